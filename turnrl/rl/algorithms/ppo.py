"""PPO and VAPO: a critic, (decoupled, length-adaptive) GAE and the clipped surrogate (docs/algorithms.md §0, §3).

* ``ppo`` — a value head on the policy (or a separate critic transformer, ``critic_model``), masked GAE with
  λ = 0.95 for actor and critic, whitened advantages, clipped value loss (ε_v = 0.5). ``turn_independent`` cuts GAE
  at turn boundaries (PAG, §7). Truncated episodes bootstrap from the critic's value of their last state.
* ``vapo`` — PPO with value pretraining (the policy is not stepped at all for ``value_warmup_steps``), decoupled GAE
  (λ_critic = 1), length-adaptive λ_actor = 1 − 1/(α·l) (α = 0.05), clip-higher, token-mean, and μ·NLL on correct
  samples (μ = 0.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

import torch
from pydantic import Field

from turnrl.rl.algorithms.base import (
    CriticSpec,
    Experience,
    Forward,
    OverlongConfig,
    PolicyGradient,
    PolicyGradientConfig,
)
from turnrl.rl.core.batch import Batch
from turnrl.rl.core.value_model import saved_base
from turnrl.rl.formulas.advantages import length_adaptive_lambda, masked_gae, masked_whiten
from turnrl.rl.formulas.losses import AggMode, clipped_value_loss
from turnrl.rl.formulas.rewards import on_last_token

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class PPOConfig(PolicyGradientConfig):
    """PPO's options (docs/algorithms.md §0)."""

    name: Literal["ppo"] = "ppo"
    lam_actor: float = Field(0.95, ge=0, le=1, description="GAE λ of the actor's advantages")
    lam_critic: float = Field(0.95, ge=0, le=1, description="GAE λ of the critic's targets (vapo: 1)")
    vf_coef: float = Field(0.5, ge=0)
    eps_value: float = Field(0.5, gt=0)
    critic_lr: float | None = Field(None, gt=0, description="default: 2 x the actor's lr")
    critic_model: str | None = Field(
        None,
        description="a separate critic transformer (agent spec sharing the "
        "policy's tokenizer, e.g. a smaller model); default: a value head on the policy",
    )
    critic_init: str | None = Field(
        None,
        description=(
            "start the separate critic as a process reward model (its folder, `turnrl prm train`): its backbone and "
            "head; critic_model defaults to the PRM's base model"
        ),
    )
    value_warmup_steps: int = Field(0, ge=0, description="steps that train only the critic (vapo: 50)")
    whiten_advantages: bool = Field(True, description="whiten the actor's advantages (vapo: off)")
    turn_independent: bool = Field(False, description="cut GAE at turn boundaries: nothing flows across turns (PAG)")
    overlong: OverlongConfig | None = Field(
        None,
        description=(
            "DAPO's soft overlong punishment on the last token's reward of each finished episode (off by default)"
        ),
    )


class VAPOConfig(PPOConfig):
    """VAPO's options (docs/algorithms.md §3). ``lam_actor`` None = length-adaptive."""

    name: Literal["vapo"] = "vapo"  # type: ignore[assignment]  # its own name: the discriminator
    eps_high: float = Field(0.28, gt=0)
    agg: AggMode = "token-mean"
    nll_coef: float = Field(0.1, ge=0)
    lam_actor: float | None = Field(None, ge=0, le=1, description="None: length-adaptive 1 - 1/(alpha·length)")  # type: ignore[assignment]  # None: adaptive
    alpha: float = Field(0.05, gt=0, description="length-adaptive λ: 1 - 1/(alpha·length)")
    lam_critic: float = Field(1.0, ge=0, le=1)
    value_warmup_steps: int = Field(50, ge=0)
    whiten_advantages: bool = False


