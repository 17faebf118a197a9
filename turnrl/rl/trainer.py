"""``Trainer``: a training run assembled from the learner core, an experience source and the driver.

Where a step's episodes come from is the algorithm's ``experience``: fresh rollouts (on-policy); stored
Trajectories for offline algorithms (dqo, dpo, rft, sft; :class:`turnrl.rl.offline_data.OfflineSource`); or fresh
steps sampled from stored states (swirl; :class:`turnrl.swirl.source.StateSource`). ``data.epochs`` resolves to
``steps``.

Each step: pick ``prompts_per_step`` training tasks (a data cursor walks the env's task indices) → roll out
``group_size`` episodes per task with the current weights → the learner leaves out episodes that ended in an
error, computes advantages over whole groups and takes ``epochs`` passes of optimizer steps → metrics (JSONL and
TensorBoard) → periodic held-out evaluation → checkpoint. ``placement: local`` rolls out in this process with the
very model being trained; ``placement: ray`` on Ray rollout workers that receive the weights after every update
(:mod:`turnrl.rl.placement.ray`). A killed run resumes from its last checkpoint and continues exactly like an
uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.config import EnvConfig, OptimConfig, RayConfig, RolloutConfig, TrainConfig, load_config
from turnrl.rl.driver import Driver
from turnrl.rl.learner import Learner
from turnrl.rl.sources import LocalRunner, OnPolicySource


def load_policy(model: Any, run: str | Path) -> None:
    """Load the policy weights of another run (its folder or its ``checkpoint.pt``) into ``model``, in place.

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the checkpoint's weights do not fit ``model`` (a run of another model).
    """
    path = Path(run)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"init_from: no checkpoint at {path} (a finished run's OUT_DIR holds checkpoint.pt)")
    state = torch.load(path, map_location="cpu", weights_only=False)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise ValueError(f"init_from: the weights in {path} do not fit this model ({str(e)[:200]}); was that run "
                         f"of another `model`? (it was {state.get('config', {}).get('model')!r})") from e


class Trainer:
    """Train a policy on an environment with a registered algorithm (see the module docstring).

    Args:
        config: the run.
        model, tokenizer: the policy; default: loaded from ``config.model``.
    """

    def __init__(self, config: TrainConfig, *, model: Any = None, tokenizer: Any = None) -> None:
        self.cfg = config
        self._eval_kwargs: dict[str, Any] | None = None  # the held-out env's kwargs, resolved at the first evaluation
        batch = config.rollout.prompts_per_step * config.rollout.group_size
        self.algorithm = get_algorithm(config.algorithm)
        offline = None
        kind = type(self.algorithm).experience
        if kind == "offline":  # dqo, dpo, rft, sft: epochs over stored data, checked before the model loads
            from turnrl.rl.offline_data import OfflineSource

            offline = OfflineSource(config.data.path, self.algorithm, config.data.batch_size,  # type: ignore[arg-type]
                                    seed=config.seed, shuffle=config.data.shuffle,
                                    temperature=config.rollout.temperature)
            if config.data.epochs is not None:  # resolved: config.yaml records the steps
                steps = offline.steps_for(config.data.epochs)
                config = self.cfg = config.model_copy(
                    update={"steps": steps, "data": config.data.model_copy(update={"epochs": None})})
        states = None
        if kind == "states":  # swirl: fresh steps from stored states, read (and checked) before the model loads
            from turnrl.swirl.source import StateSource

            states = StateSource(config, None, version=lambda: self.learner.version)
            if config.data is not None and config.data.epochs is not None:
                steps = states.steps_for(config.data.epochs)
                config = self.cfg = states.cfg = config.model_copy(
                    update={"steps": steps, "data": config.data.model_copy(update={"epochs": None})})
        if model is None:
            from turnrl.agents import make_agent

            agent = make_agent(config.model, batch_size=batch)
            model, tokenizer = agent.model, agent.tokenizer
        if config.init_from:
            load_policy(model, config.init_from)
        if offline is not None:
            offline.check_tokenizer(tokenizer)
        if config.learner.backend == "deepspeed":  # M DeepSpeed ranks on Ray; `model` stays as the published copy
            from turnrl.rl.placement.learner_group import LearnerGroup

            self.learner: Any = LearnerGroup(config, model, tokenizer)
        else:
            self.learner = Learner(config, self.algorithm, model, tokenizer)
        self.agent = HFAgent(model, tokenizer, batch_size=batch)
        self.runner: Any = None
        if offline is not None:
            self.source: Any = offline
        elif states is not None:
            states.agent = self.agent  # the policy being trained
            self.source = states
        else:
            if config.placement == "ray":
                from turnrl.rl.placement.ray import RayRunner

                self.runner = RayRunner(config, self.learner, tokenizer)
            else:
                self.runner = LocalRunner(config, self.agent, lambda: self.learner.version)
            self.source = OnPolicySource(config, self.algorithm, self.runner)
        self.driver = Driver(config, self.learner, self.source, self.evaluate)

    # the parts, under the names the first trainer had
    model = property(lambda self: self.agent.model)
    tokenizer = property(lambda self: self.learner.tokenizer)
    value_head = property(lambda self: self.learner.value_head)
    critic = property(lambda self: self.learner.critic)
    optimizer = property(lambda self: self.learner.optimizer)
    scheduler = property(lambda self: self.learner.scheduler)
    step = property(lambda self: self.driver.step)
    history = property(lambda self: self.driver.history)

    def evaluate(self, out: str | Path | None = None) -> float:
        """Greedy success rate on the first ``eval_tasks`` tasks of the held-out env (report, items and
        trajectories in ``out`` when given; training uses ``OUT_DIR/eval/step-N``)."""
        from turnrl.envs.registry import make
        from turnrl.rl.evaluate import evaluate, run_eval_kwargs

        sync = getattr(self.learner, "sync_driver", None)  # a learner group: bring the driver's copy up to date
        if sync is not None:
            sync()
        if self._eval_kwargs is None:
            train_env = make(self.cfg.env.id, **self.cfg.env.kwargs)
            self._eval_kwargs = run_eval_kwargs(train_env, self.cfg.env.kwargs, self.cfg.env.eval_kwargs)
        kwargs = self._eval_kwargs
        m = evaluate(self.agent, self.cfg.env.id, env_kwargs=kwargs, limit=self.cfg.eval_tasks, seed=self.cfg.seed,
                     params=SamplingParams(temperature=0.0, max_new_tokens=self.cfg.rollout.max_new_tokens),
                     batch_episodes=64, max_context=self.cfg.rollout.max_context, out=out,
                     env_timeout=self.cfg.rollout.env_timeout)
        return m["accuracy"]

    def train(self, *, stop_after: int | None = None,
              on_step: Callable[[dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        """Run the driver (see :meth:`turnrl.rl.driver.Driver.train`)."""
        return self.driver.train(stop_after=stop_after, on_step=on_step)

    def save(self, path: str | Path) -> None:
        """Checkpoint (see :meth:`turnrl.rl.driver.Driver.save`)."""
        self.driver.save(path)

    def load(self, path: str | Path) -> None:
        """Resume (see :meth:`turnrl.rl.driver.Driver.load`)."""
        self.driver.load(path)

    def close(self) -> None:
        """Release the placement's resources (Ray workers, learner ranks)."""
        for part in (self.runner, self.learner):
            close = getattr(part, "close", None)
            if close is not None:
                close()


__all__ = ["EnvConfig", "OptimConfig", "RayConfig", "RolloutConfig", "TrainConfig", "Trainer", "load_config"]
