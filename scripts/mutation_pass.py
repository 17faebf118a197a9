"""A mutation pass over the multi-agent and matrix tests (issue 78, "Acceptance that can fail").

Each break is one small, deliberate bug — a sign flipped, a seat swapped, a reward dropped, an opponent reused, a
filter inverted, a count not summed, a max averaged — written as an exact replacement of text in one file of
turnrl/rollout/multi.py, turnrl/rl/sources/multi.py, turnrl/rl/sources/league.py, turnrl/rl/core/policies.py, the
game adapters (turnrl/envs/multiagent/) or the accounting the matrix checks (driver, learner). The script applies
the breaks one at a time, runs that break's fixed list of tests (``pytest -x -q``, the test files that exercise the
module, or a named part of a slow one) under a per-break timeout, and restores the file whatever happens; a break
is *killed* when some test fails (or the run times out), *survived* when every test passes.

    .venv/bin/python scripts/mutation_pass.py              # every break; a table at the end
    .venv/bin/python scripts/mutation_pass.py --list       # the breaks and their tests, nothing run
    .venv/bin/python scripts/mutation_pass.py --check      # every break applies exactly once and compiles
    .venv/bin/python scripts/mutation_pass.py --only R1,S5 --timeout 300

Where: the breaks are made in a git worktree of HEAD under the system's temporary folder (removed at the end), with
the working tree's version of the test files the breaks name copied in (where new or changed), and the tests run
there (``PYTHONPATH`` names it), so processes running from the repository itself (a training run, another test
session) never import a broken module; ``--in-place`` breaks the repository's own files instead. Safety: it refuses
to start when a file it breaks has uncommitted changes; each file is rewritten from its original bytes (and
modification time) in a ``finally``, and ``git diff --quiet`` on it must hold afterwards. The tests run with
``PYTHONDONTWRITEBYTECODE=1``, so no broken module is left compiled in ``__pycache__``. Exit status 1 when a break
survived (or a file could not be verified as restored).
"""

from __future__ import annotations

import argparse
import os
import py_compile
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
WORK = REPO  # where the breaks are made and the tests run (a worktree of HEAD unless --in-place)

ROLLOUT, SOURCE, LEAGUE, POLICIES = (
    "turnrl/rollout/multi.py",
    "turnrl/rl/sources/multi.py",
    "turnrl/rl/sources/league.py",
    "turnrl/rl/core/policies.py",
)
CORE, TTT, EXTERNAL, SOLVER = (
    "turnrl/envs/multiagent/core.py",
    "turnrl/envs/multiagent/tictactoe.py",
    "turnrl/envs/multiagent/external.py",
    "turnrl/envs/multiagent/solver_critic.py",
)
DRIVER, LEARNER = "turnrl/rl/run/driver.py", "turnrl/rl/core/learner.py"

ENVS, ROLL, GAMES = (
    "tests/multiagent/test_multiagent_envs.py",
    "tests/multiagent/test_multiagent_rollout.py",
    "tests/multiagent/test_multiagent_games.py",
)
HELD, SPLIT = "tests/multiagent/test_multiagent_held_out.py", "tests/multiagent/test_tictactoe_held_out.py"
KILLS = "tests/multiagent/test_multiagent_mutants.py"  # the tests added for the breaks that survived the first pass
_TRAIN = "tests/multiagent/test_multiagent_train.py::"
#: tests/multiagent/test_multiagent_train.py takes 2.5 minutes whole; its parts, by what they exercise
TRAIN_ONE = tuple(
    _TRAIN + t
    for t in (
        "test_self_play_trains_every_seat_in_groups_per_seat_on_exactly_what_was_sampled",
        "test_against_a_frozen_player_only_the_policys_seat_trains_in_turn",
        "test_games_from_the_empty_board_train_and_evaluate",
        "test_the_league_enters_versions_by_its_rules_and_plays_them_frozen",
        "test_bad_multi_agent_runs_fail_before_a_model_loads",
    )
)
TRAIN_LEAGUE = tuple(
    _TRAIN + t
    for t in (
        "test_the_league_enters_versions_by_its_rules_and_plays_them_frozen",
        "test_a_lora_league_keeps_the_adapters_alone",
        "test_a_resumed_league_run_ends_like_an_uninterrupted_one",
    )
)
TRAIN_POLICIES = tuple(
    _TRAIN + t
    for t in (
        "test_separate_lora_policies_each_train_their_own_seats_on_one_base",
        "test_a_rollout_worker_samples_each_seat_with_its_own_policys_adapters",
        "test_one_policys_bad_log_probs_among_good_ones_fire_the_guard",
        "test_policy_names_are_free_a_policy_named_like_the_rollouts_own_trains_its_seats",
    )
)


