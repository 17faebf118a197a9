"""Tree rollouts against chains at equal leaves: tokens generated and prefilled per leaf (issue 79's speed goal: a
tree of 4 leaves over 3 turns prefills at most 0.6× what 4 chains do).

    python bench/tree_rollout.py                        # 8 tasks, 4 leaves each: chains vs 2 x 2 at turns 1 and 2
    python bench/tree_rollout.py --tasks 4 --model tiny # a tiny random model (the counts, not the texts, matter)

Both arms play the same tasks of ``bench/multiturn_env.py``'s research session (every episode exactly 3 turns, each
answered by a ~50-token search result, whatever the model writes — so both arms play the same number of turns) at
temperature 1, 24 new tokens a turn, with each episode's own sampling stream and the HF agent's KV sessions on:
``chains`` plays ``leaves`` independent episodes of each task; ``tree`` plays one root per task that forks into 2
children after turn 1 and again after turn 2 (4 leaves), each child's KV session started from its parent's. Printed
per arm: leaves, generated tokens per leaf, prompt tokens run through the model per leaf (prefill), tokens served from
a KV cache per leaf, the wall time; then the tree's ratios to the chains'. Token counts do not depend on the machine's
load; the wall times do (run alone for them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def arm(model: str, tasks: int, leaves: int, tree: bool) -> dict[str, float]:
    """Play one arm; its figures."""
    import torch
    import transformers
    from multiturn_env import SearchSession

    from turnrl.agents import make_agent
    from turnrl.agents.base import SamplingParams
    from turnrl.agents.hf import HFAgent
    from turnrl.rollout.engine import Rollout
    from turnrl.rollout.tree import Branch, TreeSpec, play_tree
    from turnrl.utils import run_with_daemon_threads

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    loaded = make_agent("tiny:chatml" if model == "tiny" else model, batch_size=1)  # a name, a path, or tiny
    agent = HFAgent(loaded.model, loaded.tokenizer, batch_size=tasks * leaves, kv_cache_mb=4096)
    rollout = Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=24), max_turns=3)
    roots = tasks if tree else tasks * leaves
    envs = [SearchSession(max_turns=3) for _ in range(roots)]
    per = 1 if tree else leaves
    episodes = rollout.start(
        envs,
        seeds=[i // per for i in range(roots)],
        options=[{"index": i // per} for i in range(roots)],
        group_ids=[f"t{i // per}" for i in range(roots)],
        sample_seeds=[1000 + i for i in range(roots)],
        metadata=[{} for _ in range(roots)],
    )
    t0 = time.perf_counter()
    if tree:
        done = run_with_daemon_threads(play_tree(rollout, episodes, TreeSpec((Branch(1, 2), Branch(2, 2)))))
    else:
        rollout.play(episodes)
        done = episodes
    wall = time.perf_counter() - t0
    trajs = [ep.traj for ep in done]
    n = len(trajs)
    return {
        "leaves": n,
        "generated": rollout.stats.generated_tokens / n,
        "prefill": rollout.stats.prefill_tokens / n,
        "cached": rollout.stats.cached_tokens / n,
        "turns": sum(t.num_turns for t in trajs) / n,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()
    rows = {name: arm(args.model, args.tasks, 4, name == "tree") for name in ("chains", "tree")}
    print(
        f"{'arm':8} {'leaves':>6} {'turns':>6} {'generated/leaf':>15} {'prefill/leaf':>13} {'cached/leaf':>12} "
        f"{'wall s':>7}"
    )
    for name, r in rows.items():
        print(
            f"{name:8} {r['leaves']:6.0f} {r['turns']:6.2f} {r['generated']:15.1f} {r['prefill']:13.1f} "
            f"{r['cached']:12.1f} {r['wall_s']:7.1f}"
        )
    c, t = rows["chains"], rows["tree"]
    print(
        f"tree / chains per leaf: generated {t['generated'] / c['generated']:.2f}x, prefill "
        f"{t['prefill'] / c['prefill']:.2f}x (goal <= 0.6x), wall {t['wall_s'] / c['wall_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
