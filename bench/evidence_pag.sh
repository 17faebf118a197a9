#!/usr/bin/env bash
# Issue 77: PAG with a checking verifier (the recipe of scripts/pag_checking_verifier.sh, TASK=arithmetic: the
# teacher's comparing checks and revisions, 15 supervised warm-up steps, then PAG with the calculator in the verify
# turn) re-measured with its PAG step count chosen on the validation split instead of fixed at 4: PAG runs 8 steps
# (where the old run had drifted), validated on all 42 level-1 validation problems and evaluated on all 102 test
# problems at steps 0, 2, 4, 6 and 8; each run is read at the step its validation split chose (OUT/pag-sS@best: the
# highest validation Acc@final, earliest on ties). Seeds 0 1 2 (each seeds the teacher's episodes, the warm-up's
# order and PAG's rollouts), as fixed in bench/preregistered.md before the first run. One run at a time:
#   bash bench/evidence_pag.sh [OUT]      (default runs/e77; about 45 minutes a seed on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms pag-warmup pag   (Acc@final gains; PAG's verifier at the chosen
# step). TURNRL names the turnrl to run (default .venv/bin/turnrl); a finished stage is skipped (rows: their .done
# marker; warm-up: its step-15 evaluation, and a checkpoint newer than the rows; PAG: its step-8 evaluation), an
# unfinished one is run again whole.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/e77}
T=${TURNRL:-.venv/bin/turnrl}
mkdir -p "$OUT"
ENV_ID=turnrl/Arithmetic-PAG-v0
BOXED='Put your final answer within \boxed{}.'
# the environment of all three stages: level-1 training problems, the calculator offered in the verify turn only,
# the first answer recalled beside the check (as scripts/pag_checking_verifier.sh)
PAIRS=(level=1 split=train answer_format=auto calculator=true tool_style=tags verify_tools=true recall_answer=true)
ENV_KW=()
for pair in "${PAIRS[@]}"; do ENV_KW+=(--kw "$pair"); done
KW=$(IFS=,; echo "{${PAIRS[*]//=/: }}")
for S in 0 1 2; do
  [ -f "$OUT/pag-s$S/eval/step-8/items.jsonl" ] && continue
  ROWS=$OUT/pag-rows-s$S.parquet
  WARM=$OUT/pag-warmup-s$S
  if [ ! -f "$OUT/pag-rows-s$S.done" ]; then
    $T pag checks --env "$ENV_ID" "${ENV_KW[@]}" --kw "instruction=$BOXED" --compare --revisions \
      --agent smollm2-135m-instruct --tasks 300 --seed "$S" --temperature 0.8 --max-new-tokens 64 \
      --out "$ROWS" > "$OUT-pag-rows-s$S.log" 2>&1
    [ -f "$ROWS" ] && touch "$OUT/pag-rows-s$S.done"
  fi
  # the warm-up is finished when its step-15 evaluation and checkpoint are written after the rows it trained on
  if [ ! -f "$WARM/eval/step-15/items.jsonl" ] || [ ! "$WARM/checkpoint.pt" -nt "$ROWS" ]; then
    $T train configs/pag-arith-checks.yaml data.path="$ROWS" env.id="$ENV_ID" "env.kwargs=$KW" \
      "env.kwargs.instruction=$BOXED" rollout.max_new_tokens=64 eval_tasks=102 seed="$S" out_dir="$WARM" \
      --no-resume > "$OUT-pag-warmup-s$S.log" 2>&1
  fi
  $T train configs/pag-arith.yaml init_from="$WARM" env.id="$ENV_ID" "env.kwargs=$KW" \
    "env.kwargs.instruction=$BOXED" rollout.max_new_tokens=64 algorithm.verifier_balance=true \
    algorithm.kl_coef=0.3 optim.lr=1e-5 rollout.prompts_per_step=8 rollout.group_size=4 steps=8 eval_every=2 \
    eval_tasks=102 validate_every=2 validation_tasks=42 seed="$S" out_dir="$OUT/pag-s$S" --no-resume \
    > "$OUT-pag-s$S.log" 2>&1
done
