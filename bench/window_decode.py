"""Time to decode one T-PPO window, side by side: in one batch, in lanes one after the other, and in lanes where the
next joins the running batch once it has few rows left (the HF agent's default), and as streamed requests.

    python bench/window_decode.py                      # SmolLM2-135M: 32 fresh rows of 120 tokens, 5 carried of 800
    python bench/window_decode.py --fresh 32x120 --carried 7x900 --window 128 --repeats 3
    python bench/window_decode.py --arms "lanes in turn,lanes that join,streamed" --repeats 3

A window decodes fresh episodes (short contexts) beside carried ones (hundreds of tokens of context). Most fresh
answers end within a few dozen tokens, one may run to the window's end; most carried ones run the whole window.
Every row here decodes a set number of tokens (end-of-sequence switched off): fresh rows a long-tailed draw (mean
``--mean`` tokens, one row the whole window), carried rows the whole window, bar ``--carried-ending`` of them which
end early. Arms, each the same rows with the same random streams:

    one batch        every row in one batch, padded to the longest context (``decode_lanes=False``)
    lanes in turn    lanes of similar context, each decoded after the one before has finished (the agent until
                     2026-11-29)
    lanes that join  the next lane joins the running batch once padding its remaining rows costs less than a call
                     per step (``decode_lanes=True``, the default)
    streamed         every row as its own request (``agenerate_one``: continuous batching, lanes side by side)

The arms run in turn, ``--repeats`` times over; each arm's fastest time is printed, with forward calls counted,
and its speed against the first arm.
Run it alone: a timing taken while anything else runs on the machine is void.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import torch

from turnrl.agents import SamplingParams, make_agent
from turnrl.agents.batching import Row


def lengths(n: int, mean: float, window: int, rng: random.Random) -> list[int]:
    """``n`` answer lengths with an exponential tail of ``mean``, capped at ``window``; the first runs to it."""
    return [window] + [min(window, max(1, round(rng.expovariate(1 / mean)))) for _ in range(n - 1)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--fresh", default="32x120", help="fresh rows: COUNTxCONTEXT")
    p.add_argument("--carried", default="5x800", help="carried rows: COUNTxCONTEXT")
    p.add_argument("--window", type=int, default=128, help="tokens a row may decode in the window")
    p.add_argument("--mean", type=float, default=20.0, help="mean fresh answer length (tokens)")
    p.add_argument("--carried-ending", type=int, default=2, help="carried rows that end early in the window")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--arms", default="one batch,lanes in turn,lanes that join,streamed", help="which arms to time, comma-separated"
    )
    args = p.parse_args()
    agent = make_agent(args.model, batch_size=64)
    agent.eos_ids = [-1]  # rows end at their own max_new_tokens only
    rng = random.Random(args.seed)
    ids = agent.tokenizer("Compute 12 + 7 and explain each step. Show the answer.")["input_ids"]
    (nf, cf), (nc, cc) = ((int(x) for x in spec.split("x")) for spec in (args.fresh, args.carried))
    prompts = [[*((ids * (cf // len(ids) + 1))[: cf - 1]), 10 + i] for i in range(nf)]
    prompts += [[*((ids * (cc // len(ids) + 1))[: cc - 1]), 10 + i] for i in range(nc)]
    news = lengths(nf, args.mean, args.window, rng)
    news += [rng.randrange(1, args.window) if i < args.carried_ending else args.window for i in range(nc)]

    def rows() -> list[Row]:
        out = [
            Row(i, p, SamplingParams(temperature=0.8, max_new_tokens=m)) for i, (p, m) in enumerate(zip(prompts, news))
        ]
        for i, row in enumerate(out):
            row.gen = torch.Generator().manual_seed(1000 + i)
        return out

    def one_batch() -> None:
        agent._decode([rows()])

    def in_turn() -> None:
        for lane in agent._lanes(rows()):
            agent._decode([lane])

    def joining() -> None:
        agent._decode(agent._lanes(rows()))

    def streamed() -> None:
        async def run() -> None:
            await asyncio.gather(
                *[
                    agent.agenerate_one(p, SamplingParams(temperature=0.8, max_new_tokens=m), seed=i)
                    for i, (p, m) in enumerate(zip(prompts, news))
                ]
            )

        asyncio.run(run())

    arms = {"one batch": one_batch, "lanes in turn": in_turn, "lanes that join": joining, "streamed": streamed}
    unknown = set(args.arms.split(",")) - set(arms)
    if unknown:
        p.error(f"unknown arms {sorted(unknown)}: choose from {list(arms)}")
    arms = {name: fn for name, fn in arms.items() if name in args.arms.split(",")}
    calls = [0]
    agent.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    print(
        f"fresh {args.fresh}: answers {sorted(news[:nf])}; carried {args.carried}: {news[nf:]}; "
        f"lanes {[len(lane) for lane in agent._lanes(rows())]}",
        flush=True,
    )
    best = {name: float("inf") for name in arms}
    counted = {}
    agent.model.eval()
    with torch.no_grad():
        agent._decode([rows()[:2]])  # warm-up
        for _ in range(args.repeats):
            for name, fn in arms.items():
                calls[0] = 0
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
                counted[name] = calls[0]
    base_name = next(iter(best))
    for name, s in best.items():
        print(
            f"{name:>16s}  {s:6.2f} s  {counted[name]:4d} forward calls  ({best[base_name] / s:.2f}x {base_name})",
            flush=True,
        )


if __name__ == "__main__":
    main()
