"""Evaluate an agent on any registered environment: accuracy, pass@k, turns, tool use, tokens.

``evaluate(...)`` runs ``samples`` episodes on each of the first ``limit`` tasks through the token-exact
rollout, streams the trajectories to ``OUT/trajectories.jsonl``, and writes ``OUT/items.jsonl`` (one line per
episode), ``OUT/report.md``, ``OUT/metrics.json`` and ``OUT/plot.png``. With the same seed the numbers repeat.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.agents.base import Agent, SamplingParams
from turnrl.envs.registry import make
from turnrl.rl.rollout import Rollout
from turnrl.storage import TrajectoryWriter
from turnrl.types import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 − C(n−c, k) / C(n, k) for n samples of which c are correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def episode_row(traj: Trajectory, index: int, sample: int) -> dict[str, Any]:
    """The per-episode record written to ``items.jsonl``."""
    last = traj.turns[-1].info if traj.turns else {}
    generated = sum(traj.loss_mask or [])
    return {
        "index": index,
        "sample": sample,
        "task_id": traj.task_id,
        "correct": bool(traj.correct),
        "reward": traj.total_reward,
        "turns": traj.num_turns,
        "tool_calls": sum(len(t.info.get("tool_calls") or []) for t in traj.turns),
        "generated_tokens": generated,
        "total_tokens": len(traj.token_ids or []),
        "terminated": traj.terminated,
        "truncated": traj.truncated,
        "error": traj.error,
        "metrics": {k: v for k, v in (last.get("metrics") or {}).items() if isinstance(v, (int, float))},
        "final_response": traj.turns[-1].action.content if traj.turns else None,
    }


def summarize(rows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """Aggregate per-episode rows into the report's metrics."""
    by_task: dict[int, list[bool]] = defaultdict(list)
    for r in rows:
        by_task[r["index"]].append(r["correct"])
    ks = sorted({1, samples} | {k for k in (2, 4, 8, 16) if k < samples})
    metrics: dict[str, Any] = {
        "episodes": len(rows),
        "tasks": len(by_task),
        "accuracy": float(np.mean([r["correct"] for r in rows])) if rows else 0.0,
        "mean_reward": float(np.mean([r["reward"] for r in rows])) if rows else 0.0,
        "mean_turns": float(np.mean([r["turns"] for r in rows])) if rows else 0.0,
        "tool_call_rate": float(np.mean([r["tool_calls"] > 0 for r in rows])) if rows else 0.0,
        "tool_calls_per_episode": float(np.mean([r["tool_calls"] for r in rows])) if rows else 0.0,
        "generated_tokens_per_episode": float(np.mean([r["generated_tokens"] for r in rows])) if rows else 0.0,
        "tokens_per_episode": float(np.mean([r["total_tokens"] for r in rows])) if rows else 0.0,
        "truncated_rate": float(np.mean([r["truncated"] for r in rows])) if rows else 0.0,
        "errors": sum(r["error"] is not None for r in rows),
    }
    for k in ks:
        metrics[f"pass@{k}"] = float(np.mean([pass_at_k(len(v), sum(v), k) for v in by_task.values()])) if by_task else 0.0
    extra: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for key, value in r["metrics"].items():
            extra[key].append(float(value))
    for key, values in sorted(extra.items()):
        metrics[f"mean_{key}"] = float(np.mean(values))
    return metrics


def write_report(out: Path, title: str, metrics: dict[str, Any], rows: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """Write ``report.md`` and return its text."""
    lines = [f"# {title}", "", "| metric | value |", "|---|---|"]
    for k, v in metrics.items():
        lines.append(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |")
    lines += ["", "## Configuration", "", "```json", json.dumps(config, indent=2, default=str), "```", "",
              "## Examples", ""]
    for r in rows[:3]:
        response = " ".join((r["final_response"] or "").split())[:300]
        lines.append(f"- `{r['task_id']}` correct={r['correct']} turns={r['turns']}: {response}")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def plot(out: Path, metrics: dict[str, Any], rows: list[dict[str, Any]], title: str) -> Path:
    """Draw pass@k and the distribution of generated tokens per episode to ``plot.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith("pass@"))
    a.plot(ks, [metrics[f"pass@{k}"] for k in ks], marker="o")
    a.set(xlabel="k", ylabel="pass@k", ylim=(0, 1), title="pass@k")
    a.set_xscale("log", base=2)
    b.hist([r["generated_tokens"] for r in rows], bins=20, color="tab:orange")
    b.set(xlabel="generated tokens per episode", ylabel="episodes", title=f"accuracy {metrics['accuracy']:.3f}")
    fig.suptitle(title)
    fig.tight_layout()
    path = out / "plot.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
) -> dict[str, Any]:
    """Evaluate ``agent`` on tasks ``0..limit-1`` of ``env_id`` with ``samples`` episodes each.

    Args:
        params: sampling parameters; default greedy for one sample, temperature 1 for several.
        seed: the sampling seed (with the same seed the numbers repeat).
        out: the output folder (created); None writes nothing.
        batch_episodes: episodes rolled out together (each turn's generation is batched across them).
        on_episode: called with each finished trajectory (progress bars).

    Returns:
        The metrics dict (also in ``metrics.json``).
    """
    if samples < 1 or limit < 1:
        raise ValueError(f"samples and limit must be >= 1, got samples={samples}, limit={limit}")
    env_kwargs = dict(env_kwargs or {})
    params = params or SamplingParams(temperature=0.0 if samples == 1 else 1.0, max_new_tokens=256)
    probe = make(env_id, **env_kwargs)
    n_tasks = min(limit, len(probe)) if hasattr(probe, "__len__") else limit
    jobs = [(i, s) for i in range(n_tasks) for s in range(samples)]
    out_dir = Path(out) if out is not None else None
    writer = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        writer = TrajectoryWriter(out_dir / "trajectories.jsonl")

    def sink(traj: Trajectory) -> None:
        if writer is not None:
            writer(traj)
        if on_episode is not None:
            on_episode(traj)

    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    generated = 0
    try:
        for b, start in enumerate(range(0, len(jobs), batch_episodes)):
            chunk = jobs[start : start + batch_episodes]
            rollout = Rollout(agent, params.model_copy(update={"seed": seed * 100_003 + b}), max_context=max_context,
                              sink=sink)
            envs = [make(env_id, **env_kwargs) for _ in chunk]
            trajs = rollout.run(envs, seeds=[seed + i for i, _ in chunk], options=[{"index": i} for i, _ in chunk],
                                group_ids=[str(i) for i, _ in chunk])
            generated += rollout.stats.generated_tokens
            rows += [episode_row(t, i, s) for t, (i, s) in zip(trajs, chunk)]
    finally:
        if writer is not None:
            writer.close()
    wall = time.perf_counter() - t0
    metrics = summarize(rows, samples)
    metrics["wall_seconds"] = round(wall, 2)
    metrics["generated_tokens_per_second"] = round(generated / wall, 2) if wall > 0 else 0.0
    if out_dir is not None:
        with (out_dir / "items.jsonl").open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
        config = {"env_id": env_id, "env_kwargs": env_kwargs, "limit": limit, "samples": samples, "seed": seed,
                  "params": params.model_dump()}
        write_report(out_dir, f"{env_id}: {n_tasks} tasks x {samples} samples", metrics, rows, config)
        plot(out_dir, metrics, rows, env_id)
    return metrics
