#!/usr/bin/env bash
# Issue 77: the difficulty sampler against the uniform one on mixed Arithmetic levels 1-5
# (configs/arith-mix-tasks.yaml: SmolLM2-135M-Instruct, GRPO, 4 x 8 episodes a step), the design of the four-seed
# runs documented in docs/results.md#which-tasks (20 steps, evaluated every 2 steps on the first 160 tasks of the
# mixture's held-out split: 32 distinct test problems of each level, greedy), both samplers with seeds 0 1 2, the
# same seed in both arms, as fixed in bench/preregistered.md before the first run. Nothing is chosen on these runs: the
# steps compared (6 and 20) are fixed there (the mixture declares no validation split to choose on). One run at a time:
#   bash bench/evidence_sampler.sh [OUT]      (default runs/e77; about 8.5 minutes a run on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms uniform difficulty   (each arm's gain; difficulty - uniform at
# step 6 and at step 20, paired per item, per seed and pooled) and, no claim:
# python bench/samplers.py --read OUT --seeds 0 1 2   (the steps to reach uniform's final figure, as published).
# TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished run (its step-20 evaluation written) is
# skipped, an unfinished one is run again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
for S in 0 1 2; do
  for M in uniform difficulty; do  # seed by seed, so that an early stop leaves matched pairs
    [ -f "$OUT/$M-s$S/eval/step-20/items.jsonl" ] && continue
    $T train configs/arith-mix-tasks.yaml tasks.strategy=$M steps=20 eval_every=2 eval_tasks=160 seed=$S \
      out_dir=$OUT/$M-s$S --no-resume > "$OUT-$M-s$S.log" 2>&1
  done
done