class PPO(PolicyGradient):
    """Proximal Policy Optimization with a critic (see the module docstring)."""

    name = "ppo"
    Config = PPOConfig
    cfg: PPOConfig

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Value pretraining needs the torch learner: DeepSpeed's optimizer steps the policy too (with zero
        gradients its Adam moments and step count move)."""
        super().check_config(cfg)
        alg = cast(PPOConfig, cfg.algorithm)  # this algorithm's (PPO's or a subclass's)
        if cfg.learner.backend == "deepspeed" and alg.value_warmup_steps > 0:
            raise ValueError(
                "value pretraining (algorithm.value_warmup_steps > 0) needs learner.backend=torch: "
                "DeepSpeed's optimizer steps the policy too (with zero gradients, its Adam moments and "
                "step count move); set algorithm.value_warmup_steps=0 or use the torch learner"
            )
        init, model = alg.critic_init, alg.critic_model
        if init is not None and model is not None:
            try:
                base = saved_base(init)
            except FileNotFoundError:  # a folder made later (documented commands): it fails when the critic is built
                return
            if model != base:
                raise ValueError(
                    f"algorithm.critic_init's process reward model was trained on {base!r}, but "
                    f"algorithm.critic_model is {model!r}: the critic starts as the PRM, so it must be "
                    "the same model (leave critic_model out)"
                )

    def critic(self) -> CriticSpec:
        """A value head on the policy, or the separate ``critic_model`` (started as the PRM of ``critic_init``), at
        ``critic_lr``."""
        model = self.cfg.critic_model
        if self.cfg.critic_init is not None and model is None:
            model = saved_base(self.cfg.critic_init)
        return CriticSpec(model, self.cfg.critic_lr, self.cfg.critic_init)

    @property
    def critic_only_steps(self) -> int:
        """VAPO's value pretraining: the first ``value_warmup_steps`` steps train only the critic."""
        return self.cfg.value_warmup_steps

    def actor_lambda(self, batch: Batch) -> float | torch.Tensor:
        """λ_actor: the configured value (PPO) or VAPO's length-adaptive λ per sequence (§3)."""
        lam = self.cfg.lam_actor
        if lam is None:
            return length_adaptive_lambda(batch.response_lengths, self.cfg.alpha)
        return lam

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor advantages (GAE with λ_actor, optionally whitened) and critic targets (GAE with λ_critic).

        Decoupled GAE (VC-PPO/VAPO): the two λ differ; with λ_critic = 1 and γ = 1 the target is the return to go.
        ``bootstrap`` ``(B,)``: V of the state after the last token for truncated episodes, 0 for terminated ones.
        """
        if values is None:
            raise ValueError(f"{self.name} needs the critic's values")
        mask, cut, rewards = batch.loss_mask, self.cfg.turn_independent, self.shaped_rewards(batch, max_new_tokens)
        adv, _ = masked_gae(rewards, values, mask, 1.0, self.actor_lambda(batch), cut, bootstrap)
        _, returns = masked_gae(rewards, values, mask, 1.0, self.cfg.lam_critic, cut, bootstrap)
        return self.normalize(adv, batch), returns

    def token_rewards(self, batch: Batch) -> torch.Tensor:
        """The per-token rewards GAE runs on: each turn's reward on its last generated token."""
        return batch.token_rewards

    def shaped_rewards(self, batch: Batch, max_new_tokens: int) -> torch.Tensor:
        """:meth:`token_rewards` plus, with ``overlong``, DAPO's soft overlong punishment of each finished sequence's
        longest turn on its last generated token (docs/algorithms.md §4). A sequence still in play (T-PPO) gets it
        in the window where it finishes, when its length is known."""
        rewards = self.token_rewards(batch)
        if self.cfg.overlong is None:
            return rewards
        penalty = self.cfg.overlong.penalty(batch.turn_ids, max_new_tokens)
        return rewards + on_last_token(penalty.to(rewards.dtype) * batch.finished.to(rewards.dtype), batch.loss_mask)

    def normalize(self, adv: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Whiten the actor's advantages over the generated tokens (``whiten_advantages``), or leave them."""
        return masked_whiten(adv, batch.loss_mask) if self.cfg.whiten_advantages else adv

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss (when ``train_policy``) + vf_coef · clipped value loss."""
        if fwd.values is None or exp.old_values is None or exp.returns is None:
            raise ValueError(f"{self.name} needs values, old values and returns")
        if train_policy:
            loss, metrics = self.policy_loss(fwd, exp, counts)
        else:
            loss, metrics = torch.zeros((), device=fwd.values.device), {}
        vloss, vmetrics = clipped_value_loss(
            fwd.values,
            exp.old_values,
            exp.returns,
            exp.batch.loss_mask,
            self.cfg.eps_value,
            self.cfg.agg,
            counts["policy"],
        )
        metrics.update(vmetrics, value_loss=vloss.detach())
        return loss + self.cfg.vf_coef * vloss, metrics


class VAPO(PPO):
    """Value-based augmented PPO (docs/algorithms.md §3)."""

    name = "vapo"
    Config = VAPOConfig
