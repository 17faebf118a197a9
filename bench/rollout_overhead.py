"""Rollout overhead: generated tokens/s of a multi-turn rollout vs raw batched generation on the same prompts.

Runs SmolLM2-135M-Instruct (fp32, CPU) greedily on turnrl/Arithmetic-v0 with retries (up to 3 turns), then
replays exactly the prompts each turn sent, as the same batches, through (a) the HF agent's generate alone and
(b) transformers' own `model.generate`. Greedy decoding makes the work identical, so

    ratio = rollout tokens/s ÷ raw generate tokens/s      (target ≥ 0.95)

Usage: python bench/rollout_overhead.py [--episodes 16] [--max-new-tokens 48] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import time

import torch

import turnrl
from turnrl.agents import SamplingParams, make_agent
from turnrl.rollout.engine import Rollout


class Recording:
    """Passes generate through and remembers each batch of prompts."""

    def __init__(self, agent):
        self.agent, self.tokenizer, self.eos_ids, self.batches = agent, agent.tokenizer, agent.eos_ids, []

    def generate(self, prompts, params):
        self.batches.append(([list(p) for p in prompts], params))
        return self.agent.generate(prompts, params)


def hf_generate(model, tokenizer, prompts, max_new):
    pad = tokenizer.pad_token_id
    L = max(map(len, prompts))
    ids = torch.tensor([[pad] * (L - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
    new = out[:, L:]
    return sum(int(((row != pad) | (torch.arange(len(row)) == 0)).sum()) for row in new)  # tokens up to eos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    agent = Recording(make_agent(args.model, batch_size=args.episodes))
    params = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    envs = [turnrl.make("turnrl/Arithmetic-v0", level=2, retry=True, max_turns=3) for _ in range(args.episodes)]
    rollout = Rollout(agent, params)
    t0 = time.perf_counter()
    trajs = rollout.run(envs, seeds=list(range(args.episodes)))
    rollout_s = time.perf_counter() - t0
    gen_tokens = sum(sum(t.loss_mask) for t in trajs)

    t0 = time.perf_counter()
    raw_tokens = sum(len(c.token_ids) for prompts, p in agent.batches for c in agent.agent.generate(prompts, p))
    raw_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    hf_tokens = sum(
        hf_generate(agent.agent.model, agent.tokenizer, prompts, p.max_new_tokens) for prompts, p in agent.batches
    )
    hf_s = time.perf_counter() - t0

    turns = sum(t.num_turns for t in trajs)
    print(
        f"model {args.model}, {args.episodes} episodes, {turns} turns, {len(agent.batches)} generate calls, "
        f"{gen_tokens} generated tokens, torch threads {torch.get_num_threads()}"
    )
    print(
        f"multi-turn rollout        : {gen_tokens / rollout_s:7.1f} tok/s  ({rollout_s:.1f} s; generate "
        f"{rollout.stats.generate_s:.1f} s, env {rollout.stats.env_s:.2f} s, bookkeeping {rollout.stats.bookkeeping_s:.3f} s)"
    )
    print(f"raw HFAgent.generate      : {raw_tokens / raw_s:7.1f} tok/s  ({raw_s:.1f} s, {raw_tokens} tokens)")
    print(f"raw transformers.generate : {hf_tokens / hf_s:7.1f} tok/s  ({hf_s:.1f} s, {hf_tokens} tokens)")
    print(f"ratio rollout / raw HFAgent.generate      = {(gen_tokens / rollout_s) / (raw_tokens / raw_s):.3f}")
    print(f"ratio rollout / raw transformers.generate = {(gen_tokens / rollout_s) / (hf_tokens / hf_s):.3f}")


if __name__ == "__main__":
    main()
