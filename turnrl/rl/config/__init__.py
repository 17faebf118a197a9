"""The run configuration, at the bottom of :mod:`turnrl.rl` (docs/ARCHITECTURE.md): what ``turnrl train CONFIG.yaml
key.sub=value …`` reads, as pydantic models in which unknown keys are errors.

* :mod:`~turnrl.rl.config.train` — :class:`TrainConfig`, the whole run, and the combinations it refuses;
* :mod:`~turnrl.rl.config.sections` — its sections about the training itself (``env``, ``rollout``, ``optim``,
  ``data``, ``program``, ``guard``, ``wandb``, ``extra_evals``);
* :mod:`~turnrl.rl.config.cluster` — where the run runs: the ``ray`` and ``learner`` sections, the custom resources
  and the ``runtime_env`` they declare to a cluster;
* :mod:`~turnrl.rl.config.tasks` and :mod:`~turnrl.rl.config.rewards` — the ``tasks`` and ``reward`` sections;
* :mod:`~turnrl.rl.config.multi_agent` — the ``multi_agent`` section (seats, opponents, the league);
* :mod:`~turnrl.rl.config.algorithm` — the base of every algorithm's options and the registry's hooks;
* :mod:`~turnrl.rl.config.loading` — a YAML file plus overrides to a config, and errors on one line.

Every module of ``turnrl.rl`` may import this package; it imports none of them.
"""

from turnrl.rl.config.algorithm import (
    AlgorithmConfig,
    AlgorithmHooks,
    algorithm_hooks,
    install_algorithm_hooks,
)
from turnrl.rl.config.cluster import LearnerConfig, RayConfig
from turnrl.rl.config.loading import config_error, load_config, parse_overrides
from turnrl.rl.config.multi_agent import LeagueConfig, MultiAgentConfig, PolicyConfig
from turnrl.rl.config.rewards import ProcessRewardConfig, RewardConfig
from turnrl.rl.config.sections import (
    ContextConfig,
    DataConfig,
    EnvConfig,
    GuardConfig,
    OptimConfig,
    ProgramConfig,
    RolloutConfig,
    WandbConfig,
)
from turnrl.rl.config.tasks import (
    CurriculumStage,
    CurriculumTasks,
    DifficultyTasks,
    PrePPOTasks,
    SequentialTasks,
    TaskConfig,
    UniformTasks,
)
from turnrl.rl.config.train import TrainConfig, check_guard

__all__ = [
    "AlgorithmConfig",
    "AlgorithmHooks",
    "ContextConfig",
    "CurriculumStage",
    "CurriculumTasks",
    "DataConfig",
    "DifficultyTasks",
    "EnvConfig",
    "GuardConfig",
    "LeagueConfig",
    "LearnerConfig",
    "MultiAgentConfig",
    "OptimConfig",
    "PolicyConfig",
    "PrePPOTasks",
    "ProcessRewardConfig",
    "ProgramConfig",
    "RayConfig",
    "RewardConfig",
    "RolloutConfig",
    "SequentialTasks",
    "TaskConfig",
    "TrainConfig",
    "UniformTasks",
    "WandbConfig",
    "algorithm_hooks",
    "check_guard",
    "config_error",
    "install_algorithm_hooks",
    "load_config",
    "parse_overrides",
]
