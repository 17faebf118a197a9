"""Evaluate an agent on any registered environment: accuracy, pass@k, outcomes, turns, tool use, tokens.

``evaluate(...)`` runs ``samples`` episodes on each of the first ``limit`` tasks of the environment's held-out
split (unless ``env_kwargs`` names a split; see :func:`held_out_kwargs`) through the token-exact rollout, streams
the trajectories to ``OUT/trajectories.jsonl``, and writes ``OUT/items.jsonl`` (one line per episode),
``OUT/report.md``, ``OUT/metrics.json`` and ``OUT/plot.png`` (their contents: :mod:`turnrl.rl.run.eval_report`).
With the same seed the numbers repeat. Each row names its ``item``, the problem it poses (:func:`item_key`), so
figures count distinct problems and ``turnrl compare`` pairs two runs problem by problem.

Interrupted (Ctrl-C, or SIGTERM where the caller turns it into ``KeyboardInterrupt``), it writes the items, report,
metrics and plot of the episodes that finished, says so in them, and raises :class:`EvaluationInterrupted`.
``resume=True`` then keeps the finished episodes of ``OUT/trajectories.jsonl`` — where ``OUT/run.json`` shows the
same settings (environment and its kwargs, samples, seed, sampling, context, agent) — and plays only the others;
the items come out as an uninterrupted run's (one per task and sample, in order; the same episodes where each is
sampled from its own seed or greedily — an agent sampling a batch from one seed draws other samples for a batch that
starts elsewhere). Finished episodes past a smaller ``limit`` stay in ``trajectories.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnrl.agents.base import Agent, SamplingParams
from turnrl.envs.core import Task
from turnrl.envs.registry import make
from turnrl.envs.splits import canonical_key
from turnrl.rl.run.eval_report import (  # noqa: F401 — re-exported: evaluation's names in one place
    FAILURES,
    OUTCOMES,
    episode_row,
    failure_reason,
    figure,
    outcome,
    pass_at_k,
    pick_examples,
    plot,
    render_episode,
    summarize,
    write_report,
)
from turnrl.rl.sources.base import Job
from turnrl.rollout.play import Playing, play
from turnrl.storage import write_jsonl
from turnrl.types import Trajectory
from turnrl.utils import code_version

TOKEN_FIELDS = ("token_ids", "loss_mask", "logprobs", "token_versions", "segments")


class EvaluationInterrupted(KeyboardInterrupt):
    """An evaluation stopped by Ctrl-C or SIGTERM after writing what finished: ``metrics`` of the ``done`` of
    ``total`` episodes (a ``KeyboardInterrupt``, so that whoever does not catch it stops as before)."""

    def __init__(self, metrics: dict[str, Any], done: int, total: int) -> None:
        super().__init__(f"evaluation interrupted: {done} of {total} episodes finished")
        self.metrics, self.done, self.total = metrics, done, total


def held_out_kwargs(env: Any, env_kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The kwargs that evaluate ``env`` as it asks to be evaluated, or None when nothing changes.

    That is its held-out split (``TextEnv.held_out_split``) unless the kwargs name a split (the caller chose), and
    its ``evaluation_options`` (e.g. PAG's ``mode: eval``) unless the kwargs name them.
    """
    extra: dict[str, Any] = {}
    held = getattr(env, "held_out_split", None)
    if "split" not in env_kwargs and held is not None and getattr(env, "split", None) != held:
        extra["split"] = held
    for key, value in (getattr(env, "evaluation_options", None) or {}).items():
        if key not in env_kwargs and getattr(env, key, None) != value:
            extra[key] = value
    return {**env_kwargs, **extra} if extra else None


