#!/usr/bin/env bash
# Pilot for issue 79's HotPotQA recipe (goal on the 100 dev-test questions: F1 >= 0.20 and supporting-article recall
# >= 0.60 within 3 searches), read on the VALIDATION split only (dev-validation: the dev file's questions 100-149): it
# picks the recipe — the gold-path SFT warm-up alone, or GRPO from it as chains or as trees — and its step, before the
# test runs are preregistered. It never reads the test split (eval_tasks 1, each run's one-question evaluation, is
# not looked at). The task: turnrl/HotPotQA-v0 in SWiRL's tags (one passage a search, so the second article must be
# searched for: one search of the question's words finds 41 % of the supporting articles on dev-test, where the
# default three passages a search find 72 %), no demonstrations, at most 3 searches.
#   TURNRL_DATA_DIR=DIR bash bench/pilot_hotpotqa.sh runs/pilot79h   (alone on the machine; DIR holds hotpotqa/dev*.jsonl)
# Then read OUT/{sft,chain,tree}/validation/step-N/metrics.json: mean_f1, mean_support_recall, mean_searches by step
# (metrics.jsonl's val_success is exact match only); and success, generated_tokens, logp_diff, guard_violations from
# OUT/{chain,tree}/metrics.jsonl for the GRPO runs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/pilot79h}
T=${TURNRL:-.venv/bin/turnrl}
ENV=turnrl/HotPotQA-v0
KW=(--kw tool_style=swirl --kw demos=none --kw max_searches=3)
mkdir -p "$OUT"
cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: $ENV
  kwargs: {split: dev-train, tool_style: swirl, demos: none, max_searches: 3}
  eval_kwargs: {split: dev-test}
eval_tasks: 1
validation_tasks: 50
YAML
# The teacher (--agent gold) on the 350 dev-train questions: the question as the first search, then a supporting
# article the first search missed, then the gold answer, played in the live environment; the filters keep the paths
# whose answer a search found.
[ -f "$OUT/gold.parquet" ] || $T swirl generate --env "$ENV" --agent gold --kw split=dev-train "${KW[@]}" \
  --tasks 350 --samples 1 --temperature 0 --max-new-tokens 200 --out "$OUT/gold.parquet"
[ -f "$OUT/gold-steps.parquet" ] || { $T swirl filter "$OUT/gold.parquet" --mode both --out "$OUT/gold-kept.parquet" &&
  $T swirl decompose "$OUT/gold-kept.parquet" --out "$OUT/gold-steps.parquet"; }
common=("$OUT/base.yaml" --no-resume)
ro='rollout={prompts_per_step: 8, group_size: 4, max_new_tokens: 40, max_context: 2048, temperature: 1.0'
# SFT warm-up (the recipe of docs/results/methods.md#swirl: 30 steps of 16 step rows at 5e-5), validated every 10.
[ -f "$OUT/sft/checkpoint.pt" ] || $T train "${common[@]}" 'algorithm={name: sft}' \
  "data={path: $OUT/gold-steps.parquet, batch_size: 16}" "$ro}" \
  'optim={lr: 5.0e-5, minibatch_size: 8, grad_accum: 2}' steps=30 validate_every=10 eval_every=30 out_dir="$OUT/sft"
# GRPO on the answer's F1 from its end, 16 steps of 8 questions x 4 episodes at 1e-5, validated every 4: chains, then
# trees (2 children after turns 1 and 2: 4 leaves, the tree advantage), seed 0.
rl=("${common[@]}" init_from="$OUT/sft" 'optim={lr: 1.0e-5, minibatch_size: 8, grad_accum: 4}' steps=16
    validate_every=4 eval_every=16 seed=0)
[ -f "$OUT/chain/checkpoint.pt" ] || $T train "${rl[@]}" 'algorithm={name: grpo}' "$ro}" out_dir="$OUT/chain"
[ -f "$OUT/tree/checkpoint.pt" ] || $T train "${rl[@]}" 'algorithm={name: grpo, advantage: tree}' \
  "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}" out_dir="$OUT/tree"
