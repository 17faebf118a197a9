"""Training steps with cross-turn KV reuse and continuous batching vs re-prefilling, side by side in one run.

    python bench/kv_train.py --steps 3                 # the quickstart (≤ 2 turns) and a 3-turn variant

For each config — the quickstart (GRPO, SmolLM2-135M-Instruct, Arithmetic with the calculator, up to 2 turns) and
the same with up to 3 turns (``retry``: a wrong answer gets another try) — it trains ``--steps`` steps (after one
warm-up step) from the same weights in three modes: ``prefill`` (``rollout.kv_cache_mb=0``: every turn runs the
whole conversation through the model), ``reuse`` (each episode's KV cache kept between its turns) and ``reuse +
continuous`` (``rollout.continuous_batching``: an episode's next turn joins the running batch as soon as its
environment answered). Sampling is batch-invariant (``rollout.seed_per_episode``), so the modes play the same
episodes up to float rounding. Printed: seconds per step (rollout + update), rollout seconds, steps/s and the ratios
against ``prefill``, and the cache hit share.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

MODES = {"prefill": ["rollout.kv_cache_mb=0"], "reuse": [], "reuse + continuous": ["rollout.continuous_batching=true"]}
CONFIGS = {"quickstart (≤2 turns)": [], "3 turns": ["env.kwargs.max_turns=3", "env.kwargs.retry=true"]}


def run(extra: list[str], steps: int, model: str) -> dict[str, float]:
    """Train ``steps`` steps after a warm-up; the mean step and rollout seconds and the cache hit share."""
    from turnrl.agents import make_agent
    from turnrl.rl.config import load_config
    from turnrl.rl.run.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(
            "configs/quickstart.yaml",
            [f"steps={steps + 1}", "rollout.seed_per_episode=true", f"model={model}", f"out_dir={out}", *extra],
        )
        agent = make_agent(model, batch_size=32)
        torch.manual_seed(0)
        trainer = Trainer(cfg, model=agent.model, tokenizer=agent.tokenizer)
        rows = []
        try:
            for step in range(steps + 1):
                s0 = time.perf_counter()
                trajs, info = trainer.source.collect(step)
                s1 = time.perf_counter()
                trainer.learner.update(trajs)
                rows.append(
                    {
                        "rollout_s": s1 - s0,
                        "step_s": time.perf_counter() - s0,
                        "hit": info.get("cache_hit_share", 0.0),
                        "turns": info["turns"],
                    }
                )
                print(
                    f"    step {step}: rollout {s1 - s0:.1f} s, step {rows[-1]['step_s']:.1f} s, turns "
                    f"{info['turns']:.2f}, cache hit share {rows[-1]['hit']:.2f}",
                    flush=True,
                )
        finally:
            trainer.close()
    rows = rows[1:]
    return {k: statistics.mean(r[k] for r in rows) for k in ("rollout_s", "step_s", "hit", "turns")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    table = []
    for config, extra in CONFIGS.items():
        base = None
        for mode, opts in MODES.items():
            print(f"{config} / {mode}", flush=True)
            r = run(extra + opts, args.steps, args.model)
            base = base or r
            table.append((config, mode, r, base))
    print(
        f"\n{'config':<22}{'mode':<20}{'s/step':>8}{'steps/s':>9}{'× prefill':>10}{'rollout s':>10}"
        f"{'× prefill':>10}{'turns':>7}{'hit share':>10}"
    )
    for config, mode, r, base in table:
        print(
            f"{config:<22}{mode:<20}{r['step_s']:>8.1f}{1 / r['step_s']:>9.3f}{base['step_s'] / r['step_s']:>10.2f}"
            f"{r['rollout_s']:>10.1f}{base['rollout_s'] / r['rollout_s']:>10.2f}{r['turns']:>7.2f}{r['hit']:>10.2f}"
        )


if __name__ == "__main__":
    main()
