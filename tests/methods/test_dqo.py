"""DQO (docs/algorithms.md §2): the soft-Q formulas on a solved tabular MDP, their identities, and learner steps."""

import itertools
import math

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.methods.dqo.algorithm import DQO, with_process_rewards
from turnrl.methods.dqo.soft_q import (
    dqo_policy_loss,
    dqo_value_loss,
    importance_weights,
    lambda_returns,
    lambda_returns_explicit,
    next_state_values,
    soft_bellman_residual,
    soft_rewards,
)
from turnrl.rl.config import TrainConfig
from turnrl.rl.core.batch import collate
from turnrl.rl.core.forward import token_logprobs
from turnrl.rl.run.trainer import learner_of
from turnrl.rl.sources.replay import OfflineDataError
from turnrl.tokens import ChatRenderer
from turnrl.types import Message, Trajectory, Turn

BETA = 0.3


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ---- a tabular tree MDP, solved by soft backward induction ----


def solve_tree(depth=3, branching=3, beta=BETA, seed=0):
    """Random π_ref and rewards on every (prefix, token); returns π*, V*, π_ref and r as dicts keyed by prefix."""
    g = torch.Generator().manual_seed(seed)
    states = [p for d in range(depth) for p in itertools.product(range(branching), repeat=d)]
    ref = {s: torch.softmax(torch.randn(branching, generator=g, dtype=torch.float64), 0) for s in states}
    r = {s: torch.randn(branching, generator=g, dtype=torch.float64) for s in states}
    V = {p: torch.zeros((), dtype=torch.float64) for p in itertools.product(range(branching), repeat=depth)}
    pi = {}
    for s in sorted(states, key=len, reverse=True):  # backward induction, deepest states first
        q = r[s] + torch.stack([V[(*s, a)] for a in range(branching)])
        V[s] = beta * torch.logsumexp(torch.log(ref[s]) + q / beta, 0)
        pi[s] = ref[s] * torch.exp((q - V[s]) / beta)
    return pi, V, ref, r


def tree_batch(pi, V, ref, r, depth=3, branching=3, policy=None):
    """Every root-to-leaf path as one row: [prompt, a0, env, env, a1, env, a2]; env positions hold junk values."""
    policy = policy or pi
    layout = [0, 1, 0, 0, 1, 0, 1]  # depth 3: three actions, environment tokens between them
    mask = torch.tensor(layout, dtype=torch.float64)
    acts = mask.nonzero().squeeze(-1).tolist()
    rows = list(itertools.product(range(branching), repeat=depth))
    B, T = len(rows), len(layout)
    junk = torch.Generator().manual_seed(1)
    logp = torch.randn(B, T, generator=junk, dtype=torch.float64)  # junk off the mask: must not matter
    ref_logp, values = logp.clone(), torch.randn(B, T, generator=junk, dtype=torch.float64)
    rewards = torch.zeros(B, T, dtype=torch.float64)
    for b, path in enumerate(rows):
        for h, (t, a) in enumerate(zip(acts, path)):
            s = path[:h]
            logp[b, t], ref_logp[b, t] = torch.log(policy[s][a]), torch.log(ref[s][a])
            values[b, t], rewards[b, t] = V[s], r[s][a]
    return logp, ref_logp, values, rewards, mask.expand(B, T).clone(), rows, acts


def test_every_residual_is_zero_at_the_soft_optimal_policy_and_value():
    pi, V, ref, r = solve_tree()
    logp, ref_logp, values, rewards, mask, rows, acts = tree_batch(pi, V, ref, r)
    nxt = next_state_values(values, mask)
    for b, path in enumerate(rows):  # V(s_{h+1}) is read at the next generated token, across env tokens
        assert [float(nxt[b, t]) for t in acts] == pytest.approx([float(V[path[: h + 1]]) for h in range(3)], abs=1e-12)
    delta = soft_bellman_residual(logp - ref_logp, values, nxt, rewards, mask, BETA)
    assert delta.abs().max() < 1e-10
    for lam in (0.0, 0.5, 1.0):  # soft rewards telescope: every λ-return equals V* on every path
        G, N = lambda_returns(soft_rewards(rewards, logp - ref_logp, mask, BETA), nxt, mask, lam)
        assert torch.allclose(G, values * mask, atol=1e-10)
        w = torch.ones_like(mask) * mask
        assert dqo_value_loss(values, G, mask, w)[0] < 1e-18
        assert dqo_policy_loss(logp - ref_logp, values, rewards, N, mask, w, BETA)[0] < 1e-18
    # not at the optimum: the reference policy (or a wrong V) leaves residuals
    logp_ref_policy = tree_batch(pi, V, ref, r, policy=ref)[0]
    assert soft_bellman_residual(logp_ref_policy - ref_logp, values, nxt, rewards, mask, BETA).abs().max() > 1e-2
    assert soft_bellman_residual(logp - ref_logp, values + 0.1 * mask, nxt, rewards, mask, BETA).abs().max() > 1e-2


