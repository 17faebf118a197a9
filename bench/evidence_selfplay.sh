#!/usr/bin/env bash
# Issue 78: self-play tic-tac-toe (configs/tictactoe-selfplay.yaml as shipped) with seeds 0 1 2, as fixed in
# bench/preregistered.md before the first run; each evaluated on the 26 held-out openings x both seats against random
# play at steps 0, 10 and 20, beside the floor (a random legal player from the same openings). One run at a time:
#   bash bench/evidence_selfplay.sh [OUT]      (default runs/e78)
# then, per seed: turnrl compare OUT/ttt-sS@0 OUT/ttt-sS   and   turnrl compare OUT/ttt-sS/eval/step-0/floor OUT/ttt-sS
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e78}
T=".venv/bin/turnrl"
mkdir -p "$OUT"
for S in 0 1 2; do
  [ -f "$OUT/ttt-s$S/eval/step-20/items.jsonl" ] && continue
  $T train configs/tictactoe-selfplay.yaml seed=$S out_dir=$OUT/ttt-s$S --no-resume > "$OUT-ttt-s$S.log" 2>&1
done
