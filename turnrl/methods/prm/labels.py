"""Line-level process labels for code by Monte-Carlo completion (PRM for code, arXiv 2410.17621; docs/algorithms.md
§8).

The prefix of a reply up to the end of one of its lines is **positive** when some completion from it passes the
task's tests. Estimated by sampling ``completions`` continuations of the prefix with a policy (the *prover*) and
running the tests on each prefix + continuation: one pass makes it positive.

What we settled on:

* **Positions** — a line ends at a generated token whose text holds a newline (:func:`line_ends`); the label of a
  prefix sits on that token. The reply's last token carries the outcome itself (its tests were run): it is not
  sampled again, and it is not a line end.
* **Monotone, by construction** — a completion that passes from a later prefix is also a completion of every earlier
  prefix, so the positive prefixes come first: labels are 1 up to the last positive line and 0 after it. A reply
  that passes is positive everywhere (no sampling). For a failing reply the last positive line is found by **binary
  search** over its line ends (the paper's procedure), ``⌈log2(lines + 1)⌉`` probes of ``completions`` samples each
  instead of one per line; the probes of all episodes in a batch are sampled in one ``generate`` call.
* **Estimates err one way** — with few completions a positive prefix may look negative (no sample passed), never
  the reverse (a pass is a pass): the labels are lower bounds, and more completions raise them.

:func:`search` is the binary search, once; :func:`label_prefixes` runs it against an abstract "does some completion
pass from line i" oracle (the tests check it on scripted suites), :func:`label_episodes` runs many at once with a
real agent and environment.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from turnrl.methods.prm.model import line_ends
from turnrl.types import SamplingParams, Trajectory


class PRMDataError(ValueError):
    """Episodes or an environment the process labels cannot be made for."""


def search(n_lines: int, passes: bool) -> Generator[int, bool, list[int]]:
    """The binary search for one reply, as a coroutine: it yields the line end to probe next, is sent whether some
    completion from there passes, and returns the 0/1 labels of the ``n_lines`` line ends (see the module docstring).
    A passing reply yields nothing."""
    lo, hi = (n_lines - 1, n_lines) if passes else (-1, n_lines)  # prefix lo is positive (or none known), hi negative
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (yield mid):
            lo = mid
        else:
            hi = mid
    return [1] * (lo + 1) + [0] * (n_lines - lo - 1)


def label_prefixes(n_lines: int, passes: bool, passes_from: Callable[[int], bool]) -> tuple[list[int], int]:
    """0/1 labels of a reply's ``n_lines`` line-end prefixes, and how many probes it took (:func:`search`, one probe
    at a time).

    Args:
        n_lines: the reply's line ends.
        passes: whether the whole reply passed its tests (then every prefix is positive).
        passes_from: ``i -> whether some completion from the prefix up to line end i passes`` (one probe).
    """
    steps, probes = search(n_lines, passes), 0
    try:
        mid = next(steps)
        while True:
            probes += 1
            mid = steps.send(passes_from(mid))
    except StopIteration as done:
        return done.value, probes


def _reply_span(traj: Trajectory) -> tuple[int, int]:
    spans = [t.token_span for t in traj.turns if t.token_span is not None]
    if traj.token_ids is None or len(spans) != 1:
        raise PRMDataError(
            f"episode {traj.id}: process labels are made for one-turn episodes with tokens (one reply "
            f"per task); it has {len(spans)} generated turns"
        )
    return spans[0]


def task_index(traj: Trajectory) -> int:
    """The environment task an episode played (``turnrl rollout``'s ``task_index``, or a training job's)."""
    if "task_index" in traj.metadata:
        return int(traj.metadata["task_index"])
    if "job" in traj.metadata:
        from turnrl.rl.sources.base import Job

        return Job.parse(traj.metadata["job"]).task
    raise PRMDataError(f"episode {traj.id} does not say which task it played (metadata task_index or job)")


def check_env(env: Any) -> None:
    """Raise :class:`PRMDataError` unless ``env`` grades replies by running tests (a code environment)."""
    u = env.unwrapped
    task = u.task_at(0) if len(u) else None
    if task is None or not task.metadata.get("tests") or not hasattr(u, "score"):
        raise PRMDataError(
            f"{type(u).__name__} has no tests to run: process labels (a prefix is positive when some "
            "completion passes the tests) need a code environment such as turnrl/Functions-v0 or "
            "turnrl/HumanEval-v0"
        )


def label_episodes(
    trajs: Sequence[Trajectory], agent: Any, env: Any, *, completions: int = 4, params: SamplingParams | None = None
) -> tuple[list[Trajectory], dict[str, float]]:
    """Label every line end of each one-turn episode (see the module docstring).

    Args:
        trajs: episodes of ``env`` (one reply each, with tokens and their task index).
        agent: the prover that samples completions (token prompts → completions).
        env: the environment that grades a reply (its ``score``; ``reset(options={"index": i})`` selects the task).
        completions: samples per probe.
        params: the prover's sampling (default temperature 1, 256 new tokens).

    Returns:
        The episodes with ``metadata["prm_labels"] = [[token_index, label], …]`` and ``metadata["prm_outcome"]``,
        and figures: ``episodes``, ``line_ends``, ``positive_share``, ``probes``, ``completions_sampled``,
        ``passing_episodes``, ``rescued`` (failing episodes with a positive prefix).

    Raises:
        PRMDataError: ``env`` has no tests, or an episode is not a one-turn episode of it with tokens.
    """
    check_env(env)
    params = params or SamplingParams(temperature=1.0, max_new_tokens=256)
    tok = agent.tokenizer
    cases: list[dict[str, Any]] = []  # one open search per episode
    for t in trajs:
        span = _reply_span(t)
        assert t.token_ids is not None  # _reply_span refused an episode without tokens
        ends = line_ends(t.token_ids, span, tok)
        c: dict[str, Any] = {
            "traj": t,
            "span": span,
            "ends": ends,
            "task": task_index(t),
            "passes": bool(t.correct),
            "search": search(len(ends), bool(t.correct)),
            "probes": 0,
            "labels": None,
        }
        try:
            c["mid"] = next(c["search"])
        except StopIteration as done:
            c["labels"] = done.value
        cases.append(c)
    sampled = 0
    while todo := [c for c in cases if c["labels"] is None]:  # one round of probes of every open search at once
        prompts = [list(c["traj"].token_ids[: c["ends"][c["mid"]] + 1]) for c in todo for _ in range(completions)]
        outs = agent.generate(prompts, params)
        sampled += len(outs)
        for k, c in enumerate(todo):
            head = tok.decode(c["traj"].token_ids[c["span"][0] : c["ends"][c["mid"]] + 1])
            ok = any(_passes(env, c["task"], head + o.text) for o in outs[k * completions : (k + 1) * completions])
            c["probes"] += 1
            try:
                c["mid"] = c["search"].send(ok)
            except StopIteration as done:
                c["labels"] = done.value
    out: list[Trajectory] = []
    positive, total = 0, 0
    for c in cases:
        labels = c["labels"]
        positive, total = positive + sum(labels), total + len(labels)
        meta = {
            **c["traj"].metadata,
            "prm_labels": [[i, y] for i, y in zip(c["ends"], labels)],
            "prm_outcome": int(c["passes"]),
        }
        out.append(c["traj"].model_copy(update={"metadata": meta}))
    return out, {
        "episodes": float(len(cases)),
        "line_ends": float(total),
        "positive_share": positive / total if total else 0.0,
        "probes": float(sum(c["probes"] for c in cases)),
        "completions_sampled": float(sampled),
        "passing_episodes": float(sum(c["passes"] for c in cases)),
        "rescued": float(sum(not c["passes"] and any(c["labels"]) for c in cases)),
    }


def _passes(env: Any, task: int, reply: str) -> bool:
    env.reset(options={"index": task})
    return bool(env.unwrapped.score(reply).correct)
