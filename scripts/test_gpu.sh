#!/usr/bin/env bash
# The GPU path, on a machine with a CUDA GPU:
#   1. tests/test_gpu.py: the local learner and rollouts on the GPU (`device: cuda`) against the CPU, and the
#      DeepSpeed learner group as one NCCL rank on the GPU (full weights and LoRA) against one process;
#   2. bench/gpu_costs.py: generation and training tokens/s of the HF path, GPU and CPU side by side;
#   3. with vLLM: vLLM's own tests, then vLLM rollout workers + a one-GPU DeepSpeed learner (NCCL) on the quickstart
#      config, with the check that the learner's weights reach vLLM (bench/gpu_check.py).
# Installs the gpu extra (vllm, deepspeed with its CUDA ops built on demand) into .venv-gpu; set TURNRL_GPU_PYTHON to
# use another Python that has torch with CUDA, turnrl's dependencies and deepspeed (then vLLM's steps run only if
# it imports vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi >/dev/null 2>&1 || { echo "no GPU (nvidia-smi failed): the GPU path cannot run here" >&2; exit 2; }
PY=${TURNRL_GPU_PYTHON:-.venv-gpu/bin/python}
if [ -z "${TURNRL_GPU_PYTHON:-}" ] && [ ! -x .venv-gpu/bin/python ]; then
  python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q vllm deepspeed
  # turnrl without its torch pin (the CPU build): vLLM brings the CUDA torch it was built for.
  .venv-gpu/bin/pip install -q --no-deps -e .
  .venv-gpu/bin/python - <<'PY' | xargs .venv-gpu/bin/pip install -q
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = p["dependencies"] + p["optional-dependencies"]["dev"]
print(" ".join(f"'{d}'" for d in deps if not d.startswith("torch")))
PY
fi
"$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py
"$PY" bench/gpu_costs.py ${TURNRL_GPU_TOKENIZER:+--tokenizer "$TURNRL_GPU_TOKENIZER"} --bf16
if "$PY" -c "import vllm" 2>/dev/null; then
  "$PY" -m pytest -q tests/test_vllm.py
  exec "$PY" bench/gpu_check.py "$@"
fi
echo "vllm is not importable by $PY: its tests and bench/gpu_check.py did not run" >&2
