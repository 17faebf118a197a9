"""RLOO: REINFORCE with a leave-one-out baseline (docs/algorithms.md §12; Ahmadian et al., 2024, arXiv 2402.14740).

Â_i = R_i − mean_{j≠i} R_j over the k samples of a prompt (no standard deviation), broadcast to every generated token
of sample i (:func:`turnrl.rl.formulas.advantages.leave_one_out`). The loss is §0's clipped surrogate, which at ratio 1
(one epoch, on-policy) is the REINFORCE gradient; its default aggregation is ``seq-mean-token-sum`` — the gradient of
each sequence's summed log-probability, as in the paper. A group of one has no other sample to compare with: k = 1 is
refused (``rollout.group_size`` ≥ 2), and a group left with one episode after errors gets advantage 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from pydantic import Field

from turnrl.rl.algorithms.base import PolicyGradient, PolicyGradientConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import leave_one_out
from turnrl.rl.formulas.losses import AggMode
from turnrl.rl.formulas.tree import tree_token_advantages

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class RLOOConfig(PolicyGradientConfig):
    """RLOO's options (docs/algorithms.md §12)."""

    name: Literal["rloo"] = "rloo"
    agg: AggMode = Field(
        "seq-mean-token-sum", description="loss aggregation (the paper: each sequence's summed log-probability)"
    )
    advantage: Literal["group", "tree"] = Field(
        "group",
        description=(
            "group: the leave-one-out baseline; tree: turn-level credit on tree rollouts "
            "(rollout.tree), each turn's tokens the advantage of the node they lead to (docs/algorithms.md §14): its "
            "baselines are means, not leave-one-out (on chains R - mean R, (k-1)/k of group's)"
        ),
    )


class RLOO(PolicyGradient):
    """REINFORCE with a leave-one-out baseline (see the module docstring)."""

    name = "rloo"
    Config = RLOOConfig
    cfg: RLOOConfig

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """At least two samples per prompt (the baseline is the mean of the others)."""
        super().check_config(cfg)
        if cfg.rollout.group_size < 2:
            raise ValueError(
                f"rloo's baseline is the mean of a prompt's other samples: rollout.group_size must be "
                f">= 2, got {cfg.rollout.group_size}"
            )

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Each sequence's leave-one-out advantage on its generated tokens ``(B, T)`` — or, with ``advantage: tree``,
        each turn's tokens the tree advantage of its node, not normalized (docs/algorithms.md §14)."""
        if self.cfg.advantage == "tree":
            return tree_token_advantages(
                batch.scores, batch.tree_paths, batch.tree_depth, batch.group_ids, batch.loss_mask
            ), None
        return leave_one_out(batch.scores, batch.group_ids)[:, None] * batch.loss_mask, None
