#!/usr/bin/env bash
# The GPU path, on a machine with a CUDA GPU: vLLM's own tests, then vLLM rollout workers + a one-GPU DeepSpeed
# learner (NCCL) on the quickstart config, with the check that the learner's weights reach vLLM (bench/gpu_check.py).
# Installs the gpu extra (vllm, deepspeed with its CUDA ops built on demand) into .venv-gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi >/dev/null 2>&1 || { echo "no GPU (nvidia-smi failed): the GPU path cannot run here" >&2; exit 2; }
if [ ! -x .venv-gpu/bin/python ]; then
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
.venv-gpu/bin/python -m pytest -q tests/test_vllm.py
exec .venv-gpu/bin/python bench/gpu_check.py "$@"
