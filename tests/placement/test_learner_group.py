"""The DeepSpeed learner group on a real local Ray cluster: 2 gloo ranks (``DS_ACCELERATOR=cpu``), a tiny model."""

import copy
import functools
import operator
import time
from types import SimpleNamespace

import pytest
import torch
import toy_envs  # noqa: F401 — registers the toy environments
from test_learner import episodes

from turnrl.agents.tiny import tiny_model
from turnrl.rl.placement.deepspeed_rank import shard_rows
from turnrl.rl.run.trainer import TrainConfig, learner_of

ray = pytest.importorskip("ray")
pytest.importorskip("deepspeed")


def cfg(tmp_path, stage=2, algo="dapo", ranks=2, lr=1e-2, lora=None, **optim):
    name = algo if isinstance(algo, str) else algo["name"]
    stored = {"data": {"path": "unused.parquet"}} if name in ("dqo", "sft", "rft") else {}
    return TrainConfig.model_validate(
        {
            **stored,
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": algo,
            "placement": "ray",
            "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
            "optim": {"lr": lr, "share_prompts": False, **optim},
            "learner": {"backend": "deepspeed", "ranks": ranks, "zero_stage": stage, "timeout": 120, "lora": lora},
            "out_dir": str(tmp_path),
        }
    )


