"""Learning, not just speed: turnrl's GRPO and TRL's GRPOTrainer on the same task for the same number of steps.

SmolLM2-135M-Instruct (fp32, CPU) on ``turnrl/Arithmetic-v0`` (default level 1; ``--level 2 3`` for two-digit
sums/differences and products/quotients, the problems of the RL-core issue's peer run), answers graded by
turnrl's math verifier with the lenient ``auto`` format, in both trainers. Each step: 4 training problems × 8
samples of ≤ 48 tokens at temperature 0.8, one AdamW step (lr 2e-5, constant, grad-norm clip 1) on the 32 with
group-normalized advantages and per-sequence token-mean loss (TRL ``loss_type="grpo"``); no KL. Both see the
same problems in the same order from the same initial weights. The held-out measure is the same for the base
model and both trained models: turnrl's greedy evaluation on the disjoint test split.

Prints held-out success before / after each, and the wall time of the training steps (evaluation excluded).

Needs TRL: ``pip install -e .[bench]``. Usage:
    python bench/learn_vs_trl.py [--steps 10] [--level 1] [--eval-tasks 64] [--out runs/learn_vs_trl]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.models import load_model
from turnrl.rl.run.evaluate import evaluate
from turnrl.rl.run.trainer import TrainConfig, Trainer
from turnrl.verifiers.math import verify

PROMPTS, GROUP, MAX_NEW, TEMP, LR = 4, 8, 48, 0.8, 2e-5


def held_out(model: Any, tok: Any, env_kwargs: dict[str, Any], n: int) -> float:
    """turnrl's greedy held-out success (the same measure for every model)."""
    m = evaluate(
        HFAgent(model, tok, batch_size=64),
        "turnrl/Arithmetic-v0",
        env_kwargs={**env_kwargs, "split": "test"},
        limit=n,
        params=SamplingParams(temperature=0.0, max_new_tokens=MAX_NEW),
        batch_episodes=64,
    )
    return m["accuracy"]


def train_turnrl(model: Any, tok: Any, env_kwargs: dict[str, Any], steps: int, out: Path) -> float:
    cfg = TrainConfig.model_validate(
        {
            "model": "unused",
            "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {**env_kwargs, "split": "train"}},
            "algorithm": {"name": "grpo"},
            "rollout": {
                "prompts_per_step": PROMPTS,
                "group_size": GROUP,
                "max_new_tokens": MAX_NEW,
                "temperature": TEMP,
            },
            "optim": {"lr": LR, "minibatch_size": GROUP, "grad_accum": PROMPTS},
            "steps": steps,
            "out_dir": str(out),
        }
    )
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    t0 = time.perf_counter()
    for step in range(steps):
        trajs, info = trainer.source.collect(step)
        trainer.learner.update(trajs)
        print(f"  turnrl step {step + 1}: success {info['success']:.2f}", flush=True)
    return time.perf_counter() - t0


def train_trl(model: Any, tok: Any, env_kwargs: dict[str, Any], steps: int, out: Path) -> float:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    env = turnrl.make("turnrl/Arithmetic-v0", **env_kwargs, split="train")
    rows = []
    for i in range(steps * PROMPTS):  # the problems turnrl's data cursor walks, in the same order
        obs, _ = env.reset(options={"index": i})
        rows.append({"prompt": [{"role": m.role, "content": m.content} for m in obs], "answer": env.task.answer})
    fmt = env_kwargs.get("answer_format", "auto")

    def reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        return [verify(c[-1]["content"], a, answer_format=fmt).score for c, a in zip(completions, answer)]

    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=steps,
        per_device_train_batch_size=GROUP,
        gradient_accumulation_steps=PROMPTS,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        temperature=TEMP,
        learning_rate=LR,
        lr_scheduler_type="constant",
        beta=0.0,
        num_iterations=1,
        loss_type="grpo",
        scale_rewards="group",
        max_grad_norm=1.0,
        shuffle_dataset=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
    )
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--level", type=int, nargs="+", default=[1])
    ap.add_argument("--eval-tasks", type=int, default=64)
    ap.add_argument("--out", default="runs/learn_vs_trl")
    args = ap.parse_args()
    try:
        import trl
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -e .[bench]") from None
    env_kwargs = {"level": args.level, "answer_format": "auto"}
    out = Path(args.out)
    results: dict[str, Any] = {
        "steps": args.steps,
        "level": args.level,
        "eval_tasks": args.eval_tasks,
        "trl": trl.__version__,
    }

    model, tok = load_model(args.model)
    results["before"] = held_out(model, tok, env_kwargs, args.eval_tasks)
    print(f"held-out before: {results['before']:.3f}", flush=True)
    torch.manual_seed(0)
    results["turnrl_train_s"] = train_turnrl(model, tok, env_kwargs, args.steps, out / "turnrl")
    results["turnrl_after"] = held_out(model, tok, env_kwargs, args.eval_tasks)
    print(f"turnrl: held-out {results['turnrl_after']:.3f} after {results['turnrl_train_s']:.0f} s", flush=True)
    del model

    model, tok = load_model(args.model)
    torch.manual_seed(0)
    results["trl_train_s"] = train_trl(model, tok, env_kwargs, args.steps, out / "trl")
    model.eval()
    results["trl_after"] = held_out(model, tok, env_kwargs, args.eval_tasks)
    print(f"TRL:    held-out {results['trl_after']:.3f} after {results['trl_train_s']:.0f} s", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(
        f"\nArithmetic level {args.level}, {args.steps} steps of {PROMPTS} x {GROUP}, held-out {args.eval_tasks} "
        f"test problems (greedy):\n  base {results['before']:.1%}\n"
        f"  turnrl {results['turnrl_after']:.1%} ({results['turnrl_train_s']:.0f} s of training)\n"
        f"  TRL    {results['trl_after']:.1%} ({results['trl_train_s']:.0f} s of training)"
    )


if __name__ == "__main__":
    main()
