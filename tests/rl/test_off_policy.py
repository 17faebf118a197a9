"""Off-policy corrections (docs/algorithms.md §11): decoupled PPO / truncated importance sampling of the rollout–learner
mismatch — the weight min(π_prox/μ, C) as a pure function, each listed check a test, and the option on the
policy-gradient family (``algorithm.behaviour_is_cap``) in a real learner step."""

import pytest
import torch
from pydantic import ValidationError
from test_dqo import bandit

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.config import TrainConfig
from turnrl.rl.formulas.importance import behaviour_weights
from turnrl.rl.formulas.losses import clipped_surrogate
from turnrl.rl.run.trainer import learner_of


def case(seed=0, B=3, T=6):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g) * 3
    adv = torch.randn(B, T, generator=g)
    mask = (torch.rand(B, T, generator=g) > 0.3).float()
    return logp, adv, mask


def test_weights_are_one_and_the_loss_is_section_0s_when_the_sampler_is_the_proximal_policy():
    logp, adv, mask = case()
    old = logp - 0.1
    w, m = behaviour_weights(old, old.clone(), mask, 2.0)
    assert torch.equal(w, mask) and float(m["is_weight_mean"]) == 1.0 and float(m["is_weight_clipped"]) == 0.0
    plain, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28)
    weighted, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, weights=w)
    assert torch.allclose(plain, weighted)


def test_a_token_the_sampler_found_unlikely_weighs_the_cap_not_the_raw_ratio():
    prox = torch.tensor([[-0.1, -1.0, -2.0]])
    mu = torch.tensor([[-9.0, -1.0, -1.5]])  # token 0: μ ≪ π_prox (raw ratio e^8.9); token 2: π_prox < μ
    w, m = behaviour_weights(prox, mu, torch.ones(1, 3), 2.0)
    assert (
        w[0, 0].item() == 2.0
        and w[0, 1].item() == 1.0
        and w[0, 2].item() == pytest.approx(float(torch.exp(torch.tensor(-0.5))))
    )  # truncation from above only
    assert float(m["is_weight_clipped"]) == pytest.approx(1 / 3) and float(m["is_weight_max"]) == 2.0
    with pytest.raises(ValueError, match=">= 1"):
        behaviour_weights(prox, mu, torch.ones(1, 3), 0.5)


def test_no_gradient_flows_through_the_weight():
    logp, adv, mask = case(1)
    prox = (logp - 0.2).requires_grad_(True)
    mu = (logp - 0.5).requires_grad_(True)
    w, _ = behaviour_weights(prox, mu, mask, 2.0)
    assert w.grad_fn is None
    theta = logp.clone().requires_grad_(True)
    loss, _ = clipped_surrogate(theta, prox.detach(), adv, mask, weights=w)
    loss.backward()
    assert prox.grad is None and mu.grad is None and theta.grad is not None
    # the gradient on θ is the weighted one: each token's gradient scaled by its weight
    theta2 = logp.clone().requires_grad_(True)
    clipped_surrogate(theta2, prox.detach(), adv, mask)[0].backward()
    assert torch.allclose(theta.grad, theta2.grad * w)


def config(**optim):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": {"name": "grpo", "behaviour_is_cap": 2.0},
            "optim": {"lr": 1e-2, **optim},
        }
    )


def test_the_option_needs_the_learners_own_logprobs():
    with pytest.raises(ValidationError, match="behaviour_is_cap.*optim.recompute_logprobs=true"):
        config()
    assert get_algorithm(config(recompute_logprobs=True).algorithm).uses_behaviour_logprobs


def test_a_learner_step_weighs_the_samples_of_another_policy():
    # μ: a model with other weights sampled the data; the learner's π_old differs, so weights differ from 1
    import toy_envs  # noqa: F401 — registers the toy environments

    tok = tiny_tokenizer("chatml")
    trajs, _, _ = bandit(tok, tiny_model(tok, seed=7))
    cfg = config(recompute_logprobs=True)
    learner = learner_of(cfg, tiny_model(tok, seed=1), tok)
    info = learner.update(trajs)
    assert info["rollout_logp_diff"] > 1e-3
    assert 0 < info["is_weight_mean"] <= 2.0 and info["is_weight_mean"] != pytest.approx(1.0, abs=1e-4)
    assert info["is_weight_max"] <= 2.0 and torch.isfinite(torch.tensor(info["loss"]))


# ---- masked importance sampling and IcePop (docs/algorithms.md §11; issue 66) ----


def test_every_variant_is_one_and_leaves_the_loss_as_section_0s_when_the_sampler_is_the_proximal_policy():
    from turnrl.rl.formulas.importance import off_policy_weights

    logp, adv, mask = case(2)
    old = logp - 0.1
    plain, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28)
    for mode in ("truncate", "mask-token", "mask-sequence", "icepop"):
        w, _ = off_policy_weights(mode, old, old.clone(), mask, 5.0)
        assert torch.equal(w, mask), mode
        assert torch.allclose(clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, weights=w)[0], plain), mode


def test_a_token_the_sampler_found_unlikely_is_masked_not_capped():
    from turnrl.rl.formulas.importance import token_mask_weights

    prox = torch.tensor([[-0.1, -1.0, -2.0]])
    mu = torch.tensor([[-9.0, -1.0, -1.5]])  # token 0: ρ = e^8.9 > C
    w, m = token_mask_weights(prox, mu, torch.ones(1, 3), 2.0)
    assert w[0, 0].item() == 0.0 and w[0, 1].item() == 1.0
    assert w[0, 2].item() == pytest.approx(float(torch.exp(torch.tensor(-0.5))))  # below 1: kept as it is
    assert float(m["is_weight_masked"]) == pytest.approx(1 / 3)


