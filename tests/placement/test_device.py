"""`device` (train config) and `--device` (turnrl eval): where this process's policy runs, and the errors for a GPU
that is not there (run on machines without one; tests/placement/test_gpu.py checks the GPU path on a CUDA machine)."""

import pytest
import torch
from typer.testing import CliRunner

from turnrl.agents import make_agent
from turnrl.agents.models import pick_device
from turnrl.cli import app
from turnrl.rl.run.trainer import TrainConfig, Trainer

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answers of a machine without a CUDA GPU")


def test_device_names_are_checked_by_the_config():
    assert TrainConfig(env={"id": "turnrl/Arithmetic-v0"}).device == "auto"
    for good in ("cpu", "cuda", "cuda:1"):
        assert TrainConfig(env={"id": "turnrl/Arithmetic-v0"}, device=good).device == good
    for bad in ("gpu", "cuda:x", "CUDA", "mps"):
        with pytest.raises(ValueError, match="device"):
            TrainConfig(env={"id": "turnrl/Arithmetic-v0"}, device=bad)
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        pick_device("tpu")


@no_gpu
def test_auto_is_the_cpu_without_a_gpu_and_a_gpu_that_is_not_there_fails_before_anything_loads(tmp_path):
    assert pick_device("auto") == pick_device("auto", gpu_ok=False) == pick_device("cpu") == "cpu"
    for spec in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=r"use device=cpu \(or auto\)"):
            pick_device(spec)
    # the check comes first: a model that does not exist would be an OSError if the trainer got that far
    cfg = TrainConfig(
        model=str(tmp_path / "no-such-model"), env={"id": "turnrl/Arithmetic-v0"}, device="cuda", out_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="device='cuda'"):
        Trainer(cfg)
    with pytest.raises(ValueError, match="device='cuda:0'"):
        make_agent("tiny:chatml", device="cuda:0")
    assert make_agent("tiny:chatml", device="auto").device.type == "cpu"


@no_gpu
def test_eval_with_a_gpu_that_is_not_there_says_what_to_change(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/Arithmetic-v0",
            "--agent",
            "tiny:chatml",
            "--limit",
            "2",
            "--out",
            str(tmp_path),
            "--device",
            "cuda",
        ],
    )
    assert result.exit_code != 0
    assert "device='cuda'" in result.output and "device=cpu" in result.output
    ok = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/Arithmetic-v0",
            "--agent",
            "tiny:chatml",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "cpu"),
            "--max-new-tokens",
            "4",
        ],
    )
    assert ok.exit_code == 0, ok.output
