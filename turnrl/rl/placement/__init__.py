"""Placements: where the pieces of a run live. ``local`` (one process; agent and learner share the model object) and
``ray`` (rollout workers as Ray actors). The learner core, the algorithms and the driver are the same in both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from turnrl.types import Trajectory


class LearnerProtocol(Protocol):
    """What the driver and trainer ask of a learner, wherever it runs: the learner core in this process
    (:class:`turnrl.rl.core.learner.Learner`) or a group of DeepSpeed ranks
    (:class:`turnrl.rl.placement.learner_group.LearnerGroup`)."""

    tokenizer: Any

    @property
    def version(self) -> int:
        """The policy version the learner's weights are at."""
        ...

    def update(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One training step on ``trajectories``; its metrics."""
        ...

    @property
    def lr(self) -> float:
        """The policy's current learning rate."""
        ...

    def export_for_workers(self, put: Any) -> tuple[int, Any]:
        """``(version, handle of the weights)`` for rollout workers; ``put`` stores a CPU state dict (Ray's
        ``ray.put``)."""
        ...

    def connect_rollout(self, workers: list[Any]) -> None:
        """Open a direct weight channel to the rollout workers where the learner has one (NCCL), else nothing."""
        ...

    def sync_driver(self) -> None:
        """Bring the driver's copy of the policy up to date (before an evaluation)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...

    def close(self) -> None:
        """Release ranks and other resources."""
        ...
