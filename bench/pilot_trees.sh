#!/usr/bin/env bash
# Pilot for issue 79's learning comparison (trees against chains), read on the VALIDATION split only: it picks the
# recipe — the supervised warm-up's length and whether GRPO from it has signal left (its validation success neither 0
# nor saturated) — before the comparison is preregistered. It never reads the test split (eval_tasks 1, the runs' final
# one-task evaluation, is not looked at). TESTBED picks the task (bench/evidence_trees.sh's two):
#   multihop (default): turnrl/MultiHop-v0, 2-hop bridge questions (world 2 validation: no test entity anywhere), the
#     gold-path teacher, 48 validation questions
#   arithmetic (bench/pilot_trees_arith.sh): turnrl/Arithmetic-v0 level 5, the calculator teacher, 64 validation
#     problems
#   bash bench/pilot_trees.sh runs/pilot79        (alone on the machine: about an hour on 2 cores)
#   TESTBED=arithmetic bash bench/pilot_trees.sh runs/pilot79a        (about 25 minutes)
# Then read: OUT/sft/metrics.jsonl (val_success by step), OUT/{chain,tree}/metrics.jsonl (val_success, success,
# generated_tokens, logp_diff, guard_violations).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/trees_testbeds.sh  # ENV, KW, KWARGS of the TESTBED
# this script's held-out sizes and output folder, per testbed
case ${TESTBED:-multihop} in
  multihop) OUT=${1:-runs/pilot79} VAL=48 ;;
  arithmetic) OUT=${1:-runs/pilot79a} VAL=64 ;;
esac
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: $ENV
  kwargs: $KWARGS
  eval_kwargs: {split: test}
eval_tasks: 1
validation_tasks: $VAL
YAML
# The teacher (--agent gold) on 256 training tasks (it reads gold answers and refuses held-out splits).
[ -f "$OUT/gold.parquet" ] || $T swirl generate --env "$ENV" --agent gold --kw split=train "${KW[@]}" \
  --tasks 256 --samples 1 --temperature 0 --max-new-tokens 64 --out "$OUT/gold.parquet"
[ -f "$OUT/gold-steps.parquet" ] || { $T swirl filter "$OUT/gold.parquet" --mode both --out "$OUT/gold-kept.parquet" &&
  $T swirl decompose "$OUT/gold-kept.parquet" --out "$OUT/gold-steps.parquet"; }
common=("$OUT/base.yaml" --no-resume)
# SFT warm-up: 12 steps of 16 step rows, validated every 4.
[ -f "$OUT/sft/checkpoint.pt" ] || $T train "${common[@]}" 'algorithm={name: sft}' \
  "data={path: $OUT/gold-steps.parquet, batch_size: 16}" 'rollout={max_new_tokens: 48, max_context: 2048}' \
  'optim={lr: 2.0e-5, minibatch_size: 8, grad_accum: 2}' steps=12 validate_every=4 eval_every=12 out_dir="$OUT/sft"
# GRPO from it, 8 steps of 4 questions x 4 episodes, validated every 4: chains, then trees (2 children after turns
# 1 and 2: 4 leaves), seed 0.
rl=("${common[@]}" init_from="$OUT/sft" 'algorithm={name: grpo}' 'optim={lr: 1.0e-5, minibatch_size: 8, grad_accum: 2}'
    steps=8 validate_every=4 eval_every=8 seed=0)
ro='rollout={prompts_per_step: 4, group_size: 4, max_new_tokens: 48, max_context: 2048, temperature: 1.0'
[ -f "$OUT/chain/checkpoint.pt" ] || $T train "${rl[@]}" "$ro}" out_dir="$OUT/chain"
[ -f "$OUT/tree/checkpoint.pt" ] || $T train "${rl[@]}" 'algorithm={name: grpo, advantage: tree}' \
  "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}" out_dir="$OUT/tree"
