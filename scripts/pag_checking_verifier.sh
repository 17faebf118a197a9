#!/usr/bin/env bash
# A self-correcting verifier that checks, with SmolLM2-135M-Instruct (docs/results.md, "The comparing check keeps the
# verdict honest through PAG"): warm-up rows from the policy's own first answers with a teacher's comparing checks
# and revisions, supervised steps on them, then PAG with the calculator in the verify turn.
#   [SEED=N] [TASK=arithmetic|gsm8k] bash scripts/pag_checking_verifier.sh [OUT_DIR]
# TASK=arithmetic (default): Arithmetic level 1, about 35 minutes on 2 CPU cores. TASK=gsm8k: the same recipe on
# GSM8K (the teacher's check is the reference solution's last calculation; needs GSM8K's files, TURNRL_DATA_DIR).
# OUT_DIR defaults to runs/pag-checking (runs/pag-checking-gsm8k); SEED (default 0) seeds the teacher's episodes,
# the supervised steps and PAG's rollouts.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${TURNRL:-.venv/bin/turnrl}
SEED=${SEED:-0}
TASK=${TASK:-arithmetic}
BOXED='Put your final answer within \boxed{}.'
TOOLS=(calculator=true tool_style=tags verify_tools=true recall_answer=true)
case "$TASK" in
  arithmetic)
    OUT=${1:-runs/pag-checking}; ENV_ID=turnrl/Arithmetic-PAG-v0; TASKS=300; TOKENS=64
    PAIRS=(level=1 split=train answer_format=auto "${TOOLS[@]}") ;;
  gsm8k)
    OUT=${1:-runs/pag-checking-gsm8k}; ENV_ID=turnrl/GSM8K-PAG-v0; TASKS=${TASKS:-300}; TOKENS=256
    PAIRS=(split=train answer_format=auto "${TOOLS[@]}") ;;
  *) echo "TASK must be arithmetic or gsm8k, got '$TASK'" >&2; exit 2 ;;
esac
# the same environment keyword arguments (and the boxed instruction) for all three stages: one --kw KEY=VALUE each
# for `turnrl pag checks`, one YAML mapping replacing the configs' env.kwargs for `turnrl train`
ENV_KW=()
for pair in "${PAIRS[@]}"; do ENV_KW+=(--kw "$pair"); done
KW=$(IFS=,; echo "{${PAIRS[*]//=/: }}")
mkdir -p "$OUT"
$T pag checks --env "$ENV_ID" "${ENV_KW[@]}" --kw "instruction=$BOXED" --compare --revisions \
  --agent smollm2-135m-instruct --tasks "$TASKS" --seed "$SEED" --temperature 0.8 --max-new-tokens "$TOKENS" \
  --out "$OUT/checks-rows.parquet"
$T train configs/pag-arith-checks.yaml data.path="$OUT/checks-rows.parquet" env.id="$ENV_ID" "env.kwargs=$KW" \
  "env.kwargs.instruction=$BOXED" rollout.max_new_tokens="$TOKENS" seed="$SEED" out_dir="$OUT/warmup" --no-resume
$T train configs/pag-arith.yaml init_from="$OUT/warmup" env.id="$ENV_ID" "env.kwargs=$KW" \
  "env.kwargs.instruction=$BOXED" rollout.max_new_tokens="$TOKENS" algorithm.verifier_balance=true \
  algorithm.kl_coef=0.3 optim.lr=1e-5 rollout.prompts_per_step=8 rollout.group_size=4 steps=4 eval_every=4 \
  seed="$SEED" out_dir="$OUT/pag" --no-resume
