"""One test per check listed in docs/algorithms.md §0, §3, §4, §5, §7 for the pure primitives."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from turnrl.rl.formulas.advantages import (
    group_normalize,
    length_adaptive_lambda,
    masked_gae,
    masked_whiten,
    role_whiten,
)
from turnrl.rl.formulas.losses import aggregate, clipped_surrogate, clipped_value_loss, masked_nll
from turnrl.rl.formulas.rewards import longest_turn, on_last_token, overlong_penalty


@pytest.fixture(autouse=True)
def float64():
    """Exact arithmetic for these checks; the global default is restored afterwards."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def rand(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, generator=g)


# ---- §0 masked GAE ----


def test_gae_with_gamma_lambda_one_is_monte_carlo_return_minus_value():
    r, v = rand(3, 7), rand(3, 7, 1)
    mask = torch.ones(3, 7)
    adv, ret = masked_gae(r, v, mask, gamma=1.0, lam=1.0)
    mc = r.flip(-1).cumsum(-1).flip(-1)
    assert torch.allclose(adv, mc - v) and torch.allclose(ret, mc)


def test_gae_with_lambda_zero_is_the_td_error():
    r, v = rand(2, 5), rand(2, 5, 1)
    adv, _ = masked_gae(r, v, torch.ones(2, 5), gamma=0.9, lam=0.0)
    next_v = torch.cat([v[:, 1:], torch.zeros(2, 1)], 1)
    assert torch.allclose(adv, r + 0.9 * next_v - v)


def test_gae_skips_env_tokens_and_accepts_per_sequence_lambda():
    r = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    v = torch.tensor([[0.1, 0.2, 99.0, 0.3, 0.4]])  # a value at an env token must not matter
    mask = torch.tensor([[1, 1, 0, 1, 1]])
    adv, _ = masked_gae(r, v, mask, lam=1.0)
    assert adv[0, 2] == 0 and torch.allclose(adv[0, [0, 1, 3, 4]], 1.0 - v[0, [0, 1, 3, 4]])
    two = masked_gae(torch.cat([r, r]), torch.cat([v, v]), torch.cat([mask, mask]), lam=torch.tensor([1.0, 0.0]))[0]
    assert torch.allclose(two[0], adv[0]) and not torch.allclose(two[1], adv[0])


def test_vc_ppo_reward_decay_with_lambda_095():
    T = 100
    r = torch.zeros(1, T)
    r[0, -1] = 1.0
    adv, _ = masked_gae(r, torch.zeros(1, T), torch.ones(1, T), lam=0.95)
    assert math.isclose(adv[0, 0].item(), 0.95 ** (T - 1), rel_tol=1e-9) and adv[0, 0] < 1e-2


def test_pag_turn_independent_gae_has_no_leakage():
    mask = torch.tensor([[1, 1, 1, 0, 1, 1, 0, 1, 1]])
    r = torch.tensor([[0, 0, 1.0, 0, 0, 2.0, 0, 0, -1.0]])
    adv, _ = masked_gae(r, torch.zeros(1, 9), mask, cut_at_mask=True)
    assert adv[0].tolist() == [1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 0.0, -1.0, -1.0]
    leaky, _ = masked_gae(r, torch.zeros(1, 9), mask, cut_at_mask=False)
    assert leaky[0, 0] == 2.0  # without the cut, later turns' rewards flow back


def test_terminated_episode_does_not_bootstrap():
    # no bootstrap given: the state after the last token is terminal, V(s_T) = 0
    r, v = torch.zeros(1, 3), torch.tensor([[0.5, 0.5, 0.5]])
    adv, _ret = masked_gae(r, v, torch.ones(1, 3), lam=0.0)
    assert torch.allclose(adv[0, :2], torch.zeros(2)) and adv[0, 2] == -0.5


def test_truncated_episode_bootstraps_through_its_last_value():
    # a truncated episode has no terminal reward; with V(s_T) = b kept, the last token's advantage is r + b - V
    r, v = torch.zeros(1, 3), torch.tensor([[0.5, 0.5, 0.5]])
    adv, _ = masked_gae(r, v, torch.ones(1, 3), lam=0.0, bootstrap=torch.tensor([2.0]))
    assert torch.allclose(adv[0], torch.tensor([0.0, 0.0, 1.5]))
    _adv1, ret1 = masked_gae(r, v, torch.ones(1, 3), lam=1.0, bootstrap=torch.tensor([2.0]))
    assert torch.allclose(ret1[0], torch.full((3,), 2.0))  # γ = λ = 1: the return to go is the bootstrap


