"""The GPU path end to end (run by ``scripts/test_gpu.sh`` on a machine with a CUDA GPU).

The quickstart config with vLLM rollout workers (``ray.rollout_backend: vllm``) and a one-GPU DeepSpeed learner
(``learner.backend: deepspeed``, NCCL), both on the same GPU (fractional Ray GPUs). After training it pushes the
last version to the workers and checks that the weights arrived: the vLLM worker's log-probabilities of a fixed
sequence equal the learner's (fp32 on both sides). Prints generation and training throughput, the weight export
time and the GPU memory in use.

Runs once per weight transport (``learner.weight_sync``): through Ray's object store, and, on a machine with two
GPUs or more, streamed over NCCL into vLLM with the learner and the worker on GPUs of their own (NCCL refuses two
ranks on one device, and vLLM's NCCL transfer is for separate GPUs). A run that fails is reported and the next one
runs.

Usage: python bench/gpu_check.py [--steps 3] [--out runs/gpu-check] [--weight-sync object_store nccl]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="runs/gpu-check")
    ap.add_argument(
        "--weight-sync",
        nargs="+",
        default=None,
        help="the weight transports to check, one short run each (default: object_store, and nccl "
        "where there are two GPUs or more)",
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the GPU path cannot run here", file=sys.stderr)
        return 2
    gpus = torch.cuda.device_count()
    modes = args.weight_sync or (["object_store", "nccl"] if gpus >= 2 else ["object_store"])
    if "nccl" in modes and gpus < 2:
        print(
            f"--weight-sync nccl needs two GPUs (this machine has {gpus}): NCCL refuses two ranks on one device",
            file=sys.stderr,
        )
        return 2
    import ray

    ray.init(num_cpus=4, num_gpus=gpus, include_dashboard=False, log_to_driver=True)
    failed = 0
    for mode in modes:
        try:
            failed += not check(mode, args.steps, f"{args.out}-{mode}")
        except Exception as e:  # report it and check the next transport
            print(f"weights reached vLLM ({mode}): NO — {type(e).__name__}: {e}", flush=True)
            failed += 1
    ray.shutdown()
    return 1 if failed else 0


def check(mode: str, steps: int, out: str) -> bool:
    """One short training run with weight transport ``mode``; True when the weights reached vLLM."""
    import ray

    from turnrl.rl.run.trainer import Trainer, load_config

    own = mode == "nccl"  # NCCL: the learner and the worker on GPUs of their own; else both share GPU 0
    cfg = load_config(
        "configs/quickstart.yaml",
        [
            f"steps={steps}",
            "eval_tasks=16",
            f"out_dir={out}",
            "placement=ray",
            f"learner.weight_sync={mode}",
            "learner.backend=deepspeed",
            "learner.ranks=1",
            f"learner.rank_gpus={1 if own else 0.5}",
            "learner.rank_cpus=1",
            "ray.rollout_workers=1",
            "ray.rollout_backend=vllm",
            f"ray.worker_gpus={1 if own else 0.4}",
            "ray.worker_cpus=1",
            "ray.start_timeout=600",
            "ray.vllm={gpu_memory_utilization: 0.3, dtype: float32, enforce_eager: true, max_model_len: 2048}",
        ],
    )
    trainer = Trainer(cfg)
    try:
        history = trainer.train()
        version = trainer.runner.sync()
        tok = trainer.tokenizer
        probe = [tok.encode("The capital of France is Paris. 12 + 30 = 42.", add_special_tokens=False)]
        learner = trainer.learner.score(probe)[0]
        held, worker = ray.get(trainer.runner.workers[0].score.remote(probe), timeout=120)
        diff = max(abs(a - b) for a, b in zip(learner[1:], worker[0][1:]))
    finally:
        trainer.close()
    steps = history[1:]
    gen = sum(h["generated_tokens"] for h in steps) / sum(h["generate_s"] for h in steps)
    train = sum(h["train_tokens"] for h in steps) / sum(h["seconds"] - h["generate_s"] for h in steps)
    mem = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    report = {
        "weight_sync": mode,
        "version": version,
        "worker_version": held,
        "max_logprob_diff": diff,
        "generate_tokens_per_s": gen,
        "train_tokens_per_s": train,
        "export_s": [h.get("export_s") for h in steps],
        "held_out": [h.get("eval_success") for h in history if "eval_success" in h],
        "gpu": mem,
    }
    print(json.dumps(report, indent=1))
    ok = held == version and diff < 1e-3
    print(f"weights reached vLLM ({mode}): " + ("yes" if ok else "NO"), flush=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