def test_a_truncated_episode_bootstraps_from_the_value_after_its_last_token():
    pi, V, ref, r = solve_tree()
    logp, ref_logp, values, rewards, mask, rows, acts = tree_batch(pi, V, ref, r)
    cut = acts[1] + 1  # keep two actions; the third is beyond a turn limit
    boot = torch.stack([V[path[:2]] for path in rows])
    m = mask.clone()
    m[:, cut:] = 0
    delta = soft_bellman_residual(logp - ref_logp, values, next_state_values(values, m, boot), rewards, m, BETA)
    assert delta.abs().max() < 1e-10
    wrong = soft_bellman_residual(logp - ref_logp, values, next_state_values(values, m), rewards, m, BETA)
    assert wrong.abs().max() > 1e-2  # treating the cut as terminal is not optimal


def random_case(seed=0, B=4, T=9):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=g) > 0.35).double()
    mask[0] = torch.tensor([0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=torch.float64)[:T]
    mask[-1, :] = 0
    mask[-1, 3] = 1  # a single action
    rnd = lambda: torch.randn(B, T, generator=g, dtype=torch.float64)
    return rnd(), rnd(), rnd(), rnd(), mask, torch.randn(B, generator=g, dtype=torch.float64)


def test_the_residuals_telescope_along_a_trajectory():
    """Σ_h δ_h = β Σ log ρ + V(s_0) − R − V(s_{H+1}); with λ = 1 the value residual at h = 0 is that sum (DRO)."""
    logp, ref_logp, values, rewards, mask, boot = random_case()
    nxt = next_state_values(values, mask, boot)
    delta = soft_bellman_residual(logp - ref_logp, values, nxt, rewards, mask, BETA)
    first = (mask > 0).double().argmax(-1)
    v0 = values.gather(1, first[:, None]).squeeze(1)
    want = BETA * ((logp - ref_logp) * mask).sum(-1) + v0 - (rewards * mask).sum(-1) - boot
    assert torch.allclose(delta.sum(-1), want, atol=1e-10)
    G, _ = lambda_returns(soft_rewards(rewards, logp - ref_logp, mask, BETA), nxt, mask, 1.0)
    assert torch.allclose(v0 - G.gather(1, first[:, None]).squeeze(1), want, atol=1e-10)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.95, 1.0])
def test_the_lambda_return_recursion_equals_the_explicit_mixture(lam):
    logp, ref_logp, values, rewards, mask, boot = random_case(seed=3)
    soft_r = soft_rewards(rewards, logp - ref_logp, mask, BETA)
    nxt = next_state_values(values, mask, boot)
    G, N = lambda_returns(soft_r, nxt, mask, lam)
    assert torch.allclose(G, lambda_returns_explicit(soft_r, nxt, mask, lam), atol=1e-10)
    assert torch.allclose(G, soft_r + N, atol=1e-12) and not G[mask == 0].any()


def test_lambda_zero_gives_the_one_step_residual_in_both_losses():
    logp, ref_logp, values, rewards, mask, boot = random_case(seed=5)
    nxt = next_state_values(values, mask, boot)
    delta = soft_bellman_residual(logp - ref_logp, values, nxt, rewards, mask, BETA)
    G, N = lambda_returns(soft_rewards(rewards, logp - ref_logp, mask, BETA), nxt, mask, 0.0)
    assert torch.allclose((values - G) * mask, delta, atol=1e-12)  # the value loss's residual
    assert torch.allclose((BETA * (logp - ref_logp) + values - rewards - N) * mask, delta, atol=1e-12)  # the policy's
    _G1, N1 = lambda_returns(soft_rewards(rewards, logp - ref_logp, mask, BETA), nxt, mask, 1.0)
    assert not torch.allclose(N1 * mask, nxt * mask)  # λ = 1 is not the one-step target


