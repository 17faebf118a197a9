"""What an algorithm is: a config (its options and the defaults it implies), advantages and a loss.

The learner core calls only this interface; placements never branch on an algorithm's name. Every formula lives in
:mod:`turnrl.rl.formulas.advantages`, :mod:`turnrl.rl.formulas.losses` and :mod:`turnrl.rl.formulas.rewards`; algorithm modules compose them.

Call order, per training step (see :class:`turnrl.rl.core.learner.Learner`):

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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch
from pydantic import BaseModel, ConfigDict, Field

from turnrl.rl.config import AlgorithmConfig, TrainConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.core.experience import CriticSpec, Experience, Forward
from turnrl.rl.formulas.advantages import window_mask, zero_variance_groups
from turnrl.rl.formulas.importance import off_policy_weights
from turnrl.rl.formulas.losses import (
    AggMode,
    agg_count,
    aggregate,
    clipped_surrogate,
    masked_nll,
)
from turnrl.rl.formulas.rewards import longest_turn, overlong_penalty
from turnrl.types import Trajectory
from turnrl.utils import load_entry

if TYPE_CHECKING:
    from turnrl.rollout.engine import Rewrite


class SourceClass(Protocol):
    """What the algorithm asks of its experience source's class before a run is built (the class is
    :class:`turnrl.rl.sources.base.ExperienceSource`'s, a layer above: named by :attr:`Algorithm.source`)."""

    sampled: bool
    reads_data: bool

    def check_config(self, cfg: TrainConfig) -> None: ...

    def open(self, cfg: TrainConfig, algorithm: Any) -> Any: ...


