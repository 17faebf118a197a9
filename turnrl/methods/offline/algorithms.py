"""The offline baselines on the same data as DQO (docs/algorithms.md §9; DQO itself: :mod:`turnrl.methods.dqo`), each an
:class:`~turnrl.methods.offline.base.OfflineAlgorithm` trained from stored Trajectories with no rollouts:

* ``dpo`` — pairs (y_w, y_l) of a correct and an incorrect episode of the same task (the same group); the sigmoid
  loss against a frozen reference on the summed log-probabilities of the generated tokens (β = 0.1). ``pairs: all``
  takes every (correct, incorrect) combination of a task, ``one`` the first correct and first incorrect episode in
  the file's order. Tasks whose episodes are all correct or all incorrect are skipped and counted.
* ``rft`` — rejection-sampling fine-tuning: masked NLL on the generated tokens of the correct episodes only.
* ``sft`` — supervised fine-tuning: NLL on every row's generated tokens (SWiRL's SFT baseline on filtered step rows,
  or plain SFT on any token-exact Trajectories).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from pydantic import Field

from turnrl.methods.offline.base import OfflineAlgorithm, OfflineDataError, Units
from turnrl.methods.offline.preference import dpo_loss, sequence_logp
from turnrl.rl.algorithms.base import AlgorithmConfig, Experience, Forward
from turnrl.rl.core.batch import Batch, untrainable
from turnrl.rl.formulas.losses import AggMode, agg_count, masked_nll
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


def _outcome_groups(groups: Units) -> tuple[list[tuple[list[Trajectory], list[Trajectory]]], dict[str, float]]:
    """Split each group's trainable, graded episodes into (correct, incorrect), with counts of what was skipped."""
    out, ungraded = [], 0
    for g in groups:
        ok = [t for t in g if untrainable(t) is None]
        ungraded += sum(t.correct is None for t in ok)
        out.append(([t for t in ok if t.correct is True], [t for t in ok if t.correct is False]))
    return out, {"data_ungraded_episodes": float(ungraded)}


def dpo_pairs(groups: Units, mode: Literal["all", "one"]) -> tuple[Units, dict[str, float]]:
    """DPO's pairs ``[y_w, y_l]`` (correct first) within each task group, and counts (docs/algorithms.md §9).

    ``all``: every (correct, incorrect) combination; ``one``: the first correct and the first incorrect episode.
    Tasks with a single outcome (all correct or all incorrect) give no pair: they are skipped and counted in
    ``dpo_skipped_tasks`` (and split into ``dpo_all_correct_tasks`` / ``dpo_all_incorrect_tasks``).
    """
    split, info = _outcome_groups(groups)
    pairs: Units = []
    both = all_correct = all_wrong = 0
    for good, bad in split:
        if not good and not bad:
            continue
        if not bad:
            all_correct += 1
        elif not good:
            all_wrong += 1
        else:
            both += 1
            pairs += [[w, lose] for w in good for lose in bad] if mode == "all" else [[good[0], bad[0]]]
    info.update(
        dpo_pairs=float(len(pairs)),
        dpo_tasks=float(both),
        dpo_skipped_tasks=float(all_correct + all_wrong),
        dpo_all_correct_tasks=float(all_correct),
        dpo_all_incorrect_tasks=float(all_wrong),
    )
    return pairs, info


class DPOConfig(AlgorithmConfig):
    """DPO's options (docs/algorithms.md §9)."""

    name: Literal["dpo"] = "dpo"
    beta: float = Field(0.1, gt=0, description="β of the DPO sigmoid loss")
    pairs: Literal["all", "one"] = Field("all", description="all (correct, incorrect) pairs of a task, or one per task")