def test_shards_are_contiguous_whole_groups_of_about_equal_size():
    assert shard_rows([0, 0, 0, 1, 1, 1], 2) == [[0, 1, 2], [3, 4, 5]]
    assert shard_rows([0, 0, 0, 0, 1, 1], 2) == [[0, 1, 2, 3], [4, 5]]
    assert shard_rows([0, 0, 0, 0, 0, 0, 0, 0], 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # one big group is split
    assert sorted(functools.reduce(operator.iadd, shard_rows([0, 0], 3), [])) == [0, 1] and all(
        len(p) <= 1 for p in shard_rows([0, 0], 3)
    )
    parts = shard_rows([0, 1, 1, 2, 3, 3, 3, 4], 3)
    assert functools.reduce(operator.iadd, parts, []) == list(range(8)) and all(parts)


# DAPO and SFT on ZeRO-2 here. PPO on ZeRO-3 (a policy-gradient update on partitioned weights, with the value head
# and a partitioned reference) is the token-budget test below: the same run with micro-batches cut by tokens. DQO on
# ZeRO-3 ranks is compared with one process in loss, gradient norm and weights through `turnrl train`
# (test_an_offline_run_trains_on_a_learner_group_like_the_local_learner). The suite's time goes to combinations
# that add something.
@pytest.mark.parametrize("stage,algo,lr", [(2, "dapo", 1e-2), (2, "sft", 1e-2)])
def test_two_ranks_update_like_one_process(ray_cluster, tmp_path, stage, algo, lr):
    """Unequal rows and tokens per rank, two optimizer steps per update (windows of 6 and 2 rows, micro-batches of
    3); SFT trains on a group too. Each rank scores only its own rows before the update."""
    _check_two_ranks(tmp_path, stage, algo, lr, minibatch_size=3, grad_accum=2)


def test_a_rank_with_nothing_to_train_keeps_step_with_its_peer(ray_cluster, tmp_path):
    """One row per optimizer step: rank 1 runs only stand-ins (it hung when its metrics had fewer keys to reduce)."""
    _check_two_ranks(tmp_path, 2, "grpo", 1e-2, minibatch_size=1, grad_accum=1, unequal=False)


def test_ranks_under_a_token_budget_update_like_one_process(ray_cluster, tmp_path):
    """optim.micro_tokens on a group (rows of 29, 28, 27 and 26 tokens per group; 57 tokens: the longest alone): each
    rank cuts its share into pieces of its own when scoring and in micro-batches — of the first window, rank 0 its
    four rows into three, rank 1 its two into two and a stand-in — and the update is still the single process's.
    PPO on ZeRO-3: the value head (trained in the same DeepSpeed engine, at twice the learning rate) and a reference
    model; each rank scores only its own rows (values, reference log-probabilities), and the reference is
    partitioned: each rank holds about half of it."""
    _check_two_ranks(
        tmp_path, 3, {"name": "ppo", "kl_coef": 0.05}, 5e-3, minibatch_size=3, grad_accum=2, micro_tokens=57
    )


# ZeRO-2 here; LoRA on ZeRO-3 ranks: test_a_lora_run_on_a_group_syncs_workers_with_the_adapters_and_checkpoints_them
@pytest.mark.parametrize("stage", [2])
def test_lora_ranks_update_like_one_process_and_export_the_adapters_alone(ray_cluster, tmp_path, stage):
    """learner.lora on the group: the ranks start from the driver's adapters, train only them (PPO: with the value
    head, and the policy with its adapters off as the KL reference — no reference copy on any rank, none
    partitioned), and publish the adapters alone."""
    _check_two_ranks(
        tmp_path,
        stage,
        {"name": "ppo", "kl_coef": 0.05},
        5e-3,
        minibatch_size=3,
        grad_accum=2,
        lora={"r": 4, "target_modules": ["q_proj", "v_proj", "up_proj"]},
    )


def test_ranks_training_trees_once_update_like_separate_rows(ray_cluster, tmp_path):
    """optim.prefix_tree on 2 ZeRO-2 ranks: each rank takes whole trees (4 leaves branching at turns 1 and 2) and runs
    each shared segment once; two updates match one process training the same leaves as separate rows."""
    import random

    from test_prefix_tree_learner import tree_leaves

    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.placement.learner_group import LearnerGroup

    rng = random.Random(0)
    trajs = tree_leaves(0, rng) + tree_leaves(1, rng)
    tok = tiny_tokenizer("chatml")
    algo, optim = {"name": "grpo", "advantage": "tree"}, {"minibatch_size": 4, "recompute_logprobs": True}
    single = learner_of(cfg(tmp_path, 2, algo, prefix_tree=False, **optim), tiny_model(tok, seed=0), tok)
    group = LearnerGroup(cfg(tmp_path, 2, algo, prefix_tree=True, **optim), tiny_model(tok, seed=0), tok)
    try:
        for _ in range(2):
            want, got = single.update(trajs), group.update(trajs)
            assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
            assert got["pass_tokens"] < 0.75 * want["pass_tokens"]  # the ranks ran the trees' history once
        assert_same_steps(group.export_weights()[1], single.model.state_dict(), 1e-2)
    finally:
        group.close()


def _check_two_ranks(tmp_path, stage, algo, lr, unequal=True, lora=None, **optim):
    """Two updates of one process and of 2 ranks on the same episodes: the same losses, norms and weights."""
    from turnrl.lora import adapter_state, apply_lora
    from turnrl.rl.placement.learner_group import LearnerGroup

    tok, trajs = episodes()
    config = cfg(tmp_path, stage, algo, lr=lr, lora=lora, **optim)
    if lora is None:
        single = learner_of(config, tiny_model(tok, seed=0), tok)
        group = LearnerGroup(config, tiny_model(tok, seed=0), tok)
    else:  # the same adapters on both (the group's ranks take them from the driver's policy)
        torch.manual_seed(0)
        model = apply_lora(tiny_model(tok, seed=0), lora)
        with torch.no_grad():  # nonzero B: the adapters count from the first forward on
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
        single = learner_of(config, model, tok)
        group = LearnerGroup(config, copy.deepcopy(model), tok)
        start = {k: v.clone() for k, v in adapter_state(model).items()}
    try:
        exp, _ = single.prepare(trajs)
        window = single.windows(len(exp))[0]
        parts = shard_rows(exp.batch.group_ids[window].tolist(), 2)
        tokens = [float(exp.batch.loss_mask[window[p]].sum()) for p in parts]
        if unequal:
            assert len(parts[0]) != len(parts[1]) and tokens[0] != tokens[1]  # unequal rows and tokens per rank
        for _ in range(2):
            want, got = single.update(trajs), group.update(trajs)
            assert got["loss"] == pytest.approx(want["loss"], abs=1e-5)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)
            if lora is not None:  # the policy with its adapters off: no reference weights of its own
                assert got["reference_share"] == 0.0
            elif single.ref_model is not None:  # a full copy on one process; partitioned over the ranks by ZeRO-3
                assert got["reference_share"] == (pytest.approx(0.5, abs=0.1) if stage == 3 else 1.0)
        assert group.version == single.version == 2
        version, state = group.export_weights()
        want = adapter_state(single.model) if lora is not None else single.model.state_dict()
        assert set(state) == set(want)  # of a LoRA policy: the adapters alone
        if lora is not None:  # which trained
            assert max(float((state[k] - v).abs().max()) for k, v in start.items()) > lr
        assert version == 2
        assert_same_steps(state, want, lr)
    finally:
        group.close()


