"""The tables of the preregistered runs (bench/preregistered.md), read from their run folders with `turnrl compare`'s
figures: per seed, held-out success at step 0 and at the end (or, for a run that validated, at the step its validation split
chose: ``OUT@best``), the gain paired item by item (bootstrap 95 % interval,
McNemar's exact p), then the mean over seeds with its interval; and arm against arm at the end, the same way. The
log-probability gap is the worst step's (an offline run's first step's: later steps train on the base model's data).

    python bench/evidence_report.py runs/e77                    # every experiment whose runs are there
    python bench/evidence_report.py runs/e77 --arms full lora   # only these arms (folders ARM-sSEED)

Prints Markdown; nothing is run. A seed whose run is missing or unfinished is listed as such, never skipped silently.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from turnrl.cli.compare import CompareError, compare_runs

PAIRS = (("lora", "full"), ("dapo", "grpo"), ("vapo", "grpo"), ("vapo", "dapo"), ("dqo", "rft"), ("dqo", "dpo"),
         ("rft", "dpo"))


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def finished(run: Path) -> bool:
    """Whether the run evaluated its last step (``steps`` of its config.yaml; a run still going is not read)."""
    import yaml

    config = run / "config.yaml"
    if not config.is_file():
        return False
    steps = (yaml.safe_load(config.read_text()) or {}).get("steps")
    return steps is not None and (run / "eval" / f"step-{steps}" / "items.jsonl").is_file()


def offline(run: Path) -> bool:
    """Whether the run trained from stored data (its config names ``data``)."""
    import yaml

    return bool((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("data"))


def end(run: Path) -> str:
    """Where a run is read: at the step its validation split chose (``OUT@best``) where it validated, else at its
    last evaluation."""
    return f"{run}@best" if (run / "validation").is_dir() else str(run)


def chosen(run: Path) -> str:
    """The step a run is read at, as a table shows it."""
    if not (run / "validation").is_dir():
        return "end"
    from turnrl.cli.compare import best_step

    return f"step {best_step(run)} (validation)"


def seeds_of(out: Path, arm: str) -> list[int]:
    return sorted(int(d.name.rsplit("-s", 1)[1]) for d in out.glob(f"{arm}-s*") if d.name.rsplit("-s", 1)[1].isdigit())


def gain_table(out: Path, arm: str) -> list[str]:
    """Per seed the arm's step-0 and final held-out success and its gain; then the mean over the finished seeds."""
    lines = [f"**{arm}**: held-out success, step 0 → end, and the gain paired on the same items", "",
             "| seed | items | step 0 | read at | success there | gain (points) | 95 % interval | McNemar p (gained / lost) "
             "| logp gap, guard |", "|---|---|---|---|---|---|---|---|---|"]
    args = []
    for seed in seeds_of(out, arm):
        run = out / f"{arm}-s{seed}"
        if not finished(run):
            lines.append(f"| {seed} | — | — | — | — | not finished | | | |")
            continue
        p = compare_runs([f"{run}@0", end(run)])["pairs"][0]
        m = p["mcnemar"] or {}
        steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        gaps = [h["logp_diff"] for h in steps if "logp_diff" in h]
        # the rollout-learner log-prob gap, worst step; an offline run's data is the base model's, so only its first
        # step (before any update) measures the learner against the sampler
        gap = (gaps[0] if gaps else 0.0) if offline(run) else max(gaps or [0.0])
        violations = sum(h.get("guard_violations", 0.0) for h in steps)
        lines.append(f"| {seed} | {p['items']} | {pct(p['accuracy_a'])} | {chosen(run)} | {pct(p['accuracy_b'])} | "
                     f"{pts(p['diff'])} | "
                     f"[{pts(p['low'])}, {pts(p['high'])}] | {m.get('p_value', float('nan')):.2g} "
                     f"({m.get('only_b', '—')} / {m.get('only_a', '—')}) | {gap:.1e}, {violations:.0f} |")
        args += [f"{run}@0", end(run)]
    if len(args) >= 4:
        o = compare_runs(args)["over_seeds"]
        lines.append(f"| mean of {o['seeds']} | | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | | |")
    return lines + [""]


def arms_table(out: Path, b: str, a: str) -> list[str]:
    """Arm ``b`` against arm ``a`` at the end, seed by seed (same seed in both), then over seeds."""
    both = sorted(set(seeds_of(out, a)) & set(seeds_of(out, b)))
    both = [s for s in both if finished(out / f"{a}-s{s}") and finished(out / f"{b}-s{s}")]
    if not both:
        return []
    args = [x for s in both for x in (end(out / f"{a}-s{s}"), end(out / f"{b}-s{s}"))]
    try:
        result = compare_runs(args)
    except CompareError as e:
        return [f"**{b} − {a}**: not compared ({e})", ""]
    where = "each at its best step on validation" if end(out / f"{a}-s{both[0]}").endswith("@best") else "at the end"
    lines = [f"**{b} − {a}** {where}, paired on the same items and seeds", "",
             f"| seed | items | {a} | {b} | {b} − {a} (points) | 95 % interval | McNemar p |", "|---|---|---|---|---|---|---|"]
    for s, p in zip(both, result["pairs"]):
        m = p["mcnemar"] or {}
        lines.append(f"| {s} | {p['items']} | {pct(p['accuracy_a'])} | {pct(p['accuracy_b'])} | {pts(p['diff'])} | "
                     f"[{pts(p['low'])}, {pts(p['high'])}] | {m.get('p_value', float('nan')):.2g} |")
    o = result["over_seeds"]
    lines.append(f"| mean of {o['seeds']} | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arms", nargs="*", default=None)
    args = parser.parse_args()
    arms = args.arms or sorted({d.name.rsplit("-s", 1)[0] for d in args.out.glob("*-s*") if d.is_dir()})
    lines: list[str] = []
    for arm in arms:
        lines += gain_table(args.out, arm)
    for b, a in PAIRS:
        if b in arms and a in arms:
            lines += arms_table(args.out, b, a)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
