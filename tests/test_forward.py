"""forward_tokens: scoring generated positions only and running shared prompts once give the plain pass's values
and gradients."""

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.core.forward import forward_tokens

PAD = 0


def _batch():
    """Two groups of three rows with identical prompts, a singleton, a row with nothing generated; a multi-turn
    row (an environment segment inside its generated tokens); rows of different lengths, right-padded."""
    g = torch.Generator().manual_seed(0)

    def rand(n):
        return torch.randint(5, 400, (n,), generator=g).tolist()

    p1, p2 = rand(7), rand(4)
    rows = [  # (prompt, generated-or-env segments as (tokens, generated?))
        (p1, [(rand(5), 1)]), (p1, [(rand(3), 1), (rand(2), 0), (rand(4), 1)]), (p1, [(rand(6), 1)]),
        (p2, [(rand(2), 1)]), (p2, [(rand(8), 1)]), (p2, [(rand(1), 1)]),
        (rand(5), [(rand(4), 1)]), (rand(6), []),
    ]
    T = max(len(p) + sum(len(s) for s, _ in segs) for p, segs in rows)
    ids = torch.full((len(rows), T), PAD)
    attn = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T))
    for b, (p, segs) in enumerate(rows):
        seq, m = list(p), [0] * len(p)
        for s, gen in segs:
            seq += s
            m += [gen] * len(s)
        ids[b, : len(seq)] = torch.tensor(seq)
        attn[b, : len(seq)] = 1
        mask[b, : len(seq)] = torch.tensor(m, dtype=torch.float32)
    return ids, attn, mask


def _plain(model, ids, attn, temperature):
    out = model(input_ids=ids, attention_mask=attn, output_hidden_states=True)
    logits = out.logits[:, :-1].float() / temperature
    lsm = logits.log_softmax(-1)
    lp = lsm.gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = -(lsm.exp() * lsm).sum(-1)
    z = torch.zeros_like(lp[:, :1])
    return torch.cat([z, lp], 1), torch.cat([z, ent], 1), out.hidden_states[-1]


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_forward_tokens_equals_the_plain_pass(share, temperature):
    tok = tiny_tokenizer("chatml")
    ids, attn, mask = _batch()
    ref_model, model = tiny_model(tok, seed=1).train(), tiny_model(tok, seed=1).train()
    ref_lp, ref_ent, ref_h = _plain(ref_model, ids, attn, temperature)
    lp, ent, h = forward_tokens(model, ids, attn, temperature, hidden=True, loss_mask=mask, share_prefix=share)

    on = mask > 0
    assert torch.allclose(lp[on], ref_lp[on], atol=1e-5)
    assert torch.allclose(ent[on], ref_ent[on], atol=1e-5)
    real = attn > 0
    assert torch.allclose(h[real], ref_h[real], atol=1e-5)
    first = on.float().argmax(-1)
    before = torch.arange(ids.shape[1])[None] < first[:, None]
    assert (lp[before | ~real] == 0).all() and (lp[7] == 0).all()  # prompts, padding, the row with nothing generated
    assert not ent.requires_grad and lp.requires_grad

    (ref_lp * mask).sum().backward()
    (lp * mask).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


def test_scoring_all_positions_without_a_loss_mask():
    tok = tiny_tokenizer("chatml")
    ids, attn, _ = _batch()
    model = tiny_model(tok)
    with torch.no_grad():
        ref_lp, _, _ = _plain(model, ids, attn, 1.0)
        lp, _, h = forward_tokens(model, ids, attn)
    real = attn > 0
    real[:, 0] = False
    assert torch.allclose(lp[real], ref_lp[real], atol=1e-5) and h is None


@pytest.mark.parametrize("share", [False, True])
def test_hidden_states_alone_are_the_scoring_pass_hidden_states(share):
    """``scores=False`` (what a value head reads) gives the same hidden states without scoring any token."""
    tok = tiny_tokenizer("chatml")
    ids, attn, mask = _batch()
    model = tiny_model(tok, seed=2)
    with torch.no_grad():
        _, _, ref_h = forward_tokens(model, ids, attn, hidden=True, loss_mask=mask, share_prefix=share)
        lp, ent, h = forward_tokens(model, ids, attn, hidden=True, loss_mask=mask, share_prefix=share, scores=False)
    real = attn > 0
    assert torch.equal(h[real], ref_h[real])
    assert (lp == 0).all() and (ent == 0).all()