@pytest.mark.parametrize("cut", [False, True])
def test_padded_truncated_row_keeps_its_bootstrap(cut):
    # docs/algorithms.md §0: two truncated rows with bootstrap 2, γ = λ = 1, V = 0; the second is right-padded (and has
    # a template suffix) — the padding is not a turn boundary, so both get advantage 2 on their last turn
    mask = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 1, 0, 1, 0, 0]], dtype=torch.float)
    adv, _ = masked_gae(torch.zeros(2, 6), torch.zeros(2, 6), mask, cut_at_mask=cut, bootstrap=torch.tensor([2.0, 2.0]))
    assert adv[0, 3:].tolist() == [2.0, 2.0, 2.0] and adv[1, 3].item() == 2.0
    # the first turn: cut at the turn boundary (a later turn follows), or the bootstrap flows back without the cut
    first = 0.0 if cut else 2.0
    assert adv[:, :2].tolist() == [[first, first], [first, first]]


# ---- §0 group normalization, whitening ----


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=2, max_size=24), st.integers(1, 4))
def test_group_normalized_advantages_sum_to_zero(scores, groups):
    s = torch.tensor(scores)
    ids = torch.arange(len(scores)) % groups
    adv = group_normalize(s, ids)
    for g in ids.unique():
        assert abs(adv[ids == g].sum().item()) < 1e-6


def test_group_normalize_values_and_zero_variance_groups():
    adv = group_normalize(torch.tensor([1.0, 0.0, 1.0, 1.0, 5.0]), torch.tensor([0, 0, 1, 1, 2]))
    assert torch.allclose(adv[:2], torch.tensor([0.5, -0.5]) / (math.sqrt(0.5) + 1e-6))
    assert adv[2:].tolist() == [0.0, 0.0, 0.0]  # all-correct group and a singleton: no signal


def test_whitening_and_role_whitening():
    x, mask = rand(2, 6), torch.tensor([[1, 1, 1, 0, 1, 1], [1, 0, 1, 1, 1, 1]])
    w = masked_whiten(x, mask)
    sel = mask.bool()
    assert (
        abs(w[sel].mean().item()) < 1e-9 and abs(w[sel].var(unbiased=False).item() - 1) < 1e-6 and (w[~sel] == 0).all()
    )
    roles = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 0, 0, 0, 1]])
    rw = role_whiten(x * 10 + roles * 100, mask, roles)
    for role in (0, 1):
        s = sel & (roles == role)
        assert abs(rw[s].mean().item()) < 1e-9 and abs(rw[s].var(unbiased=False).item() - 1) < 1e-6


# ---- §0 losses ----


def test_at_ratio_one_the_clipped_loss_is_minus_a():
    adv, mask = rand(2, 5), torch.ones(2, 5)
    lp = rand(2, 5, 3)
    loss, m = clipped_surrogate(lp, lp.clone(), adv, mask)
    assert torch.isclose(loss, -adv.mean()) and m["clip_frac"] == 0


def test_values_at_masked_tokens_do_not_change_the_loss():
    adv, lp, old = rand(2, 6), rand(2, 6, 1), rand(2, 6, 2)
    mask = torch.tensor([[1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    base, _ = clipped_surrogate(lp, old, adv, mask)
    lp2, adv2 = lp.clone(), adv.clone()
    lp2[mask == 0], adv2[mask == 0] = 50.0, -1e6
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        a, _ = clipped_surrogate(lp, old, adv, mask, agg=mode)
        b, _ = clipped_surrogate(lp2, old, adv2, mask, agg=mode)
        assert torch.isclose(a, b)
    assert torch.isfinite(base)


def test_token_mean_weights_every_token_equally_seq_mean_does_not():
    values = torch.zeros(2, 1000)
    mask = torch.zeros(2, 1000)
    mask[0, :1000], mask[1, :10] = 1, 1
    values[1, :10] = 1.0  # the short sequence's tokens
    assert torch.isclose(aggregate(values, mask, "token-mean"), torch.tensor(10 / 1010))
    assert torch.isclose(aggregate(values, mask, "seq-mean-token-mean"), torch.tensor(0.5))
    assert torch.isclose(aggregate(values, mask, "seq-mean-token-sum"), torch.tensor(5.0))
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(values, mask, "mean")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_aggregation_ignores_extra_padding(mode):
    v, m = rand(3, 4), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    padded_v = torch.cat([v, rand(3, 5, 9)], 1)
    padded_m = torch.cat([m, torch.zeros(3, 5)], 1)
    assert torch.isclose(aggregate(v, m, mode), aggregate(padded_v, padded_m, mode))


# ---- §4 DAPO: clip-higher, dual clip, overlong punishment ----


def grad_of(ratio, adv, **kw):
    lp = torch.log(torch.tensor([[ratio]])).requires_grad_(True)
    loss, _ = clipped_surrogate(lp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), **kw)
    loss.backward()
    return lp.grad.item(), loss.item()


def test_clip_higher_gradients_vanish_outside_the_trust_region():
    kw = {"eps_low": 0.2, "eps_high": 0.28}
    assert grad_of(1.27, 1.0, **kw)[0] != 0 and grad_of(1.29, 1.0, **kw)[0] == 0  # A > 0: stops past 1 + ε_high
    assert grad_of(0.81, -1.0, **kw)[0] != 0 and grad_of(0.79, -1.0, **kw)[0] == 0  # A < 0: stops below 1 − ε_low


def test_dual_clip_bounds_negative_advantage_loss():
    _, loss = grad_of(100.0, -2.0, dual_clip=3.0)
    assert loss == pytest.approx(6.0)  # c · |A|
    _, unbounded = grad_of(100.0, -2.0)
    assert unbounded == pytest.approx(200.0)
    with pytest.raises(ValueError):
        grad_of(1.0, -1.0, dual_clip=0.5)


def test_all_correct_group_has_zero_advantage():
    assert group_normalize(torch.ones(4), torch.zeros(4, dtype=torch.long)).abs().max() == 0


def test_overlong_penalty_shape_and_continuity():
    L, C = 100, 20
    f = lambda n: overlong_penalty(torch.tensor([float(n)]), L, C).item()
    assert f(50) == 0 and f(80) == 0 and f(90) == pytest.approx(-0.5) and f(100) == pytest.approx(-1) and f(101) == -1
    assert abs(f(80 + 1e-9)) < 1e-6 and abs(f(100 + 1e-9) - f(100)) < 1e-6  # continuous at both breakpoints
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1.0]), 10, 20)


