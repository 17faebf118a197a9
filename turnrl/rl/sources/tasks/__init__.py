"""Task samplers: which tasks each round of an on-policy run plays (the ``tasks:`` config section,
:mod:`turnrl.rl.config.tasks`; docs/training.md "Which tasks").

A sampler sees the training environment as a :class:`TaskPool` — its task count and, for a
``turnrl/Mixture-v0``, which member poses each task and the members' weights (any other environment is one member).
:meth:`TaskSampler.tasks` chooses a round's tasks once (asking again returns the same choice, so a round handed to
rollout workers ahead of time is the round that is trained on) from a random stream seeded by the run's seed, the
step and the round; :meth:`TaskSampler.observe` takes the success of every group played in a step (also those
dynamic sampling leaves out). Everything a choice depends on is in :meth:`~TaskSampler.state_dict`, so a resumed
run draws the same next tasks as an uninterrupted one.

Strategies: ``sequential`` (index order, the default), ``uniform``, ``difficulty`` (docs/algorithms.md §13: weight ∝
p(1 − p) + ε), ``pre-ppo`` (score a pool once, keep the lowest-scoring share) and ``curriculum`` (stages of mixture
members with switch rules).
"""

from __future__ import annotations

from typing import Any

from turnrl.rl.config.tasks import (
    CurriculumTasks,
    DifficultyTasks,
    PrePPOTasks,
    SequentialTasks,
    TaskConfig,
    UniformTasks,
)
from turnrl.rl.sources.tasks.base import TaskPool, TaskSampler, draw, draw_by_member, group_success, stream
from turnrl.rl.sources.tasks.online import Difficulty, Sequential, Uniform, difficulty_weight, ema_update
from turnrl.rl.sources.tasks.plans import Curriculum, PrePPO, Selection, select_lowest

SAMPLERS: dict[type, type[TaskSampler]] = {
    SequentialTasks: Sequential,
    UniformTasks: Uniform,
    DifficultyTasks: Difficulty,
    PrePPOTasks: PrePPO,
    CurriculumTasks: Curriculum,
}


def make_sampler(cfg: TaskConfig, env: Any, seed: int) -> TaskSampler:
    """The sampler ``cfg`` names over ``env``'s tasks (an environment or a :class:`TaskPool`; a curriculum's member
    names are checked here)."""
    return SAMPLERS[type(cfg)](cfg, env if isinstance(env, TaskPool) else TaskPool.of(env), seed)


__all__ = [
    "SAMPLERS",
    "Curriculum",
    "Difficulty",
    "PrePPO",
    "Selection",
    "Sequential",
    "TaskPool",
    "TaskSampler",
    "Uniform",
    "difficulty_weight",
    "draw",
    "draw_by_member",
    "ema_update",
    "group_success",
    "make_sampler",
    "select_lowest",
    "stream",
]
