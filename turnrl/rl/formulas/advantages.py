"""Advantage estimators: pure tensor functions (docs/algorithms.md §0, §3, §5, §6, §7, §12).

Tensors are ``(B, T)`` (batch, token); ``mask`` is the loss mask (1 = a token the policy generated).
No config objects, no ``.item()``, no logging: tensors and scalars in, tensors out.
"""

from __future__ import annotations

import torch


def masked_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float | torch.Tensor = 1.0,
    cut_at_mask: bool = False,
    bootstrap: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over generated tokens only (docs/algorithms.md §0 "Masked GAE").

    Env/template tokens (mask 0) are skipped: the recursion passes through them unchanged, so a multi-turn episode
    is one sequence. With ``cut_at_mask`` a turn ends where the next token is masked *and* a later turn follows, and
    nothing flows back across the boundary (PAG's turn-independent GAE, §7); the masked tail after the last turn
    (template suffix, right padding) is not a boundary, so a truncated row's bootstrap reaches its last turn.

    Args:
        rewards: ``(B, T)`` per-token rewards (each turn's reward on its last generated token).
        values: ``(B, T)`` value estimates V(s_t).
        mask: ``(B, T)`` loss mask.
        gamma: discount.
        lam: GAE λ, a float or a ``(B,)`` tensor (one per sequence: VAPO's length-adaptive λ).
        cut_at_mask: reset the recursion at turn boundaries.
        bootstrap: ``(B,)`` value of the state after each sequence's last token: V(s_T) for an episode that was
            *truncated* (turn or context limit), 0 for one that terminated. Default: 0 for every sequence (all
            terminated). With ``cut_at_mask`` it reaches the last turn only, however the row is padded.

    Returns:
        ``(advantages, returns)``, both ``(B, T)``; advantages are 0 on masked tokens; returns = advantages + values.
    """
    B, T = rewards.shape
    m = mask.to(rewards.dtype)
    lam_t = torch.as_tensor(lam, dtype=rewards.dtype, device=rewards.device).expand(B)  # (B,)
    adv = torch.zeros_like(rewards)
    last = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    next_v = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    if bootstrap is not None:
        next_v = bootstrap.to(rewards.dtype).detach().clone()
    # later[:, t]: a generated token at t or after it. A turn boundary needs one *after* the masked gap: the template
    # suffix and right padding that follow a sequence's last turn are not a boundary (§0).
    later = m.flip(-1).cummax(-1).values.flip(-1) > 0 if cut_at_mask else None
    for t in range(T - 1, -1, -1):  # a loop over time on (B,) tensors; no per-sequence Python loop
        if later is not None and t + 2 < T:
            boundary = (m[:, t + 1] == 0) & later[:, t + 2]
            next_v = torch.where(boundary, torch.zeros_like(next_v), next_v)
            last = torch.where(boundary, torch.zeros_like(last), last)
        live = m[:, t] > 0
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        new_last = delta + gamma * lam_t * last
        last = torch.where(live, new_last, last)
        next_v = torch.where(live, values[:, t], next_v)
        adv[:, t] = torch.where(live, new_last, torch.zeros_like(new_last))
    return adv, adv + values


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float = 0.05, floor: float = 0.0) -> torch.Tensor:
    """VAPO's λ_policy = 1 − 1/(α·l) per sequence (docs/algorithms.md §3), clamped to [floor, 1) (the clamp is ours;
    T-PPO's λ_actor uses ``floor`` 0.95, §6).

    Args:
        lengths: ``(B,)`` response lengths (generated tokens).
    """
    lam = 1.0 - 1.0 / (alpha * lengths.to(torch.float64).clamp(min=1e-9))
    return lam.clamp(min=floor, max=1.0 - 1e-12).to(torch.get_default_dtype())


def group_normalize(scores: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO's group-normalized advantage Â_i = (R_i − mean_g) / (std_g + eps), unbiased std (docs/algorithms.md §0).

    Args:
        scores: ``(B,)`` sequence rewards.
        group_ids: ``(B,)`` integer group of each sequence (samples of one prompt share a group).

    Returns:
        ``(B,)``; a group of one gets 0 (its std is undefined), a zero-variance group gets 0.
    """
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    G = counts.numel()
    s = scores.to(torch.float64)
    sums = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, inv, s)
    mean = sums / counts
    sq = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, inv, (s - mean[inv]) ** 2)
    std = torch.sqrt(sq / (counts - 1).clamp(min=1))
    adv = (s - mean[inv]) / (std[inv] + eps)
    adv = torch.where(counts[inv] > 1, adv, torch.zeros_like(adv))
    return adv.to(scores.dtype)


def leave_one_out(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO's baseline-subtracted reward Â_i = R_i − mean_{j≠i, j∈g} R_j, SWiRL's per-state baseline over the G fresh
    samples of one stored state (docs/algorithms.md §1 [recon]).

    Args:
        scores: ``(B,)`` rewards.
        group_ids: ``(B,)`` integer group of each sample.

    Returns:
        ``(B,)``; a group of one gets 0 (it has no other sample to compare with).
    """
    _, inv, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    s = scores.to(torch.float64)
    sums = torch.zeros(counts.numel(), dtype=s.dtype, device=s.device).index_add_(0, inv, s)
    n = counts[inv].to(s.dtype)
    adv = torch.where(n > 1, s - (sums[inv] - s) / (n - 1).clamp(min=1), torch.zeros_like(s))
    return adv.to(scores.dtype)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Whiten ``x`` to mean 0, variance 1 over masked positions; masked-out positions become 0."""
    m = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * m


def role_whiten(x: torch.Tensor, mask: torch.Tensor, roles: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """PAG's RoleAdvNorm (docs/algorithms.md §7): whiten separately over each role's tokens.

    Args:
        roles: ``(B, T)`` integer role per token (e.g. 0 policy, 1 verifier); only masked tokens count.
    """
    out = torch.zeros_like(x)
    for role in torch.unique(roles[mask.bool()]):
        sel = mask.bool() & (roles == role)
        out = out + masked_whiten(x, sel, eps)
    return out


def zero_variance_groups(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: the sequence's group has identical scores (no learning signal; DAPO drops these)."""
    out = torch.zeros_like(scores, dtype=torch.bool)
    for g in group_ids.unique():
        sel = group_ids == g
        out[sel] = bool((scores[sel] == scores[sel][0]).all())
    return out


def kl_penalized_rewards(
    rewards: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """REINFORCE++'s per-token reward r_t − β·(log π(y_t) − log π_ref(y_t)) on generated tokens (docs/algorithms.md
    §12).

    Args:
        rewards: ``(B, T)`` per-token rewards (each turn's reward on its last generated token).
        logp, ref_logp: ``(B, T)`` the sampling policy's and the reference's log-probabilities of each token.
        mask: ``(B, T)`` loss mask; elsewhere the rewards pass unchanged.
    """
    return rewards - beta * (logp - ref_logp) * mask.to(rewards.dtype)


def reward_to_go(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Returns to go with γ = 1 over generated tokens: G_t = Σ_{t' ≥ t, m_{t'} = 1} r_{t'} on generated tokens, 0
    elsewhere (docs/algorithms.md §12, REINFORCE++).

    Args:
        rewards, mask: ``(B, T)``.
    """
    m = mask.to(rewards.dtype)
    return (rewards * m).flip(-1).cumsum(-1).flip(-1) * m


def egae_bootstrap(values: torch.Tensor, mask: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
    """T-PPO's Extended GAE bootstrap (docs/algorithms.md §6 [ref]): an unfinished response of current length l
    continues from V(s_l) := V(s_{l−1}), the value at its last generated token; a finished one ends at 0 (standard GAE).

    Pass it as ``bootstrap`` to :func:`masked_gae`: with γ = λ = 1 an unfinished response's advantage is then
    Σ_{k≥t} r_k + V(s_{l−1}) − V(s_t).

    Args:
        values: ``(B, T)`` V(s_t) at each token.
        mask: ``(B, T)`` loss mask (the generated tokens).
        finished: ``(B,)`` 1 where the response ended (end of sequence or its last window), 0 where it goes on.

    Returns:
        ``(B,)``; 0 for finished rows and rows without a generated token.
    """
    T = mask.shape[-1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    last = torch.where(mask.bool(), positions, torch.full_like(positions, -1)).max(-1).values  # (B,)
    v_last = values.gather(-1, last.clamp(min=0)[:, None]).squeeze(-1)
    keep = (last >= 0) & (finished.to(values.dtype) == 0)
    return torch.where(keep, v_last, torch.zeros_like(v_last))


def window_mask(mask: torch.Tensor, window_start: torch.Tensor) -> torch.Tensor:
    """T-PPO's policy mask (docs/algorithms.md §6): the generated tokens of each sequence's current window only (earlier
    windows act as prompt).

    Args:
        mask: ``(B, T)`` loss mask.
        window_start: ``(B,)`` token index where the current window begins (0: the whole response is new).
    """
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    return mask * (positions >= window_start[:, None]).to(mask.dtype)
