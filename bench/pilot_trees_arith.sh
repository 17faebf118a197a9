#!/usr/bin/env bash
# Pilot for issue 79's second testbed (trees against chains on Arithmetic with the calculator at a multi-step level),
# read on the VALIDATION split only: turnrl/Arithmetic-v0 level 5 (word problems of two or three operations), the
# swirl tool style (one calculator call or the answer a turn), no demonstrations — the MultiHop recipe
# (bench/pilot_trees.sh) carried over unchanged: the calculator teacher's step rows on 256 training problems
# (turnrl/methods/swirl/gold_steps.py), a 12-step supervised warm-up validated every 4 steps, then from it 8 GRPO steps
# of 4 problems x 4 episodes as chains and as trees (2 children after turns 1 and 2), validated every 4 steps. It
# answers whether GRPO from the warm-up has signal left (validation success neither near 0 nor saturated) and how
# long episodes are, before the comparison is preregistered. It never reads the test split (eval_tasks 1, the runs'
# final one-task evaluation, is not looked at).
#   bash bench/pilot_trees_arith.sh runs/pilot79a        (alone on the machine)
# Then read: OUT/sft/metrics.jsonl and OUT/{chain,tree}/metrics.jsonl (val_success, success, generated_tokens,
# mean turns, logp_diff, guard_violations).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/pilot79a}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
KW=(--kw tool_style=swirl --kw demos=none --kw 'level=[5]')
cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: turnrl/Arithmetic-v0
  kwargs: {split: train, tool_style: swirl, demos: none, level: [5]}
  eval_kwargs: {split: test}
eval_tasks: 1
validation_tasks: 64
YAML
# The calculator teacher on 256 training problems (it reads gold answers and refuses held-out splits).
[ -f "$OUT/gold.parquet" ] || $T swirl generate --env turnrl/Arithmetic-v0 --agent gold --kw split=train "${KW[@]}" \
  --tasks 256 --samples 1 --temperature 0 --max-new-tokens 64 --out "$OUT/gold.parquet"
[ -f "$OUT/gold-steps.parquet" ] || { $T swirl filter "$OUT/gold.parquet" --mode both --out "$OUT/gold-kept.parquet" &&
  $T swirl decompose "$OUT/gold-kept.parquet" --out "$OUT/gold-steps.parquet"; }
common=("$OUT/base.yaml" --no-resume)
# SFT warm-up: 12 steps of 16 step rows, validated every 4.
[ -f "$OUT/sft/checkpoint.pt" ] || $T train "${common[@]}" 'algorithm={name: sft}' \
  "data={path: $OUT/gold-steps.parquet, batch_size: 16}" 'rollout={max_new_tokens: 48, max_context: 2048}' \
  'optim={lr: 2.0e-5, minibatch_size: 8, grad_accum: 2}' steps=12 validate_every=4 eval_every=12 out_dir="$OUT/sft"
# GRPO from it, 8 steps of 4 problems x 4 episodes, validated every 4: chains, then trees (2 children after turns
# 1 and 2: 4 leaves), seed 0.
rl=("${common[@]}" init_from="$OUT/sft" 'algorithm={name: grpo}' 'optim={lr: 1.0e-5, minibatch_size: 8, grad_accum: 2}'
    steps=8 validate_every=4 eval_every=8 seed=0)
ro='rollout={prompts_per_step: 4, group_size: 4, max_new_tokens: 48, max_context: 2048, temperature: 1.0'
[ -f "$OUT/chain/checkpoint.pt" ] || $T train "${rl[@]}" "$ro}" out_dir="$OUT/chain"
[ -f "$OUT/tree/checkpoint.pt" ] || $T train "${rl[@]}" 'algorithm={name: grpo, advantage: tree}' \
  "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}" out_dir="$OUT/tree"