def run_eval_kwargs(train_env: Any, kwargs: dict[str, Any], eval_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The kwargs of a training run's held-out environment: ``kwargs`` updated by ``eval_kwargs``, and, where
    ``eval_kwargs`` names no split and the environment (``train_env``, made with ``kwargs``) declares a held-out
    split, that split — a split named only for training (``split: train``) never carries over to evaluation."""
    merged = {**kwargs, **(eval_kwargs or {})}
    held = getattr(train_env, "held_out_split", None)
    if "split" not in (eval_kwargs or {}) and held is not None:
        merged["split"] = held
    return merged


def split_line(env: Any, first: int, last: int, first_id: str | None, last_id: str | None) -> str:
    """One line for a report: which split the tasks came from, whether it is held out, and which tasks."""
    split, held = getattr(env, "split", None), getattr(env, "held_out_split", None)
    size = f" of {len(env)}" if hasattr(env, "__len__") else ""
    span = f"tasks {first}–{last}{size}" + (f" (`{first_id}` … `{last_id}`)" if first_id and last_id else "")
    if split is None:
        return f"split: not declared by the environment (turnrl cannot tell whether these are held out) · {span}"
    if split == held:
        return f"split: **{split}** (held-out) · {span}"
    if held is None:
        return (
            f"split: **{split}** — the environment declares no held-out split (turnrl cannot tell whether "
            f"these are held out) · {span}"
        )
    if split == getattr(env, "validation_split", None):
        return (
            f"split: **{split}** (validation: for choosing steps and recipes, not a held-out figure; its held-out "
            f"split is {held}) · {span}"
        )
    return f"split: **{split}** — NOT held-out (training tasks; its held-out split is {held}) · {span}"


def held_out_warning(env: Any, env_id: str) -> str | None:
    """A warning for the top of ``turnrl eval``'s output when ``env`` (as it will be evaluated) poses tasks that are
    not known to be held out from training; None when they are."""
    split, held = getattr(env, "split", None), getattr(env, "held_out_split", None)
    if split is not None and split == held:
        return None
    if split is None or held is None:
        what = "no split" if split is None else f"no held-out split (this is its {split!r} split)"
        return (
            f"warning: {env_id} declares {what}, so turnrl cannot tell whether these tasks are held out from "
            "training; an environment declares them with `split` and `held_out_split` (see "
            "examples/unit_converter_env.py)"
        )
    if split == getattr(env, "validation_split", None):
        return (
            f"note: evaluating {env_id}'s validation split {split!r}: problems training does not see, kept for "
            f"choosing steps and recipes; report held-out figures on {held!r} (leave out --kw split=…)"
        )
    return (
        f"warning: evaluating {env_id}'s {split!r} split, which is NOT held out: these are training tasks "
        f"(its held-out split is {held!r}; leave out --kw split=… to evaluate that)"
    )


def item_key(env: Any, index: int, task_id: str | None) -> str | None:
    """The item an episode of task ``index`` counts as: the task's canonical form
    (:func:`turnrl.envs.splits.canonical_key`: two presentations of one problem are one item) where the environment's
    ``task_at`` gives a :class:`~turnrl.envs.core.Task`, else ``task_id`` (environments without a list of tasks; a
    ``task_at`` that raises counts as none)."""
    try:
        task = getattr(env.unwrapped, "task_at", lambda i: None)(index)
    except Exception:  # an environment's own code: no task means the id names the item
        task = None
    return canonical_key(task) if isinstance(task, Task) else task_id


def _read_finished(path: Path) -> list[Trajectory]:
    """The trajectories streamed to ``path``; a line cut by an interruption is ignored."""
    out: list[Trajectory] = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            out.append(Trajectory.model_validate(json.loads(line)))
        except ValueError:
            continue
    return out


def eval_settings(
    env_id: str,
    env_kwargs: dict[str, Any],
    samples: int,
    seed: int,
    params: SamplingParams,
    max_context: int,
    agent_name: str | None,
    context: Any = None,
) -> dict[str, Any]:
    """What an evaluation must share with the one it resumes (``run.json``'s ``settings``; ``env_kwargs`` as
    evaluated, the held-out split included)."""
    return {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "samples": samples,
        "seed": seed,
        "params": params.model_dump(mode="json"),
        "max_context": max_context,
        "agent": agent_name,
        "context": repr(context) if context is not None else None,
    }


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"params": {"seed": 1}}`` -> ``{"params.seed": 1}`` (to name what differs)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def previous_episodes(out: Path, settings: dict[str, Any]) -> dict[str, Trajectory]:
    """The finished episodes of an earlier evaluation in ``out`` (``settings`` must be its own), by job key.

    Raises:
        ValueError: ``out`` holds trajectories but no ``run.json``, or one written with other settings.
    """
    run, stream = out / "run.json", out / "trajectories.jsonl"
    if not run.is_file():
        if stream.is_file():
            raise ValueError(
                f"--resume: {out} holds trajectories but no run.json, so turnrl cannot tell which settings "
                "made them; evaluate into another --out"
            )
        return {}
    theirs, mine = _flat(json.loads(run.read_text())["settings"]), _flat(json.loads(json.dumps(settings, default=str)))
    if theirs != mine:
        diff = "; ".join(
            f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} now"
            for k in sorted(set(theirs) | set(mine))
            if theirs.get(k) != mine.get(k)
        )
        raise ValueError(
            f"--resume: {out} was evaluated with other settings ({diff}); rerun with the same options "
            "to resume it, or evaluate into another --out"
        )
    found: dict[str, Trajectory] = {}  # every finished episode once, those this evaluation does not reuse too
    for traj in _read_finished(stream):
        key = traj.metadata.get("job")
        if key is not None and key not in found:
            found[key] = traj
    return found


def evaluate(
    agent: Agent,
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    limit: int = 100,
    samples: int = 1,
    params: SamplingParams | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    batch_episodes: int = 32,
    max_context: int = 4096,
    on_episode: Callable[[Trajectory], Any] | None = None,
    env_timeout: float | None = 60.0,
    player: Callable[..., tuple[list[Trajectory], int]] | None = None,
    context: Any = None,
    resume: bool = False,
    agent_name: str | None = None,
    on_start: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``agent`` on tasks ``0..limit-1`` of ``env_id`` with ``samples`` episodes each.

    Args:
        env_kwargs: the environment's kwargs. Without a ``split`` the environment's held-out split is evaluated
            where it declares one (:func:`held_out_kwargs`); the report says which split and tasks were used.
        params: sampling parameters; default greedy for one sample, temperature 1 for several.
        seed: the sampling seed (with the same seed the numbers repeat).
        out: the output folder (created); None writes nothing.
        batch_episodes: episodes rolled out together (each turn's generation is batched across them).
        on_episode: called with each newly finished trajectory (progress bars).
        env_timeout: seconds one environment step may take before its episode ends with an error.
        player: plays the episodes instead of the native rollout (a user program through the gateway):
            ``player(jobs, env_kwargs, sink) -> (trajectories in job order, generated tokens)``.
        context: a :class:`~turnrl.rollout.context.ContextBudget` (history rewriting for long episodes).
        resume: keep the finished episodes of an earlier evaluation in ``out`` with the same settings (``limit`` may
            differ) and play only the others (see the module docstring).
        agent_name: the agent's identity (e.g. its spec), recorded in ``run.json`` and checked by ``resume``.
        on_start: called with (episodes already finished, episodes in all) before any is played.

    Returns:
        The metrics dict (also in ``metrics.json``).

    Raises:
        EvaluationInterrupted: Ctrl-C (``KeyboardInterrupt``) while episodes played; what finished is written.
        ValueError: bad arguments, or ``resume`` finds an evaluation with other settings in ``out``.
    """
    if samples < 1 or limit < 1:
        raise ValueError(f"samples and limit must be >= 1, got samples={samples}, limit={limit}")
    env_kwargs = dict(env_kwargs or {})
    params = params or SamplingParams(temperature=0.0 if samples == 1 else 1.0, max_new_tokens=256)
    probe = make(env_id, **env_kwargs)
    if (held := held_out_kwargs(probe, env_kwargs)) is not None:
        probe.close()
        env_kwargs, probe = held, make(env_id, **held)
    try:
        n_tasks = min(limit, len(probe)) if hasattr(probe, "__len__") else limit
        jobs = [Job(0, 0, i, s) for i in range(n_tasks) for s in range(samples)]
        by_key = {j.key: (n, j) for n, j in enumerate(jobs)}
        max_new = params.max_new_tokens
        settings = eval_settings(env_id, env_kwargs, samples, seed, params, max_context, agent_name, context)
        out_dir = Path(out) if out is not None else None
        found = previous_episodes(out_dir, settings) if resume and out_dir is not None else {}
        previous = {k: t for k, t in found.items() if k in by_key}
        stream = out_dir / "trajectories.jsonl" if out_dir is not None else None
        if out_dir is not None and stream is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "run.json").write_text(
                json.dumps({"settings": settings, "limit": limit, "code": code_version()}, indent=2, default=str)
            )
            tmp = stream.with_name("trajectories.tmp.jsonl")  # the reused episodes in job order, those past the limit,
            beyond = [t for k, t in found.items() if k not in by_key]  # then the new ones
            write_jsonl(sorted(previous.values(), key=lambda t: by_key[t.metadata["job"]][0]) + beyond, tmp)
            tmp.replace(stream)

        rows: dict[str, dict[str, Any]] = {}
        items: dict[int, str | None] = {}  # task index -> its item (item_key), asked of the environment once
        light: dict[str, Trajectory] = {}  # for the environment's figures: turns only, not every token
        kept: list[tuple[int, Trajectory]] = []  # candidates for the report's example episodes, in job order

        def record(traj: Trajectory, job: Job) -> None:
            nonlocal kept
            if job.key in rows:
                return
            if job.task not in items:
                items[job.task] = item_key(probe, job.task, traj.task_id)
            rows[job.key] = {**episode_row(traj, job.task, job.sample, max_new), "item": items[job.task]}
            light[job.key] = traj.model_copy(update=dict.fromkeys(TOKEN_FIELDS))
            order = sorted([*kept, (by_key[job.key][0], traj)], key=lambda x: x[0])
            chosen = {id(t) for t in pick_examples([t for _, t in order], 2, 2 * len(FAILURES), max_new)}
            kept = [(n, t) for n, t in order if id(t) in chosen]

        for key, traj in previous.items():
            record(traj, by_key[key][1])
        stopped = False

        def sink(traj: Trajectory) -> None:
            if stopped:  # an interrupted rollout's last words
                return
            if stream is not None:
                write_jsonl([traj], stream, append=True)
            key = traj.metadata.get("job")
            if (found := by_key.get(key) if key is not None else None) is not None:
                record(traj, found[1])
            if on_episode is not None:
                on_episode(traj)

        if on_start is not None:
            on_start(len(rows), len(jobs))
        todo = [j for j in jobs if j.key not in rows]
        t0 = time.perf_counter()
        generated, interrupted = 0, None
        try:
            for start in range(0, len(todo), batch_episodes):
                chunk = todo[start : start + batch_episodes]
                if player is not None:
                    trajs, tokens = player(chunk, env_kwargs, sink)
                else:
                    trajs, rollout = play(
                        agent,
                        env_id,
                        env_kwargs,
                        chunk,
                        seed=seed,
                        how=Playing(params, max_context, env_timeout=env_timeout, context=context),
                        sink=sink,
                        chunk=chunk[0].task,
                        group_id=lambda j: str(j.task),
                    )
                    tokens = rollout.stats.generated_tokens
                generated += tokens
                for traj, job in zip(trajs, chunk):  # those the sink did not see (no job key)
                    record(traj, job)
        except KeyboardInterrupt as e:
            interrupted = e
        stopped = True
        done = [j for j in jobs if j.key in rows]
        wall = time.perf_counter() - t0
        metrics = summarize([rows[j.key] for j in done], samples)
        if done:  # the environment's own figures (user code: not asked about nothing)
            own = probe.unwrapped.summarize_episodes([light[j.key] for j in done])
            metrics.update(own)
            metrics["env"] = {k: v for k, v in own.items() if isinstance(v, (int, float))}  # the same, by themselves
        metrics["wall_seconds"] = round(wall, 2)
        metrics["generated_tokens_per_second"] = round(generated / wall, 2) if wall > 0 else 0.0
        metrics["split"] = getattr(probe, "split", None)
        held_split = getattr(probe, "held_out_split", None)
        metrics["held_out"] = metrics["split"] is not None and metrics["split"] == held_split
        if previous:
            metrics["resumed_episodes"] = len(previous)
        notice = None
        if interrupted is not None:
            metrics.update(interrupted=True, episodes_planned=len(jobs))
            notice = (
                f"**Interrupted**: {len(done)} of {len(jobs)} episodes finished; this report covers those only. "
                f"Rerun with `--resume` (the same options) to play the other {len(jobs) - len(done)}."
            )
        if out_dir is not None:
            ids = {r["index"]: r["task_id"] for r in rows.values()}
            with (out_dir / "items.jsonl").open("w") as f:
                for j in done:
                    f.write(json.dumps(rows[j.key]) + "\n")
            (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
            config = {
                "env_id": env_id,
                "env_kwargs": env_kwargs,
                "limit": limit,
                "samples": samples,
                "seed": seed,
                "params": params.model_dump(),
                **({"agent": agent_name} if agent_name else {}),
            }
            tok = getattr(agent, "tokenizer", None)
            decode = (lambda ids: tok.decode(ids, skip_special_tokens=False)) if tok is not None else None
            write_report(
                out_dir,
                f"{env_id}: {n_tasks} tasks x {samples} samples",
                metrics,
                [rows[j.key] for j in done],
                config,
                pick_examples([t for _, t in kept], max_new_tokens=max_new),
                subtitle=split_line(probe, 0, n_tasks - 1, ids.get(0), ids.get(n_tasks - 1)),
                notice=notice,
                decode=decode,
                headline=probe.unwrapped.report_lines(metrics) if done else [],
            )
            plot(out_dir, metrics, [rows[j.key] for j in done], env_id, max_new)
        if interrupted is not None:
            raise EvaluationInterrupted(metrics, len(done), len(jobs)) from interrupted
        return metrics
    finally:  # the probe was made here: its session (a remote: server's) ends here
        probe.close()
