#!/usr/bin/env bash
# Issue 81: a task set written for verifiers 0.4's v1 API (examples/vf_arithmetic_v1.py, its harness's agent a
# subprocess whose calls reach the gateway through verifiers' interception server) trained by turnrl as committed
# (examples/vf-arithmetic-v1.yaml: GRPO, 8 problems x 8 episodes, 20 steps at lr 2e-5), every evaluation on all 200
# distinct test problems (eval_tasks=200; none equals a training problem in any order), greedy, at step 0 and after
# step 20. Seeds 0 1 2, as fixed in bench/preregistered.md before the first run; nothing is chosen, so no validation
# split is read. One run at a time, alone on the machine, in the environment that holds verifiers 0.4:
#   bash bench/evidence_vf_v1.sh [OUT]       (default runs/e81v1, relative to the repository)
# then: python bench/evidence_report.py OUT --arms vf-v1
# TURNRL names the turnrl to run (default .venv-verifiers-v1/bin/turnrl, which scripts/setup.sh builds); a finished
# run (its step-20 evaluation written) is skipped, an unfinished one is run again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-runs/e81v1}")
T=$(realpath "${TURNRL:-.venv-verifiers-v1/bin/turnrl}")
mkdir -p "$OUT"
cd examples  # the config names its task set's module, found from this folder
for S in 0 1 2; do
  [ -f "$OUT/vf-v1-s$S/eval/step-20/items.jsonl" ] && continue
  $T train vf-arithmetic-v1.yaml eval_tasks=200 seed=$S out_dir="$OUT/vf-v1-s$S" --no-resume > "$OUT-vf-v1-s$S.log" 2>&1
done
