"""How much of a synchronous run's time goes to waiting for the longest answer: the most T-PPO (or overlap) can save.

    python bench/tail_waste.py runs/tppo_w128_s0/ppo        # a kept run's answer lengths, this machine's decode costs
    python bench/tail_waste.py RUN --sizes 1,2,4,8,16,32 --tokens 64
    python bench/tail_waste.py RUN --costs 1=116.4,2=192.3,4=242.9,8=221.1,16=297.2,32=357.5   # costs measured before

A synchronous step decodes until its longest answer ends. The HF agent drops finished rows from the batch, so the
tail costs what a decode step of the few rows still running costs: c(b) for b rows. This measures c(b) on this
machine (SmolLM2 by default, every row forced to decode ``--tokens`` tokens past a prompt of the run's length), then
replays each step of a kept run (its ``train/step-N/trajectories.jsonl``) through three cost models:

* ``sync``: the step as it ran, Σ_t c(b_t) with b_t the rows still decoding at step t (checked against the run's own
  ``generate_s``);
* ``full``: the same tokens decoded in full batches, (Σ L / B) · c(B) — what windows refilled with new prompts, or
  rollouts overlapping the update, approach at best;
* the same two with a flat c(b) (a GPU decoding a small model: a step costs the same for 1 row as for 64), where the
  ratio is L_max · B / Σ L, the 1/u of docs/SCALING.md.

The last lines give the training time the run would have taken had every step's generation cost ``full`` instead of
``sync`` and everything else (the update, the environment) stayed the same: the ceiling on the wall-time ratio a
method that removes the tail can show against this run with the same updates. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from turnrl.agents import SamplingParams, make_agent
from turnrl.storage import read_jsonl
from turnrl.types import Trajectory


def episodes(run: Path) -> dict[int, list[Trajectory]]:
    """Each training step's episodes, read once from ``train/step-N/trajectories.jsonl``."""
    steps = {int(d.name.split("-")[1]): d for d in run.glob("train/step-*")}
    return {k: read_jsonl(steps[k] / "trajectories.jsonl") for k in sorted(steps)}


def lengths(trajs: list[Trajectory]) -> list[int]:
    """The tokens each episode's policy sampled (its ``loss_mask``)."""
    return [sum(t.loss_mask) for t in trajs]


def prompt_length(trajs: list[Trajectory]) -> int:
    """The median prompt length (the tokens before the first sampled one)."""
    return int(statistics.median(t.loss_mask.index(1) if 1 in t.loss_mask else len(t.loss_mask) for t in trajs))


