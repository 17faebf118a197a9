"""bench/claims.py: how a re-run's figures are read and judged (a gain paired on distinct items, its bootstrap
interval excluding zero and holding the published gain), that every claim's check can fail, a failing command
reported as failed, and the check that refuses to time anything beside a busy process (the claims themselves are
minutes of training: run by hand)."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import claims  # noqa: E402 — bench/ on the path first


def item_row(index: int, correct: bool, item: str | None, sample: int = 0) -> dict:
    """One items.jsonl row as `turnrl train`'s evaluation writes it (turnrl.rl.run.eval_report.episode_row + item)."""
    row = {
        "index": index,
        "sample": sample,
        "task_id": f"arithmetic/test/L1/{index}",
        "correct": correct,
        "outcome": "correct" if correct else "wrong",
        "reward": float(correct),
        "turns": 1,
        "tool_calls": 0,
        "generated_tokens": 10,
        "turn_tokens": [10],
        "turns_cut_at_token_limit": 0,
        "total_tokens": 120,
        "terminated": True,
        "truncated": False,
        "error": None,
        "failure": None if correct else "wrong",
        "metrics": {},
        "final_response": "\\boxed{1}",
    }
    return row if item is None else {**row, "item": item}


def fake_run(
    folder: Path, first: list[bool], last: list[bool], items: list[str | None] | None = None, steps: int = 10
) -> Path:
    """A run folder as `turnrl train` leaves it: OUT/metrics.jsonl (the step-0 evaluation, a row per step, the last
    with its evaluation) and OUT/eval/step-N/items.jsonl for both evaluations. ``items[i]``: task i's item (None:
    rows without an item field, as before items were named); default: one distinct item per task."""
    items = items if items is not None else [f"arithmetic:({i}+1)" for i in range(len(first))]
    folder.mkdir(parents=True)
    rows = [{"step": 0.0, "eval_success": sum(first) / len(first)}]
    rows += [{"step": s, "reward_mean": 0.5, "loss": 0.1, "seconds": 20.0} for s in range(1, steps)]
    rows.append(
        {"step": steps, "reward_mean": 0.6, "loss": 0.1, "seconds": 20.0, "eval_success": sum(last) / len(last)}
    )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step, outcome in ((0, first), (steps, last)):
        d = folder / "eval" / f"step-{step}"
        d.mkdir(parents=True)
        (d / "items.jsonl").write_text(
            "".join(json.dumps(item_row(i, c, items[i])) + "\n" for i, c in enumerate(outcome))
        )
    return folder


def outcomes_at(share: float, n: int, order: list[int]) -> list[bool]:
    """``n`` outcomes, ``round(share * n)`` of them right: the first ones of ``order`` (a later share's right
    answers include an earlier one's)."""
    right = set(order[: round(share * n)])
    return [i in right for i in range(n)]


def claimed_run(claim: claims.Claim, folder: Path, gain: bool) -> Path:
    """A run of ``claim`` in the on-disk format: its published figures exactly (``gain``), or no gain at all (the
    published 'before' figure after training too, on every item)."""
    n = max([64] + [b for _, b in claim.subsets.values()])
    order = list(range(n))
    random.Random(0).shuffle(order)  # right answers spread over the subsets
    before = outcomes_at(claim.published[0], n, order)
    after = outcomes_at(claim.published[1], n, order) if gain else before
    if not claim.arms:
        return fake_run(folder, before, after)
    for arm, final in zip(claim.arms, (before, after)):
        fake_run(folder / arm, before, final)
    return folder


ARMS = claims.Claim("arms", "doc", "true", (0.4, 0.7), 1, arms=("ppo", "tppo"))


@pytest.mark.parametrize("claim", [*claims.CLAIMS, ARMS], ids=lambda c: c.name)
def test_every_claim_fails_without_a_gain_and_holds_with_its_published_one(claim, tmp_path):
    """A claim whose check cannot fail is no claim: a run that gains nothing must not hold it."""
    assert not claims.verdict(claim, claimed_run(claim, tmp_path / "none", gain=False))["holds"]
    v = claims.verdict(claim, claimed_run(claim, tmp_path / "gain", gain=True))
    assert v["holds"], v["why"]


