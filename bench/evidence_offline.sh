#!/usr/bin/env bash
# Issue 77: DQO against RFT and DPO from one dataset of the base model's own answers, at the same number of updates
# (16 steps of 32 units each), each read at its own best step chosen on the validation split (42 level-1 problems
# never trained on), scored on the 102 test problems; training seeds 0 1 2, as fixed in bench/preregistered.md before
# the first run. One run at a time:
#   bash bench/evidence_offline.sh [OUT]      (default runs/e77; the dataset about 9 min, then 9 runs on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=".venv/bin/turnrl"
mkdir -p "$OUT"
DATA=$OUT/arith-data.parquet
if [ ! -f "$OUT/arith-data.done" ]; then
  $T rollout --env turnrl/Arithmetic-v0 --kw level=1 --kw split=train --kw answer_format=auto \
    --agent smollm2-135m-instruct --tasks 256 --samples 8 --temperature 1.0 --max-new-tokens 48 --seed 0 \
    --out "$DATA" > "$OUT-arith-data.log" 2>&1
  touch "$OUT/arith-data.done"
fi
COMMON="data.path=$DATA data.epochs=null steps=16 validate_every=4 validation_tasks=42 eval_every=4 eval_tasks=102"
for S in 0 1 2; do
  for M in rft dpo dqo; do
    [ -f "$OUT/$M-s$S/eval/step-16/items.jsonl" ] && continue
    $T train configs/$M-arith.yaml $COMMON seed=$S out_dir=$OUT/$M-s$S --no-resume > "$OUT-$M-s$S.log" 2>&1
  done
done
