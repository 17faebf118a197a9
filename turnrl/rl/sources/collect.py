"""Offline datasets: N episodes per training task from any agent, as token-exact Trajectories (``turnrl rollout``).

Each episode keeps its rewards, the behaviour policy's per-token log-probabilities (``Trajectory.logprobs``) and,
in ``metadata``, the agent's identity (``agent``), the tokenizer's fingerprint (``tokenizer``, checked when a model
trains on the data), the dataset's settings (``dataset``), ``task_index`` and ``sample``. The samples of one task
share the group ``task-INDEX`` (DPO pairs and DQO batches are built from groups).

Resumable: episodes stream to ``OUT.partial.jsonl`` as they finish; a rerun with the same settings keeps every task
already written in full (in ``OUT`` or the partial file), re-runs only the others and then writes ``OUT`` whole.
Episodes are played by :func:`turnrl.rollout.play.play` under its seeding rule: episode ``s`` of task ``i`` is
sampled from its own random stream (seeded by the seed, ``i`` and ``s``) where the agent supports it, so what is
sampled does not depend on how the run was cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnrl.agents.base import SamplingParams
from turnrl.envs.conformance.split_check import task_items
from turnrl.envs.registry import make
from turnrl.rl.sources.base import Job
from turnrl.rl.sources.replay import tokenizer_fingerprint
from turnrl.rollout.play import Playing, play
from turnrl.storage import load, save, write_jsonl
from turnrl.types import Trajectory


def _read_partial(path: Path) -> list[Trajectory]:
    """The episodes streamed to a partial file; a line cut by an interruption (the last one) is ignored."""
    out: list[Trajectory] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Trajectory.model_validate(json.loads(line)))
        except ValueError:
            continue
    return out


def dataset_summary(trajectories: list[Trajectory]) -> dict[str, float]:
    """Episodes, tasks, success rate, mean reward and generated tokens, and how many task groups have both outcomes
    (DPO's pairs come from those), all correct, or all incorrect."""
    groups: dict[str, list[bool]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id or t.id, []).append(bool(t.correct))
    n = max(len(trajectories), 1)
    return {
        "episodes": float(len(trajectories)),
        "tasks": float(len(groups)),
        "success_rate": sum(bool(t.correct) for t in trajectories) / n,
        "mean_reward": sum(t.total_reward for t in trajectories) / n,
        "generated_tokens_per_episode": sum(sum(t.loss_mask or []) for t in trajectories) / n,
        "errors": float(sum(t.error is not None for t in trajectories)),
        "groups_both_outcomes": float(sum(any(v) and not all(v) for v in groups.values())),
        "groups_all_correct": float(sum(all(v) for v in groups.values())),
        "groups_all_incorrect": float(sum(not any(v) for v in groups.values())),
    }


def rollout_dataset(
    agent: Any,
    agent_name: str,
    env_id: str,
    *,
    out: str | Path,
    tasks: int,
    samples: int,
    params: SamplingParams,
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    batch_episodes: int = 64,
    max_context: int = 4096,
    env_timeout: float | None = 60.0,
    on_episode: Callable[[Trajectory], Any] | None = None,
) -> dict[str, Any]:
    """Sample ``samples`` episodes of each task ``0..tasks-1`` of ``env_id`` with ``agent``; write them to ``out``.

    Args:
        agent: generates from token prompts (its tokenizer renders the chat template).
        agent_name: the agent's identity, recorded in every episode (e.g. its spec).
        out: ``.parquet`` or ``.jsonl``; an existing file made with the same settings is resumed.
        tasks: the first ``tasks`` tasks (fewer if the environment has fewer).
        params: sampling parameters (its ``seed`` is ignored: ``seed`` seeds every episode).
        batch_episodes: episodes rolled out together (whole tasks).
        on_episode: called with each newly finished episode (progress bars).

    Returns:
        :func:`dataset_summary` of the whole file plus ``new_episodes``, ``skipped_tasks`` (already written),
        ``wall_seconds`` and ``out``.

    Raises:
        ValueError: ``out`` holds episodes sampled with other settings (agent, tokenizer, environment, sampling).
    """
    out = Path(out)
    if out.suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"--out must end in .parquet or .jsonl, got {out.name}")
    env_kwargs = dict(env_kwargs or {})
    partial = out.with_name(out.name + ".partial.jsonl")
    probe = make(env_id, **env_kwargs)
    try:
        n_tasks = min(tasks, len(probe)) if hasattr(probe, "__len__") else tasks
        items = task_items(probe, n_tasks)  # so that a run can refuse rows that pose its held-out problems
    finally:
        probe.close()  # the episodes make their own
    key = {
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "samples": samples,
        "seed": seed,
        "sampling": params.model_dump(mode="json", exclude={"seed"}),
    }
    fingerprint = tokenizer_fingerprint(agent.tokenizer)
    old = (load(out) if out.is_file() else []) + _read_partial(partial)
    mine = {"agent": agent_name, "tokenizer": fingerprint, **key}
    for t in old:
        theirs = {
            "agent": t.metadata.get("agent"),
            "tokenizer": t.metadata.get("tokenizer"),
            **(t.metadata.get("dataset") or {}),
        }
        if theirs != mine:
            diff = ", ".join(
                f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} now" for k in mine if theirs.get(k) != mine.get(k)
            )
            raise ValueError(
                f"{out} already holds episodes sampled with other settings ({diff}); write to another "
                "--out, or rerun with the same agent and options to resume it"
            )
    by_task: dict[int, dict[int, Trajectory]] = {}
    for t in old:
        by_task.setdefault(t.metadata["task_index"], {})[t.metadata["sample"]] = t
    done = {i for i, eps in by_task.items() if len(eps) == samples}
    todo = [i for i in range(n_tasks) if i not in done]
    kept = [by_task[i][s] for i in sorted(done) for s in sorted(by_task[i])]
    per_chunk = max(1, batch_episodes // samples)
    t0, new = time.perf_counter(), []
    write_jsonl(kept, partial)  # the partial file restarts from the complete tasks

    def sink(traj: Trajectory) -> None:
        write_jsonl([traj], partial, append=True)
        if on_episode is not None:
            on_episode(traj)

    how = Playing(params, max_context, env_timeout=env_timeout)
    for c in range(0, len(todo), per_chunk):  # a chunk is named by its first task: a resumed run draws the same
        jobs = [Job(0, 0, i, s) for i in todo[c : c + per_chunk] for s in range(samples)]
        trajs, _ = play(
            agent,
            env_id,
            env_kwargs,
            jobs,
            seed=seed,
            how=how,
            sink=sink,
            chunk=todo[c],
            group_id=lambda j: f"task-{j.task}",
            metadata=lambda j: {
                "agent": agent_name,
                "tokenizer": fingerprint,
                "dataset": key,
                "task_index": j.task,
                "sample": j.sample,
                **({"item": items[j.task]} if j.task in items else {}),
            },
        )
        new += trajs
    everything = sorted(kept + new, key=lambda t: (t.metadata["task_index"], t.metadata["sample"]))
    tmp = out.with_name(out.name + ".tmp" + out.suffix)
    save(everything, tmp)
    tmp.replace(out)
    partial.unlink(missing_ok=True)
    return {
        **dataset_summary(everything),
        "new_episodes": float(len(new)),
        "skipped_tasks": float(len(done)),
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "out": str(out),
    }
