#!/usr/bin/env bash
# Issue 77: the quickstart and LoRA-vs-full re-measured on the canonical level-1 split (102 distinct test problems),
# seeds fixed in bench/preregistered.md before the first run. Runs one after the other (one torch process at a time):
#   bash bench/evidence_quickstart.sh [OUT]      (default runs/e77; about 6 x 6 minutes on 2 CPU cores)
# then compare per item with `turnrl compare` (the commands are in bench/preregistered.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=".venv/bin/turnrl"
for S in 0 1 2; do
  $T train configs/quickstart.yaml seed=$S out_dir=$OUT/full-s$S --no-resume > $OUT-full-s$S.log 2>&1
done
for S in 0 1 2; do
  $T train configs/quickstart.yaml seed=$S out_dir=$OUT/lora-s$S --no-resume \
    'learner.lora={r: 16, alpha: 32, target_modules: all-linear}' optim.lr=2.0e-4 > $OUT-lora-s$S.log 2>&1
done
