"""What the learner and the algorithms share, below both (docs/ARCHITECTURE.md): the prepared batch
(:class:`Experience`), a micro-batch's forward pass (:class:`Forward`), the critic an algorithm asks for
(:class:`CriticSpec`), and :class:`Objective`, the calls the learner makes on an algorithm. Every
:class:`turnrl.rl.algorithms.Algorithm` is an Objective; the learner is typed against the protocol, so the core
never imports the algorithms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

import torch

from turnrl.rl.core.batch import Batch


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
        rows: dict[str, Any] = {
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[idx]
            for f in fields(self)
            if f.name != "batch"
        }
        return Experience(self.batch.select(idx), **rows)


@dataclass
class Forward:
    """The learner's forward pass on a micro-batch (``(B, T)`` each; ``values`` only for critic algorithms)."""

    logp: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None = None


@dataclass(frozen=True)
class CriticSpec:
    """The critic an algorithm needs, built by the run (:mod:`turnrl.rl.core.extra_models`), never by the learner.

    Attributes:
        model: None for a value head on the policy's own features; else an agent spec of a separate critic
            transformer sharing the policy's tokenizer (e.g. a smaller model).
        lr: the critic's learning rate (None: 2 × ``optim.lr``).
        init: a process reward model's folder to start the separate critic from (its weights; same ``model``).
    """

    model: str | None = None
    lr: float | None = None
    init: str | None = None


class Objective(Protocol):
    """The learner's view of an algorithm (:class:`turnrl.rl.algorithms.Algorithm` documents each call)."""

    summed_metrics: ClassVar[frozenset[str]]
    counted_metrics: ClassVar[frozenset[str]]

    @property
    def critic_only_steps(self) -> int:
        """Steps at the start that train only the critic."""
        ...

    def trains_policy(self, step: int) -> bool:
        """Whether update ``step`` trains the policy (else the critic alone)."""
        ...

    def batch_metrics(self, batch: Batch) -> dict[str, float]:
        """Figures of a prepared batch to report with the step."""
        ...

    def policy_mask(self, batch: Batch) -> torch.Tensor:
        """The generated tokens an update trains the policy on."""
        ...

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(adv (B, T), returns (B, T) or None)`` over the whole batch."""
        ...

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Additive normalizers of the aggregated loss terms on ``batch``."""
        ...

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss of one micro-batch under the step's global ``counts``, and tensor metrics."""
        ...
