#!/usr/bin/env bash
# The GPU path, on a machine with a CUDA GPU:
#   1. tests/placement/test_gpu.py: the local learner and rollouts on the GPU (`device: cuda`) against the CPU, and (with Ray
#      and deepspeed) the DeepSpeed learner group as one NCCL rank on the GPU (full weights and LoRA) against one
#      process;
#   2. bench/gpu_costs.py: generation and training tokens/s of the HF path, GPU and CPU side by side;
#   3. with vLLM: vLLM's own tests, then vLLM rollout workers + a one-GPU DeepSpeed learner on the quickstart config,
#      with the check that the learner's weights reach vLLM (bench/gpu_check.py; extra arguments go to it).
# Which Python runs them:
#   - TURNRL_GPU_PYTHON, when set: a Python with CUDA torch and turnrl's dependencies;
#   - else .venv-gpu, made on the first run with the gpu extra (vllm, deepspeed) from the package index;
#   - else, on a machine without a package index: `python3` (its CUDA torch) with the kit in .gpu-kit (made on a
#     machine with the index by scripts/gpu_kit.py and copied here: wheels, and Ray stripped), turnrl from here.
# Every step runs under a time limit (TURNRL_GPU_STEP_TIMEOUT seconds, default 480) and a failed step does not stop
# the next; the exit status is 1 when any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi >/dev/null 2>&1 || { echo "no GPU (nvidia-smi failed): the GPU path cannot run here" >&2; exit 2; }
LIMIT=${TURNRL_GPU_STEP_TIMEOUT:-480}
if [ -n "${TURNRL_GPU_PYTHON:-}" ]; then
  PY=$TURNRL_GPU_PYTHON
elif [ -x .venv-gpu/bin/python ]; then
  PY=.venv-gpu/bin/python
elif [ -d .gpu-kit/wheels ]; then
  PY=python3
  echo "== installing .gpu-kit into $(command -v python3) (no package index)"
  python3 -m pip install -q --no-index --no-deps .gpu-kit/wheels/*.whl || { echo "the kit did not install" >&2; exit 1; }
  SITE=$PWD
  if [ -f .gpu-kit/ray.tar.xz ]; then  # Ray without what turnrl never starts, unpacked beside the kit
    mkdir -p .gpu-kit/site && tar -xJf .gpu-kit/ray.tar.xz -C .gpu-kit/site || exit 1
    SITE=$SITE:$PWD/.gpu-kit/site
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if [ -z "${TURNRL_GPU_TOKENIZER:-}" ] && [ -d .gpu-kit/tokenizer ]; then
    export TURNRL_GPU_TOKENIZER=$PWD/.gpu-kit/tokenizer
  fi
else
  set -e
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
  set +e
  PY=.venv-gpu/bin/python
fi
"$PY" -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0))" || exit 1

failed=()
step() {  # step NAME COMMAND...: run it under the time limit, note a failure, go on
  local name=$1; shift
  echo "== $name"
  local t0=$SECONDS
  timeout --kill-after=20 "$LIMIT" "$@"
  local rc=$?
  [ "$rc" = 124 ] && echo "== $name: stopped after ${LIMIT} s" >&2
  [ "$rc" = 0 ] || failed+=("$name (exit $rc)")
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
}
step "tests/placement/test_gpu.py" "$PY" -m pytest -q -p no:cacheprovider tests/placement/test_gpu.py
step "bench/gpu_costs.py" "$PY" bench/gpu_costs.py ${TURNRL_GPU_TOKENIZER:+--tokenizer "$TURNRL_GPU_TOKENIZER"} --bf16
if "$PY" -c "import vllm" 2>/dev/null; then
  step "tests/agents/test_vllm.py" "$PY" -m pytest -q -p no:cacheprovider tests/agents/test_vllm.py
  step "bench/gpu_check.py" "$PY" bench/gpu_check.py "$@"
else
  echo "vllm is not importable by $PY: its tests and bench/gpu_check.py did not run" >&2
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
