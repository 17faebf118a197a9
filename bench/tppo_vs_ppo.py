"""T-PPO vs PPO on answers with a long tail of lengths: training wall time to the same held-out success.

    python bench/tppo_vs_ppo.py                       # SmolLM2-135M, Arithmetic level 1, 256 new tokens, W = 64
    python bench/tppo_vs_ppo.py --steps 2 --eval-every 1 --eval-tasks 4 --max-new 32 --window 8   # a smoke run
    python bench/tppo_vs_ppo.py --train-on finished   # T-PPO trains whole groups once they finished
    python bench/tppo_vs_ppo.py --train-on finished --skip-baseline runs/tppo --out runs/tppo2   # reuse a PPO run
    python bench/tppo_vs_ppo.py --train-on finished --overlong 64   # both runs punish answers near the limit
    python bench/tppo_vs_ppo.py --train-on finished --tppo-set algorithm.min_groups=4   # an option of T-PPO's run only
    python bench/tppo_vs_ppo.py --train-on finished --tppo-set algorithm.refill=prompts  # full sets of new groups
    python bench/tppo_vs_ppo.py --train-on finished --report runs/tppo --target 0.8   # time two kept runs to 80 %

Both runs are ``algorithm: tppo`` with the same options, seed and tasks; the baseline's window is one no episode
reaches (``NO_WINDOW``: every episode finishes in its first window, and T-PPO with W at least the longest episode is
PPO with T-PPO's options exactly — a check of docs/algorithms.md §6), the other's is ``--window``. (``max_new_tokens``
is not enough: it bounds one turn, and the quickstart's episodes may take two — before 2026-11-28 the baseline's window
was ``max_new_tokens``, and a two-turn answer longer than that carried over.) The base model
answers most level-1 sums in 20–40 tokens but now and then rambles to the token limit: a synchronous step waits for
that answer, a windowed step decodes at most W tokens and carries it over. Each run trains ``--steps`` steps and is
evaluated greedily on the held-out split every ``--eval-every`` steps; the table gives the training seconds (the
steps' own time, evaluation excluded) at each evaluation, and the time each run needed to first reach each
``--target``: by default the baseline's final held-out success and its best (PPO's success can peak and fall, and a
fallen final is a low bar). Run it alone: a timing taken while anything else runs on the machine is void.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

NO_WINDOW = 1_000_000  # the baseline's W: more tokens than any episode generates, so none is ever carried over


def train(
    name: str,
    out: Path,
    args: argparse.Namespace,
    window: int,
    train_on: str = "window",
    extra: list[str] | None = None,
) -> list[tuple[int, float, float]]:
    """Train one run; returns (step, training seconds so far, held-out success) at each evaluation."""
    overrides = [
        "model=" + args.model,
        "env.id=turnrl/Arithmetic-v0",
        "env.kwargs.level=1",
        "env.kwargs.split=train",
        "env.kwargs.answer_format=auto",
        "env.eval_kwargs.split=test",
        "algorithm.name=tppo",
        f"algorithm.window={window}",
        f"algorithm.train_on={train_on}",
        f"algorithm.value_warmup_steps={args.warmup}",
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.max_new}",
        "rollout.temperature=0.8",
        "optim.lr=2e-5",
        "optim.minibatch_size=8",
        f"optim.grad_accum={max(args.prompts * args.group // 8, 1)}",
        f"steps={args.steps}",
        f"eval_every={args.eval_every}",
        f"eval_tasks={args.eval_tasks}",
        f"seed={args.seed}",
        f"out_dir={out}",
    ]
    if args.overlong:
        overrides.append(f"algorithm.overlong.cache_len={args.overlong}")
    overrides += args.set + (extra or [])
    cmd = [sys.executable, "-m", "turnrl", "train", "configs/quickstart.yaml", *overrides, "--no-resume"]
    print(f"[{name}] {' '.join(cmd[2:])}", flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if args.quiet else None)
    return points(out)


def points(out: Path) -> list[tuple[int, float, float]]:
    """(step, training seconds so far, held-out success) at each evaluation of the run in ``out``."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    spent, points = 0.0, []
    for row in rows:
        if "seconds" in row:
            spent += row["seconds"]
        if "eval_success" in row:
            points.append((int(row["step"]), spent, row["eval_success"]))
    return points


def first_reach(points: list[tuple[int, float, float]], target: float) -> float | None:
    return next((s for _, s, v in points if v >= target - 1e-9), None)


