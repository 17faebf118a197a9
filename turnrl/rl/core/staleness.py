"""How stale the trained tokens were: the staleness histogram and the rollout–learner gap per version lag
(docs/concepts.md; the metrics of a run with ``rollout.max_staleness``)."""

from __future__ import annotations

import torch


def staleness_metrics(versions: torch.Tensor, mask: torch.Tensor, version: int) -> dict[str, float]:
    """``staleness_mean``/``staleness_max``: how many versions before ``version`` (the weights updated) the
    generated tokens were sampled, over the tokens whose version is recorded; ``staleness_0``: the share sampled
    by ``version`` itself. Empty when no version is recorded (stored data)."""
    known = (versions >= 0) & mask.bool()
    if not bool(known.any()):
        return {}
    lag = (version - versions)[known].float()
    out = {"staleness_mean": float(lag.mean()), "staleness_max": float(lag.max())}
    for d in range(min(int(lag.max()), 3) + 1):  # the histogram: the share of tokens d versions old (3: 3 or more)
        out[f"staleness_{d}"] = float(((lag == d) if d < 3 else (lag >= d)).float().mean())
    return out


def logp_diff_by_lag(diff: torch.Tensor, versions: torch.Tensor, mask: torch.Tensor, version: int) -> dict[str, float]:
    """``logp_diff_lag{d}``: the mean |learner − sampler| log-probability gap over the tokens sampled ``d`` versions
    before ``version`` (d = 0, 1, 2, 3 or more): how far the policy moved since a stale token was sampled."""
    known = (versions >= 0) & mask.bool()
    lag = (version - versions).clamp(max=3)
    return {
        f"logp_diff_lag{d}": float(diff[known & (lag == d)].mean())
        for d in range(4)
        if bool((known & (lag == d)).any())
    }


def lag0_gap(diff: torch.Tensor, versions: torch.Tensor, mask: torch.Tensor, version: int) -> dict[str, float]:
    """The rollout–learner gap on the tokens sampled by the very weights being updated (lag 0), which the learner
    scored before its first optimizer step: where the two hold the same weights the gap is numerics only, so a
    larger one is a bug (a stale KV cache, a template that drifted, sampling options the learner does not apply).

    Args:
        diff: ``(B, T)`` learner − rollout log-probability of each token (signed).
        versions: ``(B, T)`` the version that sampled each token (−1: not recorded).
        mask: ``(B, T)`` the tokens the learner scored before its first optimizer step.
        version: the version being updated.

    Returns:
        ``lag0_tokens`` (how many), ``lag0_gap_max`` (the largest |gap|) and ``lag0_excess_max`` (the largest
        amount by which the learner's log-probability exceeds the rollout's: with top-p/top-k sampling the rollout's
        is of the renormalized nucleus, never below the learner's, so only this side is a bug); {} without such
        tokens.
    """
    lag0 = mask.bool() & (versions == version)
    if not bool(lag0.any()):
        return {}
    d = diff[lag0].float()
    return {
        "lag0_tokens": float(lag0.sum()),
        "lag0_gap_max": float(d.abs().max()),
        "lag0_excess_max": float(d.max().clamp(min=0)),
    }
