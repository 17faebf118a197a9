"""GRPO and DAPO: group-normalized sequence advantages and the clipped surrogate (docs/algorithms.md §0, §4).

* ``grpo`` — Â_i = (R_i − mean_g R) / (std_g R + ε) on every generated token of sequence i; clipped surrogate with
  ε = 0.2; seq-mean-token-mean; optional k3 KL to a frozen reference.
* ``dapo`` — GRPO plus clip-higher (ε_high = 0.28), token-mean, dynamic sampling (groups whose rewards are all equal
  carry no signal: they are dropped and more are sampled, up to ``max_resample`` rounds) and, when configured, the
  soft overlong punishment added to each sequence's reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field

from turnrl.rl.algorithms.base import OverlongConfig, PolicyGradient, PolicyGradientConfig
from turnrl.rl.core.batch import Batch, collate
from turnrl.rl.formulas.advantages import group_normalize, zero_variance_groups
from turnrl.rl.formulas.losses import AggMode
from turnrl.rl.formulas.tree import tree_token_advantages
from turnrl.types import Trajectory


class GRPOConfig(PolicyGradientConfig):
    """GRPO's options (docs/algorithms.md §0)."""

    name: Literal["grpo"] = "grpo"
    dynamic_sampling: bool = Field(False, description="drop zero-variance groups and sample more (dapo: on)")
    max_resample: int = Field(10, ge=1, description="generation rounds per step when dynamic sampling")
    overlong: OverlongConfig | None = Field(None, description="DAPO's soft overlong punishment (off by default)")
    advantage: Literal["group", "tree"] = Field(
        "group",
        description=(
            "group: one advantage per episode against its group; tree: turn-level credit on tree rollouts "
            "(rollout.tree), each turn's tokens the advantage of the node they lead to (docs/algorithms.md §14; on chains "
            "it equals group)"
        ),
    )


class DAPOConfig(GRPOConfig):
    """DAPO's options: GRPO's with clip-higher, token-mean and dynamic sampling on (docs/algorithms.md §4)."""

    name: Literal["dapo"] = "dapo"  # type: ignore[assignment]  # its own name: the discriminator
    eps_high: float = Field(0.28, gt=0)
    agg: AggMode = "token-mean"
    dynamic_sampling: bool = True


def sequence_rewards(batch: Batch, overlong: OverlongConfig | None, max_new_tokens: int) -> torch.Tensor:
    """Per-sequence rewards ``(B,)``: the episode's total, plus the overlong penalty of its longest turn if enabled."""
    scores = batch.scores.clone()
    if overlong is not None:
        scores = scores + overlong.penalty(batch.turn_ids, max_new_tokens)
    return scores


class GRPO(PolicyGradient):
    """Group Relative Policy Optimization (see the module docstring)."""

    name = "grpo"
    Config = GRPOConfig
    cfg: GRPOConfig

    @property
    def max_rounds(self) -> int:
        """``max_resample`` rounds with dynamic sampling, else 1."""
        return self.cfg.max_resample if self.cfg.dynamic_sampling else 1

    def keep(self, trajectories: Sequence[Trajectory], max_new_tokens: int) -> list[bool]:
        """With dynamic sampling, drop every member of a group whose rewards are all equal."""
        if not self.cfg.dynamic_sampling or not trajectories:
            return [True] * len(trajectories)
        batch = collate(trajectories, 0)
        zero = zero_variance_groups(sequence_rewards(batch, self.cfg.overlong, max_new_tokens), batch.group_ids)
        return [not z for z in zero.tolist()]

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Each sequence's group-normalized reward on its generated tokens ``(B, T)`` — or, with ``advantage: tree``,
        each turn's tokens the std-normalized tree advantage of its node (docs/algorithms.md §14)."""
        scores = sequence_rewards(batch, self.cfg.overlong, max_new_tokens)
        if self.cfg.advantage == "tree":
            return tree_token_advantages(
                scores, batch.tree_paths, batch.tree_depth, batch.group_ids, batch.loss_mask, normalize=True
            ), None
        return group_normalize(scores, batch.group_ids)[:, None] * batch.loss_mask, None


class DAPO(GRPO):
    """Decoupled clip and dynamic sampling policy optimization (docs/algorithms.md §4)."""

    name = "dapo"
    Config = DAPOConfig
