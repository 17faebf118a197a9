"""What reaches a rollout worker after each update: the whole policy, or the LoRA adapters alone, side by side.

Both arms build the real pieces of ``placement: ray`` (SmolLM2-135M-Instruct, a :class:`~turnrl.rl.core.learner.
Learner`, a :class:`~turnrl.rl.placement.ray.RayRunner` with one HF rollout worker on a local Ray cluster), then
``--updates`` times change the trained weights as an optimizer step would and time ``runner.sync()``: the export,
the object store, and the worker's load of the new version (it answers with the version it holds, which is checked).
The LoRA arm wraps the policy in adapters first (r 16, alpha 32, every linear layer but the head). Printed per arm:

    sent MB     what one update puts in the object store (full: every weight; LoRA: the adapters)
    sync s      the median time of one push, export to the worker's acknowledged load
    match       the worker's log-probabilities of a fixed sequence equal the learner's after the last push

Usage (nothing else may run on the machine meanwhile):
    python bench/lora_sync.py [--updates 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from turnrl.agents.models import load_model
from turnrl.lora import apply_lora, is_lora
from turnrl.rl.config import TrainConfig
from turnrl.rl.core.forward import sequence_logprobs
from turnrl.rl.placement.ray import RayRunner
from turnrl.rl.run.trainer import learner_of

LORA = {"r": 16, "alpha": 32, "target_modules": "all-linear"}
PROBE = [[1, 22, 333, 4444, 5555, 66, 7, 888]]


def arm(lora: bool, updates: int) -> dict[str, float]:
    import ray

    model, tok = load_model("smollm2-135m-instruct")
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig.model_validate(
            {
                "model": "smollm2-135m-instruct",
                "placement": "ray",
                "out_dir": out,
                "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
                "ray": {"rollout_workers": 1, "worker_cpus": 1, "start_timeout": 300},
                "learner": {"lora": LORA if lora else None},
            }
        )
        if lora:
            model = apply_lora(model, cfg.learner.lora)
        learner = learner_of(cfg, model, tok)
        runner = RayRunner(cfg, learner, tok)
        try:
            times, sent = [], 0.0
            for _ in range(updates):
                with torch.no_grad():  # what an optimizer step does: every trained weight moves
                    for p in model.parameters():
                        if p.requires_grad:
                            p.add_(torch.randn_like(p), alpha=1e-3)
                learner.version += 1
                t0 = time.perf_counter()
                assert runner.sync() == learner.version
                times.append(time.perf_counter() - t0)
                state = ray.get(runner.pushed[1])
                sent = sum(array.nbytes for array, _ in state.values() if not isinstance(array, str)) / 2**20
            held = ray.get(runner.workers[0].score.remote(PROBE), timeout=60)[1]
            want = sequence_logprobs(model, PROBE)
            match = max(abs(a - b) for a, b in zip(held[0], want[0])) < 1e-4
        finally:
            runner.close()
    return {"sent MB": sent, "sync s": statistics.median(times), "match": float(match), "lora": float(is_lora(model))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5)
    args = parser.parse_args()
    rows = {"full": arm(False, args.updates), "lora": arm(True, args.updates)}
    print(f"{'arm':6} {'sent MB':>9} {'sync s':>8} {'match':>6}")
    for name, r in rows.items():
        print(f"{name:6} {r['sent MB']:9.1f} {r['sync s']:8.3f} {'yes' if r['match'] else 'NO':>6}")
    full, lora = rows["full"], rows["lora"]
    print(
        f"LoRA / full: {lora['sent MB'] / full['sent MB']:.3f}x the bytes, {lora['sync s'] / full['sync s']:.2f}x "
        "the sync time"
    )


if __name__ == "__main__":
    main()
