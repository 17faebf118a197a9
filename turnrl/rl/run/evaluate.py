"""Evaluate an agent on any registered environment: accuracy, pass@k, turns, tool use, tokens.

``evaluate(...)`` runs ``samples`` episodes on each of the first ``limit`` tasks of the environment's held-out
split (unless ``env_kwargs`` names a split; see :func:`held_out_kwargs`) through the token-exact rollout, streams the trajectories to ``OUT/trajectories.jsonl``, and writes ``OUT/items.jsonl`` (one line per
episode), ``OUT/report.md``, ``OUT/metrics.json`` and ``OUT/plot.png``. With the same seed the numbers repeat.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.agents.base import Agent, SamplingParams
from turnrl.envs.registry import make
from turnrl.rl.sources.base import Job
from turnrl.rl.sources.play import play
from turnrl.storage import TrajectoryWriter
from turnrl.types import Trajectory


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 − C(n−c, k) / C(n, k) for n samples of which c are correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


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
    span = f"tasks {first}–{last}{size}" + (f" (`{first_id}` … `{last_id}`)" if first_id else "")
    if split is None:
        return f"split: not declared by the environment (turnrl cannot tell whether these are held out) · {span}"
    if split == held:
        return f"split: **{split}** (held-out) · {span}"
    other = f"; its held-out split is {held}" if held else ""
    return f"split: **{split}** — NOT held-out (training tasks{other}) · {span}"


FAILURES = ("error", "truncated", "tool error", "no answer", "wrong")  # in order of precedence


def failure_reason(traj: Trajectory) -> str | None:
    """Why an episode did not succeed (None if it did): the rollout failed (``error``), a limit cut it
    (``truncated``), a tool call failed (``tool error``), no final answer was found (``no answer``), or ``wrong``."""
    if traj.correct:
        return None
    if traj.error is not None:
        return "error"
    if traj.truncated:
        return "truncated"
    if any(t.info.get("tool_calls") and t.info.get("error") for t in traj.turns):
        return "tool error"
    graded = [t for t in traj.turns if t.info.get("correct") is not None]
    if not graded or (graded[-1].info.get("extracted") is None and "extracted" in graded[-1].info):
        return "no answer"
    return "wrong"


def render_episode(traj: Trajectory, max_chars: int = 600) -> list[str]:
    """The whole episode as Markdown lines: each assistant turn, the tool calls' results and feedback, rewards."""

    def clip(text: str) -> str:
        text = text.strip()
        return text if len(text) <= max_chars else text[:max_chars] + f" […{len(text) - max_chars} more characters]"

    def quote(who: str, text: str) -> list[str]:
        return [f"> **{who}**: " + (clip(text) or "(empty)").replace("\n", "\n> "), ""]

    users = [i for i, m in enumerate(traj.prompt) if m.role == "user"]
    shown = users[-1:]  # the question; the messages between the system prompt and it are few-shot demonstrations
    skipped = users[-1] - (1 if traj.prompt[0].role == "system" else 0) if users else 0
    lines = [f"*({skipped} demonstration messages before the question are not shown)*", ""] if skipped else []
    lines += [line for i in shown for line in quote("user", traj.prompt[i].content)]
    for t in traj.turns:
        lines += quote(f"assistant, turn {t.index}, reward {t.reward:g}", t.action.content)
        for m in t.observation:
            lines += quote(m.role if m.name is None else f"{m.role}:{m.name}", m.content)
    return lines + (quote("error", traj.error) if traj.error else [])


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
        "failure": failure_reason(traj),
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


def pick_examples(trajs: list[Trajectory], successes: int = 2, failures: int = 4) -> list[Trajectory]:
    """A few successes and failures to show, the failures of different reasons first."""
    good = [t for t in trajs if t.correct][:successes]
    by_reason: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if not t.correct:
            by_reason[failure_reason(t) or "wrong"].append(t)
    bad: list[Trajectory] = []
    while len(bad) < failures and any(by_reason.values()):
        for reason in FAILURES:
            if by_reason.get(reason) and len(bad) < failures:
                bad.append(by_reason[reason].pop(0))
    return good + bad


