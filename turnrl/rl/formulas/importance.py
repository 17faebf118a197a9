"""Importance weights against the policy that sampled each token (docs/algorithms.md §11): truncated, masked at
token or sequence level, and IcePop's two-sided mask.

ρ_t = π_prox(y_t)/μ(y_t): π_prox is the policy at the start of the update as the learner scores it (``old_logp``
recomputed, ``optim.recompute_logprobs``), μ the policy that sampled the token (the rollout engine's log-probability,
possibly of an older version). Every weight is a constant of the loss (no gradient flows through it) that multiplies
each token's surrogate; with μ = π_prox every weight is 1 and the surrogate is §0's.

Which to use (docs/algorithms.md §11): truncation keeps every token and bounds its weight — the default for stale
samples and small engine mismatches; masking drops what is too far off instead of letting it in at the cap — for
engines whose numbers drift (ratios that explode with vLLM in bf16); the sequence-level mask judges a whole answer
by its geometric-mean ratio; IcePop masks in both directions — for mixture-of-experts models whose routing differs
between engine and trainer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _ratio(prox_logp: torch.Tensor, behaviour_logp: torch.Tensor) -> torch.Tensor:
    """ρ_t = exp(log π_prox − log μ), the log-ratio clamped to ±20 (no overflow), without gradient."""
    return torch.exp(torch.clamp(prox_logp.detach() - behaviour_logp.detach(), -20.0, 20.0))


def _metrics(w: torch.Tensor, m: torch.Tensor, out: torch.Tensor, name: str) -> dict[str, torch.Tensor]:
    """``is_weight_mean``/``is_weight_max`` over masked tokens and the share ``name`` of them that ``out`` marks."""
    n = m.sum().clamp(min=1)
    return {"is_weight_mean": w.sum() / n, "is_weight_max": w.max(), name: (out.to(m.dtype) * m).sum() / n}


def _masked(
    prox_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    mask: torch.Tensor,
    out_of: Callable[[torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """w_t = ρ_t, or 0 where ``out_of(ρ)`` marks the token (the token-level masks), with their metrics."""
    m = mask.to(prox_logp.dtype)
    raw = _ratio(prox_logp, behaviour_logp)
    out = out_of(raw)
    w = torch.where(out, torch.zeros_like(raw), raw) * m
    return w, _metrics(w, m, out, "is_weight_masked")


def behaviour_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Truncated importance sampling: w_t = min(ρ_t, C) (docs/algorithms.md §11; decoupled PPO, Hilton et al., 2021;
    the rollout–learner mismatch, Yao et al., 2025).

    Args:
        prox_logp, behaviour_logp: ``(B, T)`` log π_prox and log μ of each token.
        mask: ``(B, T)`` loss mask (weights are 0 elsewhere).
        cap: C ≥ 1, the truncation.

    Returns:
        ``(w (B, T), {"is_weight_mean", "is_weight_max", "is_weight_clipped"})`` over masked tokens.
    """
    if cap < 1:
        raise ValueError(f"the importance-weight cap must be >= 1, got {cap}")
    m = mask.to(prox_logp.dtype)
    raw = _ratio(prox_logp, behaviour_logp)
    w = torch.clamp(raw, max=cap) * m
    return w, _metrics(w, m, raw > cap, "is_weight_clipped")


def token_mask_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Masked importance sampling, token level: w_t = ρ_t if ρ_t ≤ C, else 0 (docs/algorithms.md §11; "When speed
    kills stability", 2025): a token the sampler found far less likely than the learner does carries no gradient,
    instead of coming in at the cap.

    Returns:
        ``(w (B, T), {"is_weight_mean", "is_weight_max", "is_weight_masked"})`` over masked tokens.
    """
    if cap < 1:
        raise ValueError(f"the importance-weight cap must be >= 1, got {cap}")
    return _masked(prox_logp, behaviour_logp, mask, lambda raw: raw > cap)


def sequence_mask_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Masked importance sampling, sequence level (docs/algorithms.md §11): ρ_seq = exp(mean_t log ρ_t) over each
    row's masked tokens (the geometric mean, so that length does not decide); every token of the row weighs ρ_seq
    if 1/C ≤ ρ_seq ≤ C, else 0 — the whole sequence is left out of the update (``is_sequences_masked`` counts
    them).

    Returns:
        ``(w (B, T), {"is_weight_mean", "is_weight_max", "is_weight_masked", "is_sequences_masked"})``.
    """
    if cap < 1:
        raise ValueError(f"the importance-weight cap must be >= 1, got {cap}")
    m = mask.to(prox_logp.dtype)
    log_ratio = torch.clamp(prox_logp.detach() - behaviour_logp.detach(), -20.0, 20.0) * m
    tokens = m.sum(-1)
    rho = torch.exp(log_ratio.sum(-1) / tokens.clamp(min=1))  # (B,)
    out = (rho < 1.0 / cap) | (rho > cap)
    w = torch.where(out, torch.zeros_like(rho), rho)[:, None] * m
    metrics = _metrics(w, m, out[:, None].expand_as(m), "is_weight_masked")
    metrics["is_sequences_masked"] = (out & (tokens > 0)).to(m.dtype).sum()
    return w, metrics


def icepop_weights(
    prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """IcePop's two-sided token mask (docs/algorithms.md §11; inclusionAI, 2025): w_t = ρ_t if α ≤ ρ_t ≤ β, else 0 —
    a token whose probability trainer and engine disagree on in either direction carries no gradient (typical
    α = 0.5, β = 5).

    Returns:
        ``(w (B, T), {"is_weight_mean", "is_weight_max", "is_weight_masked"})`` over masked tokens.
    """
    if not 0 < low < 1 <= high:
        raise ValueError(f"IcePop needs 0 < low < 1 <= high, got low={low}, high={high}")
    return _masked(prox_logp, behaviour_logp, mask, lambda raw: (raw < low) | (raw > high))


def off_policy_weights(
    mode: str, prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float, floor: float = 0.5
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weights of ``mode`` (``algorithm.behaviour_is``): ``truncate`` (:func:`behaviour_weights`), ``mask-token``,
    ``mask-sequence`` (with C = ``cap``) or ``icepop`` (α = ``floor``, β = ``cap``)."""
    if mode == "truncate":
        return behaviour_weights(prox_logp, behaviour_logp, mask, cap)
    if mode == "mask-token":
        return token_mask_weights(prox_logp, behaviour_logp, mask, cap)
    if mode == "mask-sequence":
        return sequence_mask_weights(prox_logp, behaviour_logp, mask, cap)
    if mode == "icepop":
        return icepop_weights(prox_logp, behaviour_logp, mask, floor, cap)
    raise ValueError(f"unknown importance-weight mode {mode!r}: truncate, mask-token, mask-sequence or icepop")
