#!/usr/bin/env bash
# Issue 78: TextArena tic-tac-toe's learning figure, as fixed in bench/preregistered.md ("TextArena tic-tac-toe's
# learning figure", 2026-12-07) before its first run: configs/textarena-tictactoe.yaml as shipped (self-play, the
# learning rate the pilot chose on validation, 20 steps; every 5 steps the validation win rate on 40 games and the test
# win rate on 96 games against the random legal player it never trains against, every seat in turn, with the floor —
# a random legal player's own games from the same seeds — at step 0), seeds 0 1 2, one run at a time, alone on the
# machine. A seed takes about 3 hours on 2 CPU cores, longer than one session: each run checkpoints every step
# (checkpoint_every=1) and a cut run resumes from its last step, bit-exactly (`turnrl train --resume` reads
# OUT/sS/checkpoint.pt); a finished seed is never run again. OUT/runs.log records each start and exit: a run stopped
# by anything but a session's end is run again whole (bench/preregistered.md says how).
#   bash bench/evidence_textarena.sh [OUT]      (default runs/e78t)
# then (each pooled over the seeds, paired on the test games):
#   turnrl compare OUT/s0@0 OUT/s0@best OUT/s1@0 OUT/s1@best OUT/s2@0 OUT/s2@best                    (it learns)
#   turnrl compare OUT/s0/eval/step-0/floor OUT/s0@best OUT/s1/eval/step-0/floor OUT/s1@best \
#                  OUT/s2/eval/step-0/floor OUT/s2@best                                              (the floor)
# The turnrl this checkout holds, whatever the environment's editable install points at (a worktree's .venv may be a
# link to another checkout's): its commit is the one each run.json records.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-.venv/bin/python}
$PY -c "import sys, turnrl; sys.exit(0 if turnrl.__file__.startswith('$PWD/') else 'turnrl imports from ' + turnrl.__file__)"
OUT=${1:-runs/e78t}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
# a seed is finished once its step 20 is recorded whole (its test and validation figures in metrics.jsonl)
finished() {
  $PY -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; \
sys.exit(0 if any(r.get('step') == 20 and 'val_success' in r and 'eval_success' in r for r in rows) else 1)" "$1"
}
for S in ${SEEDS:-0 1 2}; do
  [ -f "$OUT/s$S/metrics.jsonl" ] && finished "$OUT/s$S/metrics.jsonl" && continue
  fresh=--no-resume
  [ -f "$OUT/s$S/checkpoint.pt" ] && fresh=--resume
  echo "$(date -u +%FT%TZ) seed $S: turnrl train $fresh" >> "$OUT/runs.log"
  rc=0
  $T train configs/textarena-tictactoe.yaml seed="$S" checkpoint_every=1 out_dir="$OUT/s$S" $fresh >> "$OUT/s$S.log" 2>&1 || rc=$?
  echo "$(date -u +%FT%TZ) seed $S: exit $rc" >> "$OUT/runs.log"
  [ "$rc" = 0 ] || exit "$rc"
done
