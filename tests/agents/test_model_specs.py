"""Model specs resolve without waiting on a hub this machine may not reach: built-in names and local paths first, a
near-miss of a built-in name answered at once with 'did you mean', a hub id tried only when the hub answers (else
its copy in the local hub cache, else a clear error saying how to use a local path)."""

import os
import socket
import subprocess
import sys
import time

import pytest

from turnrl.agents import make_agent
from turnrl.agents.models import ModelNotFoundError, resolve_model_path


def _closed_endpoint() -> str:
    """An endpoint on this machine that refuses connections (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _online_env(**extra: str) -> dict[str, str]:
    """This process's environment as a user's shell has it: no HF_HUB_OFFLINE, a hub that does not answer."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return {**env, "HF_ENDPOINT": _closed_endpoint(), **extra}


def test_a_misspelled_builtin_name_fails_at_once_with_a_suggestion():
    """Before: transformers retried the hub for ~60 s, then said it could not connect, with no hint of the typo."""
    code = (
        "import time; from turnrl.agents import make_agent\nt = time.monotonic()\ntry:\n"
        "    make_agent('smollm2-135m-instruc')\nexcept OSError as e:\n    print(f'{time.monotonic() - t:.2f}', e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_online_env())
    assert out.returncode == 0, out.stderr
    seconds, message = out.stdout.split(" ", 1)
    assert float(seconds) < 5, out.stdout
    assert "did you mean 'smollm2-135m-instruct'" in message


def test_the_cli_answers_a_misspelled_agent_with_the_suggestion_and_exit_2():
    cmd = [
        sys.executable,
        "-m",
        "turnrl",
        "eval",
        "--env",
        "turnrl/Arithmetic-v0",
        "--agent",
        "smollm2-135m-instruc",
        "--limit",
        "1",
    ]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_online_env())
    assert out.returncode == 2, out.stdout + out.stderr
    assert "did you mean 'smollm2-135m-instruct'" in out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert time.monotonic() - start < 40  # the interpreter's start and imports; the hub's retries took ~60 s alone


def test_a_hub_id_with_an_unreachable_hub_fails_fast_and_says_how_to_use_a_local_path(tmp_path):
    code = (
        "import time; from turnrl.agents.models import resolve_model_path\nt = time.monotonic()\ntry:\n"
        "    resolve_model_path('some-org/some-model')\nexcept OSError as e:\n"
        "    print(f'{time.monotonic() - t:.2f}', e)"
    )
    env = _online_env(HF_HUB_CACHE=str(tmp_path / "hub"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    seconds, message = out.stdout.split(" ", 1)
    assert float(seconds) < 5, out.stdout
    assert "cannot reach http://127.0.0.1:" in message and "local hub cache holds no copy" in message
    assert "--local-dir" in message and "pass its path" in message
    # the built-in model's own hub id is a hub id, not a misspelling of the built-in name
    code = code.replace("some-org/some-model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "did you mean" not in out.stdout and "local hub cache holds no copy" in out.stdout, out.stdout


def test_a_hub_id_in_the_local_hub_cache_loads_from_there_when_the_hub_is_unreachable_or_offline(tmp_path):
    snapshot = tmp_path / "hub" / "models--some-org--some-model" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--some-org--some-model" / "refs").mkdir()
    (tmp_path / "hub" / "models--some-org--some-model" / "refs" / "main").write_text("a" * 40)
    code = "from turnrl.agents.models import resolve_model_path\nprint(resolve_model_path('some-org/some-model'))"
    for extra in ({}, {"HF_HUB_OFFLINE": "1"}):
        env = _online_env(HF_HUB_CACHE=str(tmp_path / "hub"), **extra)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(snapshot)


def test_offline_hub_id_not_cached_names_the_setting(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path)}
    code = (
        "from turnrl.agents.models import resolve_model_path\ntry:\n    resolve_model_path('some-org/some-model')\n"
        "except OSError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "HF_HUB_OFFLINE is set" in out.stdout and "some-org/some-model" in out.stdout


def test_local_paths_resolve_first(tmp_path, monkeypatch):
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    # a folder named like a hub id is a local path, whatever the hub says
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("org/name") == "org/name"


@pytest.mark.parametrize(
    "spec, words",
    [
        ("./no/such/folder", "no such file or folder"),
        ("gpt-two", "not a Hugging Face hub id (OWNER/NAME"),
        ("hf:SMOLLM2-135M-instruct", "did you mean 'smollm2-135m-instruct'"),
    ],
)
def test_a_spec_that_is_no_path_no_builtin_and_no_hub_id_is_one_clear_error(spec, words):
    with pytest.raises(ModelNotFoundError, match="unknown model") as info:
        make_agent(spec)
    assert words in str(info.value)
