"""The DeepSpeed learner group on a real local Ray cluster: 2 gloo ranks (``DS_ACCELERATOR=cpu``), a tiny model."""

import os

import pytest
import torch

import toy_envs  # noqa: F401  (registers the toy environments)
from test_learner import episodes
from turnrl.agents.tiny import tiny_model
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.learner import Learner
from turnrl.rl.placement.deepspeed_rank import shard_rows
from turnrl.rl.trainer import TrainConfig

ray = pytest.importorskip("ray")
pytest.importorskip("deepspeed")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def cfg(tmp_path, stage=2, algo="dapo", ranks=2, **optim):
    return TrainConfig.model_validate({
        "model": "tiny", "env": {"id": "tests/Upper-v0"}, "algorithm": algo, "placement": "ray",
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        "optim": {"lr": 1e-2, "minibatch_size": 3, "grad_accum": 2, "share_prompts": False, **optim},
        "learner": {"backend": "deepspeed", "ranks": ranks, "zero_stage": stage, "timeout": 120},
        "out_dir": str(tmp_path)})


def test_shards_are_contiguous_whole_groups_of_about_equal_size():
    assert shard_rows([0, 0, 0, 1, 1, 1], 2) == [[0, 1, 2], [3, 4, 5]]
    assert shard_rows([0, 0, 0, 0, 1, 1], 2) == [[0, 1, 2, 3], [4, 5]]
    assert shard_rows([0, 0], 3) == [[0, 1], [], []]
    parts = shard_rows([0, 1, 1, 2, 3, 3, 3, 4], 3)
    assert sum(parts, []) == list(range(8)) and all(parts)


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_update_like_one_process(cluster, tmp_path, stage):
    from turnrl.rl.placement.learner_group import LearnerGroup

    tok, trajs = episodes()
    config = cfg(tmp_path, stage)
    single = Learner(config, get_algorithm(config.algorithm), tiny_model(tok, seed=0), tok)
    group = LearnerGroup(config, tiny_model(tok, seed=0), tok)
    try:
        exp, _ = single.prepare(trajs)
        window = single.windows(len(exp))[0]  # 2 optimizer steps of 6 and 2 rows; micro-batches of 3
        parts = shard_rows(exp.batch.group_ids[window].tolist(), 2)
        tokens = [float(exp.batch.loss_mask[window[p]].sum()) for p in parts]
        assert len(parts[0]) != len(parts[1]) and tokens[0] != tokens[1]  # unequal rows and tokens per rank
        for _ in range(2):
            want, got = single.update(trajs), group.update(trajs)
            assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
        assert group.version == single.version == 2
        version, state = group.export_weights()
        diff = max(float((state[k] - v).abs().max()) for k, v in single.model.state_dict().items())
        assert version == 2 and diff < 1e-5
    finally:
        group.close()
