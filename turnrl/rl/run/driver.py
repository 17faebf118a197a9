"""The driver (docs/concepts.md §8): the loop of steps, held-out evaluation, monitors, metrics and checkpoints.

It talks to a learner (``update``, ``state_dict``), an experience source (``collect``, ``state_dict``) and an
evaluation function; it does not know where they run. A killed run resumes from its last checkpoint and continues
exactly like an uninterrupted one (learner, source position, RNG, metrics history).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from turnrl.rl.config import TrainConfig
from turnrl.rl.run.guard import ConsistencyError, ConsistencyGuard, rollout_backend
from turnrl.rl.run.monitors import Check, EpisodeFailures, check_health, failed_episodes
from turnrl.rl.run.tracking import Tracker
from turnrl.rl.sources.base import within_staleness
from turnrl.storage import TrajectoryWriter

logger = logging.getLogger(__name__)


class Driver:
    """Run ``cfg.steps`` training steps.

    Args:
        config: the run config (``steps``, ``eval_every``, ``checkpoint_every``, ``out_dir``, ``wandb``,
            ``save_trajectories``). The run folder gets ``config.yaml``, ``metrics.jsonl``, ``checkpoint.pt``,
            ``eval/step-N/`` (held-out reports) and ``train/step-N/trajectories.jsonl`` (the episodes of step N).
        learner: has ``update(trajectories) -> metrics``, ``state_dict()``, ``load_state_dict()`` and ``version``.
        source: an :class:`~turnrl.rl.sources.base.ExperienceSource`.
        evaluate: ``evaluate(out_dir) -> {"eval_success": held-out success, "eval_<figure>": …}`` (the
            environment's own held-out figures beside it, e.g. PAG's verifier accuracies; writes its report to
            ``out_dir``).
        monitors: health checks run after every step beside the built-in ones
            (:func:`turnrl.rl.run.monitors.check_health`).
        validate: ``validate(out_dir) -> {"val_success": …, "val_<figure>": …}`` on the validation split, run
            before training and every ``validate_every`` steps (reports in ``OUT_DIR/validation/step-N``).
    """

    def __init__(
        self,
        config: TrainConfig,
        learner: Any,
        source: Any,
        evaluate: Callable[[Path], dict[str, float]],
        monitors: Sequence[Check] = (),
        validate: Callable[[Path], dict[str, float]] | None = None,
    ) -> None:
        self.cfg, self.learner, self.source, self.evaluate = config, learner, source, evaluate
        self.validate = validate
        self.monitors = tuple(monitors)
        self.sampled = source.sampled  # the policy's own episodes (not stored data): sampling health is checked
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.out = Path(config.out_dir)
        self.guard = ConsistencyGuard(
            config.guard,
            config.rollout,
            backend=rollout_backend(config.placement, config.ray),
            sampled=self.sampled,
            group_size=source.group_size(),
        )
        self._halt: list[str] = []  # a strict guard's failures: the run stops once the step is recorded
        self.checkpoint_step: int | None = None  # the step of the checkpoint saved or loaded last (None: none yet)

    def train(
        self, *, stop_after: int | None = None, on_step: Callable[[dict[str, float]], None] | None = None
    ) -> list[dict[str, float]]:
        """Run until ``cfg.steps`` (or ``stop_after`` more steps, to simulate an interruption); return the history.

        ``on_step`` is called with each step's metrics (after the held-out evaluation, if any, ran), and with the
        step-0 evaluation's record when the run starts fresh.
        """
        self.out.mkdir(parents=True, exist_ok=True)
        # the run's config beside its outputs (`turnrl view` reads the model's tokenizer from it)
        config = self.cfg.model_dump(mode="json", exclude={"ray", "learner"} if self.cfg.placement == "local" else None)
        (self.out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # `turnrl train` loads it
        tracker = Tracker(self.out, self.cfg.wandb, self.cfg.model_dump())
        try:
            if self.step == 0 and not self.history:
                self.source.reset()
                self._record(
                    {"step": 0.0, **self.evaluate(self.out / "eval" / "step-0"), **self._validation()},
                    tracker,
                    on_step,
                    fresh=True,
                )
            end = self.cfg.steps if stop_after is None else min(self.cfg.steps, self.step + stop_after)
            while self.step < end:
                self._record(self._one_step(), tracker, on_step)
                if self._halt:
                    raise ConsistencyError("guard.strict: " + " | ".join(self._halt))
                if self.step == self.cfg.steps or (
                    self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0
                ):
                    self.save(self.out / "checkpoint.pt")
        finally:
            tracker.close()
        return self.history

    def _one_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        trajs, info = self.source.collect(self.step)
        failing, stop = self._failures(trajs, info)
        if stop is not None:  # nothing to train on: say so and end, before an update, a checkpoint or an evaluation
            saved = self._save_trajectories(self.step + 1, trajs) if trajs else None
            raise EpisodeFailures(f"{stop}{f' (the episodes: {saved})' if saved else ''}")
        fresh = trajs
        if self.sampled:  # the staleness bound (stored data carries no versions of this run)
            fresh, dropped = within_staleness(
                trajs, self.learner.version, self.cfg.rollout.max_staleness, self.source.lag
            )
            info.update(dropped)
        info.update(self.learner.update(fresh))
        # every episode collected is trained or counted as dropped, with its reason (stale, stale_group, untrainable)
        info["collected_episodes"] = float(len(trajs))
        info["trained_episodes"] = float(len(fresh) - info.get("dropped_episodes", 0.0)) if fresh else 0.0
        figures, failed = self.guard.check(self.step + 1, trajs, fresh, info)
        info.update(figures)
        self._halt = failed if self.guard.strict else []
        self.step += 1
        self._save_trajectories(self.step, trajs)
        info["step"] = float(self.step)
        info["seconds"] = time.perf_counter() - t0
        info["tokens_per_s"] = info["generated_tokens"] / max(info["seconds"], 1e-9)
        info["train_tokens_per_s"] = info.get("train_tokens", 0.0) / max(info["seconds"], 1e-9)
        info["lr"] = self.learner.lr
        if self.step == self.cfg.steps or (self.cfg.eval_every and self.step % self.cfg.eval_every == 0):
            info.update(self.evaluate(self.out / "eval" / f"step-{self.step}"))
        info.update(self._validation())
        warnings = ([failing] if failing else []) + check_health(
            self.history, info, self.cfg.rollout.max_new_tokens, sampled=self.sampled, monitors=self.monitors
        )
        for w in warnings:
            logger.warning("step %d: %s", self.step, w)
        info["warnings"] = float(len(warnings))
        return info

    def _failures(self, trajs: Sequence[Any], info: dict[str, float]) -> tuple[str | None, str | None]:
        """:func:`~turnrl.rl.run.monitors.failed_episodes` over every episode the source played this step (its
        ``rollout_episodes`` and ``error_episodes``: with dynamic sampling more than it returns), else over what it
        returned; the first error from those returned, else the source's own record of it (``first_error``)."""
        errors = [t.error for t in trajs if t.error is not None]
        played = int(info.get("rollout_episodes", len(trajs)))
        failed = int(info.get("error_episodes", len(errors)))
        first = errors[0] if errors else getattr(self.source, "first_error", None)
        return failed_episodes(
            self.step + 1,
            played,
            failed,
            first,
            self.cfg.rollout.warn_error_share,
            in_play=int(info.get("carried_episodes", 0)),
        )

    def _save_trajectories(self, step: int, trajs: Sequence[Any]) -> Path | None:
        """``train/step-N/trajectories.jsonl`` (when ``save_trajectories``): the file, or None."""
        if not self.cfg.save_trajectories:
            return None
        path = self.out / "train" / f"step-{step}" / "trajectories.jsonl"
        with TrajectoryWriter(path) as write:
            for t in trajs:
                write(t)
        return path

    def _validation(self) -> dict[str, float]:
        """The validation split's figures when this step is one to validate at (``validate_every``), else none."""
        every = self.cfg.validate_every
        if self.validate is None or not every or self.step % every:
            return {}
        return self.validate(self.out / "validation" / f"step-{self.step}")

    def _record(
        self,
        info: dict[str, float],
        tracker: Tracker,
        on_step: Callable[[dict[str, float]], None] | None,
        fresh: bool = False,
    ) -> None:
        self.history.append(info)
        with (self.out / "metrics.jsonl").open("w" if fresh else "a") as f:
            f.write(json.dumps(info) + "\n")
        tracker.log(info, self.step)
        if on_step is not None:
            on_step(info)

    # ---- checkpoints ----

    def save(self, path: str | Path) -> None:
        """Everything needed to continue exactly: the learner, the source's position, RNG, step and history."""
        state = self.learner.state_dict()
        state.update(
            rng=torch.get_rng_state(),
            step=self.step,
            history=self.history,
            source=self.source.state_dict(),
            config=self.cfg.model_dump(),
        )
        tmp = Path(path).with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)  # a run killed while saving keeps its previous checkpoint
        self.checkpoint_step = self.step

    def load(self, path: str | Path) -> None:
        """Resume from :meth:`save`'s file."""
        state = torch.load(path, map_location="cpu", weights_only=False)  # a GPU run resumes anywhere
        self.learner.load_state_dict(state)
        torch.set_rng_state(state["rng"])
        self.step, self.history = state["step"], state["history"]
        self.checkpoint_step = self.step
        self.source.load_state_dict(state["source"])
        # metrics.jsonl as of the checkpoint: the rows a killed run wrote after it (steps, evaluations) are played again
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.history))
