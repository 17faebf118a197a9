"""Games per second of a two-seat game, played and trained three ways side by side: one shared policy in both seats,
two LoRA policies on one base model, two whole models (``multi_agent.policies`` without LoRA).

Every arm is a real run of the trainer on ``turnrl/TicTacToe-v0`` with SmolLM2-135M-Instruct (GRPO, the same
``--games`` per step, the same sampling settings and seeds), for ``--steps`` steps after a warm-up step. Printed per
arm, with the ratio to the shared arm:

    games/s        games played per second of a whole step (rollout and update)
    rollout s      seconds of a step spent playing
    update s       seconds of a step spent in the learners
    params MB      trainable weights (what one policy's update changes; under LoRA what a worker would be sent)
    resident MB    every policy's weights in memory together (shared frozen tensors counted once)

With ``--placement ray`` the games are played on 2 Ray rollout workers (one CPU each; the learner in the driver) and
each arm also prints what one weight push sends every worker after an update:

    push MB/policy   the weights of one policy a push carries (under LoRA its adapters alone)
    push s           one push of every policy's weights to both workers (object store put, fetch, load)

Usage (nothing else may run on the machine meanwhile):
    python bench/multiagent.py [--steps 2] [--games 8] [--placement local|ray]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from turnrl.rl.config import TrainConfig
from turnrl.rl.placement.parameters import to_shared
from turnrl.rl.run.trainer import Trainer

LORA = {"r": 16, "alpha": 32, "target_modules": "all-linear"}
TWO = {"X": {"seats": ["x"]}, "O": {"seats": ["o"]}}


def config(out: str, arm: str, steps: int, games: int, placement: str = "local") -> TrainConfig:
    ma: dict = {"opponent": "self"}
    learner: dict = {}
    if arm in ("two LoRA", "two full"):
        ma = {"policies": TWO}
    if arm in ("shared LoRA", "two LoRA"):
        learner = {"lora": LORA}
    return TrainConfig.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "env": {"id": "turnrl/TicTacToe-v0"},
            "algorithm": {"name": "grpo"},
            "rollout": {
                "prompts_per_step": max(1, games // 4),
                "group_size": 4,
                "max_new_tokens": 24,
                "temperature": 1.0,
                "max_context": 1024,
            },
            "learner": learner,
            "multi_agent": ma,
            "steps": steps + 1,
            "eval_every": 0,
            "eval_tasks": 1,
            "out_dir": out,
            "save_trajectories": False,
            "seed": 0,
            "placement": placement,
            **({"ray": {"rollout_workers": 2, "worker_cpus": 1, "start_timeout": 300}} if placement == "ray" else {}),
        }
    )


def resident_mb(models: list[torch.nn.Module]) -> float:
    seen, total = set(), 0
    for m in models:
        for p in m.parameters():
            if p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * p.element_size()
    return total / 2**20


def push(trainer: Trainer) -> tuple[float, float]:
    """``(MB of one policy's weights in a push, seconds of one push of every policy to every worker)``: the learners'
    version moved on by one, as after an update, and the runner's push timed to the workers' acknowledgement."""
    learners = getattr(trainer.learner, "learners", {"policy": trainer.learner})
    _, state = trainer.learner.export_for_workers(lambda s: s)
    sent = to_shared(state)  # what a push puts in Ray's object store: a tied tensor (the embedding) once
    mb = sum(array.nbytes for array, _ in sent.values() if not isinstance(array, str)) / len(learners) / 2**20
    for learner in learners.values():
        learner.version += 1
    t0 = time.perf_counter()
    trainer.runner.sync()
    return mb, time.perf_counter() - t0


def run(arm: str, steps: int, games: int, placement: str = "local") -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config(out, arm, steps, games, placement))
        trainer.driver.evaluate = lambda path: {}  # the steps alone are timed (no held-out games)
        try:
            history = trainer.train()[2:]  # after step 0's record and the warm-up step
            pushed = push(trainer) if placement == "ray" else {}
        finally:
            trainer.close()
        models = [a.model for a in trainer.policies.values()] or [trainer.model]
        trainable = sum(p.numel() * p.element_size() for p in models[0].parameters() if p.requires_grad)
        per_step = [h["seconds"] for h in history]
        rollout = [h["generate_s"] for h in history]
        played = [h["rollout_episodes"] / 2 for h in history]  # every arm trains both seats' views of a game
        return {
            "games/s": statistics.mean(g / s for g, s in zip(played, per_step)),
            "rollout s": statistics.mean(rollout),
            "update s": statistics.mean(s - r for s, r in zip(per_step, rollout)),
            "params MB": trainable / 2**20,
            "resident MB": resident_mb(models),
            **({"push MB/policy": pushed[0], "push s": pushed[1]} if pushed else {}),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--games", type=int, default=8)
    ap.add_argument("--placement", choices=["local", "ray"], default="local")
    args = ap.parse_args()
    torch.set_num_threads(2)
    arms = ["shared", "shared LoRA", "two LoRA", "two full"]
    results = {}
    for arm in arms:
        t0 = time.perf_counter()
        results[arm] = run(arm, args.steps, args.games, args.placement)
        print(f"{arm}: done in {time.perf_counter() - t0:.0f} s", flush=True)
    keys = ["games/s", "rollout s", "update s", "params MB", "resident MB"]
    if args.placement == "ray":
        keys += ["push MB/policy", "push s"]
    print(f"\n{'arm':<12}" + "".join(f"{k:>16}" for k in keys) + f"{'games/s ratio':>16}")
    for arm in arms:
        r = results[arm]
        ratio = r["games/s"] / results["shared"]["games/s"]
        print(f"{arm:<12}" + "".join(f"{r[k]:>16.2f}" for k in keys) + f"{ratio:>16.2f}")


if __name__ == "__main__":
    main()
