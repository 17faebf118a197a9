#!/usr/bin/env bash
# Issue 77: GRPO, DAPO and VAPO on one task — level-1 sums without the calculator (configs/arith-grpo.yaml and
# configs/arith-vapo.yaml), 10 steps of 4 x 8 episodes each, seeds 0 1 2, on the canonical split (102 distinct test
# problems), as fixed in bench/preregistered.md before the first run. One run at a time:
#   bash bench/evidence_algorithms.sh [OUT]      (default runs/e77; about 9 x 6 minutes on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=".venv/bin/turnrl"
for S in 0 1 2; do
  $T train configs/arith-grpo.yaml steps=10 eval_every=0 seed=$S out_dir=$OUT/grpo-s$S --no-resume > $OUT-grpo-s$S.log 2>&1
  $T train configs/arith-grpo.yaml steps=10 eval_every=0 seed=$S algorithm.name=dapo out_dir=$OUT/dapo-s$S --no-resume \
    > $OUT-dapo-s$S.log 2>&1
  $T train configs/arith-vapo.yaml steps=10 eval_every=0 seed=$S out_dir=$OUT/vapo-s$S --no-resume > $OUT-vapo-s$S.log 2>&1
done
