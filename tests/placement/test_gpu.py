"""The GPU path on a machine with a CUDA GPU (``scripts/test_gpu.sh`` runs it; skipped where torch sees none): the
local learner and rollouts with ``device: cuda`` against the same on the CPU, a GPU run's checkpoint on the CPU, and
the DeepSpeed learner group as one NCCL rank on the GPU (full weights and LoRA) against one process."""

import copy

import pytest
import torch
import toy_envs  # noqa: F401 — registers the toy environments
from test_learner import episodes
from tiny_trainer import tiny_trainer as trainer

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.core.forward import sequence_logprobs
from turnrl.rl.run.trainer import TrainConfig, learner_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA GPU (tests/placement/test_device.py checks a machine without one)",
    ),
]
PROBE = [[1, 5, 9, 13, 2, 7], [3, 4, 4, 8]]
LORA = {"r": 4, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}


@pytest.fixture(autouse=True)
def exact_matmuls():
    """fp32 products in full fp32 (no TF32), as on the CPU."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def config(tmp_path, device, env="tests/Upper-v0", steps=2, **extra):
    return TrainConfig.model_validate(
        {
            "model": "tiny:chatml",
            "env": {"id": env},
            "device": device,
            "steps": steps,
            "eval_tasks": 4,
            "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4, "seed_per_episode": True},
            "optim": {"lr": 1e-2, "minibatch_size": 8},
            "out_dir": str(tmp_path),
            **extra,
        }
    )


@pytest.mark.parametrize("algo", ["dapo", {"name": "ppo", "kl_coef": 0.05}])
def test_a_learner_on_the_gpu_updates_like_one_on_the_cpu(tmp_path, algo):
    """The same episodes, two updates each (PPO: a value head and a reference model, built on the policy's
    device): the same losses, norms and weights."""
    tok, trajs = episodes()
    cfg = config(tmp_path, "cpu", algorithm=algo)
    learners = [learner_of(cfg, tiny_model(tok, seed=0).to(d), tok) for d in ("cpu", "cuda")]
    assert learners[1].device.type == "cuda"
    if learners[1].uses_critic:
        assert next((learners[1].value_head or learners[1].critic).parameters()).device.type == "cuda"
    for _ in range(2):
        want, got = (learner.update(trajs) for learner in learners)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-3)
    for a, b in zip(learners[0].model.parameters(), learners[1].model.parameters()):
        assert torch.allclose(a, b.cpu(), atol=1e-4)


def test_draws_on_the_gpu_are_the_cpu_generators_draws():
    """The GPU's sampler takes its uniforms from the rows' CPU generators: a seed gives the same tokens whether the
    probabilities live on the GPU or the CPU (the inverse transform on either)."""
    from turnrl.agents.batching import draw

    probs = torch.softmax(torch.randn(64, 49152, generator=torch.Generator().manual_seed(0)), -1)
    on_gpu = draw(probs.cuda(), torch.Generator().manual_seed(7))
    assert on_gpu.device.type == "cuda"
    assert torch.equal(on_gpu.cpu(), draw(probs, torch.Generator().manual_seed(7)))


@pytest.mark.parametrize("env", ["tests/Upper-v0", "tests/ToyPAG-v0"])
def test_a_run_on_the_gpu_samples_and_trains_reproducibly(tmp_path, env):
    """`device: cuda` on the local placement: the policy generates (KV-cached turns of a multi-turn PAG episode
    too) and trains on the GPU; the same seed gives the same run, every token sampled with the learner's weights.
    Its checkpoint loads on the CPU (`run:OUT_DIR`) with the GPU's log-probabilities."""
    from turnrl.agents import make_agent

    extra = {"algorithm": {"name": "pag"}} if "PAG" in env else {}
    runs = []
    for i, device in enumerate(("cpu", "cuda", "cuda")):
        t = trainer(config(tmp_path / f"run{i}", device, env=env, **extra))
        assert t.agent.device.type == device and t.learner.device.type == device
        runs.append((t.train(), t))
    (cpu, _), (got, gpu), (again, _) = runs
    for key in ("reward_mean", "generated_tokens", "loss"):
        assert [h[key] for h in got[1:]] == [h[key] for h in again[1:]], key
    assert [h["rollout_episodes"] for h in got[1:]] == [h["rollout_episodes"] for h in cpu[1:]]
    assert all(h["logp_diff"] < 1e-4 for h in got[1:])  # the GPU's sampling log-probabilities are its learner's
    loaded = make_agent(f"run:{tmp_path / 'run1'}")
    assert loaded.device.type == "cpu"
    for a, b in zip(sequence_logprobs(loaded.model, PROBE), sequence_logprobs(gpu.model, PROBE)):
        assert a == pytest.approx(b, abs=1e-4)


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    pytest.importorskip("deepspeed")
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=True, configure_logging=False)
    yield ray
    ray.shutdown()