#: the games' training tests (tests/multiagent/test_multiagent_games.py whole is a minute, most of it the CLI's)
GAMES_TRAIN = tuple(
    f"{GAMES}::{t}"
    for t in (
        "test_a_textarena_game_trains_on_training_seeds_and_is_evaluated_on_held_out_ones",
        "test_the_example_pettingzoo_game_trains_and_is_evaluated_on_seeds",
        "test_a_game_of_ones_own_without_a_length_trains_on_seeds",
    )
)


@dataclass(frozen=True)
class Break:
    """One deliberate bug: ``old`` (found exactly once in ``path``) becomes ``new``; ``tests`` are pytest's targets
    (files or node ids, run in this order), ``k`` an optional ``-k`` expression."""

    key: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    k: str | None = None


BREAKS = [
    # ---- turnrl/rollout/multi.py: credit, cuts, budgets, groups, seats ----
    Break(
        "R1",
        "a seat's reward sign flipped",
        ROLLOUT,
        "    view.collected += reward\n",
        "    view.collected -= reward\n",
        (ROLL,),
    ),
    Break(
        "R2",
        "rewards paid before a cut dropped",
        ROLLOUT,
        "_collect(view, float(env._cumulative_rewards.get(seat, 0.0)))",
        "_collect(view, 0.0)",
        (ROLL,),
    ),
    Break(
        "R3",
        "the seat just read credited again at a cut",
        ROLLOUT,
        "            if seat != read:\n",
        "            if True:\n",
        (ROLL,),
    ),
    Break(
        "R4",
        "max_context does not shrink a move's budget",
        ROLLOUT,
        "return min(max_new_tokens, self.max_context - len(self.tokens))",
        "return max_new_tokens",
        (ROLL,),
    ),
    Break(
        "R5",
        "groups not per seat",
        ROLLOUT,
        'group_id=f"{episode}/{seat}"',
        'group_id=f"{episode}"',
        (ROLL, TRAIN_ONE[0]),
    ),
    Break(
        "R6",
        "a game's truncation not recorded on the seat",
        ROLLOUT,
        "view.truncated = view.truncated or bool(truncation)",
        "view.truncated = view.truncated",
        (KILLS, ROLL, ENVS),
    ),
    Break(
        "R7",
        "a trained policy's failure swallowed as a game's error",
        ROLLOUT,
        "                    if policy in self.versions:  # a policy being trained fails",
        "                    if False:  # a policy being trained fails",
        (KILLS, ROLL),
    ),
    Break(
        "R8",
        "each seat played by the other seat's policy (seats swapped)",
        ROLLOUT,
        "views.append({seat: self._view(seat, self.policy_of(seat, maps[i]))",
        "views.append({seat: self._view(seat, self.policy_of(env.possible_agents[::-1]"
        "[env.possible_agents.index(seat)], maps[i]))",
        (ROLL,),
    ),
    Break(
        "R9",
        "max_moves one move late",
        ROLLOUT,
        "if moves >= self.max_moves and env.agents:",
        "if moves > self.max_moves and env.agents:",
        (ROLL,),
    ),
    # ---- turnrl/rl/sources/multi.py: who trains, who plays, which seeds, figures ----
    Break(
        "S1",
        "the trained-views filter inverted (the frozen opponent's views train)",
        SOURCE,
        'if traj.metadata["policy"] not in trained or seat not in self.train_seats:',
        'if traj.metadata["policy"] in trained or seat not in self.train_seats:',
        TRAIN_ONE,
    ),
    Break(
        "S2",
        "a policy named 'opponent' filtered out",
        SOURCE,
        "trained = set(policies)  # every one of them",
        'trained = set(policies) - {"opponent"}  # every one of them',
        TRAIN_POLICIES,
    ),
    Break(
        "S3",
        "train_seats ignored in self-play",
        SOURCE,
        'if traj.metadata["policy"] not in trained or seat not in self.train_seats:',
        'if traj.metadata["policy"] not in trained:',
        (KILLS, *TRAIN_ONE),
    ),
    Break(
        "S4",
        "the policy plays the seat it does not train (seat swapped)",
        SOURCE,
        's == self.learner_seat(j) else "opponent"',
        's != self.learner_seat(j) else "opponent"',
        TRAIN_ONE,
    ),
    Break(
        "S5",
        "the frozen opponent replaced by the policy itself (opponent reused)",
        SOURCE,
        'policies["opponent"] = opponent',
        'policies["opponent"] = self.agent',
        (KILLS, *TRAIN_ONE),
    ),
    Break(
        "S6",
        "training plays the held-out seeds",
        SOURCE,
        'split_seed("train", j.task) if self.seeded',
        'split_seed("test", j.task) if self.seeded',
        GAMES_TRAIN,
    ),
    Break(
        "S7",
        "solved games not counted in win_rate",
        SOURCE,
        'in ("win", "solved") for t in trajectories)',
        'in ("win",) for t in trajectories)',
        (KILLS, *TRAIN_ONE),
    ),
    Break(
        "S8",
        "invalid moves per game: the max, not the sum",
        SOURCE,
        'out["invalid_moves"] = sum(int(t.metadata.get("invalid_moves", 0)) for t in trajectories) / n',
        'out["invalid_moves"] = max([int(t.metadata.get("invalid_moves", 0)) for t in trajectories] or [0]) / n',
        (KILLS, *TRAIN_ONE),
    ),
    # ---- turnrl/rl/sources/league.py: the pool, the draw, the frozen copy ----
    Break(
        "L1",
        "the league's pool never trimmed",
        LEAGUE,
        "del self.pool[: max(0, len(self.pool) - self.cfg.size)]",
        "del self.pool[:0]",
        TRAIN_LEAGUE,
    ),
    Break(
        "L2",
        "'latest' inverted",
        LEAGUE,
        "if rng.random() < self.cfg.latest:",
        "if rng.random() >= self.cfg.latest:",
        TRAIN_LEAGUE,
    ),
    Break(
        "L3",
        "a snapshot shares the live weights (the current policy reused as its past)",
        LEAGUE,
        'p.detach().to("cpu", copy=True)',
        "p.detach()",
        TRAIN_LEAGUE,
    ),
    Break(
        "L4",
        "a LoRA snapshot holds the base weights too",
        LEAGUE,
        "for n, p in model.named_parameters() if p.requires_grad}",
        "for n, p in model.named_parameters()}",
        TRAIN_LEAGUE,
    ),
    Break(
        "L5",
        "the past self keeps playing the first version it loaded (opponent reused)",
        LEAGUE,
        "        if version != self.version:\n",
        "        if self.version is None:\n",
        (KILLS, *TRAIN_LEAGUE),
    ),
    # ---- turnrl/rl/core/policies.py: several policies' figures and updates ----
    Break(
        "P1",
        "a count over policies averaged, not summed",
        POLICIES,
        "            out[k] = sum(values)\n",
        "            out[k] = sum(values) / len(values)\n",
        TRAIN_POLICIES,
    ),
    Break(
        "P2",
        "a max over policies averaged",
        POLICIES,
        "            out[k] = max(values)\n",
        "            out[k] = sum(values) / len(values)\n",
        (KILLS, *TRAIN_POLICIES),
    ),
    Break(
        "P3",
        "the lag-0 gap not weighted by tokens",
        POLICIES,
        "out[k] = weighted_mean(values, weights)",
        "out[k] = sum(values) / len(values)",
        TRAIN_POLICIES,
    ),
    Break(
        "P4",
        "every learner trains on the first policy's episodes",
        POLICIES,
        "mine = by_policy[name]",
        "mine = by_policy[next(iter(by_policy))]",
        TRAIN_POLICIES,
    ),
    Break(
        "P5",
        "a policy with nothing to train keeps its old version",
        POLICIES,
        "            learner.version = target  #",
        "            learner.version += 0  #",
        (KILLS, *TRAIN_POLICIES),
    ),
    Break(
        "P6",
        "a skipped policy's learning-rate schedule stands still",
        POLICIES,
        "                learner.scheduler.step()\n",
        "                pass\n",
        (KILLS, *TRAIN_POLICIES),
    ),
    # ---- the game adapters ----
    Break(
        "T1",
        "tic-tac-toe's win reward sign flipped",
        TTT,
        "                self.reward({agent: 1.0, other: -1.0})",
        "                self.reward({agent: -1.0, other: 1.0})",
        (ENVS, ROLL),
    ),
    Break(
        "T2",
        "tic-tac-toe's forfeit pays nothing (reward dropped)",
        TTT,
        "            self.reward({agent: -1.0, other: 1.0})\n",
        "",
        (ENVS, ROLL),
    ),
    Break(
        "T3",
        "tic-tac-toe's held-out classes inverted",
        TTT,
        '{"test": HELD_OUT_SHARE}) == "test" else "train"',
        '{"test": HELD_OUT_SHARE}) == "train" else "train"',
        (SPLIT, ENVS, HELD),
    ),
    Break(
        "T4",
        "the opponent's move told to the mover (seat swapped)",
        TTT,
        'self.tell(other, f"{agent} played {cell + 1}.\\n{show(self.board)}\\nYour move ({other}).")',
        'self.tell(agent, f"{agent} played {cell + 1}.\\n{show(self.board)}\\nYour move ({other}).")',
        (KILLS, ENVS, ROLL),
    ),
    Break(
        "T5",
        "a reach check from the test openings",
        TTT,
        'reached = reachable(openings("train", max_opening))',
        'reached = reachable(openings("test", max_opening))',
        (SPLIT,),
    ),
    Break(
        "C1",
        "a seat's reward reported again at every turn",
        CORE,
        "        self._cumulative_rewards[agent] = 0.0  # what it collected",
        "        pass  # what it collected",
        (ENVS, ROLL),
    ),
    Break(
        "C2",
        "held-out seeds start where training's do",
        CORE,
        'SEED_START = {"train": 0, "test": 1_000_000}',
        'SEED_START = {"train": 0, "test": 0}',
        (GAMES,),
    ),
    Break(
        "E1",
        "TextArena's own-move filter inverted",
        EXTERNAL,
        "if sender == pid and len(entry) > 2 and entry[2] == own_move:",
        "if sender != pid and len(entry) > 2 and entry[2] == own_move:",
        (GAMES,),
    ),
    Break(
        "E2",
        "TextArena rewards' sign flipped",
        EXTERNAL,
        'self.reward({f"player_{pid}": v for pid, v in rewards.items()})',
        'self.reward({f"player_{pid}": -v for pid, v in rewards.items()})',
        (ENVS, GAMES),
    ),
    Break(
        "E3",
        "every best total a draw",
        EXTERNAL,
        "tied = sum(v == best for v in rewards.values()) > 1",
        "tied = sum(v == best for v in rewards.values()) >= 1",
        (ENVS, GAMES),
    ),
    Break(
        "E4",
        "a PettingZoo history told whole again",
        EXTERNAL,
        'news = text[len(last):].lstrip("\\n") if last and text.startswith(last) else text',
        "news = text",
        (GAMES,),
    ),
    Break(
        "E5",
        "a PettingZoo game's totals not summed",
        EXTERNAL,
        "self.totals[a] = self.totals.get(a, 0.0) + r",
        "self.totals[a] = r",
        (KILLS, ENVS, GAMES),
    ),
    Break(
        "E6",
        "the held-out split plays training seeds",
        EXTERNAL,
        "return split_seed(self.split, index)",
        'return split_seed("train", index)',
        (ENVS, GAMES),
    ),
    Break(
        "E7",
        "TextArena's invalid moves not counted",
        EXTERNAL,
        'if getattr(state, "error_count", 0) > errors:',
        'if getattr(state, "error_count", 0) < errors:',
        (KILLS, ENVS),
    ),
    Break(
        "E8",
        "a PettingZoo refused move not counted",
        EXTERNAL,
        '.get("invalid_move"):  # the game\'s word',
        '.get("invalid"):  # the game\'s word',
        (GAMES,),
    ),
    Break(
        "K1",
        "the critic's reward dropped",
        SOLVER,
        'self.reward({"solver": score, "critic": score})',
        'self.reward({"solver": score, "critic": 0.0})',
        (ENVS,),
    ),
    # ---- what the matrix and the micro-batch figures check ----
    Break(
        "M1",
        "the driver trains all but one episode",
        DRIVER,
        "info.update(self.learner.update(fresh))",
        "info.update(self.learner.update(fresh[:-1]))",
        ("tests/rl/test_matrix.py",),
        k="local",
    ),
    Break(
        "M2",
        "a max over micro-batches added up",
        LEARNER,
        'torch.tensor(value, dtype=torch.float64)) if key.endswith("_max") else total + value',
        "torch.tensor(value, dtype=torch.float64)) if False else total + value",
        ("tests/rl/test_off_policy.py",),
    ),
    Break(
        "M3",
        "a count over micro-batches averaged",
        LEARNER,
        "self.cfg.optim.epochs if k in counted else n_micro",
        "n_micro if k in counted else n_micro",
        ("tests/rl/test_off_policy.py",),
    ),
]