def assert_same_steps(state, want, lr):
    """The group's weights are the single process's to within float rounding, measured in Adam steps (lr each).

    Almost every coordinate agrees to 2e-3 of a step. A few may not: Adam divides each coordinate's step by its own
    gradient history, so where a coordinate's gradient is small and summed from terms of both signs, the rounding of
    that sum becomes a visible share of its step, and ranks and CPUs sum in different orders. (An AVX2 host showed
    0.0116 of a step on 2 coordinates of 51,872, in the tied embedding row of the byte token "ÿ"; the same with the
    clip ranges opened wide, so not a ratio crossing the clip.) A missed update, or one that weighs tokens otherwise
    (seq-mean-token-mean against token-mean), moves most coordinates by 2 to 4 steps: both bounds catch it.
    """
    diff = torch.cat([(state[k] - v).abs().flatten() for k, v in want.items()]) / lr
    over = int((diff > 2e-3).sum())
    assert float(diff.max()) < 0.05 and over <= 1e-3 * diff.numel(), (float(diff.max()), over, diff.numel())


def run_config(tmp_path, steps=2, **extra):
    from test_ray_placement import config

    return config(tmp_path, steps=steps, **extra)


def group_config(tmp_path, steps=2, stage=2, **extra):
    return run_config(
        tmp_path, steps=steps, learner={"backend": "deepspeed", "ranks": 2, "zero_stage": stage, "timeout": 60}, **extra
    )


def make_trainer(config):
    from test_ray_placement import trainer

    return trainer(config)


PROBE = [[1, 5, 9, 13, 2, 7], [3, 4, 4, 8]]


@pytest.fixture(scope="module")
def group_run(ray_cluster, tmp_path_factory):
    """One 2-step run on a 2-rank DeepSpeed group, which both tests below compare with: its folder, history and
    final weights, and the probe's log-probabilities under the learner and under the rollout worker after a sync (one
    worker: the runner hands every worker the same published version; several workers taking it are
    test_ray_placement's runs)."""
    out = tmp_path_factory.mktemp("group")
    t = make_trainer(group_config(out, ray={"rollout_workers": 1}))
    try:
        history = t.train()
        run = SimpleNamespace(
            out=out,
            history=history,
            learner=t.learner.score(PROBE),
            synced=t.runner.sync(),
            version=t.learner.version,
            workers=[ray.get(w.score.remote(PROBE), timeout=30) for w in t.runner.workers],
            ranks=t.learner.info,  # each rank's setup: pid, device, whether DeepSpeed loaded its shared-memory op
            params=[p.detach().clone() for p in t.model.parameters()],
        )
    finally:
        t.close()
    return run


def test_a_learner_group_trains_like_the_local_learner_and_workers_get_each_version(group_run, tmp_path):
    local = make_trainer(run_config(tmp_path / "local", placement="local"))
    want = local.train()
    got = group_run.history
    assert group_run.synced == group_run.version == 2
    assert [r["shm_op"] for r in group_run.ranks] == [False, False]  # trained without DeepSpeed's CPU op (skip_cpu_op)
    for version, held in group_run.workers:  # each worker holds the group's last version, token for token
        assert version == 2
        for a, b in zip(held, group_run.learner):
            assert a == pytest.approx(b, abs=1e-5)
    for key in ("reward_mean", "generated_tokens", "rollout_episodes"):
        assert got[1][key] == want[1][key], key  # the first step: the same episodes, token for token
    for key in ("loss", "grad_norm"):
        assert got[1][key] == pytest.approx(want[1][key], rel=1e-4, abs=1e-6), key
    assert [h["policy_version"] for h in got[1:]] == [1.0, 2.0]
    assert all(h["logp_diff"] < 1e-4 for h in got[1:])  # rollout workers sampled with the group's current weights
    for a, b in zip(local.model.parameters(), group_run.params):  # the driver's copy is the published version
        assert torch.allclose(a, b, atol=1e-4)
    state = torch.load(group_run.out / "checkpoint.pt", weights_only=False)
    assert state["deepspeed"]["tag"] == "update-2" and state["version"] == 2
    assert (group_run.out / "deepspeed" / "update-2").is_dir()


