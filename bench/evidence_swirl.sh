#!/usr/bin/env bash
# Issue 77: SWiRL against SFT on the same rows, and both against the base model given the demonstrations its data came
# from, on Arithmetic levels 2-3 in the SWiRL format; training seeds 0 1 2, as fixed in bench/preregistered.md before
# the first run. One run at a time:
#   bash bench/evidence_swirl.sh [OUT]      (default runs/e77; the data about 12 min, then 6 runs and one evaluation)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=".venv/bin/turnrl"
mkdir -p "$OUT"
if [ ! -f "$OUT/swirl-steps.done" ]; then
  $T swirl generate --env turnrl/Arithmetic-v0 --kw level=[2,3] --kw split=train --kw tool_style=swirl \
    --agent smollm2-135m-instruct --tasks 256 --samples 2 --max-new-tokens 48 --seed 0 \
    --out "$OUT/swirl-data.parquet" > "$OUT-swirl-data.log" 2>&1
  $T swirl filter "$OUT/swirl-data.parquet" --mode process --judge rule --out "$OUT/swirl-kept.parquet" >> "$OUT-swirl-data.log" 2>&1
  $T swirl decompose "$OUT/swirl-kept.parquet" --out "$OUT/swirl-steps.parquet" >> "$OUT-swirl-data.log" 2>&1
  touch "$OUT/swirl-steps.done"
fi
# the base model with the demonstrations (demos: default, as the data's generator saw them), the test split's first 128
[ -f "$OUT/swirl-base-demos/items.jsonl" ] || $T eval --env turnrl/Arithmetic-v0 --kw level=[2,3] --kw split=test \
  --kw tool_style=swirl --kw demos=default --agent smollm2-135m-instruct --limit 128 --max-new-tokens 48 \
  --max-context 1536 --out "$OUT/swirl-base-demos" > "$OUT-swirl-base-demos.log" 2>&1
COMMON="data.path=$OUT/swirl-steps.parquet steps=10 validate_every=5 validation_tasks=64 eval_every=5 eval_tasks=128"
for S in 0 1 2; do
  [ -f "$OUT/sft-s$S/eval/step-10/items.jsonl" ] || $T train configs/swirl-arith.yaml $COMMON 'algorithm={name: sft}' \
    data.batch_size=32 seed=$S out_dir=$OUT/sft-s$S --no-resume > "$OUT-sft-s$S.log" 2>&1
  [ -f "$OUT/swirl-s$S/eval/step-10/items.jsonl" ] || $T train configs/swirl-arith.yaml $COMMON seed=$S \
    out_dir=$OUT/swirl-s$S --no-resume > "$OUT-swirl-s$S.log" 2>&1
done
