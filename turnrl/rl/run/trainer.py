"""``Trainer``: a training run assembled from the learner core, an experience source and the driver.

The algorithm names its experience source (:attr:`~turnrl.rl.algorithms.base.Algorithm.source`): the trainer opens
it before the model loads (stored data is read and checked first), lets it resolve derived settings (``data.epochs``
→ ``steps``), builds the models the algorithm asks for (:func:`turnrl.rl.core.extra_models.build_models`), then hands the
source the run's parts — the policy as an agent, its tokenizer and the placement's runner. Nothing here names an
algorithm.

Placements: ``placement: local`` plays episodes in this process with the very model being trained;
``placement: ray`` on Ray rollout workers that receive the weights after every update
(:mod:`turnrl.rl.placement.ray`); ``learner.backend: deepspeed`` trains on a group of DeepSpeed ranks
(:mod:`turnrl.rl.placement.learner_group`). A killed run resumes from its last checkpoint and continues exactly
like an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.checkpoint import load_policy
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.config import EnvConfig, OptimConfig, RayConfig, RolloutConfig, TrainConfig, load_config
from turnrl.rl.core.learner import Learner
from turnrl.rl.placement import LearnerProtocol
from turnrl.rl.run.driver import Driver
from turnrl.rl.run.monitors import Check, registered_monitors
from turnrl.rl.sources.base import ExperienceSource, Runner, RunParts
from turnrl.rl.sources.onpolicy import LocalRunner


def learner_of(config: TrainConfig, model: Any, tokenizer: Any, algorithm: Any = None) -> Learner:
    """The learner a run of ``config`` trains ``model`` with: the four parts of the config a
    :class:`~turnrl.rl.core.learner.Learner` reads (``optim``, ``rollout``, ``learner.lora``, ``seed``), its algorithm
    (``config.algorithm`` unless given) and the models that algorithm asks for
    (:func:`~turnrl.rl.core.extra_models.build_models`: reference, critic)."""
    algorithm = get_algorithm(config.algorithm) if algorithm is None else algorithm
    return Learner(
        algorithm,
        model,
        tokenizer,
        optim=config.optim,
        rollout=config.rollout,
        lora=config.learner.lora,
        seed=config.seed,
    )


class Trainer:
    """Train a policy on an environment with a registered algorithm (see the module docstring).

    Args:
        config: the run.
        model, tokenizer: the policy; default: loaded from ``config.model``.
        monitors: the health checks run after every step beside the built-in ones; default: every registered one
            (:func:`turnrl.rl.run.monitors.registered_monitors`, the methods' included).
    """

    def __init__(
        self, config: TrainConfig, *, model: Any = None, tokenizer: Any = None, monitors: Sequence[Check] | None = None
    ) -> None:
        from turnrl.agents.models import pick_device

        # the health checks first: a plug-in's check that does not load fails here, before anything starts
        self.monitors = list(registered_monitors().values()) if monitors is None else list(monitors)

        # a GPU that is not there fails here, before anything loads; placement ray keeps the driver's copy on the
        # CPU unless asked (its workers and ranks hold the GPUs)
        self.device = pick_device(config.device, gpu_ok=config.placement == "local")
        self.cfg = config
        self._eval_kwargs: dict[str, Any] | None = None  # the held-out env's kwargs, resolved at the first evaluation
        self._validation_split: str | None = None  # the environment's, read with them
        self.validation_metrics: dict[str, Any] = {}  # the last validation's figures (validate_every)
        self.eval_metrics: dict[str, Any] = {}  # the last evaluation's figures
        self._eval_opponent: Any = None  # a multi-agent run's held-out opponent, built at the first evaluation
        self.extra_evals: Any = None  # the policy's evaluations on other environments (extra_evals), built below
        batch = config.rollout.prompts_per_step * config.rollout.group_size
        self.algorithm = get_algorithm(config.algorithm)
        # the algorithm's experience source, opened (data read and checked) before the model loads
        source_class = self.algorithm.source_class()
        if config.multi_agent is not None:  # games for episodes (the config refused algorithms whose source cannot)
            from turnrl.rl.sources.multi import MultiAgentSource

            source_class = MultiAgentSource
        self.source: ExperienceSource = source_class.open(config, self.algorithm)
        config = self.cfg = self.source.configure(config)  # e.g. data.epochs -> steps (config.yaml records them)
        if model is None:
            from turnrl.agents import make_agent

            agent = make_agent(config.model, batch_size=batch)
            model, tokenizer = agent.model, agent.tokenizer
        if config.init_from:
            load_policy(model, config.init_from)
        #: the trainable policies of a run with several (multi_agent.policies), by name; {} with one
        self.policies: dict[str, HFAgent] = {}
        if config.multi_agent is not None and config.multi_agent.policies:
            from turnrl.rl.run.policies import build_policies

            self.policies = build_policies(
                config.multi_agent.policies,
                model,
                tokenizer,
                device=self.device,
                batch_size=batch,
                lora=config.learner.lora,
                seed=config.seed,
                kv_cache_mb=config.rollout.kv_cache_mb,
            )
            self.agent = next(iter(self.policies.values()))
            model = self.agent.model
        else:
            if config.learner.lora is not None:  # adapters on the (loaded) policy; only they train
                from turnrl.lora import apply_seeded_lora

                # the adapters' initial weights follow the run's seed, as the first of several policies' (policies.py)
                model = apply_seeded_lora(model, config.learner.lora, config.seed * 1_000_003)
            model.to(self.device)  # the learner builds its reference, value head and batches on the policy's device
            self.agent = HFAgent(model, tokenizer, batch_size=batch, kv_cache_mb=config.rollout.kv_cache_mb)
        self._tokenizer = tokenizer
        self.runner: Runner | None = None
        # the source sees the policy now, before a learner group starts (stored data of another tokenizer fails
        # here); a runner is built when the source first asks, once the learner exists
        self.source.attach(
            RunParts(self.agent, tokenizer, lambda: self.learner.version, self._runner, policies=self.policies)
        )
        if config.learner.backend == "deepspeed":  # M DeepSpeed ranks on Ray; `model` stays as the published copy
            from turnrl.rl.placement.learner_group import LearnerGroup

            self.learner: LearnerProtocol = LearnerGroup(config, model, tokenizer)
        elif self.policies:  # one learner per policy: its own optimizer, scheduler, version and checkpoint
            from turnrl.rl.core.policies import LearnerSet

            self.learner = LearnerSet(
                {name: learner_of(config, a.model, tokenizer, self.algorithm) for name, a in self.policies.items()}
            )
        else:
            self.learner = learner_of(config, model, tokenizer, self.algorithm)
        try:
            self.source.start()  # e.g. the rollout workers
        except BaseException:
            self.learner.close()
            raise
        if config.extra_evals:  # the policy also evaluated on other environments (rl/run/extra_evals.py)
            from turnrl.rl.run.extra_evals import ExtraEvals
            from turnrl.rollout.opponents import make_opponent

            self.extra_evals = ExtraEvals(
                config, lambda name: make_opponent(name, self.agent.tokenizer, config.seed, str(self.device))
            )
        self.driver = Driver(
            config,
            self.learner,
            self.source,
            self._held_out,
            self.monitors,
            validate=self._validation if config.validate_every else None,
        )

    def _runner(self) -> Runner:
        """The placement's runner of on-policy jobs (built when a source first asks)."""
        if self.runner is None:
            if self.cfg.program is not None:
                from turnrl.gateway.runner import GatewayRunner

                c = self.cfg
                self.runner = GatewayRunner(
                    c.program, c.env, c.rollout, self.agent, lambda: self.learner.version, seed=c.seed
                )
            elif self.cfg.placement == "ray":
                from turnrl.rl.placement.ray import RayRunner

                self.runner = RayRunner(self.cfg, self.learner, self._tokenizer)
            else:
                c = self.cfg
                self.runner = LocalRunner(
                    c.env, c.rollout, c.algorithm, c.seed, self.agent, lambda: self.learner.version
                )
        return self.runner

    # the parts, under the names the first trainer had
    model = property(lambda self: self.agent.model)
    tokenizer = property(lambda self: self.learner.tokenizer)
    value_head = property(lambda self: self.learner.value_head)
    critic = property(lambda self: self.learner.critic)
    optimizer = property(lambda self: self.learner.optimizer)
    scheduler = property(lambda self: self.learner.scheduler)
    step = property(lambda self: self.driver.step)
    history = property(lambda self: self.driver.history)

    def evaluate(self, out: str | Path | None = None, split: Literal["held-out", "validation"] = "held-out") -> float:
        """Greedy success rate on the first ``eval_tasks`` tasks of the held-out env (a game's at
        ``multi_agent.eval_temperature``: greedy unless set); report, items and trajectories in ``out`` when given
        (training uses ``OUT_DIR/eval/step-N``); all of the evaluation's figures are in ``self.eval_metrics``
        afterwards. ``split="validation"``: the first ``validation_tasks`` tasks of the
        environment's validation split instead (``validate_every``).

        Raises:
            HeldOutError: (first call) the held-out tasks are tasks the run trains on, on an environment that calls
                them held out.
            ValueError: ``split="validation"`` on an environment that declares no validation split.
        """
        from turnrl.envs.registry import make
        from turnrl.rl.run.evaluate import evaluate, run_eval_kwargs
        from turnrl.rl.run.held_out import check_held_out, check_validation
        from turnrl.rl.sources.onpolicy import context_budget

        self.learner.sync_driver()  # a learner group: bring the driver's copy up to date
        if self.cfg.multi_agent is not None:  # games against the held-out opponent, on held-out starting states
            from turnrl.rl.run.evaluate_multi import evaluate_multi_agent

            ma = self.cfg.multi_agent
            if self._eval_kwargs is None:  # once: a game with a list of problems evaluates none it trains on
                from turnrl.rl.run.held_out import check_game_held_out, check_game_validation

                check_game_held_out(self.cfg.env.id, self.cfg.env.kwargs, self.cfg.env.eval_kwargs, self.cfg.eval_tasks)
                self._eval_kwargs = {}
                if self.cfg.validate_every:  # (and validates on none: a game that declares a validation split)
                    self._validation_split = check_game_validation(
                        self.cfg.env.id, self.cfg.env.kwargs, self.cfg.env.eval_kwargs, self.cfg.validation_tasks
                    )["split"]
            player: Any = self.agent
            if self.policies:  # every seat played by its own policy
                player = {seat: self.policies[name] for seat, name in ma.policy_of_seat().items()}
            kwargs = {k: v for k, v in self.cfg.env.kwargs.items() if k != "split"}  # the held-out split's
            kwargs.update(self.cfg.env.eval_kwargs or {})
            episodes, validating = self.cfg.eval_tasks, split == "validation"
            if validating:  # the validation split's first validation_tasks problems; no floor
                if self._validation_split is None:
                    raise ValueError(
                        f"{self.cfg.env.id}: evaluate(split='validation') reads the game's validation "
                        "split, which the run checks against its training problems with validate_every "
                        "only: set validate_every"
                    )
                kwargs, episodes = {**kwargs, "split": self._validation_split}, self.cfg.validation_tasks
            name = ma.held_out_opponent(self.cfg.env.id)
            if self._eval_opponent is None and name.kind != "self":  # built once, on the policy's device
                from turnrl.rollout.opponents import make_opponent

                self._eval_opponent = make_opponent(name, self.agent.tokenizer, self.cfg.seed, str(self.device))
            m = evaluate_multi_agent(
                player,
                self.cfg.env.id,
                kwargs,
                opponent=self._eval_opponent or "self",
                seat=ma.eval_seat,
                episodes=episodes,
                seed=self.cfg.seed,
                params=SamplingParams(temperature=ma.eval_temperature, max_new_tokens=self.cfg.rollout.max_new_tokens),
                max_context=self.cfg.rollout.max_context,
                out_dir=out,
                opponent_label=name,
                opponent_checked=True,
                floor=False if validating else self.eval_metrics.get("floor", True),
                not_held_out=ma.not_held_out(self.cfg.env.id, self.cfg.model, self.cfg.out_dir),
            )
            # (the floor — a random legal player's figures from the same states — is played at the first evaluation)
            figures = {
                **m,
                "env": {k: v for k, v in m.items() if k.endswith(("_rate", "_mean")) and k != "success_rate"}
                | {"held_out": float(m["held_out"] == "held out"), "distinct_games": float(m["distinct_games"])},
            }
            if validating:
                self.validation_metrics = figures
            else:
                self.eval_metrics = figures
            return float(m["success_rate"])
        if self._eval_kwargs is None:
            train_env = make(self.cfg.env.id, **self.cfg.env.kwargs)
            try:
                self._eval_kwargs = run_eval_kwargs(train_env, self.cfg.env.kwargs, self.cfg.env.eval_kwargs)
                self._validation_split = getattr(train_env.unwrapped, "validation_split", None)
                if self.cfg.program is None:  # (a program's episodes come from its own tasks' indices too)
                    held_env = make(self.cfg.env.id, **self._eval_kwargs)
                    try:
                        check_held_out(self.cfg.env.id, train_env, held_env, self.cfg.eval_tasks)
                    finally:
                        held_env.close()
                if self.cfg.validate_every and self._validation_split is not None:
                    check_validation(
                        self.cfg.env.id,
                        train_env,
                        {**self._eval_kwargs, "split": self._validation_split},
                        self.cfg.validation_tasks,
                    )
            finally:
                train_env.close()
        kwargs, limit = self._eval_kwargs, self.cfg.eval_tasks
        if split == "validation":
            if self._validation_split is None:
                raise ValueError(
                    f"{self.cfg.env.id} declares no validation split (validation_split), so "
                    "validate_every has nothing to read; set validate_every=0, or give the environment "
                    "one (a split distinct from its held-out split)"
                )
            kwargs, limit = {**kwargs, "split": self._validation_split}, self.cfg.validation_tasks
        player = None
        if self.cfg.program is not None:  # the program is the agent: evaluated through the gateway, greedy
            from turnrl.gateway.runner import GatewayRunner

            runner = self._runner()
            assert isinstance(runner, GatewayRunner)
            player = runner.player(greedy=True)
        m = evaluate(
            self.agent,
            self.cfg.env.id,
            env_kwargs=kwargs,
            limit=limit,
            seed=self.cfg.seed,
            params=SamplingParams(temperature=0.0, max_new_tokens=self.cfg.rollout.max_new_tokens),
            batch_episodes=64,
            max_context=self.cfg.rollout.max_context,
            out=out,
            env_timeout=self.cfg.rollout.env_timeout,
            player=player,
            context=context_budget(self.cfg.rollout),
        )
        if split == "validation":
            self.validation_metrics = m
        else:
            self.eval_metrics = m
        return m["accuracy"]

    def _held_out(self, out: Path) -> dict[str, float]:
        """The driver's evaluation: ``eval_success`` and, beside it, the environment's own figures (``eval_`` +
        the names its ``summarize_episodes`` gives, e.g. ``eval_pag_verifier_balanced_acc``), and the extra
        evaluations' (``eval_NAME_success``, …: ``extra_evals``)."""
        success = self.evaluate(out)
        own = self.eval_metrics.get("env") or {}
        spread = {
            f"eval_{k}": float(self.eval_metrics[m])
            for k, m in (
                ("items", "distinct_items"),
                ("success_low", "accuracy_low"),
                ("success_high", "accuracy_high"),
            )
            if self.eval_metrics.get(m) is not None
        }  # distinct items and the 95 % interval over them
        extra = self.extra_evals.run(self.agent, out.name) if self.extra_evals is not None else {}
        return {"eval_success": success, **spread, **{f"eval_{k}": float(v) for k, v in own.items()}, **extra}

    def _validation(self, out: Path) -> dict[str, float]:
        """The driver's validation: ``val_success`` and the environment's own figures as ``val_<figure>``."""
        success = self.evaluate(out, split="validation")
        own = self.validation_metrics.get("env") or {}
        extra = self.extra_evals.run(self.agent, out.name, "validation") if self.extra_evals is not None else {}
        return {"val_success": success, **{f"val_{k}": float(v) for k, v in own.items()}, **extra}

    def train(
        self, *, stop_after: int | None = None, on_step: Callable[[dict[str, float]], None] | None = None
    ) -> list[dict[str, float]]:
        """Run the driver (see :meth:`turnrl.rl.run.driver.Driver.train`)."""
        return self.driver.train(stop_after=stop_after, on_step=on_step)

    def save(self, path: str | Path) -> None:
        """Checkpoint (see :meth:`turnrl.rl.run.driver.Driver.save`)."""
        self.driver.save(path)

    def load(self, path: str | Path) -> None:
        """Resume (see :meth:`turnrl.rl.run.driver.Driver.load`)."""
        self.driver.load(path)

    def close(self) -> None:
        """Release the placement's resources (Ray workers, learner ranks) and the source's."""
        try:
            self.source.close()
        finally:
            try:
                if self.runner is not None:
                    self.runner.close()
            finally:
                self.learner.close()


__all__ = [
    "EnvConfig",
    "OptimConfig",
    "RayConfig",
    "RolloutConfig",
    "TrainConfig",
    "Trainer",
    "load_config",
    "load_policy",
]
