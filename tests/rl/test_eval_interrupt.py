"""Issue 32 §3: `turnrl eval`, `turnrl rollout` and `turnrl swirl generate` stopped for real (a subprocess sent SIGINT
or SIGTERM mid-run) write what finished, say how many of how many, print the command that finishes the rest, and
that command does — every task exactly once, as an uninterrupted run."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLEEPY = '''
import asyncio
import time

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.verifiers.base import Verdict


def grade(text, ref):
    ok = text.strip()[:1].isupper()
    return Verdict(correct=ok, score=float(ok))


class SleepyEnv(ToolEnv):
    """12 tasks whose every step takes 0.15 s: a run lasts long enough to be stopped in the middle (the tests stop
    it after 2 or 4 episodes, looking every 0.05 s)."""

    split, held_out_split = "test", "test"

    def __init__(self, split="test", **kw):
        super().__init__([Task(id=f"sleepy/{i}", prompt=f"Say something {i}.", answer="A") for i in range(12)],
                         verifier=grade, **kw)

    def _step(self, action):
        time.sleep(0.15)
        return super()._step(action)

    async def _astep(self, action):
        return await asyncio.to_thread(self._step, action)


turnrl.register("evaltest/Sleepy-v0", "sleepy_env:SleepyEnv")
'''
ENV = "sleepy_env:evaltest/Sleepy-v0"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _stop_when(cmd: list[str], cwd: Path, watched: Path, at_least: int, sig: int) -> tuple[int, str]:
    """Run ``cmd``; once ``watched`` holds ``at_least`` lines send ``sig``; return its exit status and output."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 240
        while _lines(watched) < at_least and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be stopped:\n{proc.stdout.read()}"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out


def _finish(cmd: list[str]) -> str:
    """Run a printed ``turnrl …`` command in this process (the current folder is the work folder); its output."""
    from typer.testing import CliRunner

    from turnrl.cli import app

    result = CliRunner().invoke(app, cmd[3:], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def _printed_command(out: str, prefix: str) -> list[str]:
    """The command an interrupted run printed after ``prefix``, runnable here."""
    line = next(x for x in out.splitlines() if x.startswith(prefix))
    words = shlex.split(line.split(": ", 1)[1])
    assert words[0] == "turnrl"
    return [sys.executable, "-m", "turnrl", *words[1:]]


@pytest.fixture
def work(tmp_path, monkeypatch, sigint_raises):
    """A folder with the sleepy environment's module, the current folder; its registration undone after."""
    import gymnasium as gym

    from turnrl.envs import registry

    (tmp_path / "sleepy_env.py").write_text(SLEEPY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    if "evaltest/Sleepy-v0" in gym.registry:
        del gym.registry["evaltest/Sleepy-v0"]
    registry._REGISTERED.pop("evaltest/Sleepy-v0", None)
    registry._SOURCES.pop("evaltest/Sleepy-v0", None)
    sys.modules.pop("sleepy_env", None)


def test_eval_stopped_by_sigint_then_sigterm_resumes_to_the_uninterrupted_report(work):
    cmd = [
        sys.executable,
        "-m",
        "turnrl",
        "eval",
        "--env",
        ENV,
        "--agent",
        "tiny:chatml",
        "--limit",
        "12",
        "--out",
        "out",
        "--max-new-tokens",
        "4",
        "--batch-size",
        "1",
    ]
    stream = work / "out" / "trajectories.jsonl"
    code, out = _stop_when(cmd, work, stream, 2, signal.SIGINT)
    assert code == 130, out
    done = json.loads((work / "out" / "metrics.json").read_text())["episodes"]
    assert 2 <= done < 12
    assert (
        f"interrupted: {done} of 12 episodes finished; out/report.md, items.jsonl, metrics.json and plot.png "
        "cover those" in out
    )
    assert f"**Interrupted**: {done} of 12 episodes finished" in (work / "out" / "report.md").read_text()
    assert _lines(work / "out" / "items.jsonl") == done
    resume = _printed_command(out, f"to finish the other {12 - done}: ")
    assert resume[3:] == [*cmd[3:], "--resume"]
    code, out = _stop_when(resume, work, stream, done + 2, signal.SIGTERM)  # the resumed run stopped in turn
    assert code == 143, out
    again = json.loads((work / "out" / "metrics.json").read_text())
    assert again["interrupted"] is True and done + 2 <= again["episodes"] < 12 and again["resumed_episodes"] == done
    first = {
        (r["index"], r["sample"]): r for r in map(json.loads, (work / "out" / "items.jsonl").read_text().splitlines())
    }
    out = _finish(resume)  # the same command finishes it
    assert "interrupted" not in out and "# sleepy_env:evaltest/Sleepy-v0: 12 tasks x 1 samples" in out
    rows = [json.loads(x) for x in (work / "out" / "items.jsonl").read_text().splitlines()]
    assert [(r["index"], r["sample"]) for r in rows] == [(i, 0) for i in range(12)]
    assert all(first[r["index"], r["sample"]] == r for r in rows if (r["index"], r["sample"]) in first)  # kept as is
    jobs = [json.loads(x)["metadata"]["job"] for x in stream.read_text().splitlines()]
    assert sorted(jobs) == sorted(f"0-0-{i}-0" for i in range(12))  # each episode stored once
    assert json.loads((work / "out" / "metrics.json").read_text())["episodes"] == 12


@pytest.mark.parametrize("command, sig", [(["rollout"], signal.SIGINT), (["swirl", "generate"], signal.SIGTERM)])
def test_dataset_commands_stopped_keep_what_finished_and_print_how_to_finish(work, command, sig):
    from turnrl.storage import load

    cmd = [
        sys.executable,
        "-m",
        "turnrl",
        *command,
        "--env",
        ENV,
        "--agent",
        "tiny:chatml",
        "--out",
        "data.jsonl",
        "--tasks",
        "12",
        "--samples",
        "2",
        "--max-new-tokens",
        "4",
        "--batch-size",
        "2",
    ]
    code, out = _stop_when(cmd, work, work / "data.jsonl.partial.jsonl", 4, sig)
    assert code == 128 + sig, out
    line = next(x for x in out.splitlines() if x.startswith("interrupted: "))
    kept = int(line.split()[1])
    assert 4 <= kept < 24 and line.startswith(
        f"interrupted: {kept} of 24 episodes are written (data.jsonl and data.jsonl.partial.jsonl)"
    ), out
    finish = _printed_command(out, "to finish: ")
    assert finish[3:] == cmd[3:]
    _finish(finish)
    trajs = load(work / "data.jsonl")
    pairs = [(t.metadata["task_index"], t.metadata["sample"]) for t in trajs]
    assert sorted(pairs) == [(i, s) for i in range(12) for s in range(2)]  # every episode exactly once
    assert not (work / "data.jsonl.partial.jsonl").exists()
