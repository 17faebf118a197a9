"""bench/claims.py: how a re-run's figures are read and judged, a failing command reported as failed, and the check
that refuses to time anything beside a busy process (the claims themselves are minutes of training: run by hand)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import claims  # noqa: E402


def fake_run(folder: Path, first: list[bool], last: list[bool]) -> Path:
    """A run folder as `turnrl train` leaves it: metrics.jsonl with two evaluations, and their per-task items."""
    folder.mkdir(parents=True)
    rows = [{"step": 0, "eval_success": sum(first) / len(first)}, {"step": 1, "reward_mean": 0.5},
            {"step": 10, "eval_success": sum(last) / len(last)}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step, outcome in ((0, first), (10, last)):
        d = folder / "eval" / f"step-{step}"
        d.mkdir(parents=True)
        (d / "items.jsonl").write_text("".join(json.dumps({"index": i, "correct": c}) + "\n"
                                               for i, c in enumerate(outcome)))
    return folder


def test_a_run_within_noise_holds_and_one_outside_does_not(tmp_path):
    claim = claims.Claim("c", "doc", "true", (0.5, 0.75), 1)
    near = fake_run(tmp_path / "near", [True, False] * 32, [True] * 44 + [False] * 20)  # 68.8 %: 6 points off
    far = fake_run(tmp_path / "far", [True, False] * 32, [True] * 32 + [False] * 32)  # 50 %: 25 points off
    assert claims.verdict(claim, near)["holds"] and not claims.verdict(claim, far)["holds"]


def test_a_minimum_gain_is_asked_of_every_subset(tmp_path):
    claim = claims.Claim("c", "doc", "true", (0.5, 0.75), 1, min_gain=0.10,
                         subsets={"seen": (0, 4), "unseen": (4, 8)})
    # all tasks: 50 % -> 75 %; tasks 0-3 gain 50 points, tasks 4-7 none
    run = fake_run(tmp_path / "run", [True, False, True, False, True, False, True, False],
                   [True, True, True, True, True, False, True, False])
    v = claims.verdict(claim, run)
    assert v["parts"]["seen"] == (0.5, 1.0) and v["parts"]["unseen"] == (0.5, 0.5)
    assert not v["holds"]


def test_a_claim_whose_command_fails_is_reported_failed_not_skipped(tmp_path):
    claim = claims.Claim("broken", "doc", f"{sys.executable} -c 'import sys; print(\"no model\"); sys.exit(3)'",
                         (0.5, 0.75), 1)
    v, seconds, error = claims.run(claim, tmp_path / "broken", timeout=60)
    assert v is None and error.startswith("exit 3: no model")
    row = claims.table([(claim, v, seconds, error)]).splitlines()[-1]
    assert "**failed**" in row and "| no |" in row
    quiet = claims.Claim("quiet", "doc", "true", (0.5, 0.75), 1)  # exits 0 but leaves no figures
    v, _, error = claims.run(quiet, tmp_path / "quiet", timeout=60)
    assert v is None and error.startswith("no figure in")


def test_a_busy_process_is_named_and_an_idle_one_is_not():
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads Linux's /proc")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        busy = claims.busy_processes(seconds=1.0)
        assert any(line.split()[0] == str(spin.pid) for line in busy)
        assert not any(line.split()[0] == str(idle.pid) for line in busy)
    finally:
        spin.kill()
        idle.kill()


def test_every_claim_names_its_command_and_the_quick_ones_run_turnrl():
    names = [c.name for c in claims.CLAIMS]
    assert len(names) == len(set(names))
    for c in claims.CLAIMS:
        assert c.command and c.doc and (c.quick or c.figure)
        if c.quick:
            assert c.command.startswith("turnrl ") and "{out}" in c.command and c.minutes <= 15