class OverlongConfig(BaseModel):
    """DAPO's soft overlong punishment (docs/algorithms.md §4): L_max is the per-turn generation limit
    (``rollout.max_new_tokens``), ``cache_len`` the buffer before it in which the penalty grows from 0 to −1."""

    model_config = ConfigDict(extra="forbid")
    cache_len: int = Field(16, ge=1)

    def penalty(self, turn_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """``(B,)`` the punishment of each sequence's longest turn (``turn_ids`` ``(B, T)``, −1 off its turns)."""
        return overlong_penalty(longest_turn(turn_ids), max_new_tokens, min(self.cache_len, max_new_tokens))


class PolicyGradientConfig(AlgorithmConfig):
    """The clipped-surrogate family (grpo, dapo, ppo, vapo, …)."""

    eps_low: float = Field(0.2, gt=0)
    eps_high: float = Field(0.2, gt=0, description="clip-higher: the upper clip ε_high (dapo, vapo 0.28)")
    dual_clip: float | None = Field(None, gt=1, description="dual clip c for negative advantages (off by default)")
    agg: AggMode = Field("seq-mean-token-mean", description="loss aggregation (dapo, vapo: token-mean)")
    kl_coef: float = Field(0.0, ge=0, description="β of the k3 KL to a frozen reference model; 0 = no reference")
    nll_coef: float = Field(0.0, ge=0, description="μ of the NLL on correct samples (vapo 0.1)")
    behaviour_is_cap: float | None = Field(
        None,
        ge=1,
        description=(
            "decoupled PPO / truncated importance sampling (docs/algorithms.md §11): weigh each token's surrogate by "
            "min(π_old/μ, C) with C this cap (2 is usual), π_old the learner's own log-probabilities "
            "(optim.recompute_logprobs) and μ the sampler's — for rollout engines whose numbers differ from the "
            "learner's, or stale samples; None = off"
        ),
    )
    behaviour_is: Literal["truncate", "mask-token", "mask-sequence", "icepop"] = Field(
        "truncate",
        description=(
            "what behaviour_is_cap C does with ρ = π_old/μ (docs/algorithms.md §11): truncate (min(ρ, C)), mask-token "
            "(ρ, or 0 above C), mask-sequence (the answer's geometric-mean ρ, or the whole answer left out outside "
            "[1/C, C]) or icepop (ρ, or 0 outside [behaviour_is_floor, C])"
        ),
    )
    behaviour_is_floor: float = Field(0.5, gt=0, lt=1, description="IcePop's lower bound α (behaviour_is: icepop)")


class Algorithm:
    """An objective: its options (``Config``), the experience source and models it needs, rollout hooks, advantages
    and a loss. The learner, driver, sources and CLI reach an algorithm through this interface (docs/ARCHITECTURE.md;
    its "Known gaps" lists where the core still names a method).

    A subclass must set ``name`` and ``Config`` (an :class:`AlgorithmConfig` whose ``name`` field defaults to the
    algorithm's name) and implement :meth:`advantages`, :meth:`counts` and :meth:`loss`; everything else has a
    default. Register it with :func:`turnrl.rl.algorithms.register_algorithm` (or the ``turnrl.algorithms`` entry
    point group) and train it with ``turnrl train --import MODULE``.
    """

    name: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]]
    #: Where a training step's episodes come from: ``"module:Class"`` of a
    #: :class:`~turnrl.rl.sources.base.ExperienceSource` (default: fresh on-policy rollouts of the env's tasks).
    source: ClassVar[str] = "turnrl.rl.sources.onpolicy:OnPolicySource"
    #: The methods a subclass must implement (checked when it is registered).
    required: ClassVar[tuple[str, ...]] = ("advantages", "counts", "loss")
    #: The metrics of :meth:`loss` that are parts of the step's loss under the global ``counts``, as the loss is: the
    #: learner adds them up over an optimizer step's micro-batches (and ranks) and reports their mean over optimizer
    #: steps, so they do not depend on how a step is split. Every other metric is the mean of its micro-batch values,
    #: but those of :attr:`counted_metrics` and the ``*_max`` ones.
    summed_metrics: ClassVar[frozenset[str]] = frozenset({"kl", "nll", "value_loss", "policy_loss"})
    #: The metrics of :meth:`loss` that count things of the micro-batch (sequences, tokens): the learner adds them up
    #: over every micro-batch (and rank) and reports one pass's worth (the sum over the update divided by
    #: ``optim.epochs``). A metric whose name ends in ``_max`` is the largest over micro-batches (and ranks).
    counted_metrics: ClassVar[frozenset[str]] = frozenset({"is_sequences_masked"})

    def __init__(self, config: AlgorithmConfig) -> None:
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}, got {type(config).__name__}")
        self.cfg = config

    # ---- what a run needs (asked before anything is built) ----

    @classmethod
    def source_class(cls) -> SourceClass:
        """The experience source class named by :attr:`source`."""
        source: SourceClass = load_entry(cls.source)
        return source

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Raise ValueError if the run's settings cannot work with this algorithm (called while the run config
        validates). Default: the experience source's checks; subclasses add their own and call ``super()``."""
        cls.source_class().check_config(cfg)

    @property
    def needs_reference(self) -> bool:
        """Whether the learner must keep a frozen reference model (default: a KL coefficient above 0)."""
        return False

    def critic(self) -> CriticSpec | None:
        """The critic this algorithm trains beside the policy, or None (no values)."""
        return None

    @property
    def uses_critic(self) -> bool:
        """Whether the learner computes values (:meth:`critic` is not None)."""
        return self.critic() is not None

    @property
    def uses_behaviour_logprobs(self) -> bool:
        """Whether the loss reads the sampler's own log-probabilities μ (``Batch.behaviour_logp``), which must then
        be taken at the temperature the learner scores at."""
        return False

    @property
    def critic_only_steps(self) -> int:
        """Training steps at the start that train only the critic (VAPO's value pretraining); 0 by default."""
        return 0

    def trains_policy(self, step: int) -> bool:
        """Whether the policy is updated at training step ``step`` (0-based)."""
        return step >= self.critic_only_steps

    # ---- hooks of the on-policy source ----

    def keep(self, trajectories: Sequence[Trajectory], max_new_tokens: int) -> list[bool]:
        """Which freshly sampled episodes an on-policy source keeps (all, unless the algorithm filters)."""
        return [True] * len(trajectories)

    @property
    def max_rounds(self) -> int:
        """How many generation rounds an on-policy source may run per step to fill the batch."""
        return 1

    def rollout_hook(self, agent: Any, temperature: float, seed: int) -> Rewrite | None:
        """A rollout hook that may replace sampled turns (:data:`turnrl.rollout.engine.Rewrite`), built for one
        generation batch of training rollouts (never for evaluation), or None."""
        return None

    # ---- the learner's calls ----

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        """Figures of a prepared batch to report with the step (default: none)."""
        return {}

    def policy_mask(self, batch: Batch) -> torch.Tensor:
        """The generated tokens an update trains the policy on (the staleness and log-probability-gap metrics cover
        these): each sequence's current window — the whole response unless it was played in windows."""
        return window_mask(batch.loss_mask, batch.window_start)

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(adv (B, T), returns (B, T) or None)`` over the whole batch.

        Args:
            batch: the step's whole batch (before any split into micro-batches or ranks).
            max_new_tokens: the per-turn generation limit (overlong shaping).
            values: ``(B, T)`` the critic's values, for algorithms with a :meth:`critic`.
            bootstrap: ``(B,)`` the critic's value after the last token of a truncated episode, 0 if terminated.
            ref_logp: ``(B, T)`` the reference's log-probabilities, where :attr:`needs_reference`.
        """
        raise NotImplementedError

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Additive normalizers of the aggregated loss terms on ``batch`` (summed over micro-batches and ranks)."""
        raise NotImplementedError

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one micro-batch under the step's global ``counts``, and tensor metrics."""
        raise NotImplementedError


