"""Samplers with a plan: ``pre-ppo`` (score a pool once, keep its lowest-scoring share; docs/algorithms.md §13) and
``curriculum`` (stages of mixture members with switch rules)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnrl.rl.config.tasks import CurriculumTasks, PrePPOTasks
from turnrl.rl.sources.tasks.base import TaskPool, TaskSampler, draw_by_member, stream


class PrePPO(TaskSampler):
    """Score a pool once, train on its lowest-scoring share (see
    :class:`~turnrl.rl.config.tasks.PrePPOTasks`)."""

    strategy = "pre-ppo"

    def __init__(self, cfg: PrePPOTasks, pool: TaskPool, seed: int) -> None:
        super().__init__(cfg, pool, seed)
        self.kept: list[int] | None = None
        self.order: list[int] = []  # the current pass over `kept`
        self.next = 0  # the position in it
        self.passes = 0

    @property
    def prepared(self) -> bool:
        return self.kept is not None

    def candidates(self) -> list[int]:
        """The pool: ``pool`` tasks drawn like ``uniform`` from a stream of its own, each once."""
        drawn = draw_by_member(stream(self.seed, -1, 0), self.pool, min(self.cfg.pool, len(self.pool)))
        return list(dict.fromkeys(drawn))

    def prepare(self, play: Callable[[list[int], int], list[tuple[int, float]]]) -> dict[str, float]:
        if self.kept is not None:
            return {}
        pool = self.candidates()
        scores = select_lowest(pool, play(pool, self.cfg.samples), self.cfg.keep)
        self.kept = scores.kept
        return {
            "preppo_pool": float(len(pool)),
            "preppo_pool_score": scores.pool_mean,
            "preppo_kept_score": scores.kept_mean,
            "preppo_kept": float(len(self.kept)),
        }

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        if self.kept is None:
            raise RuntimeError("Pre-PPO chooses tasks only after prepare() scored its pool")
        out: list[int] = []
        while len(out) < k:
            if self.next >= len(self.order):
                self._next_pass(set(out))
            out.append(self.order[self.next])
            self.next += 1
        return out

    def _next_pass(self, avoid: set[int]) -> None:
        """The next pass over the kept tasks: a seeded shuffle, with the tasks already in the round being filled
        moved to its end (a round holds a task twice only when fewer tasks were kept than it needs)."""
        assert self.kept is not None
        order = [self.kept[int(i)] for i in stream(self.seed, -1, self.passes + 1).permutation(len(self.kept))]
        self.order = [t for t in order if t not in avoid] + [t for t in order if t in avoid]
        self.passes, self.next = self.passes + 1, 0

    def _state(self) -> dict[str, Any]:
        return {"kept": self.kept, "order": self.order, "next": self.next, "passes": self.passes}

    def _load(self, state: dict[str, Any]) -> None:
        self.kept, self.order = state["kept"], [int(t) for t in state["order"]]
        self.next, self.passes = int(state["next"]), int(state["passes"])


@dataclass
class Selection:
    kept: list[int]
    pool_mean: float
    kept_mean: float


def select_lowest(pool: Sequence[int], results: Sequence[tuple[int, float]], keep: float) -> Selection:
    """docs/algorithms.md §13 (Pre-PPO): each candidate's score is the mean of its episodes' scores (a candidate whose
    episodes all failed to play is left out); the ``keep`` share with the lowest scores, ties in pool order."""
    got: dict[int, list[float]] = {}
    for task, score in results:
        got.setdefault(task, []).append(score)
    scored = [(sum(got[t]) / len(got[t]), i, t) for i, t in enumerate(pool) if t in got]
    if not scored:
        raise RuntimeError(
            "Pre-PPO could not score any task of its pool (every episode failed); see the rollout errors above"
        )
    scored.sort()
    n = max(1, math.ceil(keep * len(scored)))
    return Selection(
        [t for _, _, t in scored[:n]], sum(s for s, _, _ in scored) / len(scored), sum(s for s, _, _ in scored[:n]) / n
    )


class Curriculum(TaskSampler):
    """Stages of mixture members with switch rules (see :class:`~turnrl.rl.config.tasks.CurriculumTasks`)."""

    strategy = "curriculum"

    def __init__(self, cfg: CurriculumTasks, pool: TaskPool, seed: int) -> None:
        super().__init__(cfg, pool, seed)
        if len(pool.names) < 2:
            raise ValueError(
                "a curriculum's stages name members of a mixture: use env.id turnrl/Mixture-v0 with "
                "named members (e.g. one per level)"
            )
        self.members: list[list[int]] = []
        for i, stage in enumerate(cfg.stages):
            unknown = [n for n in stage.members if n not in pool.names]
            if unknown:
                raise ValueError(
                    f"curriculum stage {i} names {unknown}, which the mixture does not have; its members "
                    f"are {pool.names}"
                )
            ms = [pool.names.index(n) for n in stage.members]
            if not any(pool.weights[m] > 0 for m in ms):
                raise ValueError(f"curriculum stage {i}: every member it names has weight 0")
            self.members.append(ms)
        self.stage, self.steps_in_stage = 0, 0
        self.recent: list[float] = []

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        return draw_by_member(rng, self.pool, k, self.members[self.stage])

    def observe(self, step: int, results: Sequence[tuple[int, float]]) -> None:
        """Count the step, record its success on the stage's members, and move on when the stage's rule holds."""
        super().observe(step, results)
        mine = [ok for t, ok in results if int(self.pool.member[t]) in self.members[self.stage]]
        self.steps_in_stage += 1
        if mine:
            self.recent.append(sum(mine) / len(mine))
        rule = self.cfg.stages[self.stage]
        if self.stage == len(self.cfg.stages) - 1:
            return
        by_steps = rule.steps is not None and self.steps_in_stage >= rule.steps
        by_success = (
            rule.success is not None
            and len(self.recent) >= rule.window
            and sum(self.recent[-rule.window :]) / rule.window >= rule.success
        )
        if by_steps or by_success:
            self.stage, self.steps_in_stage, self.recent = self.stage + 1, 0, []

    def metrics(self, chosen: Sequence[int]) -> dict[str, float]:
        return {**super().metrics(chosen), "sampler_stage": float(self.stage)}

    def _state(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps_in_stage": self.steps_in_stage, "recent": list(self.recent)}

    def _load(self, state: dict[str, Any]) -> None:
        self.stage, self.steps_in_stage = int(state["stage"]), int(state["steps_in_stage"])
        self.recent = [float(x) for x in state["recent"]]
