"""Algorithms: small compositions of the primitives (ALGORITHMS.md §3, §4). Switching is a config change.

* ``grpo`` — group-normalized sequence advantages, clipped surrogate, optional KL to a reference model.
* ``dapo`` — GRPO plus clip-higher (0.2/0.28), token-mean, dynamic sampling (zero-variance groups dropped and
  resampled by the trainer), soft overlong punishment added to the reward.
* ``ppo`` — a value head on the policy (or a separate critic transformer, ``critic_model``), masked GAE (λ 0.95
  actor and critic), whitened advantages, clipped value loss. ``turn_independent`` cuts GAE at turn boundaries
  (PAG, §7).
* ``vapo`` — PPO with value pretraining (policy frozen for ``value_warmup_steps``), decoupled GAE (λ_critic = 1),
  length-adaptive λ_actor (α = 0.05), clip-higher, token-mean, and μ·NLL on correct samples (μ = 0.1) (§3).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from turnrl.rl.advantages import group_normalize, length_adaptive_lambda, masked_gae, masked_whiten
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
    name: Literal["grpo", "dapo", "ppo", "vapo"] = "grpo"
    eps_low: float = Field(0.2, gt=0)
    eps_high: float | None = Field(None, gt=0, description="default 0.2 (grpo) / 0.28 (dapo)")
    dual_clip: float | None = Field(None, gt=1)
    agg: AggMode | None = Field(None, description="default seq-mean-token-mean (grpo) / token-mean (dapo)")
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the reference model (grpo); 0 = no reference model")
    dynamic_sampling: bool | None = Field(None, description="default off (grpo) / on (dapo)")
    max_resample: int = Field(10, ge=1, description="generation batches per step when dynamic sampling")
    overlong: OverlongConfig | None = None
    # critic-based algorithms (ppo, vapo)
    lam_actor: float | None = Field(None, ge=0, le=1, description="ppo 0.95; vapo: length-adaptive when None")
    lam_critic: float | None = Field(None, ge=0, le=1, description="ppo 0.95 / vapo 1.0")
    alpha: float = Field(0.05, gt=0, description="length-adaptive λ: 1 - 1/(alpha·length)")
    vf_coef: float = Field(0.5, ge=0)
    eps_value: float = Field(0.5, gt=0)
    critic_lr: float | None = Field(None, gt=0, description="default: 2 x the actor's lr")
    critic_model: str | None = Field(None, description="a separate critic transformer (agent spec sharing the "
                                     "policy's tokenizer, e.g. a smaller model); default: a value head on the policy")
    nll_coef: float | None = Field(None, ge=0, description="μ of the positive-example NLL; vapo 0.1, else 0")
    value_warmup_steps: int | None = Field(None, ge=0, description="vapo 50, else 0: steps training only the critic")
    whiten_advantages: bool | None = Field(None, description="ppo on / vapo off")
    turn_independent: bool = Field(False, description="cut GAE at turn boundaries (PAG)")

    @property
    def uses_critic(self) -> bool:
        """Whether the algorithm trains a value head."""
        return self.name in ("ppo", "vapo")

    @property
    def clip_high(self) -> float:
        """ε_high in effect."""
        return self.eps_high if self.eps_high is not None else (0.28 if self.name in ("dapo", "vapo") else 0.2)

    @property
    def aggregation(self) -> AggMode:
        """Loss aggregation in effect."""
        return self.agg or ("token-mean" if self.name in ("dapo", "vapo") else "seq-mean-token-mean")

    @property
    def critic_lambda(self) -> float:
        """λ of the critic's targets."""
        return self.lam_critic if self.lam_critic is not None else (1.0 if self.name == "vapo" else 0.95)

    @property
    def mu(self) -> float:
        """Positive-example NLL coefficient in effect."""
        return self.nll_coef if self.nll_coef is not None else (0.1 if self.name == "vapo" else 0.0)

    @property
    def warmup(self) -> int:
        """Critic-only steps in effect."""
        return self.value_warmup_steps if self.value_warmup_steps is not None else (50 if self.name == "vapo" else 0)

    @property
    def whiten(self) -> bool:
        """Whether advantages are whitened."""
        return self.whiten_advantages if self.whiten_advantages is not None else self.name == "ppo"

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


def actor_lambda(batch: Batch, cfg: AlgorithmConfig) -> float | torch.Tensor:
    """λ_actor: the configured value, else 0.95 (ppo) or VAPO's length-adaptive λ per sequence (§3)."""
    if cfg.lam_actor is not None:
        return cfg.lam_actor
    if cfg.name == "vapo":
        return length_adaptive_lambda(batch.response_lengths, cfg.alpha)
    return 0.95


def critic_advantages(batch: Batch, values: torch.Tensor, cfg: AlgorithmConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/VAPO: actor advantages (GAE with λ_actor, optionally whitened) and critic targets (GAE with λ_critic).

    Decoupled GAE (VC-PPO/VAPO): the two λ differ; with λ_critic = 1 and γ = 1 the target is the return to go.
    """
    mask = batch.loss_mask
    adv, _ = masked_gae(batch.token_rewards, values, mask, 1.0, actor_lambda(batch, cfg), cfg.turn_independent)
    _, returns = masked_gae(batch.token_rewards, values, mask, 1.0, cfg.critic_lambda, cfg.turn_independent)
    if cfg.whiten:
        adv = masked_whiten(adv, mask)
    return adv, returns
