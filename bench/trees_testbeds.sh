# Issue 79's two testbeds for trees against chains, sourced by bench/pilot_trees.sh and bench/evidence_trees.sh so
# that a pilot and its comparison pose the same task: TESTBED (multihop, the default, or arithmetic) sets ENV (the
# environment id), KW (its keyword arguments for `turnrl swirl generate`) and KWARGS (the same for the run config).
case ${TESTBED:-multihop} in
  multihop)  # 2-hop bridge questions about a generated knowledge base
    ENV=turnrl/MultiHop-v0
    KW=(--kw tool_style=swirl --kw demos=none --kw 'kinds=[bridge]' --kw 'hops=[2]')
    KWARGS='{split: train, tool_style: swirl, demos: none, kinds: [bridge], hops: [2]}' ;;
  arithmetic)  # level 5: word problems of two or three operations, with the calculator
    ENV=turnrl/Arithmetic-v0
    KW=(--kw tool_style=swirl --kw demos=none --kw 'level=[5]')
    KWARGS='{split: train, tool_style: swirl, demos: none, level: [5]}' ;;
  *) echo "TESTBED must be multihop or arithmetic, got ${TESTBED}" >&2; exit 2 ;;
esac
