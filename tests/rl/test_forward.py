"""forward_tokens: scoring generated positions only and running shared prompts once give the plain pass's values
and gradients."""

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.lanes import lanes_of, merge_pays
from turnrl.rl.core.forward import PASS_OVERHEAD, forward_tokens

PAD = 0


def _batch(long: int = 0):
    """Two groups of three rows with identical prompts, a singleton, a row with nothing generated; a multi-turn
    row (an environment segment inside its generated tokens); rows of different lengths, right-padded. ``long``:
    that many more generated tokens in the first group's last row and in the singleton (answers that ran on)."""
    g = torch.Generator().manual_seed(0)

    def rand(n):
        return torch.randint(5, 400, (n,), generator=g).tolist()

    p1, p2 = rand(7), rand(4)
    rows = [  # (prompt, generated-or-env segments as (tokens, generated?))
        (p1, [(rand(5), 1)]),
        (p1, [(rand(3), 1), (rand(2), 0), (rand(4), 1)]),
        (p1, [(rand(6 + long), 1)]),
        (p2, [(rand(2), 1)]),
        (p2, [(rand(8), 1)]),
        (p2, [(rand(1), 1)]),
        (rand(5), [(rand(4 + long), 1)]),
        (rand(6), []),
        (rand(3), [(rand(2), 1)]),
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
@pytest.mark.parametrize("long", [0, 90])
def test_forward_tokens_equals_the_plain_pass(share, temperature, long):
    tok = tiny_tokenizer("chatml")
    ids, attn, mask = _batch(long)
    ref_model, model = tiny_model(tok, seed=1).train(), tiny_model(tok, seed=1).train()
    ref_lp, ref_ent, ref_h = _plain(ref_model, ids, attn, temperature)
    seen = []  # the token ids of every forward call: rows × their padded length

    def count(_, args, kwargs):
        seen.append(kwargs["input_ids"].numel())

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    lp, ent, h = forward_tokens(
        model, ids, attn, temperature, hidden=True, loss_mask=mask, share_prefix=share, lanes=bool(long)
    )
    hook.remove()
    if long:  # the long rows ran apart: the short rows beside them were not padded to their length
        lanes_seen, seen = seen, []
        with torch.no_grad():
            hook = model.register_forward_pre_hook(count, with_kwargs=True)
            forward_tokens(model, ids, attn, temperature, loss_mask=mask, share_prefix=share)
            hook.remove()
        assert len(lanes_seen) > len(seen) and sum(lanes_seen) < sum(seen) / 2
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


def _brute_force(spans, overhead):
    """The least cost over every way to cut the sorted spans into contiguous lanes."""
    s = sorted(spans)
    n, best = len(s), None
    for mask in range(1 << max(n - 1, 0)):
        cuts = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        cost = sum((b - a) * s[b - 1] + overhead for a, b in zip(cuts, cuts[1:]))
        best = cost if best is None else min(best, cost)
    return best


def _cost(spans, lanes, overhead):
    return sum(len(lane) * max(spans[i] for i in lane) + overhead for lane in lanes)


@pytest.mark.parametrize("seed", range(40))
def test_lanes_are_the_cheapest_cut(seed):
    """Every row in exactly one lane, lanes in order of length, and no cut of the sorted rows costs less."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 9, (1,), generator=g))
    spans = (torch.randint(1, 60, (n,), generator=g) ** 2 // 30 + 1).tolist()  # a long tail now and then
    overhead = int(torch.randint(0, 80, (1,), generator=g))
    lanes = lanes_of(spans, overhead)
    assert sorted(i for lane in lanes for i in lane) == list(range(n))
    tops = [max(spans[i] for i in lane) for lane in lanes]
    assert tops == sorted(tops) and all(
        max(spans[i] for i in a) <= min(spans[i] for i in b) for a, b in zip(lanes, lanes[1:])
    )
    assert _cost(spans, lanes, overhead) == _brute_force(spans, overhead)


def test_lanes_split_a_long_tail_only():
    assert lanes_of([20, 25, 30, 1000], PASS_OVERHEAD) == [[0, 1, 2], [3]]  # 4 × 1000 padded against 3 × 30 + 1000
    assert lanes_of([20, 25, 30, 40], PASS_OVERHEAD) == [[0, 1, 2, 3]]  # a call costs more than the padding it saves
    assert lanes_of([7, 7, 7], 0) == [[0, 1, 2]]  # equal rows share a lane even when a call is free
    assert lanes_of([], PASS_OVERHEAD) == [] and lanes_of([5], PASS_OVERHEAD) == [[0]]


def test_lanes_merge_when_padding_costs_less_than_a_call():
    assert merge_pays(2, 14, 2, 600, 6000)  # two short rows padded to 600: 1,172 tokens < a call
    assert merge_pays(2, 600, 2, 14, 6000) == merge_pays(2, 14, 2, 600, 6000)  # either lane may be the running one
    assert not merge_pays(30, 14, 2, 600, 6000)  # thirty short rows padded: 17,580 tokens > a call
    assert merge_pays(30, 500, 30, 500, 0)  # equal widths: nothing to pad, merging is free
    assert not merge_pays(1, 10, 1, 12, 1)  # one token of padding beyond what a call costs
