"""How full the HF agent's decode calls are in a training run: per step, the calls, the rows in each, and the share
of calls (and of their time) that ran few rows.

    python bench/decode_calls.py runs/x/tppo-finished/config.yaml steps=4 out_dir=/tmp/calls   # replay a kept run
    python bench/decode_calls.py configs/quickstart.yaml steps=2 out_dir=/tmp/calls --few 8

It trains the config (with the overrides, as ``turnrl train`` takes them) in this process and times every decode
forward call (``turnrl.agents.batching.Batch.feed``: one call per running batch per generated token). A call costs
about as much for 1 row as for a few on a CPU, where reading the weights dominates. So the calls that ran few rows
are where a step's decoding waited on a few long answers: a synchronous step's tail, or a T-PPO window's carried
answers after the fresh ones ended. Held-out evaluations are left out. Run it alone: the times are void while
anything else runs on the machine.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from turnrl.agents.batching import Batch
from turnrl.rl.run.trainer import Trainer, load_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="a training config (e.g. a kept run's config.yaml)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as turnrl train takes them")
    p.add_argument("--few", type=int, default=4, help="a call with at most this many rows counts as few")
    args = p.parse_args()
    trainer = Trainer(load_config(args.config, args.overrides))
    calls: dict[int, list[tuple[int, float]]] = defaultdict(list)  # step -> (rows, seconds) of each decode call
    state = {"step": 0, "evaluating": False}
    feed, collect, evaluate = Batch.feed, trainer.source.collect, trainer.evaluate

    def timed_feed(self: Batch, model, nxt) -> None:
        t0 = time.perf_counter()
        feed(self, model, nxt)
        if not state["evaluating"]:
            calls[state["step"]].append((len(self.rows), time.perf_counter() - t0))

    def collect_step(step: int):
        state["step"] = step
        return collect(step)

    def evaluate_aside(*a, **k):
        state["evaluating"] = True
        try:
            return evaluate(*a, **k)
        finally:
            state["evaluating"] = False

    Batch.feed = timed_feed  # type: ignore[method-assign]  # timed for the benchmark
    trainer.source.collect = collect_step  # type: ignore[method-assign]  # timed for the benchmark
    trainer.evaluate = evaluate_aside  # type: ignore[method-assign]  # kept out of the timing
    try:
        trainer.train()
    finally:
        Batch.feed = feed  # type: ignore[method-assign]  # restored
        trainer.close()
    print(f"\ndecode calls per step (a call with at most {args.few} rows counts as few):")
    print(
        f"{'step':>5} {'calls':>6} {'rows/call':>9} {'few':>5} {'few share':>9} {'seconds':>8} {'few s':>7} "
        f"{'few time share':>14}"
    )
    every: list[tuple[int, float]] = []
    for step in sorted(calls):
        every += calls[step]
        row(str(step + 1), calls[step], args.few)  # the steps as metrics.jsonl numbers them
    row("all", every, args.few)


def row(label: str, calls: list[tuple[int, float]], few: int) -> None:
    """One line of the table: ``calls`` as (rows, seconds)."""
    small = [(r, s) for r, s in calls if r <= few]
    total, small_s = sum(s for _, s in calls), sum(s for _, s in small)
    print(
        f"{label:>5} {len(calls):>6} {sum(r for r, _ in calls) / max(len(calls), 1):>9.1f} {len(small):>5} "
        f"{len(small) / max(len(calls), 1):>9.0%} {total:>8.1f} {small_s:>7.1f} {small_s / max(total, 1e-9):>14.0%}"
    )


if __name__ == "__main__":
    main()
