"""The ``tasks:`` section of a training config: which tasks an on-policy run trains on, in what order
(:mod:`turnrl.rl.sources.tasks` implements each strategy; docs/training.md "Which tasks").

``strategy`` picks one; the other keys are that strategy's::

    tasks: {strategy: difficulty, ema: 0.5, epsilon: 0.02}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Tasks(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SequentialTasks(_Tasks):
    """The tasks in index order, ``prompts_per_step`` at a time, wrapping around (the default; a mixture's members
    take turns by weight, each with its own cursor)."""

    strategy: Literal["sequential"] = Field("sequential", description="the task indices in order (the default)")


class UniformTasks(_Tasks):
    """Tasks drawn at random (a mixture's members by weight, tasks within a member uniformly), distinct within a
    round; seeded by the run's seed, step and round."""

    strategy: Literal["uniform"] = Field("uniform", description="tasks at random, mixture members by weight")


class DifficultyTasks(_Tasks):
    """[ours, docs/algorithms.md §13] Tasks drawn with weight ∝ p(1 − p) + ε, p a task's recent pass rate (an exponential
    average of its groups' success; a task not yet played takes its mixture member's average, or ``prior``)."""

    strategy: Literal["difficulty"] = Field("difficulty", description="tasks near a 50 % pass rate preferred")
    ema: float = Field(0.5, gt=0, le=1, description="the weight of the newest group in a pass rate's average")
    epsilon: float = Field(0.02, gt=0, description="added to every weight, so that no task becomes unreachable")
    prior: float = Field(
        0.5, ge=0, le=1, description="the pass rate assumed of a member none of whose tasks has been played"
    )


class PrePPOTasks(_Tasks):
    """[Pre-PPO, docs/algorithms.md §13] Before training, play ``pool`` candidate tasks ``samples`` times each with the
    initial policy, score them with the run's reward, and train on the ``keep`` share that scored lowest
    (in a seeded random order, reshuffled every pass)."""

    strategy: Literal["pre-ppo"] = Field("pre-ppo", description="the lowest-scoring share of a scored pool")
    pool: int = Field(256, ge=1, description="candidate tasks scored (drawn like `uniform`)")
    samples: int = Field(1, ge=1, description="episodes per candidate; its score is their mean reward")
    keep: float = Field(0.5, gt=0, le=1, description="the share of the pool kept (the lowest scores)")


class CurriculumStage(_Tasks):
    """One stage: tasks of the named mixture members (drawn like `uniform`) until its switch rule holds."""

    members: list[str] = Field(min_length=1, description="mixture member names (turnrl/Mixture-v0's `name`s)")
    steps: int | None = Field(None, ge=1, description="move on after this many steps in the stage")
    success: float | None = Field(
        None,
        gt=0,
        le=1,
        description="move on once the stage's rollout success, averaged over the last `window` steps, reaches this",
    )
    window: int = Field(3, ge=1)


class CurriculumTasks(_Tasks):
    """A staged curriculum: stage after stage (e.g. easy levels before hard ones, math before open-ended tasks),
    each until its switch rule (``steps`` or ``success``, whichever comes first) holds; the last stage needs none."""

    strategy: Literal["curriculum"] = Field("curriculum", description="stages of mixture members")
    stages: list[CurriculumStage] = Field(
        min_length=1, description="the stages in order, each {members, steps?, success?, window?}"
    )

    @model_validator(mode="after")
    def _rules(self) -> CurriculumTasks:
        for i, s in enumerate(self.stages[:-1]):
            if s.steps is None and s.success is None:
                raise ValueError(
                    f"curriculum stage {i} ({', '.join(s.members)}) has no switch rule: give it `steps` "
                    "or `success` (only the last stage may go on to the end)"
                )
        return self


TaskConfig = Annotated[
    SequentialTasks | UniformTasks | DifficultyTasks | PrePPOTasks | CurriculumTasks, Field(discriminator="strategy")
]
