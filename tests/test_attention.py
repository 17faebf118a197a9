"""Grouped-query attention without cache copies (turnrl.agents.attention): the same outputs as transformers' sdpa."""

import pytest
import torch

from turnrl.agents.attention import NAME, use_cpu_gqa
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer


def pair(kv_heads=2):
    tok = tiny_tokenizer("chatml")
    plain, fast = (tiny_model(tok, heads=4, kv_heads=kv_heads, seed=3) for _ in range(2))
    assert use_cpu_gqa(fast) and fast.config._attn_implementation == NAME
    return tok, plain, fast


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


def test_masked_gqa_gives_the_same_logits_without_gradients_and_the_same_path_with_them():
    _, plain, fast = pair()
    ids, mask, pos = padded_batch()
    with torch.no_grad():
        a = plain(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        b = fast(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    assert torch.allclose(a[real], b[real], atol=1e-6, rtol=0)
    # with gradients (the learner's update) transformers' own path runs: bit-equal outputs and gradients
    la = plain(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real].square().mean()
    lb = fast(input_ids=ids, attention_mask=mask, position_ids=pos).logits[real].square().mean()
    la.backward()
    lb.backward()
    assert torch.equal(la, lb)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(plain.parameters(), fast.parameters()))


def test_the_agent_decodes_the_same_tokens_on_either_attention():
    tok, plain, fast = pair()
    slow = HFAgent(plain, tok, batch_size=3)
    plain.set_attn_implementation("sdpa")  # the agent switched it: switch it back for the reference
    quick = HFAgent(fast, tok, batch_size=3)
    assert quick.model.config._attn_implementation == NAME and plain.config._attn_implementation == "sdpa"
    prompts = [[7] * n for n in (2, 30, 5, 18, 9)]  # more rows than the batch: rows join a padded running batch
    for params, seeds in [(SamplingParams(max_new_tokens=12, temperature=0.0), None),
                          (SamplingParams(max_new_tokens=12, temperature=1.0), [1, 2, 3, 4, 5])]:
        a, b = slow.generate(prompts, params, seeds=seeds), quick.generate(prompts, params, seeds=seeds)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)


def test_other_attention_implementations_and_full_multi_head_attention_are_left_alone():
    tok = tiny_tokenizer("chatml")
    eager = tiny_model(tok, kv_heads=2)
    eager.set_attn_implementation("eager")
    assert not use_cpu_gqa(eager) and eager.config._attn_implementation == "eager"
    # no key/value groups: the wrapper is transformers' sdpa exactly
    _, plain, fast = pair(kv_heads=4)
    ids, mask, pos = padded_batch()
    with torch.no_grad():
        assert torch.equal(plain(input_ids=ids, attention_mask=mask, position_ids=pos).logits,
                           fast(input_ids=ids, attention_mask=mask, position_ids=pos).logits)
