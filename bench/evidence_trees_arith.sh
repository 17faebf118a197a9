#!/usr/bin/env bash
# Issue 79's learning comparison on its second testbed, as fixed in bench/preregistered.md ("trees against chains on
# Arithmetic") before its first run: turnrl/Arithmetic-v0 level 5 (word problems of two or three operations), the swirl
# tool style (one calculator call or the answer a turn), no demonstrations; the pilot's recipe
# (bench/pilot_trees_arith.sh): the calculator teacher's step rows on the first 256 training problems, a 12-step
# supervised warm-up per seed, then from it 16 GRPO steps of 4 problems x 4 episodes as chains (G = 4) and as trees (2
# children after turns 1 and 2: 4 leaves a problem, the tree advantage). Every GRPO run validates every 4 steps on the
# first 100 distinct level-5 validation problems and evaluates every 4 steps on the first 200 distinct level-5 test
# problems, greedy. Seeds 0 1 2, seed by seed (warm-up, chains, trees), one run at a time, alone on the machine:
#   bash bench/evidence_trees_arith.sh [OUT]       (default runs/e79a; about 35 minutes a seed on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms chain tree
# TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished run is skipped, an unfinished one is run
# again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e79a}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
KW=(--kw tool_style=swirl --kw demos=none --kw 'level=[5]')
cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: turnrl/Arithmetic-v0
  kwargs: {split: train, tool_style: swirl, demos: none, level: [5]}
  eval_kwargs: {split: test}
YAML
# The calculator teacher on the first 256 training problems (it reads gold answers and refuses held-out splits),
# once: it is deterministic.
[ -f "$OUT/gold-steps.parquet" ] || {
  $T swirl generate --env turnrl/Arithmetic-v0 --agent gold --kw split=train "${KW[@]}" --tasks 256 --samples 1 \
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
      steps=16 validate_every=4 validation_tasks=100 eval_every=4 eval_tasks=200 seed=$S)
  done_run "$OUT/chain-s$S" 16 || $T train "${rl[@]}" 'algorithm={name: grpo}' "$ro}" out_dir="$OUT/chain-s$S" \
    > "$OUT-chain-s$S.log" 2>&1
  done_run "$OUT/tree-s$S" 16 || $T train "${rl[@]}" 'algorithm={name: grpo, advantage: tree}' \
    "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}" out_dir="$OUT/tree-s$S" \
    > "$OUT-tree-s$S.log" 2>&1
done
