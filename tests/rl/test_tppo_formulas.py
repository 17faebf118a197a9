"""T-PPO's formulas (docs/algorithms.md §6), each listed check a test: Extended GAE for unfinished responses, the policy
mask of the current window, the value mask of finished sequences, λ_actor with a floor. (The algorithm and its
successive-batching source come next; issue 29.)"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from turnrl.rl.formulas.advantages import egae_bootstrap, length_adaptive_lambda, masked_gae, window_mask


def test_a_response_that_finishes_in_its_first_window_gets_standard_gae():
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.zeros(2, 6), torch.rand(2, 6, generator=g)
    rewards[:, 4] = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0]], dtype=torch.float)
    boot = egae_bootstrap(values, mask, finished=torch.ones(2))
    assert boot.tolist() == [0.0, 0.0]
    egae, _ = masked_gae(rewards, values, mask, 1.0, 0.95, bootstrap=boot)
    plain, _ = masked_gae(rewards, values, mask, 1.0, 0.95)
    assert torch.equal(egae, plain)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.integers(0, 3), st.floats(-2, 2))
def test_an_unfinished_responses_advantage_is_rewards_to_go_plus_its_last_value_minus_its_value(T, start, r):
    # γ = λ = 1: Â_t = Σ_{k≥t} r_k + V(s_{l−1}) − V(s_t)
    start = min(start, T - 1)
    g = torch.Generator().manual_seed(T * 7 + start)
    values = torch.randn(1, T, generator=g)
    mask = torch.zeros(1, T)
    mask[0, start:] = 1
    rewards = torch.zeros(1, T)
    rewards[0, start] = r  # a process reward inside the window; no final reward yet
    boot = egae_bootstrap(values, mask, finished=torch.zeros(1))
    assert boot.item() == values[0, T - 1].item()
    adv, _ = masked_gae(rewards, values, mask, 1.0, 1.0, bootstrap=boot)
    for t in range(start, T):
        to_go = float(rewards[0, t:].sum())
        assert adv[0, t].item() == pytest.approx(to_go + values[0, T - 1].item() - values[0, t].item(), abs=1e-5)


def test_the_policy_mask_covers_exactly_the_current_window_and_the_value_mask_only_finished_sequences():
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0]], dtype=torch.float)
    current = window_mask(mask, torch.tensor([4, 0]))
    assert current.tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 0]]  # row 0: its earlier windows act as prompt
    finished = torch.tensor([0.0, 1.0])
    value_mask = mask * finished[:, None]
    assert value_mask.tolist() == [[0] * 6, [0, 0, 1, 1, 0, 0]]


def test_actor_lambda_is_length_adaptive_with_a_floor():
    lam = length_adaptive_lambda(torch.tensor([10.0, 100.0, 1000.0]), 0.05, floor=0.95)
    assert lam[0].item() == pytest.approx(0.95) and lam[1].item() == pytest.approx(0.95)  # 1 − 1/5 < floor
    assert lam[2].item() == pytest.approx(1 - 1 / 50)
    assert length_adaptive_lambda(torch.tensor([10.0]), 0.05).item() == pytest.approx(0.0, abs=1e-6)  # no floor: 1−2<0