class DPO(OfflineAlgorithm):
    """Direct Preference Optimization on (correct, incorrect) pairs of one task (see the module docstring)."""

    name = "dpo"
    Config = DPOConfig
    cfg: DPOConfig

    @property
    def needs_reference(self) -> bool:
        """DPO scores y_w and y_l against a frozen reference."""
        return True

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Micro-batches must hold whole pairs: ``optim.minibatch_size`` and ``data.batch_size`` even, and one
        process (a learner group's ranks would split pairs)."""
        super().check_config(cfg)
        if cfg.learner.backend == "deepspeed":
            raise ValueError(
                "dpo on a DeepSpeed learner group is not supported yet: the ranks split a task's rows "
                "by group, which can cut a (correct, incorrect) pair in two; use learner.backend=torch"
            )
        if cfg.optim.minibatch_size % 2 or (cfg.data is not None and cfg.data.batch_size % 2):
            raise ValueError(
                f"dpo trains on (correct, incorrect) pairs, so optim.minibatch_size "
                f"({cfg.optim.minibatch_size}) and data.batch_size "
                f"({cfg.data.batch_size if cfg.data else None}) must be even"
            )

    def units(self, groups: Units) -> tuple[Units, dict[str, float]]:
        """The pairs (:func:`dpo_pairs`).

        Raises:
            OfflineDataError: no task has both a correct and an incorrect episode.
        """
        pairs, info = dpo_pairs(groups, self.cfg.pairs)
        if not pairs:
            raise OfflineDataError(
                f"no task in the data has both a correct and an incorrect episode, so dpo has no pair to train on "
                f"({int(info['dpo_all_correct_tasks'])} task(s) all correct, {int(info['dpo_all_incorrect_tasks'])} "
                "all incorrect); sample more episodes per task (turnrl rollout --samples N) or train rft or dqo"
            )
        return pairs, info

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``pairs``: the number of pairs in ``batch``."""
        return {"pairs": torch.tensor(float(len(batch) // 2))}

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Σ_pairs DPO loss / the step's number of pairs; rows ``2k, 2k+1`` are pair k's y_w and y_l.

        Raises:
            ValueError: the micro-batch does not hold whole pairs of one task, correct first.
        """
        b = exp.batch
        if exp.ref_logp is None:
            raise ValueError("dpo needs reference log-probabilities")
        w, lo = slice(0, None, 2), slice(1, None, 2)
        if len(b) % 2 or not bool(
            (b.correct[w] == 1).all() and (b.correct[lo] == 0).all() and (b.group_ids[w] == b.group_ids[lo]).all()
        ):
            raise ValueError(
                "dpo micro-batches must hold whole (correct, incorrect) pairs of one task, correct first; "
                "train it from `data:` (the offline source) with an even optim.minibatch_size"
            )
        seq, ref = sequence_logp(fwd.logp, b.loss_mask), sequence_logp(exp.ref_logp, b.loss_mask)
        losses, metrics = dpo_loss(seq[w], ref[w], seq[lo], ref[lo], self.cfg.beta)
        return losses.sum() / counts["pairs"], metrics


class RFTConfig(AlgorithmConfig):
    """RFT's options (docs/algorithms.md §9)."""

    name: Literal["rft"] = "rft"
    agg: AggMode = Field("token-mean", description="aggregation of the NLL over the correct episodes' tokens")


class RFT(OfflineAlgorithm):
    """Rejection-sampling fine-tuning: NLL on the generated tokens of the correct episodes (docs/algorithms.md §9)."""

    name = "rft"
    Config = RFTConfig
    cfg: RFTConfig

    def units(self, groups: Units) -> tuple[Units, dict[str, float]]:
        """Each task's correct episodes (incorrect and ungraded ones are not trained on, and are counted).

        Raises:
            OfflineDataError: no episode is correct.
        """
        split, info = _outcome_groups(groups)
        units = [good for good, _ in split if good]
        info.update(
            rft_correct_episodes=float(sum(len(u) for u in units)),
            rft_incorrect_episodes=float(sum(len(bad) for _, bad in split)),
        )
        if not units:
            raise OfflineDataError(
                "no episode in the data is correct, so rft has nothing to imitate; sample more "
                "episodes per task (turnrl rollout --samples N) or easier tasks"
            )
        return units, info

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``nll``: the normalizer over the correct rows' generated tokens."""
        return {"nll": agg_count(batch.loss_mask * batch.correct[:, None], self.cfg.agg)}

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Masked NLL over the correct rows (an incorrect row that reaches the loss contributes nothing)."""
        b = exp.batch
        nll = masked_nll(fwd.logp, b.loss_mask * b.correct[:, None], self.cfg.agg, counts["nll"])
        return nll, {"nll": nll.detach()}


class SFTConfig(AlgorithmConfig):
    """SFT's options."""

    name: Literal["sft"] = "sft"
    agg: AggMode = Field("token-mean", description="aggregation of the NLL over the rows' step tokens")


class SFT(OfflineAlgorithm):
    """Supervised fine-tuning on stored rows: NLL on every row's generated (loss-masked) tokens — SWiRL's SFT
    baseline on filtered step rows, or plain SFT on any token-exact Trajectories."""

    name = "sft"
    Config = SFTConfig
    cfg: SFTConfig

    def units(self, groups: Units) -> tuple[Units, dict[str, float]]:
        """Every trainable row (each on its own: rows of one trajectory need not share a batch).

        Raises:
            OfflineDataError: no row has generated tokens to imitate.
        """
        units, info = super().units(groups)
        rows = [[t] for g in units for t in g if t.loss_mask and any(t.loss_mask)]
        if not rows:
            raise OfflineDataError(
                "no row in the data has generated tokens to imitate (every loss mask is 0); "
                "pass step rows from `turnrl swirl decompose` or rollout Trajectories"
            )
        return rows, {**info, "sft_rows": float(len(rows))}

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``nll``: the normalizer over the rows' generated tokens."""
        return {"nll": agg_count(batch.loss_mask, self.cfg.agg)}

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Masked NLL over the generated tokens."""
        nll = masked_nll(fwd.logp, exp.batch.loss_mask, self.cfg.agg, counts["nll"])
        return nll, {"nll": nll.detach()}
