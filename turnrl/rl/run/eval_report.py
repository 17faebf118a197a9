"""What ``turnrl eval`` writes about finished episodes: each episode's outcome, its ``items.jsonl`` row, the metrics,
``report.md`` and ``plot.png`` (the run itself, its resumption and its held-out split are in
:mod:`turnrl.rl.run.evaluate`).

Each episode has one outcome (:func:`outcome`): ``correct``, or why not, in this order of precedence: the rollout
failed (``error``), its last reply was cut at its token limit (``token limit``), its context was full
(``context limit``), it ran out of turns (``turn limit``), its final answer was ``wrong``, a tool call failed and
no answer came (``tool error``), or no final answer was found (``no answer``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from turnrl.stats import collapse, mean_interval
from turnrl.types import Trajectory, Turn

FAILURES = ("error", "token limit", "context limit", "turn limit", "tool error", "no answer", "wrong")
OUTCOMES = ("correct", *FAILURES)
EXPLAINED = {
    "error": "the rollout failed (the environment or the model raised; see the episode's error)",
    "token limit": "the last reply was cut at its token limit{limit} before it ended: raise it (`turnrl eval "
    "--max-new-tokens`, `rollout.max_new_tokens` in a training config, or the program's max_tokens)",
    "context limit": "the episode filled its context: raise it (`turnrl eval --max-context`, `rollout.max_context` "
    "in a training config)",
    "turn limit": "the episode used all its turns without a final answer",
    "tool error": "a tool call failed and no final answer came",
    "no answer": "the reply ended without a final answer the verifier could find",
    "wrong": "the final answer was wrong",
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 − C(n−c, k) / C(n, k) for n samples of which c are correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def turn_tokens(turn: Turn) -> int | None:
    """How many tokens the turn generated (from its ``token_span``), or None where unknown."""
    return turn.token_span[1] - turn.token_span[0] if turn.token_span is not None else None


def cut_at_token_limit(turn: Turn, max_new_tokens: int | None) -> bool:
    """Whether the turn's generation stopped at ``max_new_tokens`` (``finish_reason: length`` with that many tokens;
    with fewer, the context's room cut it, not the token limit)."""
    if turn.info.get("finish_reason") != "length":
        return False
    n = turn_tokens(turn)
    return max_new_tokens is None or n is None or n >= max_new_tokens


def outcome(traj: Trajectory, max_new_tokens: int | None = None) -> str:
    """The episode's outcome, one of :data:`OUTCOMES` (see the module docstring for the precedence)."""
    if traj.correct:
        return "correct"
    if traj.error is not None:
        return "error"
    last = traj.turns[-1] if traj.turns else None
    by_context = traj.metadata.get("truncated_by") == "context"
    if last is not None and last.info.get("finish_reason") == "length":
        # the rollout marks a reply the context's room cut; other cuts below max_new_tokens are a limit of the
        # request's own (a gateway program's max_tokens)
        return "context limit" if last.info.get("cut_by") == "context" else "token limit"
    if traj.truncated:
        return "context limit" if by_context else "turn limit"
    graded = [t for t in traj.turns if t.info.get("correct") is not None]
    if graded and not (graded[-1].info.get("extracted") is None and "extracted" in graded[-1].info):
        return "wrong"  # an answer was graded (an earlier failed tool call did not decide the episode)
    if any(t.info.get("tool_calls") and t.info.get("error") for t in traj.turns):
        return "tool error"
    return "no answer"


def failure_reason(traj: Trajectory, max_new_tokens: int | None = None) -> str | None:
    """Why an episode did not succeed (one of :data:`FAILURES`), or None if it did."""
    result = outcome(traj, max_new_tokens)
    return None if result == "correct" else result


def episode_row(traj: Trajectory, index: int, sample: int, max_new_tokens: int | None = None) -> dict[str, Any]:
    """The per-episode record written to ``items.jsonl``."""
    last = traj.turns[-1].info if traj.turns else {}
    result = outcome(traj, max_new_tokens)
    return {
        "index": index,
        "sample": sample,
        "task_id": traj.task_id,
        "correct": bool(traj.correct),
        "outcome": result,
        "reward": traj.total_reward,
        "turns": traj.num_turns,
        "tool_calls": sum(len(t.info.get("tool_calls") or []) for t in traj.turns),
        "generated_tokens": sum(traj.loss_mask or []),
        "turn_tokens": [turn_tokens(t) for t in traj.turns],
        "turns_cut_at_token_limit": sum(cut_at_token_limit(t, max_new_tokens) for t in traj.turns),
        "total_tokens": len(traj.token_ids or []),
        "terminated": traj.terminated,
        "truncated": traj.truncated,
        "error": traj.error,
        "failure": None if result == "correct" else result,
        "metrics": {k: v for k, v in (last.get("metrics") or {}).items() if isinstance(v, (int, float))},
        "final_response": traj.turns[-1].action.content if traj.turns else None,
    }


