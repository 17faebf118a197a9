#!/usr/bin/env bash
# Issue 77: the gateway example (examples/openai_agent.yaml: an agent written with the `openai` client only, trained
# through the gateway; GRPO, 8 problems x 8 episodes a step, 20 steps at lr 1e-5) re-measured as configured now, on
# the canonical level-1 split: every evaluation reads all 102 distinct test problems (eval_tasks=102), greedy,
# through the same agent, at step 0 and after step 20. Seeds 0 1 2, as fixed in bench/preregistered.md before the
# first run; nothing else is changed and no step is chosen (so no validation split is read). One run at a time:
#   bash bench/evidence_gateway.sh [OUT]      (default runs/e77; about 13-16 minutes a run on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms gateway   (per seed and pooled, and on the problems no earlier run
# of the example was scored on). TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished run (its
# step-20 evaluation written) is skipped, an unfinished one is run again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
for S in 0 1 2; do
  [ -f "$OUT/gateway-s$S/eval/step-20/items.jsonl" ] && continue
  $T train examples/openai_agent.yaml eval_tasks=102 seed=$S out_dir=$OUT/gateway-s$S --no-resume \
    > "$OUT-gateway-s$S.log" 2>&1
done
