"""T-PPO: truncated PPO with successive batching (docs/algorithms.md §6).

Each step generates at most ``window`` (W) tokens per episode; an episode that has not finished re-enters the next
step with its tokens so far and new tasks fill the rest of the batch (:class:`turnrl.rl.sources.windowed.
WindowedSource`). The learner then trains on every episode that generated in this window:

* Extended GAE: an unfinished response of current length l bootstraps from V(s_l) := V(s_{l−1}), a finished one
  from 0 (or, cut by a turn or context limit, from the critic's value after its last token, as in PPO);
* λ_actor = max(0.95, 1 − 1/(α·l)), λ_critic = 1 (Monte-Carlo targets);
* the policy loss only on the current window's tokens (earlier windows act as prompt): token-mean, clip 0.2/0.28,
  dual clip 10, μ·NLL (0.1) on correct samples, advantages whitened over the window's tokens then clamped to ±10;
* the value loss only on finished sequences, over all their tokens (clipped);
* critic warm-up: the first ``value_warmup_steps`` updates train only the critic (a step that trains nothing does
  not count; ``min_groups`` holds no groups during it nor for the first policy update, so that the warm-up ends
  and the actor starts on the steps an unwindowed run's would).

With W at least the longest response every episode finishes in its first window and T-PPO is PPO with these
options.

``train_on: finished`` keeps the windows and the carry-over but trains a group only once all of its episodes have
finished, on all of their tokens with PPO's GAE (the "partial rollouts" of Kimi k1.5, by whole groups): no
unfinished response is scored by the critic alone. The tokens of earlier windows were sampled by older policy
versions — as many versions back as the windows an episode took — which the staleness metrics show and
``optim.recompute_logprobs`` with ``behaviour_is_cap`` corrects (decoupled PPO, docs/algorithms.md §11).
``min_groups`` holds finished groups until that many are ready, so that no policy update is made of a few slow groups
alone (the critic's warm-up updates and the first policy update train whatever groups have finished).

``refill`` says how many new tasks a step starts: ``fit`` (the default) fills the places the carried episodes leave,
in whole groups, so that a step with one carried episode starts a group fewer; ``prompts`` starts
``rollout.prompts_per_step`` groups every step, as an unwindowed step does, and the carried episodes ride on top.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator

from turnrl.rl.algorithms.base import Experience, Forward
from turnrl.rl.algorithms.ppo import PPO, PPOConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import egae_bootstrap, length_adaptive_lambda, masked_gae, masked_whiten, window_mask
from turnrl.rl.formulas.losses import AggMode, agg_count, clipped_value_loss


class TPPOConfig(PPOConfig):
    """T-PPO's options (docs/algorithms.md §6). ``lam_actor`` None = length-adaptive with a floor."""

    name: Literal["tppo"] = "tppo"  # type: ignore[assignment]  # its own name: the discriminator
    window: int = Field(
        128,
        ge=1,
        description="W: the most tokens an episode generates per step; an unfinished one carries on in the next step",
    )
    lam_actor: float | None = Field(None, ge=0, le=1, description="None: max(lam_floor, 1 - 1/(alpha·length))")  # type: ignore[assignment]  # None: adaptive
    alpha: float = Field(0.05, gt=0, description="length-adaptive λ_actor: 1 - 1/(alpha·length)")
    lam_floor: float = Field(0.95, ge=0, le=1, description="the floor of the length-adaptive λ_actor")
    lam_critic: float = Field(1.0, ge=0, le=1)
    eps_high: float = Field(0.28, gt=0)
    dual_clip: float | None = Field(10.0, gt=1)
    agg: AggMode = "token-mean"
    nll_coef: float = Field(0.1, ge=0)
    adv_clip: float | None = Field(10.0, gt=0, description="clamp the whitened advantages to ±adv_clip; None = off")
    value_warmup_steps: int = Field(
        10,
        ge=0,
        description=("critic warm-up: updates that train only the critic (a step that trains nothing does not count)"),
    )
    train_on: Literal["window", "finished"] = Field(
        "window",
        description=(
            "window: every step trains each episode's newest window, an unfinished one through EGAE (the paper's T-PPO); "
            "finished: a group trains once all its episodes finished, on all their tokens (partial rollouts: earlier "
            "windows were sampled by older versions, see optim.recompute_logprobs and algorithm.behaviour_is_cap)"
        ),
    )
    refill: Literal["fit", "prompts"] = Field(
        "fit",
        description=(
            "which new tasks a step starts beside the carried episodes — fit: whole groups into the places the carried "
            "ones leave of rollout.prompts_per_step × group_size (at least one group); prompts: prompts_per_step new "
            "groups every step, as many as an unwindowed step takes, the carried episodes on top"
        ),
    )
    min_groups: int | None = Field(
        None,
        ge=1,
        description=(
            "train_on finished: hold finished groups until at least this many are ready, then train them together, so "
            "that no policy update is made of a few slow groups alone (e.g. rollout.prompts_per_step; None: train "
            "whatever groups have finished); the critic warm-up's updates and the first policy update do not wait"
        ),
    )

    @model_validator(mode="after")
    def _min_groups_needs_finished(self) -> TPPOConfig:
        if self.min_groups is not None and self.train_on != "finished":
            raise ValueError(
                "algorithm.min_groups holds finished groups and needs algorithm.train_on=finished "
                "(or leave min_groups unset)"
            )
        return self