def test_importance_weights_are_one_on_policy_and_clipped_off_policy():
    logp, _, _, _, mask, _ = random_case(seed=7)
    for mode in ("token", "trajectory", "none"):
        assert torch.equal(importance_weights(logp, logp.clone(), mask, mode, 2.0), mask)
    behaviour = logp - 0.5 * torch.sign(torch.randn(logp.shape, generator=torch.Generator().manual_seed(0)))
    w = importance_weights(logp, behaviour, mask, "token", 1.5)
    want = torch.minimum(torch.exp(logp - behaviour), torch.tensor(1.5, dtype=torch.float64)) * mask
    assert torch.allclose(w, want) and (w[mask > 0] == 1.5).any() and (w[mask > 0] < 1).any()
    wt = importance_weights(logp, behaviour, mask, "trajectory", 100.0)
    per_row = torch.exp(((logp - behaviour) * mask).sum(-1))
    assert torch.allclose(wt, torch.minimum(per_row, torch.tensor(100.0, dtype=torch.float64))[:, None] * mask)


def test_the_stop_gradients_of_section_2():
    logp, ref_logp, values, rewards, mask, boot = random_case(seed=9)
    logp, values = logp.clone().requires_grad_(), values.clone().requires_grad_()
    nxt = next_state_values(values.detach(), mask, boot)
    G, N = lambda_returns(soft_rewards(rewards, (logp - ref_logp).detach(), mask, BETA), nxt, mask, 0.7)
    w = mask.clone()
    vloss = dqo_value_loss(values, G, mask, w)[0]
    assert torch.autograd.grad(vloss, logp, allow_unused=True)[0] is None
    ploss = dqo_policy_loss((logp - ref_logp) * mask, values, rewards, N, mask, w, BETA)[0]
    assert torch.autograd.grad(ploss, values, allow_unused=True)[0] is None
    assert torch.autograd.grad(ploss, logp)[0].abs().sum() > 0 and torch.autograd.grad(vloss, values)[0].abs().sum() > 0


# ---- learner steps on a tiny model: a two-armed token bandit ----


def bandit(tok, model, rewarded="A", n=4):
    """One group: n episodes pulling arm A and n pulling arm B (one generated token each), with behaviour
    log-probabilities of ``model``; only ``rewarded`` pays 1."""
    prompt = ChatRenderer(tok).prompt_tokens([Message(role="user", content="Pick a letter.")])
    arms = {a: tok.encode(a, add_special_tokens=False)[0] for a in "AB"}
    ids = torch.tensor([[*prompt, arms[a]] for a in "AB"])
    mask = torch.zeros_like(ids, dtype=torch.float32)
    mask[:, -1] = 1
    logp = token_logprobs(model, ids, torch.ones_like(ids), loss_mask=mask)[0][:, -1].tolist()
    out = []
    for k, arm in enumerate("AB"):
        for _ in range(n):
            out.append(
                Trajectory(
                    group_id="g",
                    prompt=[Message(role="user", content="Pick a letter.")],
                    token_ids=ids[k].tolist(),
                    loss_mask=[0] * len(prompt) + [1],
                    logprobs=[0.0] * len(prompt) + [logp[k]],
                    turns=[
                        Turn(
                            index=0,
                            action=Message(role="assistant", content=arm),
                            token_span=(len(prompt), len(prompt) + 1),
                            reward=float(arm == rewarded),
                            terminated=True,
                            info={"correct": arm == rewarded},
                        )
                    ],
                    terminated=True,
                    metadata={"prompt_length": len(prompt)},
                )
            )
    return out, ids[0, :-1], arms


def arm_probs(model, prompt, arms):
    with torch.no_grad():
        p = torch.softmax(model(input_ids=prompt[None]).logits[0, -1].float(), -1)
    return {a: float(p[i]) for a, i in arms.items()}


def dqo_config(**algo):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "turnrl/Arithmetic-v0"},
            "algorithm": {"name": "dqo", "beta": 0.1, **algo},
            "data": {"path": "unused.parquet"},
            "optim": {"lr": 3e-3},
        }
    )


@pytest.mark.parametrize("rewarded,algo", [("A", {}), ("B", {}), ("A", {"critic_model": "tiny:chatml", "lam": 0.5})])
def test_dqo_moves_probability_toward_the_rewarded_token(rewarded, algo):
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=1)
    trajs, prompt, arms = bandit(tok, model, rewarded)
    before = arm_probs(model, prompt, arms)
    learner = learner_of(dqo_config(**algo), model, tok)
    first = learner.update(trajs)
    assert first["is_weight_mean"] == pytest.approx(1.0, abs=1e-4)  # the data's behaviour policy is π_θ: weights 1
    assert math.isfinite(first["loss"]) and first["residual_abs"] > 0
    for _ in range(7):
        info = learner.update(trajs)
    after = arm_probs(model, prompt, arms)
    other = "B" if rewarded == "A" else "A"
    assert after[rewarded] > 2 * before[rewarded], (before, after)
    assert after[other] < before[other], (before, after)
    assert info["value_mean"] != 0.0  # the value model learned something (it starts at 0)


