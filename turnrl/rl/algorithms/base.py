"""What an algorithm is: a config (its options and the defaults it implies), advantages and a loss.

The learner core calls only this interface; placements never branch on an algorithm's name. Every formula lives in
:mod:`turnrl.rl.advantages`, :mod:`turnrl.rl.losses` and :mod:`turnrl.rl.rewards`; algorithm modules compose them.

Call order, per training step (see :class:`turnrl.rl.learner.Learner`):

1. ``keep(trajectories)`` — which episodes an on-policy source keeps (DAPO's dynamic sampling drops groups with
   no reward variance);
2. ``advantages(batch, values, bootstrap)`` — over the *whole* batch, before any split into micro-batches or ranks
   (group statistics need every member of a group);
3. ``counts(batch)`` — additive normalizers of each aggregated loss term, summed over all micro-batches (and ranks)
   of one optimizer step;
4. ``loss(forward, experience, counts, train_policy)`` — the loss of one micro-batch; summing it over the
   micro-batches of a step gives the loss of the whole step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

import torch
from pydantic import BaseModel, ConfigDict, Field

from turnrl.rl.batch import Batch
from turnrl.rl.losses import AggMode, agg_count, aggregate, clipped_surrogate, masked_nll
from turnrl.types import Trajectory


class AlgorithmConfig(BaseModel):
    """Options every algorithm has. Subclasses add their own; options of another algorithm are errors."""

    model_config = ConfigDict(extra="forbid")
    name: str


class PolicyGradientConfig(AlgorithmConfig):
    """The clipped-surrogate family (grpo, dapo, ppo, vapo, …)."""

    eps_low: float = Field(0.2, gt=0)
    eps_high: float = Field(0.2, gt=0, description="clip-higher: the upper clip ε_high (dapo, vapo 0.28)")
    dual_clip: float | None = Field(None, gt=1, description="dual clip c for negative advantages (off by default)")
    agg: AggMode = Field("seq-mean-token-mean", description="loss aggregation (dapo, vapo: token-mean)")
    kl_coef: float = Field(0.0, ge=0, description="β of the k3 KL to a frozen reference model; 0 = no reference")
    nll_coef: float = Field(0.0, ge=0, description="μ of the NLL on correct samples (vapo 0.1)")


@dataclass
class Experience:
    """A prepared batch: the padded tensors plus what the learner computed for them before any update."""

    batch: Batch
    adv: torch.Tensor  # (B, T) advantages, 0 off the loss mask
    returns: torch.Tensor | None = None  # (B, T) critic targets
    old_values: torch.Tensor | None = None  # (B, T) V(s_t) before the update
    ref_logp: torch.Tensor | None = None  # (B, T) reference log-probabilities (KL)

    def __len__(self) -> int:
        return len(self.batch)

    def select(self, index: torch.Tensor | Sequence[int]) -> Experience:
        """The rows ``index`` (micro-batches, rank shards)."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.adv.device)
        return Experience(self.batch.select(idx), **{f.name: None if getattr(self, f.name) is None else
                                                      getattr(self, f.name)[idx] for f in fields(self)
                                                      if f.name != "batch"})


@dataclass
class Forward:
    """The learner's forward pass on a micro-batch (``(B, T)`` each; ``values`` only for critic algorithms)."""

    logp: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None = None


class Algorithm:
    """An objective: its options (``Config``), advantages and loss. Subclasses register with
    :func:`turnrl.rl.algorithms.register_algorithm`."""

    name: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]]
    uses_critic: ClassVar[bool] = False
    #: Where a training step's episodes come from: ``on-policy`` (fresh rollouts of the env's tasks), ``offline``
    #: (stored Trajectories, ``data:``) or ``states`` (fresh samples from stored states, ``data:``; SWiRL).
    experience: ClassVar[str] = "on-policy"

    def __init__(self, config: AlgorithmConfig) -> None:
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}, got {type(config).__name__}")
        self.cfg = config

    @property
    def needs_reference(self) -> bool:
        """Whether the learner must keep a frozen reference model."""
        return getattr(self.cfg, "kl_coef", 0.0) > 0

    @property
    def uses_behaviour_logprobs(self) -> bool:
        """Whether the loss reads the sampler's own log-probabilities μ (``Batch.behaviour_logp``), which must then
        be taken at the temperature the learner scores at."""
        return False

    def trains_policy(self, step: int) -> bool:
        """Whether the policy is updated at training step ``step`` (0-based); VAPO trains only its critic first."""
        return True

    def keep(self, trajectories: Sequence[Trajectory], max_new_tokens: int) -> list[bool]:
        """Which freshly sampled episodes an on-policy source keeps (all, unless the algorithm filters)."""
        return [True] * len(trajectories)

    @property
    def max_rounds(self) -> int:
        """How many generation rounds an on-policy source may run per step to fill the batch."""
        return 1

    def advantages(self, batch: Batch, max_new_tokens: int, values: torch.Tensor | None = None,
                   bootstrap: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(adv (B, T), returns (B, T) or None)`` over the whole batch."""
        raise NotImplementedError

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Additive normalizers of the aggregated loss terms on ``batch`` (summed over micro-batches and ranks)."""
        raise NotImplementedError

    def loss(self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor],
             train_policy: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one micro-batch under the step's global ``counts``, and tensor metrics."""
        raise NotImplementedError


class PolicyGradient(Algorithm):
    """Clipped surrogate + optional k3 KL to the reference + optional μ·NLL on correct samples (ALGORITHMS.md §0,
    §3, §4). Subclasses supply the advantages."""

    cfg: PolicyGradientConfig

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``policy``: the normalizer of the surrogate, KL and value terms; ``nll``: of the NLL on correct rows."""
        out = {"policy": agg_count(batch.loss_mask, self.cfg.agg)}
        if self.cfg.nll_coef > 0:
            out["nll"] = agg_count(batch.loss_mask * batch.correct[:, None], self.cfg.agg)
        return out

    def policy_loss(self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Surrogate (+ β·KL, + μ·NLL) of the micro-batch."""
        cfg, b = self.cfg, exp.batch
        loss, metrics = clipped_surrogate(fwd.logp, b.old_logp, exp.adv, b.loss_mask, cfg.eps_low, cfg.eps_high,
                                          cfg.dual_clip, cfg.agg, counts["policy"])
        if cfg.kl_coef > 0:
            if exp.ref_logp is None:
                raise ValueError("kl_coef > 0 needs reference log-probabilities")
            diff = exp.ref_logp - fwd.logp
            kl = torch.exp(diff) - diff - 1  # k3: unbiased, positive
            kl_mean = aggregate(kl, b.loss_mask, cfg.agg, counts["policy"])
            loss = loss + cfg.kl_coef * kl_mean
            metrics["kl"] = kl_mean.detach()
        if cfg.nll_coef > 0:  # VAPO: imitate the correct samples
            nll = masked_nll(fwd.logp, b.loss_mask * b.correct[:, None], cfg.agg, counts["nll"])
            loss = loss + cfg.nll_coef * nll
            metrics["nll"] = nll.detach()
        return loss, metrics

    def loss(self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor],
             train_policy: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy loss (see :meth:`policy_loss`)."""
        return self.policy_loss(fwd, exp, counts)