def write_report(out: Path, title: str, metrics: dict[str, Any], rows: list[dict[str, Any]], config: dict[str, Any],
                 examples: Sequence[Trajectory] = (), subtitle: str | None = None) -> str:
    """Write ``report.md`` (metrics, why answers failed, whole example episodes, configuration); return its text."""
    lines = [f"# {title}", "", *([subtitle, ""] if subtitle else []), "| metric | value |", "|---|---|"]
    for k, v in metrics.items():
        lines.append(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |")
    failed = [r.get("failure") or "wrong" for r in rows if not r["correct"]]
    if failed:
        lines += ["", "## Why answers failed", "", "| reason | episodes | share of failures |", "|---|---|---|"]
        lines += [f"| {reason} | {failed.count(reason)} | {failed.count(reason) / len(failed):.3f} |"
                  for reason in FAILURES if reason in failed]
    lines += ["", "## Example episodes", ""]
    for traj in examples:
        outcome = "correct" if traj.correct else f"failed: {failure_reason(traj)}"
        lines += [f"### `{traj.task_id}` ({outcome}, {traj.num_turns} turn(s), reward {traj.total_reward:g})", ""]
        lines += render_episode(traj)
    lines += ["## Configuration", "", "```json", json.dumps(config, indent=2, default=str), "```"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def plot(out: Path, metrics: dict[str, Any], rows: list[dict[str, Any]], title: str) -> Path:
    """Draw :func:`figure` to ``plot.png``."""
    import matplotlib.pyplot as plt

    fig = figure(metrics, rows, title)
    path = out / "plot.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(metrics: dict[str, Any], rows: list[dict[str, Any]], title: str) -> Any:
    """Outcomes (pass@k instead when there are several samples per task), turns, tool calls and generated tokens
    per episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(10, 7))
    ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith("pass@"))
    if len(ks) > 1:
        a.plot(ks, [metrics[f"pass@{k}"] for k in ks], marker="o")
        a.set(xlabel="k", ylabel="pass@k", ylim=(0, 1), title="pass@k")
        a.set_xscale("log", base=2)
    else:  # one sample per task: no curve to draw; the outcomes instead
        outcomes = ["correct", *FAILURES]
        counts = [sum(r["correct"] for r in rows), *(sum(r.get("failure") == f for r in rows) for f in FAILURES)]
        a.bar(outcomes, counts, color=["tab:green"] + ["tab:red"] * len(FAILURES))
        a.set(ylabel="episodes", title=f"outcomes (accuracy {metrics['accuracy']:.3f})")
        a.tick_params(axis="x", labelrotation=30)
    for ax, key, label in ((b, "turns", "turns"), (c, "tool_calls", "tool calls")):
        values = [r[key] for r in rows]
        ax.hist(values, bins=range(0, max(values, default=0) + 2), align="left", rwidth=0.8)
        ax.set(xlabel=f"{label} per episode", ylabel="episodes", title=f"mean {np.mean(values) if values else 0:.2f}")
    d.hist([r["generated_tokens"] for r in rows], bins=20, color="tab:orange")
    d.set(xlabel="generated tokens per episode", ylabel="episodes")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


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
) -> dict[str, Any]:
    """Evaluate ``agent`` on tasks ``0..limit-1`` of ``env_id`` with ``samples`` episodes each.

    Args:
        env_kwargs: the environment's kwargs. Without a ``split`` the environment's held-out split is evaluated
            where it declares one (:func:`held_out_kwargs`); the report says which split and tasks were used.
        params: sampling parameters; default greedy for one sample, temperature 1 for several.
        seed: the sampling seed (with the same seed the numbers repeat).
        out: the output folder (created); None writes nothing.
        batch_episodes: episodes rolled out together (each turn's generation is batched across them).
        on_episode: called with each finished trajectory (progress bars).
        env_timeout: seconds one environment step may take before its episode ends with an error.
        player: plays the episodes instead of the native rollout (a user program through the gateway):
            ``player(jobs, env_kwargs, sink) -> (trajectories in job order, generated tokens)``.
        context: a :class:`~turnrl.rl.sources.context.ContextBudget` (history rewriting for long episodes).

    Returns:
        The metrics dict (also in ``metrics.json``).
    """
    if samples < 1 or limit < 1:
        raise ValueError(f"samples and limit must be >= 1, got samples={samples}, limit={limit}")
    env_kwargs = dict(env_kwargs or {})
    params = params or SamplingParams(temperature=0.0 if samples == 1 else 1.0, max_new_tokens=256)
    probe = make(env_id, **env_kwargs)
    if (held := held_out_kwargs(probe, env_kwargs)) is not None:
        env_kwargs, probe = held, make(env_id, **held)
    n_tasks = min(limit, len(probe)) if hasattr(probe, "__len__") else limit
    jobs = [Job(0, 0, i, s) for i in range(n_tasks) for s in range(samples)]
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
    kept: list[Trajectory] = []  # candidates for the report's example episodes
    t0 = time.perf_counter()
    generated = 0
    everything: list[Trajectory] = []
    try:
        for start in range(0, len(jobs), batch_episodes):
            chunk = jobs[start : start + batch_episodes]
            if player is not None:
                trajs, tokens = player(chunk, env_kwargs, sink)
            else:
                trajs, rollout = play(agent, env_id, env_kwargs, chunk, seed=seed, params=params,
                                      max_context=max_context, env_timeout=env_timeout, sink=sink, chunk=chunk[0].task,
                                      group_id=lambda j: str(j.task), context=context)
                tokens = rollout.stats.generated_tokens
            generated += tokens
            rows += [episode_row(t, j.task, j.sample) for t, j in zip(trajs, chunk)]
            everything += [t.model_copy(update=dict.fromkeys(("token_ids", "loss_mask", "logprobs", "token_versions",
                                                                "segments")))
                           for t in trajs]  # for the environment's figures: turns only, not every token
            kept = pick_examples(kept + trajs, successes=2, failures=2 * len(FAILURES))
    finally:
        if writer is not None:
            writer.close()
    figures = probe.unwrapped.summarize_episodes(everything)  # the environment's own figures (e.g. PAG's)
    wall = time.perf_counter() - t0
    metrics = {**summarize(rows, samples), **figures}
    metrics["wall_seconds"] = round(wall, 2)
    metrics["generated_tokens_per_second"] = round(generated / wall, 2) if wall > 0 else 0.0
    metrics["split"] = getattr(probe, "split", None)
    metrics["held_out"] = metrics["split"] is not None and metrics["split"] == getattr(probe, "held_out_split", None)
    ids = {r["index"]: r["task_id"] for r in rows}
    subtitle = split_line(probe, 0, n_tasks - 1, ids.get(0), ids.get(n_tasks - 1))
    if out_dir is not None:
        with (out_dir / "items.jsonl").open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
        config = {"env_id": env_id, "env_kwargs": env_kwargs, "limit": limit, "samples": samples, "seed": seed,
                  "params": params.model_dump()}
        write_report(out_dir, f"{env_id}: {n_tasks} tasks x {samples} samples", metrics, rows, config,
                     pick_examples(kept), subtitle=subtitle)
        plot(out_dir, metrics, rows, env_id)
    return metrics
