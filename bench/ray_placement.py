"""Ray placement vs local on the quickstart: rollout throughput and per-step overhead, side by side in one run.

    python bench/ray_placement.py --steps 3

For each placement (local; ray with 1 worker; ray with 2 workers) it trains SmolLM2-135M-Instruct on the quickstart
config (GRPO, 4 prompts × 8 samples, 48 new tokens) for ``--steps`` steps from the same weights, with
batch-invariant sampling (``rollout.seed_per_episode``) so that all three play the same episodes, and prints
generated tokens/s of the rollouts and seconds per step (rollout + update; held-out evaluation excluded), and the
ratios against local. The Ray cluster is local (``num_cpus`` = this machine's cores) and the workers share them
(``worker_cpus`` = cores / workers; a worker runs that many torch threads), as the local placement uses them all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch


def run(placement: str, workers: int, steps: int, model: str) -> dict[str, float]:
    """Train ``steps`` steps; return the mean rollout throughput and step time (the first step excluded)."""
    from turnrl.agents import make_agent
    from turnrl.rl.run.config import load_config
    from turnrl.rl.run.trainer import Trainer

    overrides = [f"steps={steps + 1}", "rollout.seed_per_episode=true", f"placement={placement}", f"model={model}"]
    if placement == "ray":
        # the same CPUs in every placement: the workers share this machine's cores (rollouts and updates alternate)
        overrides += [f"ray.rollout_workers={workers}", f"ray.worker_cpus={(os.cpu_count() or 1) / workers}"]
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config("configs/quickstart.yaml", overrides + [f"out_dir={out}"])
        agent = make_agent(model, batch_size=32)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, model=agent.model, tokenizer=agent.tokenizer)
        start_s = time.perf_counter() - t0
        rows = []
        try:
            for step in range(steps + 1):
                s0 = time.perf_counter()
                trajs, info = trainer.source.collect(step)
                s1 = time.perf_counter()
                trainer.learner.update(trajs)
                rows.append({"rollout_s": s1 - s0, "step_s": time.perf_counter() - s0,
                             "tokens": info["generated_tokens"], "success": info["success"]})
                print(f"  {placement}/{workers} step {step}: rollout {s1 - s0:.1f} s, step {rows[-1]['step_s']:.1f} s, "
                      f"{info['generated_tokens']:.0f} tokens, success {info['success']:.3f}", flush=True)
        finally:
            trainer.close()
    rows = rows[1:]  # the first step warms up (worker processes, caches)
    return {"start_s": start_s, "tok_s": sum(r["tokens"] for r in rows) / sum(r["rollout_s"] for r in rows),
            "step_s": statistics.mean(r["step_s"] for r in rows), "success": statistics.mean(r["success"] for r in rows)}


def main() -> None:
    """Run the three placements and print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--only", choices=["local", "ray"], help="run one placement (ratios need both)")
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {}
    for placement, workers in (("local", 0), ("ray", 1), ("ray", 2)):
        if args.only in (None, placement):
            results[(placement, workers)] = run(placement, workers, args.steps, args.model)
    base = results.get(("local", 0), next(iter(results.values())))
    print(f"\n{'placement':<12}{'start s':>9}{'gen tok/s':>11}{'× local':>9}{'s/step':>9}{'× local':>9}{'success':>9}")
    for (placement, workers), r in results.items():
        name = placement if placement == "local" else f"ray × {workers}"
        print(f"{name:<12}{r['start_s']:>9.1f}{r['tok_s']:>11.1f}{r['tok_s'] / base['tok_s']:>9.2f}"
              f"{r['step_s']:>9.1f}{r['step_s'] / base['step_s']:>9.2f}{r['success']:>9.3f}")


if __name__ == "__main__":
    main()
