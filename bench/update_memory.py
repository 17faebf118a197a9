"""Peak memory and time of one update on long answers, with and without ``optim.micro_tokens`` and ``optim.lanes``,
side by side.

One PPO update (value head, as T-PPO's and the quickstart's PPO runs have) of SmolLM2-135M-Instruct in float32 on
CPU, over 32 episodes in four groups of eight: a 60-token prompt per group and answers of a long-tailed length
(most 150–400 tokens, one per group ``--long`` tokens: the answer that ran to ``max_new_tokens``). Micro-batches of
8 rows, four per optimizer step, as ``bench/tppo_vs_ppo.py`` trains. ``--episodes FILE`` replays a run's trained
episodes instead (a ``trajectories.jsonl`` of a run's ``train/step-N``: their tokens, masks and rewards as played).
Arms: ``none`` (no token budget), ``budget`` (``--budget``), ``nolanes`` (the budget, and every pass padded to its
longest row: ``optim.lanes=false``). Each arm runs in its own process, one after the other; printed per arm:

    peak RSS MB      the process's maximum resident memory, the model load included
    load MB          the same after loading the model and building the episodes, before the update
    update s         the update (scoring before it, forward and backward passes, optimizer steps)
    value_loss       the reported value loss (the same in both arms: a budget changes how, not what)

Usage (nothing else may run on the machine meanwhile):
    python bench/update_memory.py [--long 1300] [--budget 4096] [--arms none,budget,nolanes]
    python bench/update_memory.py --episodes runs/RUN/train/step-3/trajectories.jsonl --arms nolanes,budget
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time


def episodes(long: int, vocab: int, seed: int = 0) -> list:
    """32 single-turn episodes in four groups; one answer per group is ``long`` tokens."""
    from turnrl.types import Message, Trajectory, Turn

    rng = random.Random(seed)
    out = []
    for g in range(4):
        prompt = [rng.randrange(100, vocab) for _ in range(60)]
        for k in range(8):
            n = long if k == 3 else rng.randrange(150, 400)
            answer = [rng.randrange(100, vocab) for _ in range(n)]
            out.append(
                Trajectory(
                    group_id=f"g{g}",
                    prompt=[Message(role="user", content="?")],
                    turns=[
                        Turn(
                            index=0,
                            action=Message(role="assistant", content="!"),
                            reward=float(k % 2),
                            terminated=True,
                            token_span=(60, 60 + n),
                        )
                    ],
                    terminated=True,
                    token_ids=prompt + answer,
                    loss_mask=[0] * 60 + [1] * n,
                    logprobs=[0.0] * 60 + [-2.0] * n,
                )
            )
    return out


def arm(args: argparse.Namespace) -> None:
    """Child process: load, build, update once; print one JSON line."""
    import torch

    from turnrl.agents.models import load_model
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.run.trainer import learner_of

    torch.manual_seed(0)
    optim = {"lr": 2e-5, "minibatch_size": 8, "grad_accum": 4, "lanes": not args.nolanes}
    if args.budget:
        optim["micro_tokens"] = args.budget
    config = TrainConfig.model_validate(
        {
            "model": args.model,
            "env": {"id": "turnrl/Arithmetic-v0"},
            "algorithm": {"name": "ppo"},
            "optim": optim,
            "rollout": {"prompts_per_step": 4, "group_size": 8, "max_new_tokens": args.long},
        }
    )
    model, tok = load_model(args.model)
    learner = learner_of(config, model, tok)
    if args.episodes:
        from turnrl.types import Trajectory

        with open(args.episodes) as f:
            trajs = [Trajectory.model_validate_json(line) for line in f if line.strip()]
    else:
        trajs = episodes(args.long, len(tok))
    load_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    metrics = learner.update(trajs)
    print(
        json.dumps(
            {
                "load_mb": load_mb,
                "update_s": time.perf_counter() - t0,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "value_loss": metrics["value_loss"],
                "loss": metrics["loss"],
                "rows": len(trajs),
                "tokens": sum(len(t.token_ids or []) for t in trajs),
            }
        ),
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--long", type=int, default=1300, help="the longest answer of each group (tokens)")
    p.add_argument("--budget", type=int, default=4096, help="optim.micro_tokens of the budgeted arm")
    p.add_argument("--arms", default="none,budget", help="which arms to run, in order (none, budget, nolanes)")
    p.add_argument("--episodes", default="", help="a trajectories.jsonl to update on instead of the made-up episodes")
    p.add_argument("--nolanes", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        arm(args)
        return
    for name in args.arms.split(","):
        if name not in ("none", "budget", "nolanes"):
            p.error(f"unknown arm {name!r}: none, budget or nolanes")
        budget = args.budget if name in ("budget", "nolanes") else 0
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--model",
            args.model,
            "--long",
            str(args.long),
            "--budget",
            str(budget),
            "--episodes",
            args.episodes,
        ] + (["--nolanes"] if name == "nolanes" else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name}: exit {proc.returncode} (-9: killed, out of memory)\n{proc.stderr[-1500:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{name:7s} micro_tokens={budget or 'None':>5}  {r['rows']} rows, {r['tokens']} tokens  "
            f"peak RSS {r['peak_mb']:7.0f} MB  "
            f"load {r['load_mb']:6.0f} MB  update {r['update_s']:6.1f} s  value_loss {r['value_loss']:.5f}  loss {r['loss']:.5f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
