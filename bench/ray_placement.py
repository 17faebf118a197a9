"""Ray placement vs local on the quickstart: rollout throughput and per-step overhead, side by side in one run.

    python bench/ray_placement.py --steps 3
    python bench/ray_placement.py --steps 3 --ray-workers 1       # local and ray × 1 only
    python bench/ray_placement.py --steps 5 --warmup 2 --rounds 2 --ray-workers 1  # steady state, ABBA order
    python bench/ray_placement.py --async --steps 4             # ray × 2: synchronous vs max_staleness 1 and 2
    python bench/ray_placement.py --async --slow-tool --steps 4  # the same with a tool that answers in 0.2–1 s
    python bench/ray_placement.py --async --slow-tool --split-cores --steps 4  # learner and workers on own cores
    python bench/ray_placement.py --async --slow-tool --split-cores --steps 9 --staleness 0 1 --held-out --seeds 0 1

With ``--async`` it compares, on Ray with 2 workers, the synchronous placement (k = 0) with rollouts that overlap
the learner's update (``rollout.max_staleness`` k = 1, 2): episodes/s, generated tokens/s, and the share of the
wall time the learner waits for episodes (``learner idle``). ``--slow-tool`` plays ``bench/slow_tool_env.py``:
the quickstart's environment whose every step takes 0.2–1 s to answer. ``--split-cores`` gives the learner (this
process) the first half of the machine's cores and the rollout workers the other half, each pinned there (CPU
affinity of every thread): the layout of a GPU run, where rollouts and updates have devices of their own, so that a
phase that waits leaves its cores idle instead of lending them to the other. Besides the learner's idle share it
prints the workers' (1 − their CPU seconds / (wall × their cores)). ``--staleness K …`` picks the values of k
(0 is the baseline), ``--seeds S …`` runs each k once per config seed and pools the steps, and ``--held-out``
evaluates each run after its last step (greedy, the config's held-out tasks, on all cores, not timed): equal
episodes per run, so the held-out figures compare k = 1 with k = 0 after the same number of episodes.

For each placement (local; ray with 1 worker; ray with 2 workers) it trains SmolLM2-135M-Instruct on the quickstart
config (GRPO, 4 prompts × 8 samples, 48 new tokens) for ``--steps`` steps from the same weights, with
batch-invariant sampling (``rollout.seed_per_episode``) so that all three play the same episodes (their sampled
tokens part a little after two updates: a few % more or fewer tokens a step), and prints
generated tokens/s of the rollouts and seconds per step (rollout + update; held-out evaluation excluded), and the
ratios against local. ``--warmup K`` leaves the first K steps out (default 1; the object store's first pages are
faulted in over the first 2–3 weight pushes, about 1.5 s of the driver's CPU at step 1 against 0.3 s later), and
``--rounds R`` runs the placements R times in ABBA order (local, ray, ray, local, …) and pools the steps, so that
a drift of this machine's speed during the run (other tenants: the ``steal`` column, the share of CPU time the
hypervisor gave to others) falls on both sides alike. The Ray cluster is local (``num_cpus`` = this machine's
cores) and the workers share them (``worker_cpus`` = cores / workers; a worker runs that many torch threads), as the
local placement uses them all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

CORES = sorted(os.sched_getaffinity(0))  # this machine's cores, read before any run pins this process


def _pin(pid: int, cores: set[int]) -> None:
    """Pin every thread of process ``pid`` to ``cores`` (threads started later inherit their starter's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


def _unpin(cores: list[int]) -> None:
    """This process back on all ``cores``, with a torch thread for each."""
    _pin(os.getpid(), set(cores))
    torch.set_num_threads(len(cores))


def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _steal() -> tuple[int, int]:
    """``(steal ticks, all ticks)`` of this machine so far (/proc/stat)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return ticks[7], sum(ticks[:8])


def run(
    placement: str,
    workers: int,
    steps: int,
    model: str,
    staleness: int = 0,
    slow_tool: bool = False,
    split: bool = False,
    warmup: int = 1,
    seed: int = 0,
    held_out: bool = False,
) -> list[dict[str, float]]:
    """Train ``warmup + steps`` steps; return the rows of the last ``steps`` (rollout and step seconds, tokens,
    episodes, success, the workers' CPU seconds, the machine's steal ticks). With ``held_out`` the last row also
    has ``eval_success``: greedy success on the config's held-out tasks after the last step (on all cores, not
    timed)."""
    from turnrl.agents import make_agent
    from turnrl.rl.config import load_config
    from turnrl.rl.run.trainer import Trainer

    overrides = [
        f"steps={steps + warmup}",
        "rollout.seed_per_episode=true",
        f"placement={placement}",
        f"model={model}",
        f"rollout.max_staleness={staleness}",
        f"seed={seed}",
    ]
    if slow_tool:
        import turnrl

        turnrl.register("bench/SlowToolArithmetic-v0", "slow_tool_env:SlowToolArithmetic")
        overrides.append("env.id=bench/SlowToolArithmetic-v0")
    cores = CORES
    learner_cores, worker_cores = set(cores[: len(cores) // 2]), set(cores[len(cores) // 2 :])
    if placement == "ray":
        # the same CPUs in every placement: the workers share this machine's cores (rollouts and updates alternate),
        # or with ``split`` the cores that are theirs
        overrides += [
            f"ray.rollout_workers={workers}",
            f"ray.worker_cpus={(len(worker_cores) if split else len(cores)) / workers}",
        ]
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config("configs/quickstart.yaml", [*overrides, f"out_dir={out}"])
        agent = make_agent(model, batch_size=32)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, model=agent.model, tokenizer=agent.tokenizer)
        start_s = time.perf_counter() - t0
        rows, pids = [], []
        if placement == "ray":
            import ray

            runner = trainer._runner()  # the workers start now (else with the first step)
            pids = [ray.get(w.ready.remote(), timeout=60)["pid"] for w in runner.workers]
        if split:
            torch.set_num_threads(len(learner_cores))
            _pin(os.getpid(), learner_cores)
            for pid in pids:
                _pin(pid, worker_cores)
        try:
            for step in range(steps + warmup):
                s0, c0, k0 = time.perf_counter(), _cpu_seconds(pids), _steal()
                trajs, info = trainer.source.collect(step)
                s1 = time.perf_counter()
                trainer.learner.update(trajs)
                k1 = _steal()
                rows.append(
                    {
                        "rollout_s": s1 - s0,
                        "step_s": time.perf_counter() - s0,
                        "episodes": len(trajs),
                        "tokens": info["generated_tokens"],
                        "success": info["success"],
                        "worker_cpu_s": _cpu_seconds(pids) - c0,
                        "steal": k1[0] - k0[0],
                        "ticks": k1[1] - k0[1],
                        "start_s": start_s,
                    }
                )
                print(
                    f"  {placement}/{workers} step {step}: rollout {s1 - s0:.1f} s, step {rows[-1]['step_s']:.1f} s, "
                    f"{info['generated_tokens']:.0f} tokens, success {info['success']:.3f}",
                    flush=True,
                )
            if split:  # the evaluation and the next run start unpinned
                _unpin(cores)
            if held_out:
                rows[-1]["eval_success"] = trainer.evaluate()
                print(
                    f"  {placement}/{workers} k={staleness}: held-out success {rows[-1]['eval_success']:.3f}",
                    flush=True,
                )
        finally:
            trainer.close()
            if split:
                _unpin(cores)
    return rows[warmup:]  # the first steps warm up (worker processes, caches, the object store's pages)


def summary(rows: list[dict[str, float]], cores: int) -> dict[str, float]:
    """Mean figures of ``rows`` (steps of one or more runs of one placement)."""
    wall = sum(r["step_s"] for r in rows)
    return {
        "start_s": statistics.mean(r["start_s"] for r in rows),
        "tok_s": sum(r["tokens"] for r in rows) / sum(r["rollout_s"] for r in rows),
        "step_s": statistics.mean(r["step_s"] for r in rows),
        "success": statistics.mean(r["success"] for r in rows),
        "eps_s": sum(r["episodes"] for r in rows) / wall,
        "wall_tok_s": sum(r["tokens"] for r in rows) / wall,
        "learner_idle": sum(r["rollout_s"] for r in rows) / wall,
        "workers_idle": 1 - sum(r["worker_cpu_s"] for r in rows) / (wall * cores),
        "steal": sum(r["steal"] for r in rows) / max(sum(r["ticks"] for r in rows), 1),
        "held_out": [r["eval_success"] for r in rows if "eval_success" in r],
    }


def main() -> None:
    """Run the placements and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="steps before those, left out (default 1)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the placements this many times in ABBA order and pool their steps"
    )
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--only", choices=["local", "ray"], help="run one placement (ratios need both)")
    parser.add_argument(
        "--ray-workers",
        type=int,
        nargs="+",
        default=[1, 2],
        metavar="N",
        help="the Ray placements to run, by rollout workers (default: 1 2)",
    )
    parser.add_argument("--async", dest="overlap", action="store_true", help="ray × 2 with max_staleness 0, 1, 2")
    parser.add_argument("--slow-tool", action="store_true", help="a tool that answers in 0.2–1 s")
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="with --async: the learner on half the cores, the workers on the other half",
    )
    parser.add_argument(
        "--staleness",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        metavar="K",
        help="with --async: the max_staleness values to run (default: 0 1 2; ratios need 0)",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="with --async: each run's greedy held-out success after its last step (not timed)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        metavar="S",
        help="with --async: run every k with each of these config seeds and pool the steps",
    )
    args = parser.parse_args()
    if args.split_cores and (not args.overlap or len(CORES) < 2):
        parser.error("--split-cores needs --async and at least 2 cores")
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1, --warmup at least 0")
    if (args.held_out or args.seeds != [0] or args.staleness != [0, 1, 2]) and not args.overlap:
        parser.error("--held-out, --seeds and --staleness go with --async")
    if 0 not in args.staleness or min(args.staleness) < 0:
        parser.error("--staleness needs 0 (the synchronous baseline) and no value below 0")
    torch.manual_seed(0)
    if args.overlap:
        cores = len(CORES) - len(CORES) // 2 if args.split_cores else len(CORES)
        pooled: dict[int, list[dict[str, float]]] = {k: [] for k in args.staleness}
        for seed in args.seeds:  # every k of a seed before the next seed: a drift of the machine falls on all alike
            for k in args.staleness:
                pooled[k] += run(
                    "ray",
                    2,
                    args.steps,
                    args.model,
                    k,
                    args.slow_tool,
                    args.split_cores,
                    args.warmup,
                    seed,
                    args.held_out,
                )
        runs = {f"ray × 2, k={k}": summary(rows, cores) for k, rows in pooled.items()}
        base = runs["ray × 2, k=0"]
        print(
            f"\n{'run':<16}{'episodes/s':>11}{'× sync':>8}{'gen tok/s':>11}{'× sync':>8}{'s/step':>8}"
            f"{'learner idle':>14}{'workers idle':>14}{'success':>9}{'steal':>7}"
            + (f"  held-out (seeds {' '.join(map(str, args.seeds))})" if args.held_out else "")
        )
        for name, r in runs.items():
            print(
                f"{name:<16}{r['eps_s']:>11.3f}{r['eps_s'] / base['eps_s']:>8.2f}{r['wall_tok_s']:>11.1f}"
                f"{r['wall_tok_s'] / base['wall_tok_s']:>8.2f}{r['step_s']:>8.1f}{r['learner_idle']:>14.2f}"
                f"{r['workers_idle']:>14.2f}{r['success']:>9.3f}{r['steal']:>7.1%}"
                + ("  " + " ".join(f"{x:.3f}" for x in r["held_out"]) if args.held_out else "")
            )
        return
    order = [(p, w) for p, w in (("local", 0), *(("ray", n) for n in args.ray_workers)) if args.only in (None, p)]
    rows: dict[tuple[str, int], list[dict[str, float]]] = {key: [] for key in order}
    for i in range(args.rounds):  # ABBA: every other round in reverse
        for placement, workers in order if i % 2 == 0 else order[::-1]:
            got = run(placement, workers, args.steps, args.model, 0, args.slow_tool, warmup=args.warmup)
            rows[(placement, workers)] += got
            if args.rounds > 1:
                r = summary(got, len(CORES))
                print(
                    f"  round {i}: {placement}/{workers} {r['step_s']:.1f} s/step, {r['tok_s']:.1f} tok/s, "
                    f"steal {r['steal']:.1%}",
                    flush=True,
                )
    results = {key: summary(r, len(CORES)) for key, r in rows.items()}
    base = results.get(("local", 0), next(iter(results.values())))
    print(
        f"\n{'placement':<12}{'start s':>9}{'gen tok/s':>11}{'× local':>9}{'s/step':>9}{'× local':>9}{'success':>9}"
        f"{'steal':>7}"
    )
    for (placement, workers), r in results.items():
        name = placement if placement == "local" else f"ray × {workers}"
        print(
            f"{name:<12}{r['start_s']:>9.1f}{r['tok_s']:>11.1f}{r['tok_s'] / base['tok_s']:>9.2f}"
            f"{r['step_s']:>9.1f}{r['step_s'] / base['step_s']:>9.2f}{r['success']:>9.3f}{r['steal']:>7.1%}"
        )


if __name__ == "__main__":
    main()
