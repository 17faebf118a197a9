#!/usr/bin/env bash
# A self-correcting verifier that checks, on Arithmetic level 1 with SmolLM2-135M-Instruct (docs/results.md,
# "The comparing check keeps the verdict honest through PAG"): warm-up rows from the policy's own first answers with
# a teacher's comparing checks and revisions, supervised steps on them, then PAG with the calculator in the verify
# turn. About 35 minutes on 2 CPU cores. Usage: bash scripts/pag_checking_verifier.sh [OUT_DIR]  (default runs/pag-checking)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/pag-checking}
T=${TURNRL:-.venv/bin/turnrl}
ENV_KW=(--kw level=1 --kw split=train --kw answer_format=auto --kw 'instruction=Put your final answer within \boxed{}.'
        --kw calculator=true --kw tool_style=tags --kw verify_tools=true --kw recall_answer=true)
mkdir -p "$OUT"
$T pag checks --env turnrl/Arithmetic-PAG-v0 "${ENV_KW[@]}" --compare --revisions --agent smollm2-135m-instruct \
  --tasks 300 --temperature 0.8 --max-new-tokens 64 --out "$OUT/checks-rows.parquet"
$T train configs/pag-arith-checks.yaml data.path="$OUT/checks-rows.parquet" env.kwargs.level=1 \
  env.kwargs.recall_answer=true out_dir="$OUT/warmup" --no-resume
$T train configs/pag-arith.yaml init_from="$OUT/warmup" env.kwargs.calculator=true env.kwargs.tool_style=tags \
  env.kwargs.verify_tools=true env.kwargs.recall_answer=true algorithm.verifier_balance=true algorithm.kl_coef=0.3 \
  optim.lr=1e-5 rollout.prompts_per_step=8 rollout.group_size=4 steps=4 eval_every=4 out_dir="$OUT/pag" --no-resume
