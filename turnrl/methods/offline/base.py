"""What an offline objective is: trained from stored Trajectories (``data:`` in the run config), never from rollouts
(docs/algorithms.md §2, §9). Its experience source is :class:`turnrl.methods.offline.source.OfflineSource`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

import torch

from turnrl.rl.algorithms.base import Algorithm
from turnrl.rl.core.batch import Batch, untrainable
from turnrl.rl.sources.replay import OfflineDataError
from turnrl.types import Trajectory

logger = logging.getLogger(__name__)

Units = list[list[Trajectory]]

__all__ = ["OfflineAlgorithm", "OfflineDataError", "Units"]


class OfflineAlgorithm(Algorithm):
    """An objective trained from stored Trajectories (``data:`` in the run config), never from rollouts.

    The offline source calls, once, in this order: :meth:`check_data` on every stored episode, :meth:`units` on
    the task groups, and :meth:`training_view` on each episode it hands out. The learner then calls the usual
    ``advantages``/``counts``/``loss`` of :class:`Algorithm`.
    """

    source: ClassVar[str] = "turnrl.methods.offline.source:OfflineSource"

    def check_data(self, trajectories: Sequence[Trajectory]) -> None:
        """Raise :class:`OfflineDataError` if the data lacks something this objective needs."""

    def units(self, groups: Units) -> tuple[Units, dict[str, float]]:
        """The batching units (kept whole in a batch) built from the task groups, and data metrics.

        Default: each group's trainable episodes (errors and rewards without tokens are left out and counted).
        """
        why = [[untrainable(t) for t in g] for g in groups]
        units = [kept for g, reasons in zip(groups, why) if (kept := [t for t, r in zip(g, reasons) if r is None])]
        dropped = [(t.id, r) for g, reasons in zip(groups, why) for t, r in zip(g, reasons) if r is not None]
        n = sum(len(g) for g in groups)
        if dropped:
            logger.warning(
                "%d of %d stored episodes cannot be trained on and are left out; the first, %s: %s",
                len(dropped),
                n,
                *dropped[0],
            )
        return units, {
            "data_episodes": float(n),
            "data_tasks": float(len(groups)),
            "data_untrainable": float(len(dropped)),
        }

    def training_view(self, traj: Trajectory) -> Trajectory:
        """The episode as the learner should see it (default: unchanged)."""
        return traj

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Offline objectives estimate no advantages: ``(zeros (B, T), None)``."""
        return torch.zeros_like(batch.loss_mask), None
