"""The DeepSpeed learner group against the local learner: training tokens/s on the same batch, and weight export.

Part 1 — one fixed batch of Trajectories (``--groups`` groups of ``--group-size`` sequences, ``--prompt`` prompt
tokens shared within a group and ``--gen`` generated tokens; random tokens, rewards 0/1 alternating), GRPO,
``--updates`` timed updates after one warm-up update, for: the local learner (this process, ``--threads`` torch
threads), and the learner group with 1 and 2 ranks under ZeRO-2 and ZeRO-3 (each rank ``--threads`` / ranks
threads, so every row uses the same cores). Training tokens are the batch's real tokens (prompt + generated).

Part 2 — weight export: the group's publish after an update (every rank gathers, rank 0's copy goes to Ray's
object store and into the driver's model) for tiny Llamas of growing width and for ``--model``, ZeRO-2 and -3.

Usage (about 10 minutes on 2 cores with SmolLM2-135M-Instruct):
    python bench/learner_group.py [--model smollm2-135m-instruct] [--groups 2] [--group-size 4] [--prompt 96]
        [--gen 96] [--updates 2] [--threads 2] [--out runs/bench-learner-group.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from turnrl.rl.run.trainer import TrainConfig, learner_of
from turnrl.types import Message, Trajectory, Turn


def batch(vocab: int, groups: int, size: int, prompt: int, gen: int, seed: int = 0) -> list[Trajectory]:
    """Fixed token-exact Trajectories: one random prompt per group, random generated tokens, alternating rewards."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        head = [rng.randrange(vocab) for _ in range(prompt)]
        for k in range(size):
            tail = [rng.randrange(vocab) for _ in range(gen)]
            turn = Turn(
                index=0,
                action=Message(role="assistant", content="x"),
                reward=float(k % 2),
                terminated=True,
                token_span=(prompt, prompt + gen),
            )
            out.append(
                Trajectory(
                    group_id=f"g{g}",
                    turns=[turn],
                    terminated=True,
                    token_ids=head + tail,
                    loss_mask=[0] * prompt + [1] * gen,
                    logprobs=[0.0] * prompt + [-8.0] * gen,
                )
            )
    return out


def config(
    out: Path, minibatch: int, backend: str = "torch", ranks: int = 1, stage: int = 2, threads: int = 2
) -> TrainConfig:
    data: dict[str, Any] = {
        "model": "unused",
        "env": {"id": "turnrl/Arithmetic-v0"},
        "algorithm": {"name": "grpo"},
        "optim": {"lr": 1e-6, "minibatch_size": minibatch, "share_prompts": False},
        "out_dir": str(out),
    }
    if backend == "deepspeed":
        data.update(
            placement="ray",
            ray={"num_cpus": float(threads)},
            learner={
                "backend": "deepspeed",
                "ranks": ranks,
                "zero_stage": stage,
                "rank_cpus": threads / ranks,
                "timeout": 900,
            },
        )
    return TrainConfig.model_validate(data)


def timed(learner: Any, trajs: list[Trajectory], updates: int) -> dict[str, float]:
    learner.update(trajs)  # warm-up: first DeepSpeed step, allocator
    t0 = time.perf_counter()
    export = 0.0
    for _ in range(updates):
        m = learner.update(trajs)
        export += m.get("export_s", 0.0)
    seconds = (time.perf_counter() - t0 - export) / updates
    tokens = sum(len(t.token_ids or []) for t in trajs)
    return {"update_s": seconds, "train_tokens_per_s": tokens / seconds, "export_s": export / updates}


def load(name: str) -> tuple[Any, Any]:
    from turnrl.agents.models import load_model

    return load_model(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=96)
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--updates", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/bench-learner-group.json")
    args = ap.parse_args()
    import ray

    from turnrl.agents.tiny import tiny_model, tiny_tokenizer
    from turnrl.rl.placement.learner_group import LearnerGroup

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model, tok = load(args.model)
    params = sum(p.numel() for p in model.parameters())
    trajs = batch(len(tok), args.groups, args.group_size, args.prompt, args.gen)
    mb = args.group_size
    results: dict[str, Any] = {
        "model": args.model,
        "params": params,
        "sequences": len(trajs),
        "tokens": sum(len(t.token_ids or []) for t in trajs),
        "train": {},
        "export": [],
    }
    torch.set_num_threads(args.threads)
    local = learner_of(config(out.parent / "bench-lg", mb), model, tok)
    results["train"]["local"] = timed(local, trajs, args.updates)
    print(f"{args.model} ({params / 1e6:.0f} M parameters), {len(trajs)} sequences × {args.prompt}+{args.gen} tokens")
    print(f"{'learner':<22}{'s/update':>10}{'tokens/s':>10}{'vs local':>10}{'export s':>10}")
    base = results["train"]["local"]["train_tokens_per_s"]

    def row(name: str, r: dict[str, float]) -> None:
        print(
            f"{name:<22}{r['update_s']:>10.2f}{r['train_tokens_per_s']:>10.1f}"
            f"{r['train_tokens_per_s'] / base:>10.2f}{r['export_s']:>10.2f}",
            flush=True,
        )

    row("local (torch)", results["train"]["local"])
    del local
    ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        for ranks in (1, 2):
            for stage in (2, 3):
                name = f"deepspeed {ranks} rank{'s' if ranks > 1 else ''} ZeRO-{stage}"
                group = LearnerGroup(
                    config(out.parent / "bench-lg", mb, "deepspeed", ranks, stage, args.threads),
                    load(args.model)[0],
                    tok,
                )
                try:
                    results["train"][name] = r = timed(group, trajs, args.updates)
                finally:
                    group.close()
                row(name, r)
        print(f"\n{'export (publish)':<34}{'params M':>10}{'ZeRO-2 s':>10}{'ZeRO-3 s':>10}")
        ttok = tiny_tokenizer("chatml")
        sizes: list[tuple[str, Any]] = [
            (f"tiny Llama h={h}", lambda h=h: tiny_model(ttok, hidden=h, layers=4)) for h in (256, 512, 1024)
        ]
        sizes.append((args.model, lambda: load(args.model)[0]))
        for name, make in sizes:
            m = make()
            row_tok = ttok if name.startswith("tiny") else tok
            n = sum(p.numel() for p in m.parameters())
            secs = {}
            for stage in (2, 3):
                group = LearnerGroup(
                    config(out.parent / "bench-lg", mb, "deepspeed", 2, stage, args.threads), m, row_tok
                )
                try:
                    small = batch(len(row_tok), 1, 2, 8, 8)
                    group.update(small)
                    t0 = time.perf_counter()
                    group._published = None  # publish the same version again: the export alone
                    group.export_ref()
                    secs[stage] = time.perf_counter() - t0
                finally:
                    group.close()
            results["export"].append({"model": name, "params": n, "zero2_s": secs[2], "zero3_s": secs[3]})
            print(f"{name:<34}{n / 1e6:>10.1f}{secs[2]:>10.2f}{secs[3]:>10.2f}", flush=True)
    finally:
        ray.shutdown()
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