def test_a_sequence_outside_the_bounds_contributes_nothing_and_is_counted():
    from turnrl.rl.formulas.importance import sequence_mask_weights

    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    prox = torch.zeros(3, 4)
    # row 0: mean log ρ = ln 1.5 (kept, weight 1.5 on every token); row 1: mean log ρ = 2 (ρ_seq = e² > 2: out);
    # row 2: mean log ρ = −1 (ρ_seq = e^−1 < 1/2: out)
    mu = torch.tensor([[-0.2, -0.6, -(3 * 0.405465 - 0.8), 9.0], [-1.0, -3.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]])
    w, m = sequence_mask_weights(prox, mu, mask, 2.0)
    assert torch.allclose(w[0], torch.tensor([1.5, 1.5, 1.5, 0.0]), atol=1e-4)  # one weight per sequence
    assert torch.equal(w[1], torch.zeros(4)) and torch.equal(w[2], torch.zeros(4))
    assert float(m["is_sequences_masked"]) == 2.0
    logp, adv, _ = case(3, B=3, T=4)
    loss, _ = clipped_surrogate(logp, prox, adv, mask, weights=w, agg="token-mean", count=1.0)
    alone, _ = clipped_surrogate(logp[:1], prox[:1], adv[:1], mask[:1], weights=w[:1], agg="token-mean", count=1.0)
    assert torch.allclose(loss, alone)  # the masked sequences add nothing to the loss


def test_icepop_masks_both_directions_and_keeps_agreement():
    from turnrl.rl.formulas.importance import icepop_weights

    rho = torch.tensor([[0.4, 6.0, 1.0, 0.6, 4.0]])
    w, m = icepop_weights(torch.log(rho), torch.zeros(1, 5), torch.ones(1, 5), 0.5, 5.0)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 1.0, 0.6, 4.0]]))
    assert float(m["is_weight_masked"]) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="0 < low < 1 <= high"):
        icepop_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), 1.5, 5.0)


def test_no_gradient_flows_through_any_variant():
    from turnrl.rl.formulas.importance import off_policy_weights

    logp, adv, mask = case(4)
    for mode in ("truncate", "mask-token", "mask-sequence", "icepop"):
        prox = (logp - 0.2).requires_grad_(True)
        mu = (logp - 0.5).requires_grad_(True)
        w, _ = off_policy_weights(mode, prox, mu, mask, 2.0)
        assert w.grad_fn is None, mode
        theta = logp.clone().requires_grad_(True)
        clipped_surrogate(theta, prox.detach(), adv, mask, weights=w)[0].backward()
        assert prox.grad is None and mu.grad is None and theta.grad is not None, mode


@pytest.mark.parametrize("mode", ["mask-token", "mask-sequence", "icepop"])
def test_a_learner_step_takes_each_variant(mode):
    import toy_envs  # noqa: F401 — registers the toy environments

    tok = tiny_tokenizer("chatml")
    trajs, _, _ = bandit(tok, tiny_model(tok, seed=7))
    cap = 5.0 if mode == "icepop" else 2.0
    cfg = TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": {"name": "grpo", "behaviour_is_cap": cap, "behaviour_is": mode},
            "optim": {"lr": 1e-2, "recompute_logprobs": True},
        }
    )
    info = learner_of(cfg, tiny_model(tok, seed=1), tok).update(trajs)
    assert "is_weight_masked" in info and 0 <= info["is_weight_masked"] <= 1
    assert torch.isfinite(torch.tensor(info["loss"]))


def test_a_variant_without_its_cap_is_refused_with_what_to_set():
    with pytest.raises(ValidationError, match="behaviour_is=icepop.*set algorithm.behaviour_is_cap"):
        TrainConfig.model_validate(
            {
                "model": "tiny",
                "env": {"id": "tests/Upper-v0"},
                "algorithm": {"name": "grpo", "behaviour_is": "icepop"},
                "optim": {"recompute_logprobs": True},
            }
        )


@pytest.mark.parametrize(
    "split",
    [
        {"minibatch_size": 4, "grad_accum": 2},
        {"minibatch_size": 2, "grad_accum": 4},
        {"minibatch_size": 1, "grad_accum": 8},
        {"minibatch_size": 2, "epochs": 2},
    ],
)
def test_counts_and_maxima_do_not_depend_on_how_the_update_is_split(split):
    """Row k's sampler log-probabilities are off by 0.25 (k − 3) nats a token, so ρ_seq = e^{0.25 (k − 3)}: three of the
    eight sequences are masked (C = 2) and the largest weight kept is e^0.5, whatever the micro-batches."""
    from test_learner import episodes

    from turnrl.types import Trajectory

    tok, trajs = episodes()
    skewed = []
    for k, t in enumerate(trajs):
        data = t.model_dump()
        data["logprobs"] = [x - 0.25 * (k - 3) if m else x for x, m in zip(data["logprobs"], data["loss_mask"])]
        skewed.append(Trajectory.model_validate(data))

    def update(**optim):
        cfg = TrainConfig.model_validate(
            {
                "model": "tiny",
                "env": {"id": "tests/Upper-v0"},
                "algorithm": {"name": "grpo", "behaviour_is_cap": 2.0, "behaviour_is": "mask-sequence"},
                "optim": {"lr": 1e-2, "recompute_logprobs": True, **optim},
            }
        )
        return learner_of(cfg, tiny_model(tok), tok).update(skewed)

    whole, split = update(minibatch_size=8, grad_accum=1), update(**split)
    assert whole["is_sequences_masked"] == 3.0 and whole["is_weight_max"] == pytest.approx(float(torch.e**0.5))
    assert split["is_sequences_masked"] == whole["is_sequences_masked"]
    assert split["is_weight_max"] == pytest.approx(whole["is_weight_max"])