def test_longest_turn_counts_each_turns_generated_tokens():
    turn_ids = torch.tensor([[-1, 0, 0, 0, -1, 1, 1, -1], [-1, -1, 0, -1, 1, 1, 1, 1], [-1] * 8])
    assert longest_turn(turn_ids).tolist() == [3, 4, 0]  # a row with no generated token: 0


def test_on_last_token_puts_a_sequence_value_on_its_last_generated_token():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    out = on_last_token(torch.tensor([-0.5, 2.0, 7.0]), mask)
    assert out[0].tolist() == [0, 0, 0, 0, -0.5, 0] and out[1].tolist() == [0, 0, 0, 2.0, 0, 0]
    assert out[2].abs().sum() == 0  # nothing generated: nowhere to put it


# ---- §3 VAPO ----


def test_length_adaptive_lambda():
    lengths = torch.tensor([10.0, 20.0, 21.0, 100.0, 1000.0])
    lam = length_adaptive_lambda(lengths, alpha=0.05)
    assert lam[0] == 0 and lam[1] == 0  # l <= 20 clamps to 0
    assert (lam[1:].diff() >= 0).all()
    assert torch.allclose(1 / (1 - lam[2:]), 0.05 * lengths[2:])
    assert (lam < 1).all()


def test_critic_lambda_one_target_is_the_final_reward_everywhere():
    T = 6
    r = torch.zeros(2, T)
    r[:, -1] = torch.tensor([1.0, 0.0])
    _, ret = masked_gae(r, rand(2, T), torch.ones(2, T), gamma=1.0, lam=1.0)
    assert torch.allclose(ret, r[:, -1:].expand(2, T))


def test_nll_is_zero_when_no_sample_is_correct():
    lp = rand(3, 4).requires_grad_(True)
    loss = masked_nll(lp, torch.zeros(3, 4))
    loss.backward()
    assert loss.item() == 0 and lp.grad.abs().sum() == 0
    assert masked_nll(torch.log(torch.full((1, 2), 0.5)), torch.ones(1, 2)).item() == pytest.approx(math.log(2))


def test_clipped_value_loss():
    v, old, ret = torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]])
    loss, _ = clipped_value_loss(v, old, ret, torch.ones(1, 1), eps_v=0.5)
    assert loss.item() == pytest.approx(0.5 * 4.0)  # max of unclipped (4) and clipped (0.25)
    loss, _ = clipped_value_loss(torch.tensor([[0.1]]), old, torch.tensor([[1.0]]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.5 * 0.81)
    _good, _m = clipped_value_loss(ret + 0, ret + 0, torch.tensor([[1.0, 2.0]]), torch.ones(1, 2))
    perfect = clipped_value_loss(
        torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 2.0]]), torch.ones(1, 2)
    )[1]
    assert perfect["explained_variance"].item() == pytest.approx(1.0)
    flat = clipped_value_loss(torch.tensor([[0.3, 0.1]]), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))[1]
    assert flat["explained_variance"].item() == 0.0  # constant returns: undefined, reported as 0
