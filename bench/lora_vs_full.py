"""LoRA against full fine-tuning on the quickstart task, one run each, side by side.

Both arms run `turnrl train configs/quickstart.yaml` (SmolLM2-135M-Instruct, GRPO, Arithmetic level 1 with the
calculator, 10 steps, held-out success on the test split, greedy) in their own process, one after the other; the
LoRA arm adds ``learner.lora`` (r 16, alpha 32, every linear layer but the head) and a ten times larger learning
rate (2e-4, the usual ratio for adapters). Printed per arm:

    held-out success    step 0 → last step (64 test tasks)
    wall s              the whole run (model load, evaluations, training)
    peak RSS MB         the process's maximum resident memory (os.wait4)
    trainable           parameters in the optimizer (full: all of them; LoRA: the adapters)
    checkpoint MB       OUT_DIR/checkpoint.pt (full: weights + AdamW states; LoRA: adapters + their states)

Usage (nothing else may run on the machine meanwhile; ``TURNRL_DATA_DIR`` as for the quickstart):
    python bench/lora_vs_full.py [--steps 10] [--out runs/bench-lora]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ARMS = {
    "full": [],
    "lora": ["learner.lora={r: 16, alpha: 32, target_modules: all-linear}", "optim.lr=2.0e-4"],
}


def run(arm: str, steps: int, out: Path) -> dict[str, float]:
    folder = out / arm
    cmd = [
        sys.executable,
        "-m",
        "turnrl",
        "train",
        "configs/quickstart.yaml",
        f"steps={steps}",
        f"out_dir={folder}",
        "--no-resume",
        *ARMS[arm],
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{arm}: {' '.join(cmd)} failed:\n{proc.stderr.read()[-3000:]}")
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval_success"] for r in rows if "eval_success" in r]
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=False)
    trainable = sum(
        p.numel() for group in state["optimizer"]["state"].values() for k, p in group.items() if k == "exp_avg"
    )
    return {
        "before": evals[0],
        "after": evals[-1],
        "wall_s": wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "trainable": trainable,
        "checkpoint_mb": (folder / "checkpoint.pt").stat().st_size / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="runs/bench-lora")
    args = parser.parse_args()
    out = Path(args.out)
    results = {arm: run(arm, args.steps, out) for arm in ARMS}
    print(f"quickstart task, {args.steps} GRPO steps, SmolLM2-135M-Instruct on the CPU, one run per arm")
    print(f"{'arm':6} {'held-out success':>18} {'wall s':>8} {'peak RSS MB':>12} {'trainable':>12} {'ckpt MB':>8}")
    for arm, r in results.items():
        print(
            f"{arm:6} {r['before']:>8.3f} → {r['after']:.3f} {r['wall_s']:>8.0f} {r['peak_rss_mb']:>12.0f} "
            f"{r['trainable']:>12,} {r['checkpoint_mb']:>8.1f}"
        )
    full, lora = results["full"], results["lora"]
    print(
        f"LoRA / full: wall {lora['wall_s'] / full['wall_s']:.2f}x, peak RSS {lora['peak_rss_mb'] / full['peak_rss_mb']:.2f}x, "
        f"trainable {lora['trainable'] / full['trainable']:.4f}x, checkpoint {lora['checkpoint_mb'] / full['checkpoint_mb']:.3f}x"
    )
    (out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