class TPPO(PPO):
    """Truncated PPO (see the module docstring)."""

    name = "tppo"
    Config = TPPOConfig
    cfg: TPPOConfig
    source: ClassVar[str] = "turnrl.rl.sources.windowed:WindowedSource"

    def actor_lambda(self, batch: Batch) -> float | torch.Tensor:
        """λ_actor: the configured value, or max(``lam_floor``, 1 − 1/(α·l)) per sequence."""
        if self.cfg.lam_actor is not None:
            return self.cfg.lam_actor
        return length_adaptive_lambda(batch.response_lengths, self.cfg.alpha, self.cfg.lam_floor)

    def policy_mask(self, batch: Batch) -> torch.Tensor:
        """The tokens the policy loss covers: the generated tokens of each sequence's current window; with
        ``train_on: finished`` every generated token (the batch holds finished episodes only)."""
        if self.cfg.train_on == "finished":
            return batch.loss_mask
        return window_mask(batch.loss_mask, batch.window_start)

    @staticmethod
    def value_mask(batch: Batch) -> torch.Tensor:
        """The tokens the value loss covers: every generated token of the finished sequences."""
        return batch.loss_mask * batch.finished[:, None]

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor advantages (EGAE with λ_actor, whitened over the window and clamped; 0 outside the window) and
        critic targets (EGAE with λ_critic)."""
        if values is None:
            raise ValueError("tppo needs the critic's values")
        mask, cut, rewards = batch.loss_mask, self.cfg.turn_independent, self.shaped_rewards(batch, max_new_tokens)
        ended = bootstrap if bootstrap is not None else torch.zeros(len(batch), device=values.device)
        boot = torch.where(batch.finished > 0, ended, egae_bootstrap(values, mask, batch.finished))
        adv, _ = masked_gae(rewards, values, mask, 1.0, self.actor_lambda(batch), cut, boot)
        _, returns = masked_gae(rewards, values, mask, 1.0, self.cfg.lam_critic, cut, boot)
        pmask = self.policy_mask(batch)
        if self.cfg.whiten_advantages:
            adv = masked_whiten(adv, pmask)
        if self.cfg.adv_clip is not None:
            adv = adv.clamp(-self.cfg.adv_clip, self.cfg.adv_clip)
        return adv * pmask, returns

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        """PPO's, and how many sequences are still in play and how many tokens the window trained on."""
        return {
            **super().batch_metrics(batch),
            "unfinished_share": float(1 - batch.finished.mean()),
            "window_tokens": float(self.policy_mask(batch).sum()),
        }

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``policy``: over the window's tokens; ``value``: over the finished sequences' tokens; ``nll``: over the
        window's tokens of correct sequences."""
        pmask = self.policy_mask(batch)
        out = {"policy": agg_count(pmask, self.cfg.agg), "value": agg_count(self.value_mask(batch), self.cfg.agg)}
        if self.cfg.nll_coef > 0:
            out["nll"] = agg_count(pmask * batch.correct[:, None], self.cfg.agg)
        return out

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy loss on the window (when ``train_policy``) + vf_coef · clipped value loss on finished rows."""
        if fwd.values is None or exp.old_values is None or exp.returns is None:
            raise ValueError("tppo needs values, old values and returns")
        b = exp.batch
        if train_policy:
            windowed = replace(exp, batch=replace(b, loss_mask=self.policy_mask(b)))
            loss, metrics = self.policy_loss(fwd, windowed, counts)
        else:
            loss, metrics = torch.zeros((), device=fwd.values.device), {}
        vloss, vmetrics = clipped_value_loss(
            fwd.values,
            exp.old_values,
            exp.returns,
            self.value_mask(b),
            self.cfg.eps_value,
            self.cfg.agg,
            counts["value"].clamp(min=1),
        )
        metrics.update(vmetrics, value_loss=vloss.detach())
        return loss + self.cfg.vf_coef * vloss, metrics