def test_dqo_refuses_data_without_behaviour_logprobs_unless_told_to_assume_on_policy():
    tok = tiny_tokenizer("chatml")
    trajs, _, _ = bandit(tok, tiny_model(tok))
    blind = [t.model_copy(update={"logprobs": [0.0] * len(t.logprobs)}) for t in trajs]
    with pytest.raises(OfflineDataError, match="turnrl rollout.*importance_weights=none"):
        DQO(dqo_config().algorithm).check_data(blind)
    DQO(dqo_config(importance_weights="none").algorithm).check_data(blind)
    DQO(dqo_config().algorithm).check_data(trajs)


def test_process_rewards_sit_on_the_last_token_of_their_step():
    tok = tiny_tokenizer("chatml")
    traj = bandit(tok, tiny_model(tok))[0][0]
    n = len(traj.token_ids)
    long = traj.model_copy(
        update={  # a 4-token answer, steps ending at tokens n, n+2 and the turn's end n+3
            "token_ids": [*traj.token_ids, 5, 6, 7],
            "loss_mask": [*traj.loss_mask, 1, 1, 1],
            "logprobs": traj.logprobs + [-1.0] * 3,
            "turns": [traj.turns[0].model_copy(update={"token_span": (n - 1, n + 3)})],
            "metadata": {**traj.metadata, "process_rewards": [[n - 1, 0.5], [n + 1, -0.25], [n + 2, 1.0]]},
        }
    )
    view = with_process_rewards(long, 2.0)
    b = collate([view], 0)
    want = torch.zeros(n + 3)
    want[n - 1], want[n + 1], want[n + 2] = 1.0, -0.5, 1.0 + 2.0  # the turn's own reward (1) plus its step's
    assert torch.equal(b.token_rewards[0], want)
    assert view.correct is True and collate([long], 0).token_rewards[0].sum() == 1.0
    assert with_process_rewards(long, 0.0) is long
    bad = long.model_copy(update={"metadata": {"process_rewards": [[0, 1.0]]}})  # a prompt token is no step end
    with pytest.raises(OfflineDataError, match="not a generated token"):
        with_process_rewards(bad, 1.0)


def test_recomputed_logprobs_leave_the_behaviour_logprobs_to_the_importance_weights():
    # data sampled by another policy μ (a model with other weights); the learner recomputes π_old: the weights must
    # still be π_θ/μ (not π_θ/π_old, which is 1 on the first pass)
    tok = tiny_tokenizer("chatml")
    trajs, _, _ = bandit(tok, tiny_model(tok, seed=7))
    config = dqo_config().model_copy(
        update={"optim": dqo_config().optim.model_copy(update={"recompute_logprobs": True})}
    )
    learner = learner_of(config, tiny_model(tok, seed=1), tok)
    exp, info = learner.prepare(trajs)
    assert info["rollout_logp_diff"] > 1e-3  # μ and π_old differ
    assert torch.equal(exp.batch.behaviour_logp, collate(trajs, tok.pad_token_id).old_logp)
    assert not torch.allclose(exp.batch.old_logp, exp.batch.behaviour_logp)
    first = learner.update(trajs)
    assert abs(first["is_weight_mean"] - 1.0) > 1e-3  # μ ≠ π_θ: the weights are not all 1


def test_dqo_refuses_data_sampled_at_another_temperature():
    from turnrl.rl.sources.replay import check_temperature

    tok = tiny_tokenizer("chatml")
    trajs, _, _ = bandit(tok, tiny_model(tok))
    hot = [
        t.model_copy(update={"metadata": {**t.metadata, "dataset": {"sampling": {"temperature": 0.7}}}}) for t in trajs
    ]
    with pytest.raises(OfflineDataError, match=r"temperature 0.7.*rollout.temperature=1.*rollout.temperature=0.7"):
        check_temperature(hot, 1.0)
    check_temperature(hot, 0.7)
    greedy = [t.model_copy(update={"metadata": {"dataset": {"sampling": {"temperature": 0.0}}}}) for t in trajs]
    check_temperature(greedy, 1.0)  # greedy samplers record log-probabilities at T = 1
    assert DQO(dqo_config().algorithm).uses_behaviour_logprobs
    assert not DQO(dqo_config(importance_weights="none").algorithm).uses_behaviour_logprobs
