"""Token bookkeeping cost at 8 / 32 / 128 turns: turnrl's append-only tokens vs re-tokenizing each turn.

An always-wrong scripted policy plays turnrl/Arithmetic-v0 with retries, so every episode runs the full number
of turns; generation is a tiny random model (8 new tokens per turn), which makes generation cheap and the
bookkeeping share an upper bound of what a real model would see. For each turn count it reports the share of
rollout time spent on token bookkeeping, and the share that re-rendering + re-tokenizing the whole
conversation every turn would take instead (what naive multi-turn trainers do).

    target: turnrl's share < 1 % at 128 turns

Usage: python bench/token_bookkeeping.py [--episodes 8] [--template chatml]
"""

from __future__ import annotations

import argparse
import time

import turnrl
from turnrl.agents import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rollout.engine import Rollout
from turnrl.tokens import ChatRenderer


def retokenize_cost(renderer: ChatRenderer, traj) -> float:
    """Seconds to render and tokenize the whole conversation before every turn (the naive way)."""
    t0 = time.perf_counter()
    history = list(traj.prompt)
    for turn in traj.turns:
        renderer.encode(renderer.render(history, add_generation_prompt=True))
        history += [turn.action, *turn.observation]
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--template", default="chatml")
    args = ap.parse_args()
    tok = tiny_tokenizer(args.template)
    agent = HFAgent(tiny_model(tok, hidden=64, layers=2), tok)
    print(f"{args.episodes} episodes, tiny {args.template} model, 8 new tokens per turn")
    print(f"{'turns':>6} {'rollout s':>10} {'bookkeeping s':>14} {'share':>8} {'re-tokenize s':>14} {'share':>8}")
    for turns in (8, 32, 128):
        envs = [turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=turns) for _ in range(args.episodes)]
        rollout = Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=8, seed=0), max_context=1 << 16)
        t0 = time.perf_counter()
        trajs = rollout.run(envs, seeds=list(range(args.episodes)))
        total = time.perf_counter() - t0
        assert all(t.num_turns == turns for t in trajs), [t.num_turns for t in trajs]
        ours = rollout.stats.bookkeeping_s
        renderer = ChatRenderer(tok)
        naive = sum(retokenize_cost(renderer, t) for t in trajs)
        naive_total = total - ours + naive
        print(
            f"{turns:>6} {total:>10.2f} {ours:>14.4f} {ours / total:>7.2%} {naive:>14.3f} {naive / naive_total:>7.2%}"
        )


if __name__ == "__main__":
    main()
