"""Offline training data (docs/concepts.md §8, experience sources): a stored dataset replayed for DQO, DPO and RFT.

:class:`OfflineSource` is a :class:`~turnrl.rl.sources.ReplaySource` whose units are the offline algorithm's (whole
task groups for dqo and rft, (correct, incorrect) pairs for dpo), after the checks that make a dataset usable:

* the token ids must be the model's: the tokenizer fingerprint that ``turnrl rollout`` stores in each episode's
  ``metadata["tokenizer"]`` must equal the model tokenizer's, and data without one must decode to its own prompt
  text with the model's tokenizer (:func:`check_tokenizer`);
* the algorithm's own checks (:meth:`~turnrl.rl.algorithms.offline.OfflineAlgorithm.check_data`: DQO's behaviour
  log-probabilities), and, where it uses them, that they were taken at the learner's temperature
  (:func:`check_temperature`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnrl.methods.offline.base import OfflineAlgorithm
from turnrl.rl.sources.base import RunParts
from turnrl.rl.sources.replay import OfflineDataError, ReplaySource, check_temperature, check_tokenizer
from turnrl.types import Trajectory

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class OfflineSource(ReplaySource):
    """Epochs over stored Trajectories for an :class:`OfflineAlgorithm`, in batches of whole units (no rollouts).

    Args:
        paths: JSONL or Parquet files (``turnrl rollout`` writes them).
        algorithm: the offline objective (its units, data checks and training view).
        batch_size: episodes per training step (whole units; at least one unit).
        seed, shuffle: the seeded per-epoch shuffle of :class:`ReplaySource`.
        temperature: the learner's scoring temperature; data the algorithm takes behaviour log-probabilities from
            must have been sampled at it (:func:`check_temperature`).

    Call :meth:`check_tokenizer` once the model's tokenizer is loaded (:meth:`attach` does).

    Raises:
        OfflineDataError: a missing or unusable file, or data the algorithm cannot train on.
    """

    def __init__(
        self,
        paths: str | Path | Sequence[str | Path],
        algorithm: OfflineAlgorithm,
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        temperature: float | None = None,
    ) -> None:
        files = [paths] if isinstance(paths, (str, Path)) else list(paths)
        for f in files:
            if not Path(f).is_file():
                raise OfflineDataError(
                    f"data.path {f} does not exist; write it with `turnrl rollout --env ENV --agent MODEL --out {f}`"
                )
        try:
            super().__init__(files, batch_size, seed=seed, shuffle=shuffle)
        except ValueError as e:
            raise OfflineDataError(str(e)) from e
        self.where = ", ".join(str(f) for f in files)
        self.algorithm = algorithm
        episodes = [t for g in self.groups for t in g]
        try:
            algorithm.check_data(episodes)
            if temperature is not None and algorithm.uses_behaviour_logprobs:
                check_temperature(episodes, temperature)
            self.groups, self.data_metrics = algorithm.units(self.groups)
        except OfflineDataError as e:
            raise OfflineDataError(f"{self.where}: {e}") from e
        self.episodes = episodes
        self._order = self._shuffled(self.epoch)

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """``data`` set (steps or data.epochs, not both); no rollouts to place (``placement: ray`` only for the ranks
        of a DeepSpeed learner group)."""
        if cfg.data is None:
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} trains offline from a dataset: set data.path to "
                "Trajectories written by `turnrl rollout` (e.g. data: {path: runs/arith-data.parquet})"
            )
        super().check_config(cfg)
        if cfg.placement != "local" and cfg.learner.backend != "deepspeed":
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} trains offline (no rollouts to place); use "
                "placement: local (placement: ray only hosts a learner.backend: deepspeed group)"
            )

    @classmethod
    def open(cls, cfg: TrainConfig, algorithm: Any) -> OfflineSource:
        """Read and check the data before the model loads."""
        from turnrl.envs.registry import make

        assert cfg.data is not None  # check_config
        source = cls(
            cfg.data.path,
            algorithm,
            cfg.data.batch_size,
            seed=cfg.seed,
            shuffle=cfg.data.shuffle,
            temperature=cfg.rollout.temperature,
        )
        source.env = make(cfg.env.id, **cfg.env.kwargs)  # e.g. PAG's figures of stored verdict rows
        from turnrl.rl.run.held_out import HeldOutError, check_dataset, check_dataset_extra_evals

        try:
            warning = check_dataset(
                cfg.env.id,
                cfg.env.kwargs,
                cfg.env.eval_kwargs,
                cfg.eval_tasks,
                source.episodes,
                cfg.validation_tasks if cfg.validate_every else 0,
            )
            if cfg.extra_evals:  # and none of the problems its evaluations on other environments score
                check_dataset_extra_evals(cfg, source.episodes)
        except HeldOutError as e:
            source.close()
            raise OfflineDataError(f"{source.where}: {e}") from e
        if warning:
            logger.warning("%s: %s", source.where, warning)
        return source

    def configure(self, cfg: TrainConfig) -> TrainConfig:
        """``data.epochs`` resolved to ``steps`` (the run's config.yaml records them)."""
        if cfg.data is not None and cfg.data.epochs is not None:
            cfg = cfg.model_copy(
                update={"steps": self.steps_for(cfg.data.epochs), "data": cfg.data.model_copy(update={"epochs": None})}
            )
        return cfg

    def attach(self, parts: RunParts) -> None:
        """The model's tokenizer is known: refuse data of another tokenizer."""
        self.check_tokenizer(parts.tokenizer)

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Refuse the data if it was tokenized by another tokenizer (:func:`check_tokenizer`)."""
        check_tokenizer(self.episodes, tokenizer, self.where)

    def steps_for(self, epochs: float) -> int:
        """Training steps that consume ``epochs`` passes over the units (at least 1), counted by replaying the
        batches themselves (a batch that ends one epoch is topped up from the next, as :meth:`collect` does)."""
        state, target, steps = self.state_dict(), epochs * len(self.groups), 0
        self.load_state_dict({"epoch": 0, "position": 0})
        try:
            while self.epoch * len(self.groups) + self.position < target:
                ReplaySource.collect(self, steps)
                steps += 1
        finally:
            self.load_state_dict(state)
        return max(1, steps)

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The next batch of whole units, in the algorithm's training view, with the data's metrics."""
        out, info = super().collect(step)
        return [self.algorithm.training_view(t) for t in out], {**info, **self.data_metrics, "generated_tokens": 0.0}
