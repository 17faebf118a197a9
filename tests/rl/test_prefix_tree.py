"""Prefix-tree passes (issue 79, "history trained once"): the shared segments of a tree of episodes run once, with the
log-probabilities, entropies, hidden states and gradients of the leaves run as separate rows."""

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.core.forward import forward_tokens
from turnrl.rl.core.prefix_tree import common_end

PAD = 0


def _rand(g, n):
    return torch.randint(5, 400, (n,), generator=g).tolist()


def _rows(seed: int = 0, long: int = 0):
    """Two 4-leaf trees (2 children at turns 1 and 2: prompt, turn 1, observation, turn 2, observation, turn 3; 40, 20, 20, 15, 20 tokens) of
    different tasks with a common 40-token system prompt, a chain beside them, a row with nothing generated, and a
    leaf that is a prefix of its sibling (its episode ended at the branch). Each row: (tokens, generated flags)."""
    g = torch.Generator().manual_seed(seed)
    system = _rand(g, 40)
    rows = []
    for _ in range(2):
        prompt = system + _rand(g, 12)
        for _ in range(2):  # turn 1 branches
            t1, o1 = _rand(g, 40), _rand(g, 20)
            for _ in range(2):  # turn 2 branches
                t2, o2, t3 = _rand(g, 20 + long), _rand(g, 15), _rand(g, 20)
                seq = prompt + t1 + o1 + t2 + o2 + t3
                gen = [0] * len(prompt) + [1] * len(t1) + [0] * len(o1) + [1] * len(t2) + [0] * len(o2) + [1] * 20
                rows.append((seq, gen))
    head, gen = rows[0]
    rows.append((head[:80], gen[:80]))  # ends inside the first tree's shared history
    rows.append((_rand(g, 20), [0] * 8 + [1] * 12))  # a chain of another task
    rows.append((system + _rand(g, 5), [0] * 45))  # nothing generated
    return rows


def _batch(rows):
    T = max(len(s) for s, _ in rows)
    ids = torch.full((len(rows), T), PAD)
    attn = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T))
    for b, (seq, gen) in enumerate(rows):
        ids[b, : len(seq)] = torch.tensor(seq)
        attn[b, : len(seq)] = 1
        mask[b, : len(seq)] = torch.tensor(gen, dtype=torch.float32)
    return ids, attn, mask


def test_common_end():
    assert common_end([[1, 2, 3], [1, 2, 4], [1, 2]], 0) == 2
    assert common_end([[1, 2, 3], [1, 2, 3]], 1) == 3
    assert common_end([[5], [6]], 0) == 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("lanes", [False, True])
def test_prefix_tree_equals_separate_rows(temperature, lanes):
    """Values, entropies, hidden states and every parameter's gradient match the rows run apart (float32: relative
    difference ≤ 1e-5 on every parameter's gradient), and the tree ran far fewer tokens."""
    tok = tiny_tokenizer("chatml")
    ids, attn, mask = _batch(_rows(long=30 if lanes else 0))
    ref_model, model = tiny_model(tok, seed=1).train(), tiny_model(tok, seed=1).train()
    seen: list[int] = []
    hook = model.register_forward_pre_hook(lambda _, a, k: seen.append(k["input_ids"].numel()), with_kwargs=True)
    lp, ent, h = forward_tokens(
        model, ids, attn, temperature, hidden=True, loss_mask=mask, prefix_tree=True, lanes=lanes
    )
    hook.remove()
    ref_lp, ref_ent, ref_h = forward_tokens(ref_model, ids, attn, temperature, hidden=True, loss_mask=mask)
    real = attn > 0  # every position: observations after a row's first generated token are scored too
    assert torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    assert torch.allclose(h[real], ref_h[real], atol=1e-5)
    assert (lp[mask.cumsum(-1) == 0] == 0).all() and int((lp != 0).sum()) > 0.5 * int(mask.sum())
    rows = [ids[b, : int(attn[b].sum())].tolist() for b in range(len(ids))]
    distinct = len({tuple(r[: i + 1]) for r in rows for i in range(len(r))})  # the least any pass can run
    assert sum(seen) < 0.7 * int(attn.sum()) and sum(seen) <= 1.1 * distinct

    weights = torch.rand(mask.shape, generator=torch.Generator().manual_seed(3)) * mask  # each row its own weights
    (ref_lp * weights).sum().backward()
    (lp * weights).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        scale = q.grad.abs().max().clamp(min=1e-12)
        assert float((p.grad - q.grad).abs().max() / scale) <= 1e-5, name


def test_hidden_states_alone_and_rows_without_sharing():
    """``scores=False`` gives the scoring pass's hidden states; rows sharing nothing run as the plain pass does."""
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=2)
    ids, attn, mask = _batch(_rows())
    with torch.no_grad():
        _, _, ref_h = forward_tokens(model, ids, attn, hidden=True, loss_mask=mask, prefix_tree=True)
        lp, ent, h = forward_tokens(model, ids, attn, hidden=True, loss_mask=mask, prefix_tree=True, scores=False)
        real = attn > 0
        assert torch.equal(h[real], ref_h[real]) and (lp == 0).all() and (ent == 0).all()
        g = torch.Generator().manual_seed(5)
        apart = _batch([(_rand(g, n), [0] * 3 + [1] * (n - 3)) for n in (9, 14, 6)])
        a = forward_tokens(model, *apart[:2], loss_mask=apart[2], prefix_tree=True)[0]
        b = forward_tokens(model, *apart[:2], loss_mask=apart[2])[0]
    assert torch.allclose(a, b, atol=1e-5)


def test_a_row_ending_inside_a_short_shared_run_and_answers_that_open_alike():
    """A row that ends inside a shared run too short for a pass of its own is scored all the same; answers that
    share only their first few tokens (row k the first k of a common opening) run in as few forward calls as the
    shared-prompt pass makes, not in one call per branching of their openings."""
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=3)
    g = torch.Generator().manual_seed(11)
    short = _rand(g, 15)
    ended = [
        (short, [0] * 10 + [1] * 5),
        (short + _rand(g, 10), [0] * 10 + [1] * 15),
        (_rand(g, 12), [0] * 4 + [1] * 8),
    ]
    prompt, opening = _rand(g, 60), _rand(g, 16)
    alike = [(prompt + opening[:k] + _rand(g, 30 - k), [0] * 60 + [1] * 30) for k in range(16)]
    for rows in (ended, alike):
        ids, attn, mask = _batch(rows)
        calls, out = {}, {}
        for tree in (False, True):
            seen: list[int] = []
            hook = model.register_forward_pre_hook(lambda _, a, k, seen=seen: seen.append(1), with_kwargs=True)
            with torch.no_grad():
                out[tree] = forward_tokens(
                    model, ids, attn, hidden=True, loss_mask=mask, share_prefix=True, prefix_tree=tree
                )
            hook.remove()
            calls[tree] = len(seen)
        (lp, ent, h), ref = out[True], out[False]
        real = attn > 0
        assert torch.allclose(lp, ref[0], atol=1e-5) and torch.allclose(ent, ref[1], atol=1e-5)
        assert torch.allclose(h[real], ref[2][real], atol=1e-5)
        assert rows is alike or (lp[0, 10:15] != 0).all()  # the row that ended in the short run
        assert calls[True] <= calls[False]
