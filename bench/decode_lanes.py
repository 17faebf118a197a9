"""Decode-step time of fresh short rows beside carried long ones, in one batch and in lanes (``decode_lanes``).

    python bench/decode_lanes.py                        # SmolLM2-135M: 32 rows of 150 tokens and 7 of 900
    python bench/decode_lanes.py --short 32x150 --long 1x900

A T-PPO window decodes new episodes (short contexts) beside carried ones (hundreds of tokens of context). The HF
agent left-pads a batch to its longest context, so in one batch every short row costs what a long one does; with
``decode_lanes`` (the default) it decodes rows whose contexts differ widely in separate batches, one after the other.
Each arm is one ``generate`` call with end-of-sequence switched off, so every row decodes exactly as many tokens; the
cost of one decode step is (time for 16 + ``--tokens`` new tokens − time for 16) / ``--tokens``, the fastest of
``--repeats``. Arms: the short rows alone, the long rows alone, both in one batch (``decode_lanes=False``) and both in
lanes. Run it alone: a timing taken while anything else runs on the machine is void.
"""

from __future__ import annotations

import argparse
import time

from turnrl.agents import SamplingParams, make_agent


def rows(spec: str, ids: list[int]) -> list[list[int]]:
    """``NxL``: N prompts of L tokens."""
    n, length = (int(x) for x in spec.split("x"))
    return [(ids * (length // len(ids) + 1))[:length]] * n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--short", default="32x150", help="the fresh rows: COUNTxCONTEXT")
    p.add_argument("--long", default="7x900", help="the carried rows: COUNTxCONTEXT")
    p.add_argument("--tokens", type=int, default=48, help="decode steps timed")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    agent = make_agent(args.model, batch_size=64)
    agent.eos_ids = [-1]  # no row ends early
    ids = agent.tokenizer("Compute 12 + 7. Show the answer.")["input_ids"]
    short, long_ = rows(args.short, ids), rows(args.long, ids)

    def timed(prompts: list[list[int]], n: int, lanes: bool) -> float:
        agent.decode_lanes = lanes
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            agent.generate(prompts, SamplingParams(temperature=0.8, max_new_tokens=n, seed=0))
            best = min(best, time.perf_counter() - t0)
        return best

    def step_ms(prompts: list[list[int]], lanes: bool) -> float:
        return 1000 * (timed(prompts, 16 + args.tokens, lanes) - timed(prompts, 16, lanes)) / args.tokens

    timed(short[:1], 4, True)  # warm-up
    alone = {name: step_ms(ps, True) for name, ps in (("short", short), ("long", long_))}
    for name, ms in alone.items():
        print(f"{getattr(args, name):>8s} alone            {ms:7.1f} ms per decode step", flush=True)
    print(f"{'':>8s} sum of the two      {sum(alone.values()):7.1f} ms", flush=True)
    together, lanes = step_ms(short + long_, False), step_ms(short + long_, True)
    print(f"both     one batch           {together:7.1f} ms per decode step", flush=True)
    print(f"both     lanes               {lanes:7.1f} ms per decode step ({together / lanes:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