def targets(base: list[tuple[int, float, float]], wanted: list[str]) -> list[tuple[str, float]]:
    """The held-out success levels to time: ``final`` (PPO's last evaluation), ``best`` (PPO's best) or a number."""
    out = []
    for w in wanted:
        if w == "final":
            out.append(("PPO's final held-out success", base[-1][2]))
        elif w == "best":
            out.append(("PPO's best held-out success", max(v for _, _, v in base)))
        else:
            out.append(("held-out success", float(w)))
    return out


def print_curves(base: list[tuple[int, float, float]], tppo: list[tuple[int, float, float]]) -> None:
    """The two curves side by side, a line per evaluation step (the runs may have trained for different numbers of
    steps)."""
    print(f"{'step':>5} | {'PPO s':>8} {'success':>8} | {'T-PPO s':>8} {'success':>8}")
    ppo_cells, tppo_cells = ({step: f"{s:>8.0f} {v:>8.3f}" for step, s, v in run} for run in (base, tppo))
    for step in sorted(ppo_cells.keys() | tppo_cells.keys()):
        print(f"{step:>5} | {ppo_cells.get(step, ''):>17} | {tppo_cells.get(step, ''):>17}")


def seconds_per_step(run: list[tuple[int, float, float]]) -> float:
    """A run's training seconds per step, at its last evaluation."""
    return run[-1][1] / max(run[-1][0], 1)


def reach(
    label: str, target: float, base: list[tuple[int, float, float]], tppo: list[tuple[int, float, float]]
) -> None:
    """Print the training seconds each run needed to first reach ``target`` and their ratio."""
    a, b = first_reach(base, target), first_reach(tppo, target)
    pa = f"after {a:.0f} s" if a is not None else f"not in {base[-1][0]} steps"
    pb = f"after {b:.0f} s" if b is not None else f"not in {tppo[-1][0]} steps"
    print(f"target = {label} {target:.3f}: PPO {pa}, T-PPO {pb}", end="")
    if a is not None and b is not None:
        print(f": {a / b:.2f}x less wall time" if b > 0 else ": both at step 0" if a == 0 else ": T-PPO at step 0")
    else:
        print()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-tasks", type=int, default=64)
    p.add_argument("--max-new", type=int, default=256, help="rollout.max_new_tokens: the most tokens of one turn")
    p.add_argument("--window", type=int, default=64, help="T-PPO's window W")
    p.add_argument(
        "--train-on",
        choices=["window", "finished"],
        default="window",
        help="T-PPO's algorithm.train_on: each step's newest windows (the paper) or finished episodes whole",
    )
    p.add_argument(
        "--skip-baseline",
        default=None,
        metavar="DIR",
        help="read the PPO run from DIR/ppo (an earlier --out) instead of training it again; its "
        "seconds count only if it ran on this machine, alone (a rerun of the same seed on another "
        "host of the same kind gave the same episodes 1.19x faster)",
    )
    p.add_argument("--warmup", type=int, default=5, help="critic warm-up steps")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--overlong",
        type=int,
        default=0,
        metavar="L_CACHE",
        help="DAPO's soft overlong punishment with this buffer, in every run this invocation trains",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every run this invocation trains (repeatable)",
    )
    p.add_argument(
        "--tppo-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the T-PPO run only (repeatable), e.g. algorithm.min_groups=4",
    )
    p.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="train nothing: print the table of the runs kept in DIR (an earlier --out; its PPO run, or "
        "--skip-baseline's)",
    )
    p.add_argument(
        "--target",
        action="append",
        default=None,
        metavar="final|best|SUCCESS",
        help="the held-out success to time both runs to (repeatable; default: final and best)",
    )
    p.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--quiet", action="store_true", help="hide the runs' own output")
    args = p.parse_args()
    args.target = args.target or ["final", "best"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.report or args.out or tmp)
        kept = args.skip_baseline or args.report  # where a PPO run is read instead of trained
        base = points(Path(kept) / "ppo") if kept else train("PPO (no window)", root / "ppo", args, NO_WINDOW)
        name, out = f"T-PPO (W = {args.window}, train_on = {args.train_on})", root / f"tppo-{args.train_on}"
        tppo = points(out) if args.report else train(name, out, args, args.window, args.train_on, args.tppo_set)
    print(f"\nheld-out success (greedy, {args.eval_tasks} test tasks) by training seconds:")
    print_curves(base, tppo)
    print()
    for label, target in targets(base, args.target):
        reach(label, target, base, tppo)
    per_a, per_b = seconds_per_step(base), seconds_per_step(tppo)
    print(f"seconds per step: PPO {per_a:.1f}, T-PPO {per_b:.1f} ({per_a / max(per_b, 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
