#!/usr/bin/env bash
# Issue 79's HotPotQA figure, as fixed in bench/preregistered.md ("HotPotQA's test runs"): the recipe its pilot chose
# on the validation split (bench/pilot_hotpotqa.sh; both source bench/hotpotqa_recipe.sh), repeated whole with seeds
# 0, 1 and 2 — the SFT warm-up, then GRPO from its end where the pilot chose GRPO — each run evaluated on all 100
# dev-test questions, greedy, before and after training (nothing in between, nothing validated). The base model is
# each SFT run's step-0 evaluation (greedy: the same on every seed); a GRPO run's step 0 is its warm-up's end.
# Goal (issue 79): mean F1 >= 0.20 and supporting-article recall >= 0.60 within 3 searches.
#   TURNRL_DATA_DIR=DIR bash bench/evidence_hotpotqa.sh [OUT]   (default runs/e79h; alone on the machine: about 40
#   minutes a seed on 2 CPU cores; finished runs are skipped, an unfinished one is run again whole)
# then, paired on the 100 questions (three pairs: the seeds), the recipe against the base model
#   turnrl compare --score f1 OUT/sft-s0@0 OUT/RECIPE-s0 OUT/sft-s1@0 OUT/RECIPE-s1 OUT/sft-s2@0 OUT/RECIPE-s2
# and the GRPO steps' own share (OUT/RECIPE-sN@0 against OUT/RECIPE-sN); each with --score support_recall and the
# default (exact match) too; OUT/RECIPE-sN/eval/step-STEP/metrics.json holds mean_f1, mean_support_recall and
# mean_searches.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e79h}
T=${TURNRL:-.venv/bin/turnrl}
source bench/hotpotqa_recipe.sh  # ENV, KW, hotpotqa_base, hotpotqa_rows, SFT, RL_OPTIM, CHAIN, TREE
RECIPE=chain STEP=8  # the pilot's choice (bench/preregistered.md): sft, chain or tree, and its step
hotpotqa_base 100 50  # all 100 dev-test questions; nothing is validated (no validate_every)
hotpotqa_rows
common=("$OUT/base.yaml" --no-resume)
case $RECIPE in
  sft) sft_steps=$STEP how=() ;;
  chain) sft_steps=30 how=("${CHAIN[@]}") ;;
  tree) sft_steps=30 how=("${TREE[@]}") ;;
  *) echo "RECIPE must be sft, chain or tree, got $RECIPE" >&2; exit 2 ;;
esac
for seed in 0 1 2; do
  [ -f "$OUT/sft-s$seed/checkpoint.pt" ] || $T train "${common[@]}" "${SFT[@]}" steps=$sft_steps seed=$seed \
    out_dir="$OUT/sft-s$seed"
  [ "$RECIPE" = sft ] || [ -f "$OUT/$RECIPE-s$seed/checkpoint.pt" ] || $T train "${common[@]}" \
    init_from="$OUT/sft-s$seed" "$RL_OPTIM" steps=$STEP seed=$seed "${how[@]}" out_dir="$OUT/$RECIPE-s$seed"
done