def check_applies(b: Break) -> str:
    """The broken text of ``b.path`` (asserting the replacement applies exactly once and compiles)."""
    text = (WORK / b.path).read_text()
    found = text.count(b.old)
    assert found == 1, f"{b.key}: {b.old!r} occurs {found} times in {b.path} (must be once)"
    broken = text.replace(b.old, b.new)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(broken)
    try:
        py_compile.compile(f.name, doraise=True)
    finally:
        os.unlink(f.name)
    return broken


def first_failure(output: str) -> str:
    """The first failing test pytest's summary names (``FAILED`` or ``ERROR`` lines), with its message."""
    for line in output.splitlines():
        m = re.match(r"(FAILED|ERROR) (\S+)(?: - (.*))?", line)
        if m:
            return f"{m.group(2)}" + (f" - {m.group(3)[:110]}" if m.group(3) else "")
    return ""


def clean(path: str, repo: Path | None = None) -> bool:
    """Whether ``path`` is as git has it (in ``repo``, default the place the breaks are made)."""
    return subprocess.run(["git", "diff", "--quiet", "--", path], cwd=repo or WORK).returncode == 0


def make_worktree(tests: set[str]) -> Path:
    """A worktree of HEAD in a temporary folder, with the working tree's version of the test files ``tests`` where
    they are new or changed."""
    place = Path(tempfile.mkdtemp(prefix="turnrl-mutation-")) / "repo"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(place), "HEAD"], cwd=REPO, check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-m", "-o", "--exclude-standard", "--", *sorted(tests)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listed:
        if (REPO / name).is_file():
            (place / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, place / name)
    if listed:
        print(f"(tests from the working tree: {', '.join(listed)})", flush=True)
    return place


