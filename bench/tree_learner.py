"""A learner step on the leaves of trees: prefix-tree passes (``optim.prefix_tree``) against the same leaves as
separate rows, side by side (issue 79; goal ≥ 2× faster on 4-turn episodes, peak memory ≤ 1.1×).

One GRPO update with the tree estimator (``algorithm.advantage: tree``) of SmolLM2-135M-Instruct in float32 on CPU,
over ``--tasks`` trees of 4 leaves (2 children after turn 1 and after turn 2) of ``--turns``-turn episodes: a
``--prompt``-token prompt, then per turn ``--said`` generated tokens (± a quarter) and a ``--seen``-token
observation. Micro-batches of 8 rows (two whole trees), two per optimizer step. Arms, each in its own process:

    rows     the leaves as separate rows, as every run without trees trains (optim.share_prompts on: a tree's
             prompt already runs once; what runs again is the turns before each branch)
    tree     optim.prefix_tree: the trunk and each inner node's turns run once

Printed per arm: the update's seconds, the tokens its forward passes ran (``pass_tokens``), the process's peak
resident memory and the loss (the same in both arms: the sharing changes how, not what). The ratio line compares
them. Nothing else may run on the machine meanwhile. The model is loaded as a run loads its policy
(``turnrl.agents.make_agent``: a built-in name, a path, or ``tiny``), which also makes transformers' ``sdpa`` attention
the CPU grouped-query one for passes without gradients in the process, as in a run (the same results; the figures of
2026-12-05 on docs/results/speed.md were measured before this, with the model loaded alone).

Usage: python bench/tree_learner.py [--tasks 4] [--turns 4] [--prompt 150] [--said 40] [--seen 60] [--arms rows,tree]
       python bench/tree_learner.py --model tiny --tasks 2     (a tiny random model: that it runs, in seconds)
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time


def trees(args: argparse.Namespace, vocab: int) -> list:
    """``args.tasks`` trees of 4 leaves; siblings share every token up to their branch turn."""
    from turnrl.types import Message, Trajectory, Turn

    rng = random.Random(0)

    def toks(n: int) -> list[int]:
        return [rng.randrange(100, vocab) for _ in range(n)]

    def turn() -> tuple[list[int], list[int]]:
        return toks(rng.randrange(args.said * 3 // 4, args.said * 5 // 4 + 1)), toks(args.seen)

    out = []
    for task in range(args.tasks):
        prompt, first = toks(args.prompt), turn()
        for a in range(2):
            second = turn()
            for b in range(2):
                played = [first, second] + [turn() for _ in range(args.turns - 2)]
                tokens, mask, turns = list(prompt), [0] * len(prompt), []
                for i, (said, seen) in enumerate(played):
                    start = len(tokens)
                    seen = seen if i < args.turns - 1 else []
                    tokens += said + seen
                    mask += [1] * len(said) + [0] * len(seen)
                    turns.append(
                        Turn(
                            index=i,
                            action=Message(role="assistant", content="!"),
                            reward=float(rng.random() < 0.4) if i == args.turns - 1 else 0.0,
                            token_span=(start, start + len(said)),
                        )
                    )
                root = f"t{task}"
                out.append(
                    Trajectory(
                        group_id=root,
                        prompt=[Message(role="user", content="?")],
                        turns=turns,
                        terminated=True,
                        token_ids=tokens,
                        loss_mask=mask,
                        logprobs=[-2.0 if m else 0.0 for m in mask],
                        metadata={
                            "tree": {
                                "root": root,
                                "path": [root, f"{root}.{a}", f"{root}.{a}.{b}"],
                                "branch_turns": [1, 2],
                            }
                        },
                    )
                )
    return out


def arm(args: argparse.Namespace) -> None:
    """Child process: load, build, update once; print one JSON line."""
    import torch

    from turnrl.agents import make_agent
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.run.trainer import learner_of

    torch.manual_seed(0)
    config = TrainConfig.model_validate(
        {
            "model": args.model,
            "env": {"id": "turnrl/Arithmetic-v0"},
            "algorithm": {"name": "grpo", "advantage": "tree"},
            "optim": {"lr": 2e-5, "minibatch_size": 8, "grad_accum": 2, "prefix_tree": args.arm == "tree"},
            "rollout": {
                "prompts_per_step": args.tasks,
                "group_size": 4,
                "max_new_tokens": args.said * 2,
                "tree": {"branches": [{"turn": 1, "children": 2}, {"turn": 2, "children": 2}]},
            },
        }
    )
    # a built-in name, a path, or tiny: a tiny random model (checks the benchmark runs, not the figures)
    agent = make_agent("tiny:chatml" if args.model == "tiny" else args.model, batch_size=1)
    model, tok = agent.model, agent.tokenizer
    learner = learner_of(config, model, tok)
    trajs = trees(args, len(tok))
    load_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    metrics = learner.update(trajs)
    print(
        json.dumps(
            {
                "update_s": time.perf_counter() - t0,
                "load_mb": load_mb,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "pass_tokens": metrics["pass_tokens"],
                "loss": metrics["loss"],
                "grad_norm": metrics["grad_norm"],
                "rows": len(trajs),
                "tokens": sum(len(t.token_ids or []) for t in trajs),
            }
        ),
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="a model name or path, or tiny (a random one)")
    p.add_argument("--tasks", type=int, default=4, help="trees (4 leaves each)")
    p.add_argument("--turns", type=int, default=4, help="turns per episode (at least 3: branches after 1 and 2)")
    p.add_argument("--prompt", type=int, default=150, help="prompt tokens")
    p.add_argument("--said", type=int, default=40, help="generated tokens per turn (± a quarter)")
    p.add_argument("--seen", type=int, default=60, help="observation tokens after each turn but the last")
    p.add_argument("--arms", default="rows,tree")
    p.add_argument("--arm", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.turns < 3:
        p.error("--turns must be at least 3 (the trees branch after turns 1 and 2)")
    if args.arm:
        arm(args)
        return
    results = {}
    for name in args.arms.split(","):
        if name not in ("rows", "tree"):
            p.error(f"unknown arm {name!r}: rows or tree")
        cmd = [sys.executable, __file__, "--arm", name] + [
            f"--{k}={getattr(args, k)}" for k in ("model", "tasks", "turns", "prompt", "said", "seen")
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name}: exit {proc.returncode} (-9: killed, out of memory)\n{proc.stderr[-1500:]}", flush=True)
            continue
        r = results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{name:5s} {r['rows']} rows, {r['tokens']} tokens  update {r['update_s']:6.1f} s  "
            f"pass_tokens {r['pass_tokens']:7.0f}  peak RSS {r['peak_mb']:6.0f} MB (load {r['load_mb']:5.0f})  "
            f"loss {r['loss']:.6f}  grad_norm {r['grad_norm']:.6f}",
            flush=True,
        )
    if len(results) == 2:
        rows, tree = results["rows"], results["tree"]
        print(
            f"tree / rows: speed {rows['update_s'] / tree['update_s']:.2f}x  "
            f"tokens {tree['pass_tokens'] / rows['pass_tokens']:.2f}x  "
            f"peak memory {tree['peak_mb'] / rows['peak_mb']:.2f}x  "
            f"update memory {(tree['peak_mb'] - tree['load_mb']) / max(rows['peak_mb'] - rows['load_mb'], 1):.2f}x"
        )


if __name__ == "__main__":
    main()