def test_a_lora_run_on_a_group_syncs_workers_with_the_adapters_and_checkpoints_them(ray_cluster, tmp_path):
    """`learner.lora` on 2 ZeRO-3 ranks with a rollout worker: every episode is sampled with the current adapters,
    the worker gets the adapters alone and scores like the group, and the checkpoint (adapters + settings) loads as
    the group's policy."""
    from turnrl.checkpoint import load_policy
    from turnrl.rl.core.forward import sequence_logprobs

    lora = {"r": 4, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}
    t = make_trainer(
        run_config(
            tmp_path,
            steps=2,
            learner={"backend": "deepspeed", "ranks": 2, "zero_stage": 3, "timeout": 60, "lora": lora},
            ray={"rollout_workers": 1},
        )
    )
    try:
        history = t.train()
        learner, version = t.learner.score(PROBE), t.runner.sync()
        sent = ray.get(t.runner.pushed[1], timeout=30)
        workers = [ray.get(w.score.remote(PROBE), timeout=30) for w in t.runner.workers]
    finally:
        t.close()
    assert version == 2 and all(h["logp_diff"] < 1e-4 for h in history[1:])
    assert sent and all(".lora_A." in k or ".lora_B." in k for k in sent)
    for held_version, held in workers:
        assert held_version == 2
        for a, b in zip(held, learner):
            assert a == pytest.approx(b, abs=1e-5)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["lora"]["r"] == 4 and all("lora_" in k for k in state["model"])
    from turnrl.agents.tiny import tiny_tokenizer

    merged = tiny_model(tiny_tokenizer("chatml"))
    load_policy(merged, tmp_path)
    for a, b in zip(sequence_logprobs(merged, PROBE), learner):
        assert a == pytest.approx(b, abs=1e-4)
    assert (
        max(abs(a - b) for a, b in zip(sequence_logprobs(tiny_model(tiny_tokenizer("chatml")), PROBE)[0], learner[0]))
        > 1e-3
    )  # the adapters trained


