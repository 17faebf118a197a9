"""T-PPO vs PPO over several seeds: each seed's ratio, and the ratio of the seeds' mean held-out curves.

    python bench/tppo_seeds.py runs/a/ppo:runs/a/tppo-finished runs/b/ppo:runs/b/tppo-finished ...
    python bench/tppo_seeds.py PAIRS... --target 0.75     # a fixed held-out success instead of PPO's final

Each argument is one seed's pair of kept runs (``bench/tppo_vs_ppo.py --out``), PPO's folder then T-PPO's. A single
run's time to PPO's held-out success is a first passage of noisy evaluations: with 64 test tasks one evaluation's
standard error is about 5.5 points at 70 % success, larger than most differences between the runs. So besides each
seed's ratio (the same as ``tppo_vs_ppo.py`` prints) this averages the seeds: at each evaluation step every run of a
method reached, the mean held-out success over the seeds and the mean training seconds, and then the time each mean
curve needed to first reach the target — by default PPO's mean at its last evaluation. The mean over n seeds pools
n × the test tasks, and its curve is what a user of either method can expect, not what one run happened to do.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from tppo_vs_ppo import first_reach, points, print_curves, seconds_per_step

Curve = list[tuple[int, float, float]]  # (step, training seconds so far, held-out success)


def mean_curve(runs: list[Curve]) -> Curve:
    """At each step every run evaluated: (step, mean seconds, mean success) over the runs."""
    steps = set.intersection(*({step for step, _, _ in run} for run in runs))
    out = []
    for step in sorted(steps):
        rows = [next(r for r in run if r[0] == step) for run in runs]
        out.append((step, statistics.fmean(r[1] for r in rows), statistics.fmean(r[2] for r in rows)))
    return out


def ratio(base: Curve, tppo: Curve, target: float) -> tuple[float | None, float | None, float | None]:
    """(PPO's seconds to ``target``, T-PPO's, PPO's over T-PPO's); None where a run never reached it."""
    a, b = first_reach(base, target), first_reach(tppo, target)
    return a, b, (a / b if a is not None and b else None)


def fmt(x: float | None, spec: str, missing: str = "—") -> str:
    """``x`` formatted, or ``missing`` right-aligned to the width a number takes in ``spec``."""
    return format(missing, f">{len(format(0.0, spec))}") if x is None else format(x, spec)


def median_low(ratios: list[float | None]) -> float | None:
    """The median of the seeds' ratios (the lower middle one of an even count), a seed that never reached the target
    counting as the lowest."""
    ordered = sorted(ratios, key=lambda r: float("-inf") if r is None else r)
    return ordered[(len(ordered) - 1) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pairs", nargs="+", metavar="PPO_DIR:TPPO_DIR", help="one seed's kept runs, PPO's then T-PPO's")
    p.add_argument(
        "--target",
        type=float,
        default=None,
        help="the held-out success to time (default: each seed's PPO final, and PPO's mean final)",
    )
    args = p.parse_args()
    pairs = []
    for arg in args.pairs:
        if ":" not in arg:
            p.error(f"{arg!r}: give a pair as PPO_DIR:TPPO_DIR (two folders kept by bench/tppo_vs_ppo.py --out)")
        a, b = arg.split(":", 1)
        for d in (a, b):
            if not (Path(d) / "metrics.jsonl").is_file():
                p.error(f"{d}: no metrics.jsonl (a run folder kept by bench/tppo_vs_ppo.py --out, e.g. runs/x/ppo)")
        pairs.append((points(Path(a)), points(Path(b))))
    print(
        f"{'seed pair':>9} | {'PPO final':>9} {'PPO s':>7} | {'T-PPO s':>7} {'ratio':>6} | "
        f"{'PPO s/step':>10} {'T-PPO s/step':>12}"
    )
    ratios: list[float | None] = []
    for i, (base, tppo) in enumerate(pairs):
        target = base[-1][2] if args.target is None else args.target
        a, b, r = ratio(base, tppo, target)
        ratios.append(r)
        print(
            f"{i:>9} | {target:>9.3f} {fmt(a, '>7.0f')} | {fmt(b, '>7.0f')} {fmt(r, '>6.2f')} | "
            f"{seconds_per_step(base):>10.1f} {seconds_per_step(tppo):>12.1f}"
        )
    reached = [r for r in ratios if r is not None]
    goal = "PPO's final" if args.target is None else f"{args.target:.3f}"
    print(
        f"\nper seed: {len(reached)} of {len(ratios)} reached {goal}; ratios "
        + ", ".join(fmt(r, ".2f", "not reached") for r in ratios)
        + f"; median {fmt(median_low(ratios), '.2f', 'not reached')} ("
        + ("the lower middle one of an even count; " if len(ratios) % 2 == 0 else "")
        + "a seed that never reached it counts as the lowest)"
    )
    mean_base, mean_tppo = mean_curve([b for b, _ in pairs]), mean_curve([t for _, t in pairs])
    print(f"\nmean over {len(pairs)} seeds (held-out success, training seconds):")
    print_curves(mean_base, mean_tppo)
    target = mean_base[-1][2] if args.target is None else args.target
    a, b, r = ratio(mean_base, mean_tppo, target)
    label = "PPO's mean final" if args.target is None else "held-out success"
    reached_b = "never" if b is None else f"after {b:.0f} s" + (f": {r:.2f}x less wall time" if r is not None else "")
    print(f"\ntarget = {label} {target:.3f}: PPO's mean curve after {fmt(a, '.0f')} s, T-PPO's {reached_b}")


if __name__ == "__main__":
    main()
