"""Training throughput: one turnrl GRPO step vs one TRL GRPOTrainer step, same model, data and batch, one run.

The task is the peer run of the RL-core issue: SmolLM2-135M-Instruct in fp32 on the CPU, prompts "What is A + B?"
(A, B two-digit) or "What is A * B?" (A two-digit, B one-digit) asking for the answer in \\boxed{}, one prompt per
step, 8 completions of at most 48 tokens sampled at temperature 1, one optimizer step on the 8 (no KL, one
iteration, lr 1e-5). Both trainers start from the same weights and see the same prompts in the same order; the
prompt token ids are checked to be identical. A step is timed from the start of generation to the end of the
optimizer step (TRL: ``on_step_begin`` → ``on_step_end``, which brackets generation, scoring, loss, backward and
the optimizer). The first steps of each are warm-up and not counted.

    training tokens/s = (prompt + completion tokens of the step's 8 sequences, no padding) / step seconds
    ratio             = turnrl training tokens/s ÷ TRL training tokens/s            (target ≥ 1.2)

Generated tokens/s and seconds per step are printed too. Sampling makes completion lengths differ between the
two, which is why the figure is per token rather than per step.

Needs TRL: ``pip install -e .[bench]`` (trl 1.16). Usage:
    python bench/train_vs_trl.py [--steps 4] [--warmup 1] [--model smollm2-135m-instruct] [--threads N] [--unshared]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch

import turnrl
from turnrl.agents.models import load_model
from turnrl.envs.builtin.math import MathEnv
from turnrl.envs.core import Task
from turnrl.rl.run.trainer import TrainConfig, Trainer

ENV_ID = "bench/PeerArithmetic-v0"
MAX_NEW, GROUP, LR = 48, 8, 1e-5


def peer_tasks(n: int, seed: int = 0) -> list[Task]:
    """The peer run's problems: two-digit sums and two-digit × one-digit products."""
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        if rng.random() < 0.5:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            q, ans = f"What is {a} + {b}?", a + b
        else:
            a, b = rng.randint(10, 99), rng.randint(2, 9)
            q, ans = f"What is {a} * {b}?", a * b
        tasks.append(Task(id=f"peer-{len(tasks)}", prompt=q, answer=str(ans)))
    return tasks


def peer_env(tasks: list[Task]) -> MathEnv:
    """One answer in \\boxed{}, no system prompt beyond the model's own template."""
    return MathEnv(tasks, system_prompt=None, answer_format="boxed")


def peer_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """The peer run's reward: 1 for the right integer in the last \\boxed{}, plus 0.1 for any \\boxed{}."""
    import re

    out = []
    for completion, ref in zip(completions, answer):
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        boxes = re.findall(r"\\boxed\{([^{}]*)\}", text)
        out.append((1.0 if boxes and boxes[-1].strip() == ref else 0.0) + (0.1 if boxes else 0.0))
    return out


def run_turnrl(model: Any, tokenizer: Any, n_tasks: int, steps: int, share: bool = True) -> list[dict[str, float]]:
    """``steps`` GRPO steps of turnrl's trainer (rollout → advantages → one minibatch update)."""
    cfg = TrainConfig.model_validate(
        {
            "model": "unused",
            "env": {"id": ENV_ID},
            "algorithm": {"name": "grpo"},
            "rollout": {"prompts_per_step": 1, "group_size": GROUP, "max_new_tokens": MAX_NEW, "temperature": 1.0},
            "optim": {"lr": LR, "minibatch_size": GROUP, "grad_accum": 1, "share_prompts": share},
            "steps": steps,
            "out_dir": "/tmp/unused",
        }
    )
    trainer = Trainer(cfg, model=model, tokenizer=tokenizer)
    assert trainer.source.n_tasks == n_tasks
    rows = []
    for step in range(steps):
        t0 = time.perf_counter()
        trajs, info = trainer.source.collect(step)
        t1 = time.perf_counter()
        trainer.learner.update(trajs)
        t2 = time.perf_counter()
        rows.append(
            {
                "seconds": t2 - t0,
                "generate_s": t1 - t0,
                "update_s": t2 - t1,
                "tokens": float(sum(len(t.token_ids) for t in trajs)),
                "generated": info["generated_tokens"],
                "prompt_ids": trajs[0].token_ids[: trajs[0].turns[0].token_span[0]],
            }
        )
    return rows


