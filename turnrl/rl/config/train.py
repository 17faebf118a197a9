"""The whole training run (``turnrl train CONFIG.yaml key.sub=value …``): :class:`TrainConfig` puts the sections
together and refuses the combinations that cannot run. The algorithm's own section is typed as the base
:class:`~turnrl.rl.config.algorithm.AlgorithmConfig` here and resolved to the named algorithm's options by the
registry's hooks (:func:`~turnrl.rl.config.algorithm.algorithm_hooks`), so this module names no algorithm.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from turnrl.agents.spec import AgentSpec
from turnrl.envs.multiagent.registry import is_multi_agent
from turnrl.rl.config.algorithm import AlgorithmConfig, algorithm_hooks
from turnrl.rl.config.cluster import LearnerConfig, RayConfig
from turnrl.rl.config.multi_agent import MultiAgentConfig
from turnrl.rl.config.rewards import ProcessRewardConfig, RewardConfig
from turnrl.rl.config.sections import (
    DataConfig,
    EnvConfig,
    ExtraEvalConfig,
    GuardConfig,
    OptimConfig,
    ProgramConfig,
    RolloutConfig,
    WandbConfig,
)
from turnrl.rl.config.tasks import SequentialTasks, TaskConfig

EVAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # an extra evaluation's name: a folder and a metric name


class TrainConfig(BaseModel):
    """A training run (``turnrl train CONFIG.yaml``); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    model: AgentSpec = Field(
        AgentSpec("smollm2-135m-instruct"),
        description=(
            "the policy to train: a built-in model name, a path or hub id, hf:PATH, tiny:TEMPLATE (tests), or another "
            "agent backend's spec; its form is checked at load (turnrl.agents.spec)"
        ),
    )
    init_from: str | None = Field(
        None,
        description=(
            "start from another run's policy: its OUT_DIR (or OUT_DIR/checkpoint.pt) of a run of the same `model`, e.g. "
            "an SFT run before RL; the reference model (KL, DPO, DQO) is this starting policy"
        ),
    )
    env: EnvConfig
    algorithm: SerializeAsAny[AlgorithmConfig] = Field(default_factory=lambda: algorithm_hooks().parse({}))
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    tasks: TaskConfig = Field(
        default_factory=SequentialTasks,
        description="which tasks an on-policy run trains on: "
        "strategy sequential (default), uniform, difficulty, pre-ppo or curriculum",
    )
    reward: RewardConfig | None = Field(
        None,
        description="how an on-policy run scores its episodes: rule "
        "verifiers where they apply, a generative judge elsewhere (default: each "
        "environment's own reward)",
    )
    process_reward: ProcessRewardConfig | None = Field(
        None,
        description=(
            "dense rewards at the line ends of every reply from a process reward model (`turnrl prm train`), for "
            "algorithms with a critic"
        ),
    )
    optim: OptimConfig = Field(default_factory=OptimConfig)
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description=(
            "where this process's policy generates and trains: auto (a CUDA GPU when torch sees one and placement is "
            "local, else cpu), cpu, cuda or cuda:N. On placement ray the workers and DeepSpeed ranks take GPUs through "
            "`ray` and `learner` options; there auto keeps the driver's copy on cpu"
        ),
    )
    placement: Literal["local", "ray"] = Field(
        "local", description="where rollouts run: in this process, or on Ray rollout workers (options under `ray`)"
    )
    ray: RayConfig = Field(default_factory=RayConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    steps: int = Field(20, ge=1)
    seed: int = 0
    eval_every: int = Field(0, ge=0, description="0 = only before and after training")
    eval_tasks: int = Field(32, ge=1)
    validate_every: int = Field(
        0,
        ge=0,
        description=(
            "evaluate on the environment's validation split (its `validation_split`: a step, a rate or a recipe is "
            "chosen there, never on the test split) before training and every N steps, as val_success and val_<figure>; "
            "reports in OUT_DIR/validation/step-N. 0 = never"
        ),
    )
    validation_tasks: int = Field(64, ge=1, description="validation problems evaluated each time (validate_every)")
    checkpoint_every: int = Field(0, ge=0, description="0 = only at the end")
    out_dir: str = "runs/train"
    save_trajectories: bool = Field(
        True,
        description=(
            "write each step's episodes, with per-token advantages and learner log-probabilities, to "
            "OUT_DIR/train/step-N/trajectories.jsonl (turnrl view OUT_DIR shows them)"
        ),
    )
    wandb: WandbConfig | None = Field(None, description="also log to Weights & Biases (extra wandb)")
    data: DataConfig | None = Field(
        None,
        description="stored training data, for algorithms that train from it "
        "(offline objectives: epochs over stored Trajectories; step-wise ones: stored "
        "states)",
    )
    program: ProgramConfig | None = Field(
        None,
        description="train a user agent program through the OpenAI-"
        "compatible gateway (its episodes instead of native rollouts of `env`)",
    )
    guard: GuardConfig = Field(
        default_factory=GuardConfig,
        description="the consistency guard: each step checks "
        "that it trains what the policy sampled (guard_* metrics; strict stops the run)",
    )
    multi_agent: MultiAgentConfig | None = Field(
        None,
        description=(
            "an environment with several agents (env.id such as turnrl/TicTacToe-v0 or textarena:GAME): the seats the "
            "policy trains, its opponents (itself, a league of its past versions, a frozen agent) and the held-out "
            "opponent; default when env.id names one: self-play in every seat, evaluated against random play"
        ),
    )

    extra_evals: dict[str, ExtraEvalConfig] | None = Field(
        None,
        description=(
            "the policy also evaluated on other environments, by name, wherever the run evaluates and validates "
            "(reports in OUT_DIR/NAME/eval/step-N, figures eval_NAME_success and eval_NAME_<figure>): e.g. a solver "
            "trained alone on turnrl/Arithmetic-v0 evaluated through the review protocol of turnrl/SolverCritic-v0, "
            "{review: {env: turnrl/SolverCritic-v0, kwargs: {levels: [1]}}}, so that `turnrl compare OUT_DIR/review "
            "PAIR_OUT_DIR` pairs it with the solver-critic pair's evaluation. Each env's problems are checked against "
            "the training problems before a model loads"
        ),
    )

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm(cls, value: Any) -> AlgorithmConfig:
        return algorithm_hooks().parse(value)

    @model_validator(mode="after")
    def _placement_options(self) -> TrainConfig:
        c = self.rollout.context
        if c is not None and c.budget > self.rollout.max_context:
            raise ValueError(
                f"rollout.context.budget ({c.budget}) is larger than rollout.max_context "
                f"({self.rollout.max_context}): episodes would be cut by max_context before their "
                "history is ever rewritten; lower the budget or raise max_context"
            )
        if self.placement == "local" and "ray" in self.model_fields_set:
            raise ValueError("`ray` options are set but placement is 'local'; add placement=ray (or drop them)")
        if self.rollout.max_staleness > 0 and self.placement != "ray":
            raise ValueError(
                f"rollout.max_staleness={self.rollout.max_staleness} lets rollouts of the next step run "
                "while the learner updates, which needs rollout workers: add placement=ray (on "
                "placement local every token is sampled by the weights being updated: use 0)"
            )
        if self.rollout.continuous_batching and self.placement != "local":
            raise ValueError(
                "rollout.continuous_batching runs on the local placement's HF agent; Ray workers decode "
                "in rounds (a weight load falls between two generation calls): drop it or use "
                "placement=local"
            )
        if self.rollout.max_staleness > 0 and self.learner.weight_sync == "nccl":
            raise ValueError(
                "rollout.max_staleness > 0 pushes weights to workers while they generate, which the NCCL "
                "weight transfer does not do yet: use learner.weight_sync=object_store or max_staleness=0"
            )
        if self.program is not None and self.placement != "local":
            raise ValueError(
                "`program` runs the agent program against a gateway in the trainer's process: use placement=local"
            )
        if self.program is not None and self.rollout.max_staleness > 0:
            raise ValueError(
                "`program` episodes are played while nothing updates the policy: use rollout.max_staleness=0"
            )
        if self.learner.lora is not None and self.learner.weight_sync == "nccl":
            raise ValueError(
                "learner.lora sends rollout workers the adapters alone, through the object store: use "
                "learner.weight_sync=object_store (the NCCL transfer streams whole models)"
            )
        if self.learner.backend == "deepspeed" and self.placement != "ray":
            raise ValueError("learner.backend=deepspeed runs its ranks as Ray actors: add placement=ray")
        if self.learner.weight_sync == "nccl" and (
            self.learner.backend != "deepspeed" or self.ray.rollout_backend != "vllm" or self.ray.rollout_workers != 1
        ):
            raise ValueError(
                "learner.weight_sync=nccl streams from a DeepSpeed rank into one vLLM engine: it needs "
                "learner.backend=deepspeed, ray.rollout_backend=vllm and ray.rollout_workers=1"
            )
        return self

    @model_validator(mode="after")
    def _multi_agent(self) -> TrainConfig:
        several = is_multi_agent(self.env.id)
        if self.multi_agent is not None and not several:
            raise ValueError(
                f"`multi_agent` options are set but env.id {self.env.id!r} is an environment with one "
                "agent: drop them, or name a multi-agent environment (turnrl envs list)"
            )
        if several and self.multi_agent is None:
            self.multi_agent = MultiAgentConfig()
        if several and (self.program is not None or self.learner.backend != "torch"):
            raise ValueError(
                f"{self.env.id} has several agents, whose training runs with the local learner and "
                "native rollouts (the gateway and DeepSpeed ranks do not play games yet): drop `program` "
                "and learner.backend"
            )
        ma = self.multi_agent
        if several and ma is not None and self.placement == "ray" and self.rollout.max_staleness > 0:
            raise ValueError(
                f"{self.env.id} on placement ray plays its games synchronously: rollout.max_staleness > 0 "
                "runs on placement local for now"
            )
        if several and ma is not None and ma.policies and self.placement == "ray" and self.ray.rollout_backend != "hf":
            raise ValueError(
                "several trainable policies (multi_agent.policies) play on HF rollout workers: set "
                "ray.rollout_backend: hf (vLLM workers with one adapter per policy are not built yet)"
            )
        clash = ma.not_held_out(self.env.id, self.model, self.out_dir) if several and ma is not None else None
        if clash and ma is not None and not ma.eval_not_held_out:  # (ma is set where there is a clash)
            raise ValueError(
                f"{clash}: its figures would not be held out. Evaluate against an opponent the run never "
                "plays (a frozen agent spec such as hf:PATH or another run's run:OUT_DIR, a scripted player "
                "script:MODULE:FUNCTION; on tic-tac-toe random or perfect), or, where the seats are partners (a cooperative game), set "
                "multi_agent.eval_not_held_out: true to evaluate against it anyway (its figures are then "
                "labelled 'not held out')"
            )
        if several and ma is not None and ma.eval_not_held_out and not clash:
            raise ValueError(
                f"multi_agent.eval_not_held_out: true, but the held-out opponent "
                f"{ma.held_out_opponent(self.env.id)!r} is not one this run trains against: drop it"
            )
        if several and (self.reward is not None or self.process_reward is not None):
            raise ValueError(
                f"{self.env.id} pays its seats by the game's own rules: drop `reward` and `process_reward`"
            )
        return self

    @model_validator(mode="after")
    def _extra_evals(self) -> TrainConfig:
        for name, extra in (self.extra_evals or {}).items():
            if not EVAL_NAME.fullmatch(name) or name in ("eval", "train", "validation"):
                raise ValueError(
                    f"extra_evals.{name}: name an evaluation with letters, digits, - and _ (it names its "
                    "folder OUT_DIR/NAME and its figures eval_NAME_*), other than eval, train and "
                    "validation"
                )
            if not is_multi_agent(extra.env) and (extra.opponent.kind != "self" or extra.seat is not None):
                raise ValueError(f"extra_evals.{name}: {extra.env} has one agent: drop opponent and seat")
        if self.extra_evals and (self.multi_agent is not None or self.program is not None):
            raise ValueError(
                "extra_evals evaluates the run's one policy on other environments; runs of a game and "
                "runs of an agent program do not have it yet: drop extra_evals"
            )
        return self

    @model_validator(mode="after")
    def _algorithm_checks(self) -> TrainConfig:
        algorithm_hooks().check(self)  # the algorithm's own checks, its experience source's and the guard's
        return self


def check_guard(cfg: TrainConfig, sampled: bool) -> None:
    """Raise ValueError where a strict guard cannot do its work (``sampled``: the source's episodes are the policy's
    own samples, with their log-probabilities)."""
    g = cfg.guard
    if g.strict and not g.enabled:
        raise ValueError("guard.strict stops the run when a check fails, but guard.enabled is false: drop one")
    if g.strict and not sampled:
        raise ValueError(
            f"guard.strict compares the policy's own samples with the learner's scores, and algorithm "
            f"{cfg.algorithm.name!r} trains from stored data whose log-probabilities are not this run's "
            "policy's: drop guard.strict (the guard's other checks still run)"
        )