@pytest.mark.parametrize(
    "algo", [{"name": "dqo", "beta": 0.1}]
)  # SFT on a group: test_two_ranks_update_like_one_process
def test_an_offline_run_trains_on_a_learner_group_like_the_local_learner(ray_cluster, tmp_path, algo):
    """Offline objectives through `turnrl train` on 2 ZeRO-3 ranks: the same data, losses, gradient norms and weights
    as one process (DQO: a value head, a reference partitioned over the ranks — each holds about half of it — and
    importance weights); placement: ray only hosts the ranks (no rollout workers start)."""
    from turnrl.agents.base import SamplingParams
    from turnrl.agents.hf import HFAgent
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.sources.collect import rollout_dataset

    tok = tiny_tokenizer("chatml")
    data = tmp_path / "data.parquet"
    rollout_dataset(
        HFAgent(tiny_model(tok, seed=3), tok),
        "tiny:chatml",
        "tests/Upper-v0",
        out=data,
        tasks=4,
        samples=4,
        params=SamplingParams(temperature=1.0, max_new_tokens=6),
    )
    common = {
        "model": "tiny",
        "env": {"id": "tests/Upper-v0"},
        "algorithm": algo,
        "steps": 2,
        "eval_tasks": 2,
        "data": {"path": str(data), "batch_size": 8},
        # windows of 6 and 2 rows (micro-batches of 3, two a window): a batch is 2 whole groups of 4, so the first
        # window is one group and two rows of the next — 4 rows on rank 0 and 2 on rank 1 — and each rank accumulates
        # over micro-batches (rank 1 runs a stand-in for its second); prompts not shared, as ZeRO-3 ranks cannot
        "optim": {"lr": 5e-3, "minibatch_size": 3, "grad_accum": 2, "share_prompts": False},
    }
    local = make_trainer(TrainConfig.model_validate({**common, "out_dir": str(tmp_path / "local")}))
    want = local.train()
    group = make_trainer(
        TrainConfig.model_validate(
            {
                **common,
                "out_dir": str(tmp_path / "group"),
                "placement": "ray",
                "learner": {"backend": "deepspeed", "ranks": 2, "zero_stage": 3, "timeout": 120},
            }
        )
    )
    try:
        got = group.train()
        assert group.runner is None  # no rollouts to place
    finally:
        group.close()
    for g, w in zip(got[1:], want[1:]):
        assert g["loss"] == pytest.approx(w["loss"], abs=1e-5) and g["data_episodes"] == w["data_episodes"]
        assert g["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-4)
        assert g["reference_share"] == pytest.approx(0.5, abs=0.1)  # ZeRO-3: the reference partitioned
    assert got[-1]["eval_success"] == want[-1]["eval_success"]
    assert_same_steps(group.model.state_dict(), local.model.state_dict(), 5e-3)  # the driver's copy: the group's


def test_a_step_wise_run_samples_with_the_groups_weights(ray_cluster, tmp_path):
    """SWiRL on 2 ranks: the driver samples fresh steps from stored states with its copy of the policy, which loads
    every version the group publishes — the run matches the local learner's."""
    from test_swirl import CapitalJudge, _upper_rows

    from turnrl.agents.tiny import tiny_tokenizer

    rows = _upper_rows(tmp_path, tiny_tokenizer("chatml"))
    common = {
        "model": "tiny",
        "env": {"id": "tests/Upper-v0"},
        "algorithm": {"name": "swirl", "execute": False},
        "data": {"path": str(rows)},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4},
        "optim": {"lr": 1e-2, "minibatch_size": 8},
        "steps": 2,
        "eval_tasks": 2,
        "save_trajectories": False,
    }
    runs = []
    for name, extra in (
        ("local", {}),
        (
            "group",
            {"placement": "ray", "learner": {"backend": "deepspeed", "ranks": 2, "zero_stage": 2, "timeout": 120}},
        ),
    ):
        t = make_trainer(TrainConfig.model_validate({**common, **extra, "out_dir": str(tmp_path / name)}))
        t.source.judge = CapitalJudge()
        try:
            runs.append((t.train(), [p.detach().clone() for p in t.model.parameters()]))
        finally:
            t.close()
    (want, local), (got, group) = runs
    assert got[1]["reward_mean"] == want[1]["reward_mean"]  # the same states and samples before any update
    for g, w in zip(got[1:], want[1:]):
        assert g["loss"] == pytest.approx(w["loss"], abs=1e-5)
    for a, b in zip(local, group):  # the driver's copy followed the group's updates
        assert torch.allclose(a, b, atol=1e-4)


def test_a_rank_killed_mid_step_is_a_clear_error_and_resume_reproduces_the_run(group_run, tmp_path):
    from turnrl.rl.placement.learner_group import LearnerGroupError

    # one rollout worker, as group_run's
    one_worker = {"checkpoint_every": 1, "ray": {"rollout_workers": 1}}
    part = make_trainer(group_config(tmp_path / "part", **one_worker))

    def kill(traj, ledger):
        if len(ledger.done) == 5:
            ray.kill(part.learner.ranks[1], no_restart=True)

    try:
        part.train(stop_after=1)
        part.runner.on_commit = kill  # rank 1 dies in step 2, before the update
        start = time.monotonic()
        # (the ranks run on the driver's node here, asked once whether it was lost: no 5 s wait)
        own = r"learner rank 1 on node \S+ \(\w+\), the driver's own node, which Ray has up, died during update 2"
        with pytest.raises(LearnerGroupError, match=own):
            part.train()
        assert time.monotonic() - start < 60
    finally:
        part.close()
    resumed = make_trainer(group_config(tmp_path / "part", **one_worker))
    try:
        resumed.load(tmp_path / "part" / "checkpoint.pt")
        assert resumed.step == 1 and resumed.learner.version == 1
        history = resumed.train()
    finally:
        resumed.close()
    assert history[-1]["policy_version"] == 2.0
    for a, b in zip(group_run.params, resumed.model.parameters()):  # the run without the kill
        assert torch.allclose(a, b, atol=1e-5)


