#!/usr/bin/env bash
# Issue 77, item 2: the solver-critic pair against the solver trained alone, like for like, as fixed in
# bench/preregistered.md before the first run. For seeds 0 1 2: the pair (configs/solver-critic-lora.yaml) and the
# solver alone (configs/solver-alone-lora.yaml), both as shipped but evaluated on all 102 test problems of the
# canonical level-1 split (eval_tasks=102, at steps 0 and 10) and validated on all 42 validation problems at steps 0,
# 5 and 10 (validate_every=5). The solver alone is evaluated through the pair's review protocol in the same run (its
# policy in both seats of turnrl/SolverCritic-v0, the pair's settings: extra_evals.review in its config, into
# OUT/alone-sS/review/eval/step-N), beside its own single answer (OUT/alone-sS/eval/step-N). One run at a time:
#   bash bench/evidence_solver_critic.sh [OUT]      (default runs/e77; about 6 runs of 10-25 minutes on 2 CPU cores)
# then the compare commands it prints at the end (the solver's first answer, the final answer; pair minus alone).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=".venv/bin/turnrl"
mkdir -p "$OUT"
COMMON="eval_tasks=102 validate_every=5 validation_tasks=42"
for S in 0 1 2; do
  [ -f "$OUT/sc-pair-s$S/eval/step-10/items.jsonl" ] || $T train configs/solver-critic-lora.yaml $COMMON seed=$S \
    out_dir=$OUT/sc-pair-s$S --no-resume > "$OUT-sc-pair-s$S.log" 2>&1
  [ -f "$OUT/sc-alone-s$S/review/eval/step-10/items.jsonl" ] || $T train configs/solver-alone-lora.yaml $COMMON \
    seed=$S out_dir=$OUT/sc-alone-s$S --no-resume > "$OUT-sc-alone-s$S.log" 2>&1
done
ARMS=""
BEFORE=""
for S in 0 1 2; do
  ARMS="$ARMS $OUT/sc-alone-s$S/review $OUT/sc-pair-s$S"
  BEFORE="$BEFORE $OUT/sc-alone-s$S/review@0 $OUT/sc-pair-s$S@0"
done
echo "Claim 1, the solver's first answer (pair - alone, both through the review protocol, step 10):"
echo "  $T compare --score first_correct$ARMS --json $OUT/sc-first.json"
echo "Claim 2, the final answer (the same runs and steps):"
echo "  $T compare --score final_correct$ARMS --json $OUT/sc-final.json"
echo "Sanity check, step 0 (both arms are the base model: no difference expected on either score):"
echo "  $T compare --score first_correct$BEFORE"
echo "  $T compare --score final_correct$BEFORE"
echo "Each arm's gain (step 0 -> 10), per seed: $T compare OUT/sc-pair-sS@0 OUT/sc-pair-sS and"
echo "  $T compare OUT/sc-alone-sS/review@0 OUT/sc-alone-sS/review (add --score first_correct for the first answer)"
