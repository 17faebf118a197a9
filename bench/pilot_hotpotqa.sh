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
source bench/hotpotqa_recipe.sh  # ENV, KW, hotpotqa_base, hotpotqa_rows, SFT, RL_OPTIM, CHAIN, TREE
hotpotqa_base 1 50  # eval_tasks 1: each run's one-question test evaluation, not looked at
hotpotqa_rows
common=("$OUT/base.yaml" --no-resume)
# SFT warm-up: 30 steps, validated every 10.
[ -f "$OUT/sft/checkpoint.pt" ] || $T train "${common[@]}" "${SFT[@]}" steps=30 validate_every=10 eval_every=30 \
  out_dir="$OUT/sft"
# GRPO from its end, 16 steps validated every 4: chains, then trees, seed 0.
rl=("${common[@]}" init_from="$OUT/sft" "$RL_OPTIM" steps=16 validate_every=4 eval_every=16 seed=0)
[ -f "$OUT/chain/checkpoint.pt" ] || $T train "${rl[@]}" "${CHAIN[@]}" out_dir="$OUT/chain"
[ -f "$OUT/tree/checkpoint.pt" ] || $T train "${rl[@]}" "${TREE[@]}" out_dir="$OUT/tree"