class PolicyGradient(Algorithm):
    """Clipped surrogate + optional k3 KL to the reference + optional μ·NLL on correct samples (docs/algorithms.md §0,
    §3, §4). Subclasses supply the advantages."""

    cfg: PolicyGradientConfig

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """The source's checks; ``behaviour_is_cap`` needs the learner's own π_old (``optim.recompute_logprobs``)."""
        super().check_config(cfg)
        algo = cfg.algorithm
        if (
            isinstance(algo, PolicyGradientConfig)
            and algo.behaviour_is_cap is not None
            and not cfg.optim.recompute_logprobs
        ):
            raise ValueError(
                "algorithm.behaviour_is_cap weighs tokens by π_old/μ, the learner's log-probabilities "
                "over the sampler's: set optim.recompute_logprobs=true (without it π_old is μ and every "
                "weight is 1)"
            )
        if isinstance(algo, PolicyGradientConfig) and algo.behaviour_is_cap is None and algo.behaviour_is != "truncate":
            raise ValueError(
                f"algorithm.behaviour_is={algo.behaviour_is} chooses what the importance weights do, "
                "and they are off: set algorithm.behaviour_is_cap (C, e.g. 2; icepop: its upper bound "
                "β, e.g. 5)"
            )

    @property
    def needs_reference(self) -> bool:
        """A frozen reference for the k3 KL when ``kl_coef`` > 0."""
        return self.cfg.kl_coef > 0

    @property
    def uses_behaviour_logprobs(self) -> bool:
        """With ``behaviour_is_cap`` the surrogate is weighted by π_old/μ."""
        return self.cfg.behaviour_is_cap is not None

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        """``zero_variance_groups``: the share of sampled episodes whose group's rewards are all equal (no signal)."""
        return {"zero_variance_groups": float(zero_variance_groups(batch.scores, batch.group_ids).float().mean())}

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``policy``: the normalizer of the surrogate, KL and value terms; ``nll``: of the NLL on correct rows."""
        out = {"policy": agg_count(batch.loss_mask, self.cfg.agg)}
        if self.cfg.nll_coef > 0:
            out["nll"] = agg_count(batch.loss_mask * batch.correct[:, None], self.cfg.agg)
        return out

    def policy_loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Surrogate (+ β·KL, + μ·NLL) of the micro-batch."""
        cfg, b = self.cfg, exp.batch
        weights: torch.Tensor | None = None
        is_metrics: dict[str, torch.Tensor] = {}
        if cfg.behaviour_is_cap is not None:  # §11: importance weights against the sampler's μ
            weights, is_metrics = off_policy_weights(
                cfg.behaviour_is,
                b.old_logp,
                b.behaviour_logp,
                b.loss_mask,
                cfg.behaviour_is_cap,
                cfg.behaviour_is_floor,
            )
        loss, metrics = clipped_surrogate(
            fwd.logp,
            b.old_logp,
            exp.adv,
            b.loss_mask,
            cfg.eps_low,
            cfg.eps_high,
            cfg.dual_clip,
            cfg.agg,
            counts["policy"],
            weights,
        )
        metrics.update(is_metrics)
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

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy loss (see :meth:`policy_loss`)."""
        return self.policy_loss(fwd, exp, counts)