def group_config(tmp_path, stage, lora=None, **extra):
    return config(
        tmp_path,
        "cpu",
        placement="ray",
        algorithm={"name": "ppo", "kl_coef": 0.05},
        learner={
            "backend": "deepspeed",
            "ranks": 1,
            "rank_gpus": 1,
            "zero_stage": stage,
            "timeout": 300,
            "start_timeout": 300,
            "lora": lora,
        },
        **extra,
    )


@pytest.mark.parametrize("stage,lora", [(2, None), (3, None), (2, LORA), (3, LORA)])
def test_an_nccl_rank_on_the_gpu_updates_like_one_process(cluster, tmp_path, stage, lora):
    """One DeepSpeed rank on the GPU (NCCL; PPO: the value head in the engine, the reference partitioned under
    ZeRO-3, or the policy with its adapters off under LoRA) against the local learner on the GPU: the same losses
    and weights after two updates; a LoRA rank publishes the adapters alone."""
    from turnrl.lora import adapter_state, apply_lora
    from turnrl.rl.placement.learner_group import LearnerGroup

    tok, trajs = episodes()
    cfg = group_config(tmp_path, stage, lora, ray={"rollout_workers": 1})
    model = tiny_model(tok, seed=0)
    if lora is not None:
        torch.manual_seed(0)
        model = apply_lora(model, lora)
        with torch.no_grad():  # nonzero B: the adapters count from the first forward on
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
    group = LearnerGroup(cfg, copy.deepcopy(model), tok)
    single = learner_of(cfg, model.to("cuda"), tok)
    try:
        assert group.info[0]["device"].startswith("cuda")
        for _ in range(2):
            want, got = single.update(trajs), group.update(trajs)
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-5)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-3)
        version, state = group.export_weights()
        want = adapter_state(single.model) if lora is not None else single.model.state_dict()
        assert version == 2 and set(state) == set(want)
        # within 1 % of one Adam step (lr = 1e-2 per coordinate): ZeRO reduces in flat buckets, in another order
        # (ZeRO-3 on an H200: 2.06e-5)
        assert max(float((state[k].cpu() - v.cpu()).abs().max()) for k, v in want.items()) < 1e-4
    finally:
        group.close()


def test_a_lora_run_with_its_learner_on_the_gpu_syncs_the_adapters_to_cpu_workers(cluster, tmp_path):
    """`turnrl train` on placement ray: a LoRA policy trained by one NCCL rank on the GPU (ZeRO-3), sampled by a
    rollout worker on the CPU: every episode is sampled with the current adapters, the worker scores like the rank,
    and the checkpoint loads as the trained policy."""
    from turnrl.checkpoint import load_policy

    t = trainer(group_config(tmp_path, 3, LORA, steps=3, ray={"rollout_workers": 1, "start_timeout": 120}))
    try:
        history = t.train()
        learner, version = t.learner.score(PROBE), t.runner.sync()
        _, held = cluster.get(t.runner.workers[0].score.remote(PROBE), timeout=60)
    finally:
        t.close()
    assert version == 3 and all(h["logp_diff"] < 1e-4 for h in history[1:])
    for a, b in zip(held, learner):
        assert a == pytest.approx(b, abs=1e-5)
    merged = tiny_model(tiny_tokenizer("chatml"))
    load_policy(merged, tmp_path)
    for a, b in zip(sequence_logprobs(merged, PROBE), learner):
        assert a == pytest.approx(b, abs=1e-4)