def summarize(rows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """Aggregate per-episode rows into the report's metrics (``outcomes``: episodes per outcome, all of them)."""
    by_task: dict[int, list[bool]] = defaultdict(list)
    for r in rows:
        by_task[r["index"]].append(r["correct"])
    ks = sorted({1, samples} | {k for k in (2, 4, 8, 16) if k < samples})
    mean = lambda key: float(np.mean([r[key] for r in rows])) if rows else 0.0
    metrics: dict[str, Any] = {
        "episodes": len(rows),
        "tasks": len(by_task),
        "accuracy": mean("correct"),
        "mean_reward": mean("reward"),
        "mean_turns": mean("turns"),
        "tool_call_rate": float(np.mean([r["tool_calls"] > 0 for r in rows])) if rows else 0.0,
        "tool_calls_per_episode": mean("tool_calls"),
        "generated_tokens_per_episode": mean("generated_tokens"),
        "tokens_per_episode": mean("total_tokens"),
        "truncated_rate": mean("truncated"),
        "errors": sum(r["error"] is not None for r in rows),
        "token_limit_rate": float(np.mean([r.get("outcome") == "token limit" for r in rows])) if rows else 0.0,
        "turns_cut_at_token_limit": sum(r.get("turns_cut_at_token_limit", 0) for r in rows),
    }
    for k in ks:
        metrics[f"pass@{k}"] = (
            float(np.mean([pass_at_k(len(v), sum(v), k) for v in by_task.values()])) if by_task else 0.0
        )
    extra: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        for key, value in r["metrics"].items():
            extra[key].append(float(value))
    for key, values in sorted(extra.items()):
        metrics[f"mean_{key}"] = float(np.mean(values))
    metrics["outcomes"] = {name: sum(r.get("outcome") == name for r in rows) for name in OUTCOMES}
    metrics.update(item_accuracy(rows))
    return metrics


def row_item(row: dict[str, Any]) -> str:
    """The item a row counts as: its ``item`` (the problem's canonical form), else, in rows written before items
    were named, its ``task_id``."""
    return str(row["item"] if row.get("item") is not None else row["task_id"])


def item_accuracy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy over distinct items: ``distinct_items``; ``accuracy_items``, the mean over items of each item's mean
    correctness (its samples and its repeated presentations collapsed, :func:`turnrl.stats.collapse`); and its
    standard error and 95% interval ``accuracy_se``, ``accuracy_low``, ``accuracy_high``
    (:func:`turnrl.stats.mean_interval`: Wilson where every item is all right or all wrong, normal otherwise; None
    where undefined: no items, or one item with a fractional score)."""
    per_item = collapse([row_item(r) for r in rows], [float(r["correct"]) for r in rows])
    interval = mean_interval(per_item.values())
    known = lambda x: None if math.isnan(x) else x  # metrics.json stays JSON
    return {
        "distinct_items": interval.n,
        "accuracy_items": known(interval.mean) if rows else 0.0,
        "accuracy_se": known(interval.se),
        "accuracy_low": known(interval.low),
        "accuracy_high": known(interval.high),
    }


def accuracy_headline(metrics: dict[str, Any]) -> list[str]:
    """The report's first figure: accuracy over distinct items with its 95% interval, and how many episodes made it
    (nothing for metrics without ``distinct_items``)."""
    if not metrics.get("distinct_items"):
        return []
    n, episodes = metrics["distinct_items"], metrics.get("episodes", 0)
    low, high, se = metrics.get("accuracy_low"), metrics.get("accuracy_high"), metrics.get("accuracy_se")
    spread = f", 95% interval [{low:.3f}, {high:.3f}], se {se:.3f}" if None not in (low, high, se) else ""
    return [
        f"**Accuracy {metrics['accuracy_items']:.3f} over {n} distinct item(s){spread}** "
        f"({episodes} episode(s); an item's samples and repeated presentations count once)",
        "",
    ]


def pick_examples(
    trajs: list[Trajectory], successes: int = 2, failures: int = 4, max_new_tokens: int | None = None
) -> list[Trajectory]:
    """A few successes and failures to show, the failures of different reasons first."""
    good = [t for t in trajs if t.correct][:successes]
    by_reason: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        if not t.correct:
            by_reason[failure_reason(t, max_new_tokens) or "wrong"].append(t)
    bad: list[Trajectory] = []
    while len(bad) < failures and any(by_reason.values()):
        for reason in FAILURES:
            if by_reason.get(reason) and len(bad) < failures:
                bad.append(by_reason[reason].pop(0))
    return good + bad


def shown_reply(traj: Trajectory, turn: Turn, decode: Callable[[list[int]], str] | None = None) -> str:
    """A reply as the report shows it: its text, or, where it has no visible text, what it generated — whitespace
    escaped, and the tokens decoded with their special tokens where ``decode`` is given."""
    text = turn.action.content
    if text.strip():
        return text
    n = turn_tokens(turn)
    raw = text
    if decode is not None and n and traj.token_ids is not None and turn.token_span is not None:
        raw = decode(list(traj.token_ids[turn.token_span[0] : turn.token_span[1]]))
    if not n and not raw:
        return "(empty: no tokens generated)"
    kind = (
        "whitespace and special tokens only"
        if text and raw != text
        else "special tokens only"
        if raw != text
        else "whitespace only"
    )
    shown = json.dumps(raw, ensure_ascii=False)[1:-1].replace("`", "'")
    count = f"{n} generated token(s), " if n else ""
    return f"(no visible text: {count}{kind}: `{shown[:300]}`{'…' if len(shown) > 300 else ''})"


def render_episode(
    traj: Trajectory,
    max_chars: int = 600,
    decode: Callable[[list[int]], str] | None = None,
    max_new_tokens: int | None = None,
) -> list[str]:
    """The whole episode as Markdown lines: each assistant turn (marked where it was cut at ``max_new_tokens``), the
    tool calls' results and feedback, rewards."""

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
        cut = f", cut at max_new_tokens ({turn_tokens(t)} tokens)" if cut_at_token_limit(t, max_new_tokens) else ""
        lines += quote(f"assistant, turn {t.index}, reward {t.reward:g}{cut}", shown_reply(traj, t, decode))
        for m in t.observation:
            lines += quote(m.role if m.name is None else f"{m.role}:{m.name}", m.content)
    return lines + (quote("error", traj.error) if traj.error else [])


def write_report(
    out: Path,
    title: str,
    metrics: dict[str, Any],
    rows: list[dict[str, Any]],
    config: dict[str, Any],
    examples: Sequence[Trajectory] = (),
    subtitle: str | None = None,
    notice: str | None = None,
    decode: Callable[[list[int]], str] | None = None,
    headline: Sequence[str] = (),
) -> str:
    """Write ``report.md`` (metrics, outcomes, whole example episodes, configuration); return its text. ``notice``
    (e.g. that the run was interrupted) stands under the title, then ``headline``: the environment's own lines
    (:meth:`turnrl.envs.core.TextEnv.report_lines`)."""
    max_new = (config.get("params") or {}).get("max_new_tokens")
    lines = [
        f"# {title}",
        "",
        *([subtitle, ""] if subtitle else []),
        *([notice, ""] if notice else []),
        *accuracy_headline(metrics),
        *headline,
        "| metric | value |",
        "|---|---|",
    ]
    for k, v in metrics.items():
        if not isinstance(v, dict):
            lines.append(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |")
    counts = {
        name: sum(
            (r.get("outcome") or ("correct" if r["correct"] else r.get("failure") or "wrong")) == name for r in rows
        )
        for name in OUTCOMES
    }
    if rows:
        lines += ["", "## Outcomes", "", "| outcome | episodes | share |", "|---|---|---|"]
        lines += [f"| {name} | {n} | {n / len(rows):.3f} |" for name, n in counts.items() if n]
        limit = f" ({max_new})" if max_new else ""
        lines += [""] + [f"- *{name}*: {EXPLAINED[name].format(limit=limit)}" for name in FAILURES if counts[name]]
    lines += ["", "## Example episodes", ""]
    for traj in examples:
        result = outcome(traj, max_new)
        shown = "correct" if result == "correct" else f"failed: {result}"
        lines += [f"### `{traj.task_id}` ({shown}, {traj.num_turns} turn(s), reward {traj.total_reward:g})", ""]
        lines += render_episode(traj, decode=decode, max_new_tokens=max_new)
    lines += ["## Configuration", "", "```json", json.dumps(config, indent=2, default=str), "```"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text


def plot(
    out: Path, metrics: dict[str, Any], rows: list[dict[str, Any]], title: str, max_new_tokens: int | None = None
) -> Path:
    """Draw :func:`figure` to ``plot.png``."""
    import matplotlib.pyplot as plt

    fig = figure(metrics, rows, title, max_new_tokens)
    path = out / "plot.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _histogram(ax: Any, values: list[int], xlabel: str, ylabel: str, top: int | None = None, **kw: Any) -> None:
    """A histogram of counts on integer axes from 0 to the largest value (or ``top``): one bar per value where they
    are few, else 30 bins."""
    from matplotlib.ticker import MaxNLocator

    hi, few = max([*values, top or 0, 1]), max([*values, top or 0, 1]) <= 60
    bins = np.arange(0, hi + 2) - 0.5 if few else np.linspace(0, hi + 1, 31)  # few: one bar centred on each value
    ax.hist(values, bins=bins, rwidth=0.8 if few else None, **kw)
    ax.set(xlabel=xlabel, ylabel=ylabel, xlim=(-0.5, hi + 0.5) if few else (0, hi * 1.06 + 1))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def figure(metrics: dict[str, Any], rows: list[dict[str, Any]], title: str, max_new_tokens: int | None = None) -> Any:
    """Outcomes (the token limit, turn limit and wrong answers apart), pass@k where there are several samples per
    task, turns, tool calls, generated tokens per turn (``max_new_tokens`` marked) and per episode. Count axes have
    integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, grid = plt.subplots(2, 3, figsize=(14, 7))
    axes = list(grid.flat)
    a = axes.pop(0)
    shown = [
        o
        for o in OUTCOMES
        if o in ("correct", "wrong", "no answer", "token limit", "turn limit")
        or any(r.get("outcome") == o for r in rows)
    ]
    a.bar(
        shown,
        [sum(r.get("outcome") == o for r in rows) for o in shown],
        color=["tab:green" if o == "correct" else "tab:orange" if "limit" in o else "tab:red" for o in shown],
    )
    a.set(ylabel="episodes", title=f"outcomes (accuracy {metrics.get('accuracy', 0):.3f})")
    a.tick_params(axis="x", labelrotation=30)
    a.yaxis.set_major_locator(MaxNLocator(integer=True))
    ks = sorted(int(k.split("@")[1]) for k in metrics if k.startswith("pass@"))
    if len(ks) > 1:
        b = axes.pop(0)
        b.plot(ks, [metrics[f"pass@{k}"] for k in ks], marker="o")
        b.set(xlabel="k", ylabel="pass@k", ylim=(0, 1), title="pass@k")
        b.set_xscale("log", base=2)
    for key, label in (("turns", "turns"), ("tool_calls", "tool calls")):
        ax, values = axes.pop(0), [r[key] for r in rows]
        _histogram(ax, values, f"{label} per episode", "episodes")
        ax.set_title(f"mean {np.mean(values) if values else 0:.2f}")
    ax = axes.pop(0)
    per_turn = [n for r in rows for n in r.get("turn_tokens") or [] if n is not None]
    _histogram(ax, per_turn, "generated tokens per turn", "turns", max_new_tokens, color="tab:orange")
    cut = sum(r.get("turns_cut_at_token_limit", 0) for r in rows)
    if max_new_tokens is not None:
        ax.axvline(max_new_tokens, color="tab:red", linestyle="--", label=f"max_new_tokens = {max_new_tokens}")
        ax.legend(loc="upper left")
    ax.set_title(f"{cut} of {len(per_turn)} turn(s) cut at the token limit")
    _histogram(
        axes.pop(0),
        [r["generated_tokens"] for r in rows],
        "generated tokens per episode",
        "episodes",
        color="tab:orange",
    )
    for ax in axes:  # one sample per task: no pass@k panel
        fig.delaxes(ax)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
