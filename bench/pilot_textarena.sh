#!/usr/bin/env bash
# Pilot for issue 78's TextArena learning figure (textarena:TicTacToe-v0 by self-play, held out against a random legal
# player it never trains against, its games sampled at temperature 1 so they differ), read on the VALIDATION seeds
# only: it picks the learning rate and the number of steps — and says whether 20 steps move the validation win rate
# at all — before the figure is preregistered (bench/preregistered.md). The trainer plays one test game before and
# after (eval_tasks 1, with its floor at the start); nobody reads them. Seed 100 (not one of the figure's).
#   bash bench/pilot_textarena.sh runs/pilot78        (alone on the machine; about 2 hours a rate or more)
#   LRS=1e-4 bash bench/pilot_textarena.sh runs/pilot78   (one rate only; a finished rate is never run again)
# Then read OUT/lr*/metrics.jsonl (val_success: the validation win rate, by step; invalid moves, step time,
# logp_diff, guard_violations) and OUT/lr*/validation/step-N/metrics.json (distinct_games, the floor-free figures).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/pilot78}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
# Each run checkpoints every step, and one cut (a session's end) resumes from its last step, bit-exactly: a rate's run
# takes most of a session (2e-5: 1 h 53 min; at 1e-4 the games reach full length sooner, 3-7.5 minutes a step).
for LR in ${LRS:-2e-5 1e-4}; do
  [ -f "$OUT/lr$LR/eval/step-20/items.jsonl" ] && continue
  fresh=--no-resume
  [ -f "$OUT/lr$LR/checkpoint.pt" ] && fresh=--resume
  $T train configs/textarena-tictactoe.yaml seed=100 optim.lr=$LR steps=20 eval_every=0 eval_tasks=1 \
    validate_every=5 validation_tasks=40 checkpoint_every=1 out_dir="$OUT/lr$LR" $fresh >> "$OUT/lr$LR.log" 2>&1
done