def test_learner_options_that_cannot_work_fail_with_what_to_change(tmp_path):
    base = {"model": "tiny", "env": {"id": "tests/Upper-v0"}, "out_dir": str(tmp_path)}
    with pytest.raises(ValueError, match="needs learner.backend=deepspeed"):
        TrainConfig.model_validate({**base, "learner": {"ranks": 2}})
    with pytest.raises(ValueError, match="add placement=ray"):
        TrainConfig.model_validate({**base, "learner": {"backend": "deepspeed"}})
    with pytest.raises(ValueError, match="value_warmup_steps"):
        TrainConfig.model_validate(
            {**base, "placement": "ray", "algorithm": "vapo", "learner": {"backend": "deepspeed"}}
        )
    ok = TrainConfig.model_validate(
        {
            **base,
            "placement": "ray",
            "algorithm": {"name": "vapo", "value_warmup_steps": 0},
            "learner": {"backend": "deepspeed", "ranks": 2, "zero_stage": 3},
        }
    )
    assert ok.learner.ranks == 2


def test_nccl_weight_sync_needs_a_deepspeed_group_and_one_vllm_engine(tmp_path):
    base = {
        "model": "tiny",
        "env": {"id": "tests/Upper-v0"},
        "out_dir": str(tmp_path),
        "placement": "ray",
        "learner": {"backend": "deepspeed", "weight_sync": "nccl"},
    }
    with pytest.raises(ValueError, match="ray.rollout_backend=vllm and ray.rollout_workers=1"):
        TrainConfig.model_validate(base)
    ok = TrainConfig.model_validate({**base, "ray": {"rollout_backend": "vllm", "rollout_workers": 1}})
    assert ok.learner.weight_sync == "nccl"


def test_parameter_meta_lists_each_distinct_parameter_in_state_dict_order():
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.placement.parameters import full_parameters, parameter_meta

    model = tiny_model(tiny_tokenizer("chatml"))
    model.tie_weights()
    meta = parameter_meta(model)
    items = list(full_parameters(model, zero3=False, bucket_mb=1.0))
    assert [m[0] for m in meta] == [names[0] for names, _ in items]
    assert [m[2] for m in meta] == [tuple(t.shape) for _, t in items]
    covered = {n for names, _ in items for n in names}
    assert covered == {k for k in model.state_dict() if k in dict(model.named_parameters(remove_duplicate=False))}


def test_deepspeed_never_builds_its_cpu_op_for_a_rank():
    """DeepSpeed on CPU would compile its shared-memory op (a minute of C++, once per Python environment) and load it
    when its communication backend starts; it serves only inference all-reduces, so a rank declares it unavailable
    first (skip_cpu_op). In a fresh process with the op's build replaced by a failure: without the declaration
    DeepSpeed goes to build it; with it, it does not (and the learner-group tests above train without it)."""
    import os
    import subprocess
    import sys

    code = (
        "import deepspeed.ops.op_builder.builder as b\n"
        "from deepspeed.comm.torch import build_shm_op\n"
        "from turnrl.rl.placement.deepspeed_rank import skip_cpu_op\n"
        "def refuse(*a, **k): raise RuntimeError('would build')\n"
        "b.OpBuilder.load = b.OpBuilder.jit_load = refuse\n"
        "try:\n    build_shm_op(); print('no build asked')\nexcept RuntimeError as e:\n    print(e)\n"
        "skip_cpu_op()\n"
        "print(build_shm_op())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["would", "build", "None"], done.stdout + done.stderr[-2000:]