def run_trl(
    model: Any, tokenizer: Any, prompts: list[list[dict[str, str]]], answers: list[str], steps: int
) -> list[dict[str, float]]:
    """``steps`` GRPOTrainer steps on the same prompts in the same order."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.rows: list[dict[str, float]] = []
            self.t0 = 0.0
            self.last_tokens = 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.rows.append({"seconds": time.perf_counter() - self.t0})

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "num_tokens" in logs and self.rows:
                row = self.rows[-1]
                row["tokens"] = logs["num_tokens"] - self.last_tokens
                self.last_tokens = logs["num_tokens"]
                row["generated"] = logs["completions/mean_length"] * GROUP

    data = Dataset.from_list([{"prompt": p, "answer": a} for p, a in zip(prompts, answers)])
    args = GRPOConfig(
        output_dir="/tmp/trl_bench",
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=steps,
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        gradient_accumulation_steps=1,
        max_completion_length=MAX_NEW,
        temperature=1.0,
        learning_rate=LR,
        beta=0.0,
        num_iterations=1,
        shuffle_dataset=False,
        disable_tqdm=True,
        seed=0,
    )
    timer = Timer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=peer_reward,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.train()
    return timer.rows


def summarize(name: str, rows: list[dict[str, float]]) -> float:
    sec = sum(r["seconds"] for r in rows)
    tok = sum(r["tokens"] for r in rows)
    gen = sum(r["generated"] for r in rows)
    extra = ""
    if "generate_s" in rows[0]:
        extra = (
            f"  (generation {statistics.mean(r['generate_s'] for r in rows):.2f} s, "
            f"update {statistics.mean(r['update_s'] for r in rows):.2f} s)"
        )
    print(
        f"{name:8s} {sec / len(rows):6.2f} s/step  {tok / sec:7.1f} training tok/s  {gen / sec:6.1f} generated tok/s"
        f"  {gen / len(rows) / GROUP:5.1f} tok/completion{extra}"
    )
    return tok / sec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per trainer")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps per trainer")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument(
        "--unshared",
        action="store_true",
        help="also time turnrl with optim.share_prompts off (each row runs its own prompt)",
    )
    args = ap.parse_args()
    try:
        import trl
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -e .[bench]") from None
    torch.set_num_threads(args.threads)
    total = args.warmup + args.steps
    tasks = peer_tasks(total)
    turnrl.register(ENV_ID, lambda **kw: peer_env(tasks))

    env = peer_env(tasks)
    prompts, answers = [], []
    for i in range(total):
        obs, _ = env.reset(options={"index": i})
        prompts.append([{"role": m.role, "content": m.content} for m in obs])
        answers.append(tasks[i].answer)

    print(
        f"SmolLM2 fp32, {args.threads} threads, TRL {trl.__version__}, torch {torch.__version__}; "
        f"1 prompt × {GROUP} completions ≤ {MAX_NEW} tokens per step; {args.warmup} warm-up + {args.steps} timed steps"
    )
    torch.manual_seed(0)
    model, tok = load_model(args.model)
    ours = run_turnrl(model, tok, total, total)
    del model
    plain = None
    if args.unshared:
        torch.manual_seed(0)
        model, tok = load_model(args.model)
        plain = run_turnrl(model, tok, total, total, share=False)
        del model
    torch.manual_seed(0)
    model, tok = load_model(args.model)
    theirs = run_trl(model, tok, prompts, answers, total)

    for k, row in enumerate(ours):  # the same prompt tokens reach both models
        expected = tok.apply_chat_template(prompts[k], add_generation_prompt=True, tokenize=True)
        expected = expected["input_ids"] if hasattr(expected, "keys") else expected
        assert list(row["prompt_ids"]) == list(expected), f"step {k}: prompt tokens differ from the chat template's"
    a = summarize("turnrl", ours[args.warmup :])
    if plain is not None:
        c = summarize("unshared", plain[args.warmup :])
    b = summarize("TRL", theirs[args.warmup :])
    if plain is not None:
        print(f"ratio turnrl unshared / TRL: {c / b:.2f}×")
    print(f"ratio turnrl / TRL training tokens/s: {a / b:.2f}×  (target ≥ 1.2)")


if __name__ == "__main__":
    main()
