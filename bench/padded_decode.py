"""Decode-step time of the HF agent's batch layout: transformers' ``sdpa`` against turnrl's CPU grouped-query path.

    python bench/padded_decode.py                  # SmolLM2-135M: 32 rows of 55–165 tokens, and beside 4 of 1,500
    python bench/padded_decode.py --long 3000 --rounds 5

Continuous batching left-pads its rows to a common length and always passes an attention mask. With a mask,
transformers' ``sdpa`` repeats each key/value head of a grouped-query model once per query head (SmolLM2: 9 over 3), a
copy of the whole cache per layer and step; :mod:`turnrl.agents.attention` lets PyTorch's CPU kernel group the heads
instead (the same results). Each arm feeds random tokens through one prefilled batch and reports the median
milliseconds per decode step over ``--rounds`` rounds, the arms in ABBA order in one process. Run it alone: a
timing taken while anything else runs on the machine is void.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from turnrl.agents.attention import use_cpu_gqa
from turnrl.agents.base import SamplingParams
from turnrl.agents.batching import Row
from turnrl.agents.hf import HFAgent


def step_ms(agent: HFAgent, parts: list[list[int]], steps: int, seed: int) -> float:
    """Milliseconds per decode step of one batch (after a warm-up step): each part (rows of these prompt lengths) is
    prefilled on its own and joins the batch, as rows join a running batch."""
    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(max_new_tokens=steps + 2)
    with torch.no_grad():
        batch = None
        for lengths in parts:
            rows = [
                Row(i, torch.randint(100, 40000, (n,), generator=g).tolist(), params) for i, n in enumerate(lengths)
            ]
            joining = agent._prefill(rows)
            batch = joining if batch is None else batch.merge(joining)
        assert batch is not None
        batch.feed(agent.model, torch.randint(100, 40000, (len(batch.rows),), generator=g))
        start = time.perf_counter()
        for _ in range(steps):
            batch.feed(agent.model, torch.randint(100, 40000, (len(batch.rows),), generator=g))
        return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--short", type=int, default=110, help="the 32 short rows' mean prompt tokens (0.5–1.5 × this)")
    ap.add_argument("--long", type=int, default=1500, help="prompt tokens of the 4 long rows")
    ap.add_argument("--steps", type=int, default=16, help="decode steps timed per batch")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    agent = HFAgent.from_pretrained(args.model)
    impl = agent.model.config._attn_implementation
    if impl != "sdpa":
        raise SystemExit(f"the model runs {impl!r} attention, not sdpa: nothing to compare")
    short = [args.short // 2 + (args.short * i) // 31 for i in range(32)]  # 0.5–1.5 × --short: rows that joined
    cases = {
        "32 short": [short],
        f"4 × {args.long}": [[args.long] * 4],
        f"32 short + 4 × {args.long}": [short, [args.long] * 4],
    }
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for case, parts in cases.items():
            for arm in ("sdpa", "cpu gqa") if r % 2 == 0 else ("cpu gqa", "sdpa"):  # ABBA: neither always first
                use_cpu_gqa(arm == "cpu gqa")
                times.setdefault((case, arm), []).append(step_ms(agent, parts, args.steps, seed=r))
    print(f"{args.model}, ms per decode step (median of {args.rounds} rounds of {args.steps} steps)")
    print(f"{'batch':<28} {'sdpa':>9} {'cpu gqa':>9} {'speed-up':>9}")
    for case in cases:
        a, b = (statistics.median(times[(case, arm)]) for arm in ("sdpa", "cpu gqa"))
        print(f"{case:<28} {a:>9.0f} {b:>9.0f} {a / b:>8.2f}×")


if __name__ == "__main__":
    main()
