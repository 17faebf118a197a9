"""Task samplers side by side: steps to reach the uniform sampler's final held-out success on mixed levels.

    python bench/samplers.py                                   # uniform vs difficulty, seeds 0 1, 20 steps
    python bench/samplers.py --strategies uniform difficulty pre-ppo --seeds 0
    python bench/samplers.py --read runs/samplers              # only the table, from runs already in that folder
    python bench/samplers.py --steps 2 --eval-every 1 --eval-tasks 10 --seeds 0 --out /tmp/s   # a smoke run

Every run is ``configs/arith-mix-tasks.yaml`` (SmolLM2-135M-Instruct, GRPO, 4 x 8 episodes per step on a mixture
of Arithmetic levels 1-5) with one ``tasks.strategy``, one seed and the same budget, evaluated greedily every
``--eval-every`` steps on the first ``--eval-tasks`` tasks of the mixture's held-out split (an equal share of each
level's test split). Runs are kept as ``OUT/STRATEGY-sSEED``. The tables give held-out success by step (each seed,
and the mean over seeds) and, per strategy, the first evaluated step at which it reaches the target — the uniform
sampler's final held-out success — on the mean curve and on each seed's own; "smoothed" reads the same from the mean
of each evaluation and its two neighbours (single evaluations of ~30 tasks per level move by several points); a
last reading asks for the uniform sampler's best evaluation instead of its final one (stricter where its curve ends
below its peak). Ratios above 1 mean fewer steps than uniform. Steps, not seconds, are compared: the runs may share
the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def train(strategy: str, seed: int, out: Path, args: argparse.Namespace) -> None:
    """One run of the shared config under ``strategy`` and ``seed`` (its folder is replaced)."""
    cmd = [
        sys.executable,
        "-m",
        "turnrl",
        "train",
        "configs/arith-mix-tasks.yaml",
        f"tasks.strategy={strategy}",
        f"seed={seed}",
        f"steps={args.steps}",
        f"eval_every={args.eval_every}",
        f"eval_tasks={args.eval_tasks}",
        f"out_dir={out}",
        *args.set,
        "--no-resume",
    ]
    print(f"[{strategy}, seed {seed}] {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if args.quiet else None)


def curve(out: Path) -> dict[int, float]:
    """Held-out success by step of the run in ``out``."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): float(r["eval_success"]) for r in rows if "eval_success" in r}


def smooth(points: dict[int, float]) -> dict[int, float]:
    """Each evaluation averaged with its neighbours (the ends with the one they have)."""
    steps = sorted(points)
    return {
        s: sum(points[x] for x in steps[max(i - 1, 0) : i + 2]) / len(steps[max(i - 1, 0) : i + 2])
        for i, s in enumerate(steps)
    }


def first_reach(points: dict[int, float], target: float) -> int | None:
    """The first evaluated step (after step 0) at which ``points`` reach ``target``."""
    return next((s for s in sorted(points) if s > 0 and points[s] >= target - 1e-9), None)


def mean_curve(curves: list[dict[int, float]]) -> dict[int, float]:
    """The mean over runs at the steps every run evaluated."""
    common = set.intersection(*(set(c) for c in curves))
    return {s: sum(c[s] for c in curves) / len(curves) for s in sorted(common)}


def reach_row(name: str, points: dict[int, float], base: dict[int, float], best: bool = False) -> str:
    """Steps to reach ``base``'s final value (``best``: its highest), and the ratio to ``base``'s own steps."""
    target = max(base.values()) if best else base[max(base)]
    own, mine = first_reach(base, target), first_reach(points, target)
    if mine is None:
        return f"{name}: never reached {target:.3f} (final {points[max(points)]:.3f})"
    return f"{name}: reached {target:.3f} at step {mine} (uniform at step {own}: {own / mine:.2f}x fewer steps)"


def report(root: Path, strategies: list[str], seeds: list[int]) -> None:
    runs = {
        (s, seed): curve(root / f"{s}-s{seed}")
        for s in strategies
        for seed in seeds
        if (root / f"{s}-s{seed}" / "metrics.jsonl").is_file()
    }
    if not runs:
        sys.exit(f"no runs under {root} (folders STRATEGY-sSEED with a metrics.jsonl)")
    names = [f"{s} s{seed}" for s, seed in runs]
    steps = sorted(set.union(*(set(c) for c in runs.values())))
    print("\nheld-out success by step:")
    print(f"{'step':>5} | " + " | ".join(f"{n:>14}" for n in names))
    for step in steps:
        cells = [f"{c[step]:>14.3f}" if step in c else f"{'':>14}" for c in runs.values()]
        print(f"{step:>5} | " + " | ".join(cells))
    means = {
        s: mean_curve([runs[s, seed] for seed in seeds if (s, seed) in runs])
        for s in strategies
        if any((s, seed) in runs for seed in seeds)
    }
    if "uniform" not in means:
        sys.exit("no uniform run to compare with")
    print(f"\nmean over seeds {sorted({seed for _, seed in runs})}:")
    print(f"{'step':>5} | " + " | ".join(f"{s:>12}" for s in means))
    for step in means["uniform"]:
        print(f"{step:>5} | " + " | ".join(f"{m[step]:>12.3f}" if step in m else f"{'':>12}" for m in means.values()))
    print("\nsteps to reach the uniform sampler's final held-out success:")
    for s, m in means.items():
        if s == "uniform":
            continue
        print("  mean curve, " + reach_row(s, m, means["uniform"]))
        print("  smoothed,   " + reach_row(s, smooth(m), smooth(means["uniform"])))
        print("  mean curve, uniform's best instead of its final: " + reach_row(s, m, means["uniform"], best=True))
        for seed in seeds:
            if (s, seed) in runs and ("uniform", seed) in runs:
                print(f"  seed {seed},     " + reach_row(s, runs[s, seed], runs["uniform", seed]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", nargs="+", default=["uniform", "difficulty"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--eval-tasks", type=int, default=160)
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides for every run")
    p.add_argument("--out", default="runs/samplers", help="the runs' folder")
    p.add_argument("--read", default=None, metavar="DIR", help="report the runs in DIR, train nothing")
    p.add_argument("--quiet", action="store_true", help="hide the runs' own output")
    args = p.parse_args()
    if "uniform" not in args.strategies:
        p.error("--strategies must include uniform (the baseline)")
    if args.read is None:
        for seed in args.seeds:  # seed by seed, so an early stop leaves matched pairs
            for s in args.strategies:
                train(s, seed, Path(args.out) / f"{s}-s{seed}", args)
    report(Path(args.read or args.out), args.strategies, args.seeds)


if __name__ == "__main__":
    main()
