"""Sequence log-likelihoods and the DPO loss: pure tensor functions (docs/algorithms.md §9, Rafailov et al. 2023)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_logp(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log π(y|x)`` of each row: the sum of the *generated* tokens' log-probabilities (``(B, T)`` → ``(B,)``).

    Environment and template tokens (mask 0) are context, not part of y (docs/algorithms.md §9).
    """
    return (logp * mask.to(logp.dtype)).sum(-1)


def dpo_loss(
    logp_w: torch.Tensor, ref_w: torch.Tensor, logp_l: torch.Tensor, ref_l: torch.Tensor, beta: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-pair DPO loss ``−log σ(β[(log π_θ(y_w) − log π_ref(y_w)) − (log π_θ(y_l) − log π_ref(y_l))])``
    (docs/algorithms.md §9); ``(P,)`` sequence log-probabilities in, ``(P,)`` losses out.

    At π_θ = π_ref every loss is log 2, and the gradient raises log π_θ(y_w) and lowers log π_θ(y_l).

    Returns:
        ``(losses (P,), {"dpo_margin", "dpo_accuracy", "chosen_reward", "rejected_reward"})`` — batch means of
        the β-scaled margin, of margin > 0, and of the implicit rewards β·(log π_θ − log π_ref) of y_w and y_l.
    """
    chosen, rejected = beta * (logp_w - ref_w), beta * (logp_l - ref_l)
    margin = chosen - rejected
    losses = F.softplus(-margin)  # −log σ(margin), stable for large |margin|
    with torch.no_grad():
        metrics = {
            "dpo_margin": margin.mean(),
            "dpo_accuracy": (margin > 0).float().mean(),
            "chosen_reward": chosen.mean(),
            "rejected_reward": rejected.mean(),
        }
    return losses, metrics
