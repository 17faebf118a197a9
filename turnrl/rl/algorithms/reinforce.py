"""REINFORCE++ (docs/algorithms.md §12; Hu, 2025, arXiv 2501.03262): REINFORCE with PPO's clipped surrogate, a per-token
KL penalty in the reward and advantages whitened over the whole batch — no critic, no per-group statistics.

Per generated token t of a sequence: r_t = −β·KL_t, plus each turn's reward on its last token (the outcome on the
last token of a single-turn episode), with KL_t = log π_old(y_t) − log π_ref(y_t) (the k1 estimate at the sampled
token, [paper]); returns to go with γ = 1, G_t = Σ_{t' ≥ t} r_{t'}
(:func:`~turnrl.rl.formulas.advantages.reward_to_go`); advantages = G whitened over every generated token of the batch
(the *global* batch, before any micro-batch split: the learner computes advantages on the whole step). β =
``kl_reward_coef`` (0.01 by default; 0: no reference model).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from turnrl.rl.algorithms.base import PolicyGradient, PolicyGradientConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import kl_penalized_rewards, masked_whiten, reward_to_go
from turnrl.rl.formulas.losses import AggMode


class REINFORCEPlusPlusConfig(PolicyGradientConfig):
    """REINFORCE++'s options (docs/algorithms.md §12)."""

    name: Literal["reinforce++"] = "reinforce++"
    kl_reward_coef: float = Field(
        0.01,
        ge=0,
        description="β of the per-token KL penalty folded into the reward (needs a reference model when > 0)",
    )
    agg: AggMode = "token-mean"


class REINFORCEPlusPlus(PolicyGradient):
    """REINFORCE++ (see the module docstring)."""

    name = "reinforce++"
    Config = REINFORCEPlusPlusConfig
    cfg: REINFORCEPlusPlusConfig

    @property
    def needs_reference(self) -> bool:
        """A frozen reference for the KL in the reward (β > 0) or in the loss (``kl_coef`` > 0)."""
        return self.cfg.kl_reward_coef > 0 or self.cfg.kl_coef > 0

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Globally whitened returns to go of the KL-penalized per-token rewards ``(B, T)``."""
        rewards = batch.token_rewards
        if self.cfg.kl_reward_coef > 0:
            if ref_logp is None:
                raise ValueError("reinforce++ with kl_reward_coef > 0 needs reference log-probabilities")
            rewards = kl_penalized_rewards(rewards, batch.old_logp, ref_logp, batch.loss_mask, self.cfg.kl_reward_coef)
        return masked_whiten(reward_to_go(rewards, batch.loss_mask), batch.loss_mask), None
