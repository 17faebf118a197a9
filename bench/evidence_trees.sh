#!/usr/bin/env bash
# Issue 79's learning comparison, trees against chains, as fixed in bench/preregistered.md before each testbed's first
# run. TESTBED picks the task (nothing else differs between the testbeds):
#   multihop (default; "trees against chains on MultiHop"): turnrl/MultiHop-v0, 2-hop bridge questions, the gold-path
#     teacher's rows; validation on all 96 validation questions (world 2), test on all 193 test questions (worlds 0-1)
#   arithmetic ("trees against chains on Arithmetic"; bench/evidence_trees_arith.sh): turnrl/Arithmetic-v0 level 5,
#     word problems of two or three operations, the calculator teacher's rows; validation on the first 100 distinct
#     level-5 validation problems, test on the first 200 distinct level-5 test problems
# Both: the swirl tool style, no demonstrations; the teacher's step rows on the first 256 training tasks (written afresh,
# deterministic), a 12-step supervised warm-up per seed, then from it 16 GRPO steps of 4 tasks x 4 episodes as chains
# (G = 4) and as trees (2 children after turns 1 and 2: 4 leaves a task, the tree advantage), each validating and
# evaluating every 4 steps, greedy. Seeds 0 1 2, seed by seed (warm-up, chains, trees), one run at a time, alone on
# the machine:
#   bash bench/evidence_trees.sh [OUT]       (default runs/e79; about 45 minutes a seed on 2 CPU cores)
#   TESTBED=arithmetic bash bench/evidence_trees.sh [OUT]   (default runs/e79a; about 35 minutes a seed)
# then: python bench/evidence_report.py OUT --arms chain tree
# TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished run is skipped, an unfinished one is run
# again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/trees_testbeds.sh  # ENV, KW, KWARGS of the TESTBED
# this script's held-out sizes and output folder, per testbed
case ${TESTBED:-multihop} in
  multihop) OUT=${1:-runs/e79} VAL=96 TEST=193 ;;
  arithmetic) OUT=${1:-runs/e79a} VAL=100 TEST=200 ;;
esac
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: $ENV
  kwargs: $KWARGS
  eval_kwargs: {split: test}
YAML
# The teacher (--agent gold: the gold search path, or the calculator path) on the first 256 training tasks (it reads
# gold answers and refuses held-out splits), once: it is deterministic (temperature 0).
[ -f "$OUT/gold-steps.parquet" ] || {
  $T swirl generate --env "$ENV" --agent gold --kw split=train "${KW[@]}" --tasks 256 --samples 1 \
    --temperature 0 --max-new-tokens 64 --out "$OUT/gold.parquet" &&
  $T swirl filter "$OUT/gold.parquet" --mode both --out "$OUT/gold-kept.parquet" &&
  $T swirl decompose "$OUT/gold-kept.parquet" --out "$OUT/gold-steps.parquet"; } > "$OUT-gold.log" 2>&1
done_run() { [ -f "$1/eval/step-$2/items.jsonl" ]; }
ro='rollout={prompts_per_step: 4, group_size: 4, max_new_tokens: 48, max_context: 2048, temperature: 1.0'
for S in 0 1 2; do
  # the warm-up: 12 steps of 16 step rows (its own test evaluation is one task, not read)
  done_run "$OUT/warmup-s$S" 12 || $T train "$OUT/base.yaml" --no-resume 'algorithm={name: sft}' \
    "data={path: $OUT/gold-steps.parquet, batch_size: 16}" 'rollout={max_new_tokens: 48, max_context: 2048}' \
    'optim={lr: 2.0e-5, minibatch_size: 8, grad_accum: 2}' steps=12 eval_tasks=1 seed=$S \
    out_dir="$OUT/warmup-s$S" > "$OUT-warmup-s$S.log" 2>&1
  rl=("$OUT/base.yaml" --no-resume init_from="$OUT/warmup-s$S" 'optim={lr: 1.0e-5, minibatch_size: 8, grad_accum: 2}'
      steps=16 validate_every=4 validation_tasks=$VAL eval_every=4 eval_tasks=$TEST seed=$S)
  done_run "$OUT/chain-s$S" 16 || $T train "${rl[@]}" 'algorithm={name: grpo}' "$ro}" out_dir="$OUT/chain-s$S" \
    > "$OUT-chain-s$S.log" 2>&1
  done_run "$OUT/tree-s$S" 16 || $T train "${rl[@]}" 'algorithm={name: grpo, advantage: tree}' \
    "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}" out_dir="$OUT/tree-s$S" \
    > "$OUT-tree-s$S.log" 2>&1
done
