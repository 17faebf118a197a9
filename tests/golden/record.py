"""Record the golden metrics trace of tiny training runs (``python tests/golden/record.py``).

First recorded with the trainer before the learner/driver split (commit b60216b, on an AMD EPYC host); re-recorded
into ``trace.json`` on 2026-11-27 when sampling moved to inverse transform (tests/rl/test_golden.py says why); ``tests/rl/test_golden.py`` checks that the current code reproduces it. Float reductions differ in the
last bits between CPUs, so the test compares within a relative 1e-4 (and the parameters by per-tensor sums and
norms); ``params`` (a digest of the exact bytes) is kept for a bit-exact comparison on the recording host.
"""

import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import toy_envs  # noqa: F401 — registers tests/Upper-v0

from turnrl.agents.tiny import tiny_model, tiny_tokenizer

CASES = {
    "grpo": {"algorithm": {"name": "grpo"}},
    "grpo-kl": {"algorithm": {"name": "grpo", "kl_coef": 0.1}},
    "dapo-accum": {"algorithm": {"name": "dapo"}, "optim": {"minibatch_size": 8, "grad_accum": 2}},
    "ppo": {"algorithm": {"name": "ppo"}},
    "ppo-critic-model": {"algorithm": {"name": "ppo", "critic_model": "tiny:chatml"}},
    "vapo-warmup": {"algorithm": {"name": "vapo", "value_warmup_steps": 2}},
}
VOLATILE = ("seconds", "tokens_per_s", "train_tokens_per_s", "generate_s")


def config(case: str, out_dir: str) -> dict:
    """The run config of one golden case."""
    extra = CASES[case]
    return {
        "model": "tiny",
        "env": {"id": "tests/Upper-v0"},
        "algorithm": extra["algorithm"],
        "rollout": {"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        "optim": {"lr": 1e-2, "minibatch_size": 16, **extra.get("optim", {})},
        "steps": 4,
        "eval_tasks": 8,
        "out_dir": out_dir,
    }


def digest(model: torch.nn.Module) -> str:
    """SHA-256 of the parameters' bytes, in order."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def stats(model: torch.nn.Module) -> list[list[float]]:
    """Each parameter tensor's sum and L2 norm (comparable within a tolerance on any CPU)."""
    return [[float(p.detach().double().sum()), float(p.detach().double().norm())] for p in model.parameters()]


def run(case: str, out_dir: str) -> dict:
    """Train one case; return its metrics history (without timings) and the final parameters' digest."""
    from turnrl.rl.run.trainer import TrainConfig, Trainer

    tok = tiny_tokenizer("chatml")
    trainer = Trainer(TrainConfig.model_validate(config(case, out_dir)), model=tiny_model(tok), tokenizer=tok)
    history = trainer.train()
    return {
        "history": [{k: v for k, v in h.items() if k not in VOLATILE} for h in history],
        "params": digest(trainer.model),
        "param_stats": stats(trainer.model),
    }


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(1)
    out = {}
    for case in CASES:
        with tempfile.TemporaryDirectory() as d:
            out[case] = run(case, d)
            print(case, out[case]["params"][:12], out[case]["history"][-1].get("eval_success"), flush=True)
    (Path(__file__).parent / "trace.json").write_text(json.dumps(out, indent=1) + "\n")
