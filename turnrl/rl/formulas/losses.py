"""Policy and value losses: pure tensor functions (docs/algorithms.md §0, §3, §4).

Tensors are ``(B, T)``; ``mask`` is the loss mask. Each loss returns ``(loss, metrics)`` with tensor metrics
(no ``.item()`` inside: the caller decides when to synchronize). Every aggregated loss takes an optional ``count``,
the global normalizer of :func:`agg_count`.
"""

from __future__ import annotations

from typing import Literal

import torch

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def agg_count(mask: torch.Tensor, mode: AggMode = "token-mean") -> torch.Tensor:
    """The denominator of :func:`aggregate` over ``mask``: masked tokens (``token-mean``) or sequences with at least
    one masked token (the seq-mean modes). Counts add up over micro-batches and ranks, so the sum of the counts of
    every piece of a batch is the *global* normalizer that keeps a split batch's loss equal to the whole one's."""
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {AGG_MODES}")
    m = mask.to(torch.float32)
    return m.sum() if mode == "token-mean" else (m.sum(-1) > 0).sum().to(torch.float32)


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: AggMode = "token-mean", count: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Reduce per-token losses to a scalar (docs/algorithms.md §0 "Loss aggregation").

    ``token-mean``: Σ m·ℓ / Σ m over the batch (DAPO, VAPO, PAG). ``seq-mean-token-mean``: mean over sequences of
    each sequence's masked mean (original GRPO/PPO). ``seq-mean-token-sum``: mean over sequences of masked sums.
    Sequences with no masked token are ignored by the seq-mean modes.

    Args:
        count: the normalizer (see :func:`agg_count`); default: this batch's own. Pass the sum of the counts of
            all micro-batches (and ranks) of one optimizer step to make ``Σ_micro aggregate(micro, count=total)``
            equal ``aggregate(whole batch)``: token-mean stays a token mean however the batch is split.
    """
    m = mask.to(values.dtype)
    if mode == "token-mean":
        return (values * m).sum() / (m.sum().clamp(min=1) if count is None else count)
    per_seq_tokens = m.sum(-1)  # (B,)
    has = per_seq_tokens > 0
    if mode == "seq-mean-token-mean":
        per_seq = (values * m).sum(-1) / per_seq_tokens.clamp(min=1)
    elif mode == "seq-mean-token-sum":
        per_seq = (values * m).sum(-1)
    else:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose one of {AGG_MODES}")
    return (per_seq * has).sum() / (has.sum().clamp(min=1) if count is None else count)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    agg: AggMode = "token-mean",
    count: torch.Tensor | float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate with decoupled clip (clip-higher) and optional dual clip (docs/algorithms.md §0, §4).

    ρ = exp(clamp(logp − old_logp, −20, 20)); ℓ = max(−Aρ, −A·clip(ρ, 1−ε_low, 1+ε_high)); for A < 0 with dual
    clip c: ℓ = min(ℓ, c·(−A)). With ``weights`` ``(B, T)`` (no gradient) each token's ℓ is multiplied by its
    weight before aggregation: decoupled PPO / truncated importance sampling (§11, :func:`behaviour_weights`).

    Returns:
        ``(loss, {"clip_frac", "approx_kl", "ratio_mean"})``.
    """
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss_t = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        loss_t = torch.where(advantages < 0, torch.minimum(loss_t, dual_clip * -advantages), loss_t)
    if weights is not None:
        loss_t = weights.detach() * loss_t
    m = mask.to(loss_t.dtype)
    with torch.no_grad():
        metrics = {
            "clip_frac": ((clipped > unclipped).to(m.dtype) * m).sum() / m.sum().clamp(min=1),
            "approx_kl": (0.5 * log_ratio**2 * m).sum() / m.sum().clamp(min=1),
            "ratio_mean": (ratio * m).sum() / m.sum().clamp(min=1),
        }
    return aggregate(loss_t, mask, agg, count), metrics


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    eps_v: float = 0.5,
    agg: AggMode = "token-mean",
    count: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """½·agg(max((v − R)², (clip(v, v_old − ε_v, v_old + ε_v) − R)²)) (docs/algorithms.md §0)."""
    clipped = old_values + torch.clamp(values - old_values, -eps_v, eps_v)
    loss_t = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    m = mask.to(values.dtype)
    with torch.no_grad():
        var = (((returns - (returns * m).sum() / m.sum().clamp(min=1)) ** 2) * m).sum() / m.sum().clamp(min=1)
        resid = (((returns - values) ** 2) * m).sum() / m.sum().clamp(min=1)
        # Undefined when the returns have no variance (e.g. a minibatch with no success): reported as 0 then.
        ev = torch.where(var > 1e-8, 1.0 - resid / var.clamp(min=1e-8), torch.zeros_like(var))
        metrics = {
            "explained_variance": ev,
            "value_clip_frac": (((clipped - returns) ** 2 > (values - returns) ** 2).to(m.dtype) * m).sum()
            / m.sum().clamp(min=1),
        }
    return aggregate(loss_t, mask, agg, count), metrics


def masked_nll(
    logp: torch.Tensor, mask: torch.Tensor, agg: AggMode = "token-mean", count: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Negative log-likelihood of the masked tokens (VAPO's positive-example LM loss uses the correct samples' mask).

    Returns 0 (with a gradient path) when the mask is empty, e.g. when no sample in the batch was correct.
    """
    return aggregate(-logp, mask, agg, count)
