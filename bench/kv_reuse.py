"""Cross-turn KV reuse vs re-prefilling the conversation every turn: multi-turn tool episodes, side by side.

    python bench/kv_reuse.py                       # 1, 8 and 32 turns, 4 episodes, 24 new tokens per turn
    python bench/kv_reuse.py --turns 1 8 --episodes 4

Each (turns, mode) runs in its own process, one after the other, on SmolLM2-135M-Instruct (fp32, CPU, greedy):
``reuse`` keeps every episode's KV cache between its turns (the HF agent's sessions) and feeds only the new tokens;
``prefill`` is the same agent with sessions off (``kv_cache_mb=0``), which runs the whole conversation through the
model every turn. The environment (``bench/multiturn_env.py``) answers every turn with a ~50-token search result
and ends after exactly ``turns`` turns, so both modes play the same episodes; the script checks that their tokens
are identical and reports the largest per-token logprob difference. Printed per row: generated tokens/s, the
mean episode wall time, prompt tokens run through the model, the cache hit share and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def play(turns: int, episodes: int, max_new: int, reuse: bool, model: str, out: str) -> None:
    """One measurement (in a child process): play the episodes, write the figures and trajectories to ``out``."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    sys.path.insert(0, os.path.dirname(__file__))
    from multiturn_env import SearchSession

    from turnrl.agents import SamplingParams
    from turnrl.agents.hf import HFAgent
    from turnrl.rollout.engine import Rollout

    torch.manual_seed(0)
    agent = HFAgent.from_pretrained(model, batch_size=episodes, kv_cache_mb=4096 if reuse else 0)
    rollout = Rollout(agent, SamplingParams(temperature=0.0, max_new_tokens=max_new), max_context=8192)
    warm = Rollout(agent, SamplingParams(temperature=0.0, max_new_tokens=4))
    warm.run([SearchSession(max_turns=1)])  # the first forward pass pays one-off setup
    envs = [SearchSession(max_turns=turns) for _ in range(episodes)]
    t0 = time.perf_counter()
    trajs = rollout.run(envs, options=[{"index": i} for i in range(episodes)])
    wall = time.perf_counter() - t0
    errors = [t.error for t in trajs if t.error]
    if errors:
        raise SystemExit(f"episodes failed: {errors[:3]}")
    generated = sum(sum(t.loss_mask) for t in trajs)
    figures = {
        "wall_s": wall,
        "generated": generated,
        "tok_s": generated / wall,
        "episode_s": wall,
        "turns": sum(t.num_turns for t in trajs) / episodes,
        "length": max(len(t.token_ids) for t in trajs),
        **rollout.stats.kv_metrics(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tokens": [t.token_ids for t in trajs],
        "logprobs": [t.logprobs for t in trajs],
    }
    with open(out, "w") as f:
        json.dump(figures, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--child-turns", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, out = args.child
        play(args.child_turns, args.episodes, args.max_new_tokens, mode == "reuse", args.model, out)
        return
    print(
        f"model {args.model}, {args.episodes} episodes, {args.max_new_tokens} new tokens per turn, greedy, "
        f"{os.cpu_count()} cores"
    )
    print(
        f"{'turns':>5} {'mode':>8} {'tok/s':>8} {'episode s':>10} {'prefill tok':>12} {'hit share':>9} "
        f"{'peak MB':>8} {'context':>8}"
    )
    for turns in args.turns:
        got = {}
        for mode in ("prefill", "reuse"):
            out = f"/tmp/kv_reuse_{os.getpid()}_{turns}_{mode}.json"
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    mode,
                    out,
                    "--child-turns",
                    str(turns),
                    "--episodes",
                    str(args.episodes),
                    "--max-new-tokens",
                    str(args.max_new_tokens),
                    "--model",
                    args.model,
                ],
                check=True,
            )
            with open(out) as f:
                got[mode] = json.load(f)
            os.unlink(out)
            g = got[mode]
            print(
                f"{turns:>5} {mode:>8} {g['tok_s']:>8.1f} {g['episode_s']:>10.1f} {int(g['prefill_tokens']):>12} "
                f"{g['cache_hit_share']:>9.2f} {g['peak_rss_mb']:>8.0f} {g['length']:>8}",
                flush=True,
            )
        a, b = got["prefill"], got["reuse"]
        same = a["tokens"] == b["tokens"]
        diff = max((abs(x - y) for s, t in zip(a["logprobs"], b["logprobs"]) for x, y in zip(s, t)), default=0.0)
        print(
            f"{turns:>5}  speed-up reuse/prefill = {b['tok_s'] / a['tok_s']:.2f}x; tokens identical: {same}; "
            f"max |logprob diff| = {diff:.2e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