def drop_worktree(place: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(place)], cwd=REPO, check=False)
    shutil.rmtree(place.parent, ignore_errors=True)


def run_break(b: Break, timeout: float) -> tuple[str, str, float]:
    """Apply ``b``, run its tests, restore the file: (``killed``/``survived``/``timeout``, first failure, seconds)."""
    target = WORK / b.path
    original, stat = target.read_bytes(), target.stat()
    broken = check_applies(b)
    tests = [t for t in b.tests if (WORK / t.split("::")[0]).is_file()]
    if len(tests) < len(b.tests):  # (the file of the tests added for survivors, before it was written)
        print(f"    {b.key}: no such file, left out: {', '.join(sorted(set(b.tests) - set(tests)))}", flush=True)
    cmd = [
        str(PYTHON),
        "-m",
        "pytest",
        "-x",
        "-q",
        "-rfE",
        "-o",
        "addopts=",
        "-p",
        "no:cacheprovider",
        "--strict-markers",
        *tests,
        *(["-k", b.k] if b.k else []),
    ]
    env = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(WORK), os.environ.get("PYTHONPATH")])),
    }
    t0 = time.monotonic()
    try:
        target.write_text(broken)
        proc = subprocess.Popen(
            cmd, cwd=WORK, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "timeout", f"(no result within {timeout:.0f} s: counted as killed)", time.monotonic() - t0
    finally:
        target.write_bytes(original)
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        if not clean(b.path):
            raise SystemExit(f"{b.path} differs from git after restoring it ({b.key}): look at `git diff {b.path}`")
    seconds = time.monotonic() - t0
    if proc.returncode == 0:
        return "survived", "", seconds
    if proc.returncode in (4, 5):  # a usage error or no tests collected: a typo in the break's list, not a kill
        raise SystemExit(f"{b.key}: pytest could not run {b.tests} (exit {proc.returncode}):\n{out[-2000:]}")
    lines = out.strip().splitlines()
    failure = first_failure(out) or (lines[-1] if lines else f"exit {proc.returncode}")
    return "killed", failure, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated break keys (default: every break)")
    parser.add_argument("--timeout", type=float, default=360.0, help="seconds per break (default 360)")
    parser.add_argument("--list", action="store_true", help="print the breaks and their tests, run nothing")
    parser.add_argument("--check", action="store_true", help="check every break applies once and compiles")
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="break the repository's own files (default: a temporary worktree of HEAD)",
    )
    args = parser.parse_args()
    keys = [k.strip() for k in args.only.split(",")] if args.only else None
    chosen = [b for b in BREAKS if keys is None or b.key in keys]
    if keys and len(chosen) != len(keys):
        raise SystemExit(f"unknown break keys: {sorted(set(keys) - {b.key for b in BREAKS})}")
    assert len({b.key for b in BREAKS}) == len(BREAKS), "break keys must be distinct"
    if args.list:
        for b in chosen:
            print(
                f"{b.key:<3} {b.path}: {b.what}\n    {b.old!r}\n -> {b.new!r}\n    tests: {' '.join(b.tests)}"
                + (f" -k {b.k}" if b.k else "")
            )
        return 0
    if args.check:
        for b in chosen:
            check_applies(b)
        print(f"{len(chosen)} breaks apply exactly once to the working tree's files and compile")
        return 0
    dirty = sorted({b.path for b in chosen if not clean(b.path, REPO)})
    if dirty and args.in_place:
        raise SystemExit(
            f"uncommitted changes in {', '.join(dirty)}: commit or stash them first (each file is checked "
            "against git once restored)"
        )
    if dirty:
        print(f"(uncommitted changes in {', '.join(dirty)} are not in the pass: it breaks HEAD's text)", flush=True)
    global WORK
    WORK = REPO if args.in_place else make_worktree({t.split("::")[0] for b in chosen for t in b.tests})
    try:
        for b in chosen:
            check_applies(b)
    except BaseException:
        if WORK != REPO:
            drop_worktree(WORK)
        raise
    rows, start = [], time.monotonic()
    try:
        for b in chosen:
            verdict, failure, seconds = run_break(b, args.timeout)
            rows.append((b, verdict, failure, seconds))
            print(f"{b.key:<3} {verdict:<8} {seconds:6.1f}s  {b.what}  {failure}", flush=True)
        assert all(clean(b.path) for b in chosen), "a file differs from git after the pass"
    finally:
        if WORK != REPO:
            drop_worktree(WORK)
    total = time.monotonic() - start
    print("\n| break | file | what | result | first failing test | s |\n|---|---|---|---|---|---|")
    for b, verdict, failure, seconds in rows:
        print(
            f"| {b.key} | {b.path.removeprefix('turnrl/')} | {b.what} | {verdict} | {failure or '—'} | {seconds:.0f} |"
        )
    survived = [b.key for b, verdict, _, _ in rows if verdict == "survived"]
    print(
        f"\n{len(rows)} breaks: {len(rows) - len(survived)} killed, {len(survived)} survived"
        + (f" ({', '.join(survived)})" if survived else "")
        + f"; {total / 60:.1f} min"
    )
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