def test_the_gain_is_paired_on_distinct_items_and_holds_only_near_the_published_gain(tmp_path):
    claim = claims.Claim("c", "doc", "true", (0.5, 0.75), 1)
    flat = fake_run(tmp_path / "flat", [True, False] * 32, [True, False] * 32)  # no gain at all
    v = claims.verdict(claim, flat)
    p = v["parts"]["all"]
    assert (p.n, p.diff, p.low, p.high) == (64, 0.0, 0.0, 0.0) and not v["holds"]
    assert "does not show a gain" in v["why"]
    # 50 % -> 100 %: a clear gain, but twice the published one: the published 25 points lie outside the interval
    big = fake_run(tmp_path / "big", [True, False] * 32, [True] * 64)
    v = claims.verdict(claim, big)
    assert v["parts"]["all"].low > 0.25 and not v["holds"] and "published gain +25.0 lies outside" in v["why"]
    # 50 % -> 75 %: holds; the interval is the paired bootstrap's over the 64 items
    good = fake_run(tmp_path / "good", [True, False] * 32, [True, True, True, False] * 16)
    v = claims.verdict(claim, good)
    p = v["parts"]["all"]
    assert v["holds"] and v["why"] == "" and p.mean_a == 0.5 and p.mean_b == 0.75 and p.low > 0 and p.high < 0.5


def test_a_few_items_gained_do_not_hold_a_claim_even_when_the_bootstrap_interval_excludes_zero(tmp_path):
    """The review's case: 51 -> 55 of 102, no item lost. The percentile bootstrap's interval lies above zero, but
    McNemar's exact test on 4 discordant items gives p = 0.125: the claim does not hold."""
    claim = claims.Claim("c", "doc", "true", (0.5, 0.54), 1)
    before = [i < 51 for i in range(102)]
    after = [i < 55 for i in range(102)]
    v = claims.verdict(claim, fake_run(tmp_path / "few", before, after))
    assert (
        v["parts"]["all"].low > 0 and not v["holds"] and "McNemar's exact test" in v["why"] and "p = 0.125" in v["why"]
    )


def test_repeats_of_an_item_collapse_before_pairing_and_rows_without_items_fall_back_to_task_id(tmp_path):
    claim = claims.Claim("c", "doc", "true", (0.25, 0.75), 1)
    # 64 tasks but 8 distinct items (each posed 8 times): 8 items decide, not 64
    run = fake_run(
        tmp_path / "repeats",
        [i % 8 < 2 for i in range(64)],
        [i % 8 < 6 for i in range(64)],
        items=[f"arithmetic:({i % 8}+1)" for i in range(64)],
    )
    p = claims.verdict(claim, run)["parts"]["all"]
    assert p.n == 8 and (p.mean_a, p.mean_b) == (0.25, 0.75)
    old = fake_run(tmp_path / "old", [i < 16 for i in range(64)], [i < 48 for i in range(64)], items=[None] * 64)
    assert claims.verdict(claim, old)["parts"]["all"].n == 64  # one task_id per task


def test_the_two_evaluations_must_hold_the_same_items(tmp_path):
    claim = claims.Claim("c", "doc", "true", (0.5, 0.75), 1)
    run = fake_run(tmp_path / "run", [True, False] * 4, [True] * 8)
    last = run / "eval" / "step-10" / "items.jsonl"
    last.write_text(last.read_text().replace("arithmetic:(0+1)", "arithmetic:(0+2)"))
    with pytest.raises(ValueError, match="hold different items .1 only in the first, 1 only in the second"):
        claims.verdict(claim, run)


def test_a_minimum_gain_is_asked_of_every_subset(tmp_path):
    claim = claims.Claim(
        "c", "doc", "true", (0.5, 0.75), 1, min_gain=0.10, subsets={"seen": (0, 32), "unseen": (32, 64)}
    )
    # all tasks: 50 % -> 75 %; tasks 0-31 gain 50 points, tasks 32-63 none
    before = [i % 2 == 0 for i in range(64)]
    after = [i < 32 or i % 2 == 0 for i in range(64)]
    v = claims.verdict(claim, fake_run(tmp_path / "run", before, after))
    assert (v["parts"]["seen"].mean_a, v["parts"]["seen"].mean_b) == (0.5, 1.0)
    assert v["parts"]["unseen"].diff == 0.0 and v["parts"]["all"].low > 0
    assert not v["holds"] and v["why"] == "the interval on unseen does not show a gain of more than 10 points"
    rows = claims.table([(claim, v, 60.0, None)]).splitlines()
    assert rows[0].startswith("| claim | published | today | gain (95 % interval) | items | holds |")
    assert (
        rows[2].startswith("| c | 50.0 % → 75.0 % (+25.0) | 50.0 % → 75.0 % | +25.0 [") and "| 64 | **no**" in rows[2]
    )
    assert rows[4].startswith("| c: unseen |  | 50.0 % → 50.0 % | +0.0 [+0.0, +0.0] | 32 |")


def test_a_claim_that_states_no_gain_is_refused():
    with pytest.raises(ValueError, match="states no gain and no difference"):
        claims.Claim("c", "doc", "true", (0.5, 0.5), 1)


def test_a_claim_whose_command_fails_is_reported_failed_not_skipped(tmp_path):
    claim = claims.Claim(
        "broken", "doc", f"{sys.executable} -c 'import sys; print(\"no model\"); sys.exit(3)'", (0.5, 0.75), 1
    )
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
