#!/usr/bin/env bash
# Issue 81: the two SDK example agents trained unchanged through the gateway, as committed — the OpenAI Agents SDK on
# its default Responses model (examples/agents_sdk_responses_agent.yaml, arm agents-sdk-responses) and the anthropic
# SDK's tool-use loop on the Messages API (examples/anthropic_agent.yaml, arm anthropic-sdk); both GRPO, 8 problems x
# 8 episodes a step, 20 steps at lr 1e-5 (the openai-client example's settings), on the canonical level-1 split:
# every evaluation reads all 102 distinct test problems (eval_tasks=102), greedy, through the same agent, at step 0
# and after step 20. Seeds 0 1 2, as fixed in bench/preregistered.md before the first run; nothing else is changed
# and no step is chosen (so no validation split is read). One run at a time, seed by seed (both arms of a seed before
# the next seed, so that an early stop leaves matched seeds):
#   bash bench/evidence_sdk_agents.sh [OUT]      (default runs/e81; about 15-25 minutes a run on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms agents-sdk-responses anthropic-sdk   (per seed and pooled, and on
# the 84 test problems no earlier run of the openai-client example, whose settings these are, was scored on).
# TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished run (its step-20 evaluation written) is
# skipped, an unfinished one is run again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e81}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
for S in 0 1 2; do
  for ARM in agents-sdk-responses:agents_sdk_responses_agent anthropic-sdk:anthropic_agent; do
    NAME=${ARM%%:*} EXAMPLE=${ARM#*:}
    [ -f "$OUT/$NAME-s$S/eval/step-20/items.jsonl" ] && continue
    $T train "examples/$EXAMPLE.yaml" eval_tasks=102 seed=$S out_dir=$OUT/$NAME-s$S --no-resume \
      > "$OUT-$NAME-s$S.log" 2>&1
  done
done
