"""`turnrl play` read from a pipe: a plain transcript — turnrl's labels without markup tags, the played turns echoed,
and what the environment or the player wrote shown as written."""

import subprocess
import sys


def _play(*args: str, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "turnrl", "play", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_a_piped_oracle_turn_prints_no_markup_tags():
    out = _play("turnrl/Arithmetic-v0", "--index", "0", stdin=":oracle\n")
    assert out.returncode == 0, out.stderr
    assert "[dim]" not in out.stdout and "[/" not in out.stdout
    lines = out.stdout.splitlines()
    assert "assistant> :oracle" in lines
    assert "(oracle) The answer is \\boxed{32}." in lines
    assert lines[-1] == "episode over: terminated=True truncated=False"


def test_piped_turns_are_echoed_and_shown_as_written():
    turn = "[bold]not markup[/bold] \\boxed{32}"
    out = _play("turnrl/Arithmetic-v0", "--index", "0", stdin=f"{turn}\n")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"assistant> {turn}" in lines
    info = next(line for line in lines if line.startswith("reward 1 (total 1)  info "))
    assert "'correct': True" in info  # on one line, however long
    out = _play("turnrl/Arithmetic-v0", stdin=":q\n")
    assert out.stdout.splitlines()[-2:] == ["assistant> :q", "bye"]
