"""Algorithms: small compositions of the primitives (ALGORITHMS.md §3, §4). Switching is a config change.

* ``grpo`` — group-normalized sequence advantages, clipped surrogate, optional KL to a reference model.
* ``dapo`` — GRPO plus clip-higher (0.2/0.28), token-mean, dynamic sampling (zero-variance groups dropped and
  resampled by the trainer), soft overlong punishment added to the reward.

PPO and VAPO (critic, decoupled and length-adaptive GAE, value pretraining, positive-example NLL) compose
``masked_gae``/``length_adaptive_lambda``/``clipped_value_loss``/``masked_nll`` the same way; they are not wired
into the trainer yet.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from turnrl.rl.advantages import group_normalize
from turnrl.rl.batch import Batch
from turnrl.rl.losses import AggMode, aggregate, clipped_surrogate
from turnrl.rl.rewards import overlong_penalty


class OverlongConfig(BaseModel):
    """DAPO's soft overlong punishment: L_max is the per-turn generation limit, ``cache_len`` the buffer."""

    model_config = ConfigDict(extra="forbid")
    cache_len: int = Field(16, ge=1)


class AlgorithmConfig(BaseModel):
    """The objective. Defaults follow ALGORITHMS.md; ``name`` picks grpo or dapo (dapo changes the defaults noted)."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["grpo", "dapo"] = "grpo"
    eps_low: float = Field(0.2, gt=0)
    eps_high: float | None = Field(None, gt=0, description="default 0.2 (grpo) / 0.28 (dapo)")
    dual_clip: float | None = Field(None, gt=1)
    agg: AggMode | None = Field(None, description="default seq-mean-token-mean (grpo) / token-mean (dapo)")
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the reference model (grpo); 0 = no reference model")
    dynamic_sampling: bool | None = Field(None, description="default off (grpo) / on (dapo)")
    max_resample: int = Field(10, ge=1, description="generation batches per step when dynamic sampling")
    overlong: OverlongConfig | None = None

    @property
    def clip_high(self) -> float:
        """ε_high in effect."""
        return self.eps_high if self.eps_high is not None else (0.28 if self.name == "dapo" else 0.2)

    @property
    def aggregation(self) -> AggMode:
        """Loss aggregation in effect."""
        return self.agg or ("token-mean" if self.name == "dapo" else "seq-mean-token-mean")

    @property
    def dynamic(self) -> bool:
        """Whether zero-variance groups are dropped and resampled."""
        return self.dynamic_sampling if self.dynamic_sampling is not None else self.name == "dapo"


def sequence_rewards(batch: Batch, cfg: AlgorithmConfig, max_new_tokens: int) -> torch.Tensor:
    """Per-sequence rewards: the episode's total, plus the overlong penalty of its longest turn when enabled."""
    scores = batch.scores.clone()
    if cfg.overlong is not None:
        turn_lengths = torch.stack([(batch.turn_ids == k).sum(-1) for k in range(int(batch.turn_ids.max()) + 1)], -1) \
            if int(batch.turn_ids.max()) >= 0 else torch.zeros(len(batch), 1)
        scores = scores + overlong_penalty(turn_lengths.max(-1).values, max_new_tokens, min(cfg.overlong.cache_len,
                                                                                            max_new_tokens))
    return scores


def group_advantages(batch: Batch, scores: torch.Tensor) -> torch.Tensor:
    """GRPO/DAPO token advantages: each sequence's group-normalized score on its generated tokens. ``(B, T)``."""
    return group_normalize(scores, batch.group_ids)[:, None] * batch.loss_mask


def zero_variance_groups(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: the sequence's group has identical scores (no learning signal; DAPO drops these)."""
    out = torch.zeros_like(scores, dtype=torch.bool)
    for g in group_ids.unique():
        sel = group_ids == g
        out[sel] = bool((scores[sel] == scores[sel][0]).all())
    return out


def policy_loss(logp: torch.Tensor, batch: Batch, advantages: torch.Tensor, cfg: AlgorithmConfig,
                ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (+ β·KL to the reference, k3 estimator) for GRPO/DAPO."""
    loss, metrics = clipped_surrogate(logp, batch.old_logp, advantages, batch.loss_mask, cfg.eps_low, cfg.clip_high,
                                      cfg.dual_clip, cfg.aggregation)
    if cfg.kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs reference log-probabilities")
        diff = ref_logp - logp
        kl = torch.exp(diff) - diff - 1  # k3: unbiased, positive
        kl_mean = aggregate(kl, batch.loss_mask, cfg.aggregation)
        loss = loss + cfg.kl_coef * kl_mean
        metrics["kl"] = kl_mean.detach()
    return loss, metrics
