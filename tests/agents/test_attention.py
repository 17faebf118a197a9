"""Grouped-query attention without cache copies (turnrl.agents.attention): the same outputs as transformers' sdpa."""

import pytest
import torch

from turnrl.agents.attention import use_cpu_gqa
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(autouse=True)
def restore():
    yield
    use_cpu_gqa()  # as every HF agent leaves the process


def padded_batch():
    """Left-padded rows of very different lengths, as continuous batching lays them out."""
    g = torch.Generator().manual_seed(0)
    lengths = [3, 40, 7, 25]
    ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        ids[r, -n:] = torch.randint(5, 60, (n,), generator=g)
        mask[r, -n:] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, positions


def logits(model, grad=False):
    ids, mask, pos = padded_batch()
    with torch.set_grad_enabled(grad):
        return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[mask.bool()]


def test_masked_gqa_gives_the_same_logits_without_gradients_and_the_same_path_with_them():
    model = tiny_model(tiny_tokenizer("chatml"), heads=4, kv_heads=2, seed=3)
    use_cpu_gqa(False)
    plain, plain_loss = logits(model), logits(model, grad=True).square().mean()
    plain_loss.backward()
    plain_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    use_cpu_gqa()
    assert torch.allclose(logits(model), plain, atol=1e-6, rtol=0)
    # with gradients (the learner's update) transformers' own path runs: bit-equal outputs and gradients
    loss = logits(model, grad=True).square().mean()
    loss.backward()
    assert torch.equal(loss, plain_loss)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain_grads))


def test_the_agent_decodes_the_same_tokens_on_either_attention():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok, heads=4, kv_heads=2, seed=3), tok, batch_size=3)
    assert agent.model.config._attn_implementation == "sdpa"  # a model sent to another process needs nothing of ours
    prompts = [[7] * n for n in (2, 30, 5, 18, 9)]  # more rows than the batch: rows join a padded running batch
    for params, seeds in [
        (SamplingParams(max_new_tokens=12, temperature=0.0), None),
        (SamplingParams(max_new_tokens=12, temperature=1.0), [1, 2, 3, 4, 5]),
    ]:
        use_cpu_gqa(False)
        a = agent.generate(prompts, params, seeds=seeds)
        use_cpu_gqa()
        b = agent.generate(prompts, params, seeds=seeds)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_models_without_key_value_groups_and_other_implementations_run_as_before():
    tok = tiny_tokenizer("chatml")
    mha, eager = tiny_model(tok, kv_heads=4), tiny_model(tok, kv_heads=2)
    eager.set_attn_implementation("eager")
    use_cpu_gqa(False)
    before = [logits(mha), logits(eager)]
    use_cpu_gqa()
    assert all(torch.equal(a, b) for a, b in zip(before, [logits(mha), logits(eager)]))