def decode_costs(model: str, sizes: list[int], tokens: int, prompt: int, repeats: int) -> dict[int, float]:
    """Seconds per decode step for b rows: (time for prefill + 16 + tokens) − (time for prefill + 16), over tokens."""
    agent = make_agent(model, batch_size=max(sizes))
    agent.eos_ids = [-1]  # no row ends early: every row decodes exactly max_new_tokens
    ids = agent.tokenizer("Compute 12 + 7. Show the answer.")["input_ids"]
    ids = (ids * (prompt // len(ids) + 1))[:prompt]

    def timed(b: int, n: int) -> float:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            agent.generate([ids] * b, SamplingParams(temperature=0.8, max_new_tokens=n, seed=0))
            best = min(best, time.perf_counter() - t0)
        return best

    timed(1, 4)  # warm-up
    costs = {}
    for b in sizes:
        costs[b] = (timed(b, 16 + tokens) - timed(b, 16)) / tokens
        print(
            f"  c({b:>2}) = {1000 * costs[b]:6.1f} ms per decode step ({1000 * costs[b] / b:5.1f} ms per row)",
            flush=True,
        )
    return costs


def cost(costs: dict[int, float], b: int) -> float:
    """c(b), linear between the measured sizes (and past the largest, proportional to b)."""
    sizes = sorted(costs)
    if b <= sizes[0]:
        return costs[sizes[0]]
    for lo, hi in zip(sizes, sizes[1:]):
        if b <= hi:
            return costs[lo] + (costs[hi] - costs[lo]) * (b - lo) / (hi - lo)
    return costs[sizes[-1]] * b / sizes[-1]


def sync_cost(ls: list[int], c) -> float:
    """Σ_t c(b_t): decode until the longest answer ends, each step over the rows still decoding."""
    return sum(c(sum(1 for x in ls if x > t)) for t in range(max(ls, default=0)))


def full_cost(ls: list[int], c) -> float:
    """The same tokens in full batches of len(ls) rows."""
    return sum(ls) / max(len(ls), 1) * c(len(ls))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a kept run (its train/step-N/trajectories.jsonl and metrics.jsonl)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--sizes", default="1,2,4,8,16,32", help="batch sizes to time (comma-separated)")
    p.add_argument("--tokens", type=int, default=64, help="decode steps timed per batch size")
    p.add_argument("--repeats", type=int, default=2, help="timings per point (the fastest is kept)")
    p.add_argument(
        "--upto",
        type=int,
        default=None,
        metavar="N",
        help="only the run's steps 1..N (e.g. up to the step whose held-out success you time)",
    )
    p.add_argument(
        "--costs",
        default=None,
        metavar="B=MS,...",
        help="use these decode costs (ms per step for B rows, e.g. 1=116,32=358: an earlier run's line, or "
        "another machine's) instead of measuring them here",
    )
    p.add_argument(
        "--max-new",
        type=int,
        default=None,
        help="the run's max_new_tokens (one step decodes at most this; default: from its config.yaml)",
    )
    args = p.parse_args()
    kept = episodes(args.run)
    steps = {k: lengths(v) for k, v in kept.items() if args.upto is None or k <= args.upto}
    if not steps:
        raise SystemExit(f"{args.run} has no train/step-N/trajectories.jsonl: give a run kept with its trajectories")
    metrics = {
        int(r["step"]): r
        for r in map(json.loads, (args.run / "metrics.jsonl").read_text().splitlines())
        if "seconds" in r
    }
    prompt = prompt_length(kept[min(kept)])
    if args.max_new is None:
        cfg = yaml.safe_load((args.run / "config.yaml").read_text()) if (args.run / "config.yaml").exists() else {}
        args.max_new = int(((cfg or {}).get("rollout") or {}).get("max_new_tokens") or 256)
    if args.costs:
        costs = {int(b): float(ms) / 1000 for b, ms in (kv.split("=") for kv in args.costs.split(","))}
    else:
        print(f"decode cost on this machine ({args.model}, prompt {prompt} tokens):")
        costs = decode_costs(args.model, [int(s) for s in args.sizes.split(",")], args.tokens, prompt, args.repeats)
        print("  (again without measuring: --costs " + ",".join(f"{b}={1000 * c:.1f}" for b, c in costs.items()) + ")")
    cpu = lambda b: cost(costs, b)
    flat = lambda b: 1.0  # a GPU's small-model decode step: the same for 1 row as for B
    print(
        f"\n{'step':>4} {'B':>3} {'mean L':>6} {'max L':>5} | {'gen s':>6} {'sync s':>6} {'full s':>6} {'x':>5} |"
        f" {'flat x':>6} | {'step s':>6}"
    )
    tot = {"seconds": 0.0, "gen": 0.0, "sync": 0.0, "full": 0.0, "fsync": 0.0, "ffull": 0.0}
    for step, ls in steps.items():
        ls = [min(x, args.max_new) for x in ls]
        m = metrics.get(step, {})
        s, f, fs, ff = sync_cost(ls, cpu), full_cost(ls, cpu), sync_cost(ls, flat), full_cost(ls, flat)
        gen, sec = m.get("generate_s", float("nan")), m.get("seconds", float("nan"))
        print(
            f"{step:>4} {len(ls):>3} {statistics.mean(ls):>6.1f} {max(ls):>5} | {gen:>6.1f} {s:>6.1f} {f:>6.1f}"
            f" {s / f:>5.2f} | {fs / ff:>6.2f} | {sec:>6.1f}"
        )
        for k, v in zip(("seconds", "gen", "sync", "full", "fsync", "ffull"), (sec, gen, s, f, fs, ff)):
            tot[k] += v
    print(
        f"\nsteps {min(steps)}-{max(steps)}: generation measured {tot['gen']:.0f} s, modelled {tot['sync']:.0f} s "
        f"(sync) and {tot['full']:.0f} s in full batches: {tot['sync'] / tot['full']:.2f}x on this machine, "
        f"{tot['fsync'] / tot['ffull']:.2f}x with a flat decode cost"
    )
    # the tail's share of the measured generation, removed from the run's measured time
    saved = tot["gen"] * (1 - tot["full"] / tot["sync"])
    print(
        f"training time {tot['seconds']:.0f} s; without the tail {tot['seconds'] - saved:.0f} s: at most "
        f"{tot['seconds'] / (tot['seconds'] - saved):.2f}x less wall time with the same updates on this machine"
    )
    share = 1 - tot["ffull"] / tot["fsync"]
    print(
        f"with a flat decode cost the tail is {100 * share:.0f} % of generation: a run that spends a share g of its "
        f"time generating saves at most g·{share:.2f} (e.g. g = 0.6: {1 / (1 - 0.6 * share):.2f}x)"
    )


if __name__ == "__main__":
    main()
