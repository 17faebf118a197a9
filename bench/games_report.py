"""The per-seed table of a game's learning figure (win, draw and loss rates over the evaluated steps), read from the
run folders — for the preregistered figures of bench/preregistered.md whose environment reports games
(``textarena:``, ``pettingzoo:`` and the built-in tic-tac-toe): each evaluated step's test win rate with its 95 %
Wilson interval, draws, losses, invalid moves a game and the distinct games; the validation wins that chose the step
read (``OUT@best``, `turnrl compare`'s rule: the highest validation win rate, the earliest on ties); the floor (a
random legal player's games from the same seeds, ``eval/step-0/floor``, with its distinct games); and the run's
health (the consistency guard's violations summed over the steps, the worst step's rollout–learner log-probability
gap, and the largest single token's over all steps).

A game counts as distinct by its whole token sequence (the evaluation's ``game`` fingerprint), free text included:
two games with the same moves and different words count twice. Draws and forfeits (repeated invalid moves) are not
wins.

    python bench/games_report.py runs/e78t/s0 runs/e78t/s1 runs/e78t/s2

Prints Markdown; nothing is run. The claims themselves come from `turnrl compare` (the figure's script header names
the commands); this prints what the docs report beside them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from turnrl.cli.compare_arms import CompareError, best_step
from turnrl.stats import wilson


def rate(share: float, n: int) -> str:
    """``48.0 % (38.3–57.9)``: a share of ``n`` games with its 95 % Wilson interval."""
    low, high = wilson(round(share * n), n)
    return f"{100 * share:.1f} % ({100 * low:.1f}–{100 * high:.1f})"


def evaluations(run: Path, split: str) -> dict[int, dict[str, Any]]:
    """``{step: metrics.json}`` of the run's ``eval`` (test) or ``validation`` folders."""
    found = {}
    for folder in (run / split).glob("step-*"):
        metrics = folder / "metrics.json"
        if metrics.is_file():
            found[int(folder.name.split("-", 1)[1])] = json.loads(metrics.read_text())
    return dict(sorted(found.items()))


def health(run: Path) -> str:
    """The guard's violations over every step; the rollout–learner log-probability gap of the worst step (a step's
    mean over its tokens) and, separately, the largest single token's over all steps (often another step's); then the
    run's other health checks: the steps whose log printed a warning (its kinds are in the training log), the steps
    where every group had one reward (no learning signal), and the episodes the learner left out of all it collected
    (errors, timeouts, and views with a reward but no tokens: in a game, a seat that never moved); and the range of
    the steps' mean reply length against the run's token limit a move (a warning fires only when the mean nears the
    limit, so a run whose replies are mostly cut can warn on few steps)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "logp_diff" in r]
    if not steps:
        return "no training step recorded"
    violations = sum(int(r.get("guard_violations", 0)) for r in steps)
    worst = max(steps, key=lambda r: float(r["logp_diff"]))
    token = max(float(r.get("logp_diff_max", 0.0)) for r in steps)
    warned = sum(1 for r in steps if r.get("warnings", 0) > 0)
    replies = [float(r["turn_length"]) for r in steps if "turn_length" in r]
    config = run / "config.yaml"
    limit = yaml.safe_load(config.read_text())["rollout"]["max_new_tokens"] if config.is_file() else None
    flat = sum(1 for r in steps if r.get("zero_variance_groups", 0) >= 1)
    left_out = sum(int(r.get("dropped_episodes", 0)) for r in steps)
    collected = sum(int(r.get("rollout_episodes", 0)) for r in steps)
    return (
        f"guard {violations}, logp gap {float(worst['logp_diff']):.1e} (worst step, {int(worst['step'])}), largest "
        f"single token {token:.1e} (any step), {len(steps)} steps; warned on {warned} of them, every group without "
        f"reward variance on {flat}, {left_out} of {collected} episodes left out"
        + (
            f"; a reply {min(replies):.1f}–{max(replies):.1f} tokens a move (the steps' means; limit {limit})"
            if replies
            else ""
        )
    )


def seed_rows(run: Path) -> list[str]:
    """The Markdown lines of one run: its curve, its chosen step, its floor and its health."""
    test, val = evaluations(run, "eval"), evaluations(run, "validation")
    lines = [f"**{run}**", ""]
    if not test:
        return [*lines, "no test evaluation recorded", ""]
    try:
        chosen = f"validation chose step {best_step(run)}"
    except CompareError:
        chosen = "no validation figure chose a step"
    lines += [
        "| step | test wins | draws | losses | invalid moves a game | distinct games | validation wins |",
        "|---|---|---|---|---|---|---|",
    ]
    for step, m in test.items():
        n = int(m["episodes"])
        v = val.get(step)
        v_text = (
            f"{round(v['win_rate'] * v['episodes'])} of {v['episodes']} ({v['distinct_games']} distinct)" if v else "—"
        )
        lines.append(
            f"| {step} | {rate(m['win_rate'], n)} | {100 * m['draw_rate']:.1f} % | {100 * m['loss_rate']:.1f} % "
            f"| {m['invalid_moves_mean']:.2f} | {m['distinct_games']} of {n} | {v_text} |"
        )
    step0, first = next(iter(test.items()))
    if "floor_win_rate" in first:
        n = int(first["episodes"])
        floor = run / "eval" / f"step-{step0}" / "floor" / "metrics.json"
        distinct = json.loads(floor.read_text()).get("distinct_games") if floor.is_file() else None
        lines.append(
            f"\nfloor (a random legal player, step {step0}): wins {rate(first['floor_win_rate'], n)}, "
            f"draws {100 * first['floor_draw_rate']:.1f} %, losses {100 * first['floor_loss_rate']:.1f} %"
            + (f", {distinct} distinct games of {n}" if distinct is not None else "")
        )
    lines += [f"{chosen}; {health(run)}", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (OUT_DIR of each seed)")
    for run in parser.parse_args().runs:
        print("\n".join(seed_rows(run)))


if __name__ == "__main__":
    main()
