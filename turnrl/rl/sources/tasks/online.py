"""Samplers that choose as they go: ``sequential``, ``uniform`` and ``difficulty`` (docs/algorithms.md §13)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnrl.rl.config.tasks import DifficultyTasks
from turnrl.rl.sources.tasks.base import TaskPool, TaskSampler, draw, draw_by_member


class Sequential(TaskSampler):
    """Index order (members by smooth weighted round-robin, each with its own cursor; one member: the plain cursor
    of earlier versions)."""

    strategy = "sequential"

    def __init__(self, cfg: Any, pool: TaskPool, seed: int) -> None:
        super().__init__(cfg, pool, seed)
        self.cursors = [0] * len(pool.names)
        self.credit = [0.0] * len(pool.names)

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        out = []
        w, total = self.pool.weights, float(self.pool.weights.sum())
        for _ in range(k):
            m = 0
            if len(w) > 1:  # smooth weighted round-robin: every member earns its weight, the richest plays and pays
                self.credit = [c + float(x) for c, x in zip(self.credit, w)]
                m = int(np.argmax(self.credit))
                self.credit[m] -= total
            own = self.pool.tasks_of[m]
            out.append(int(own[self.cursors[m] % len(own)]))
            self.cursors[m] = (self.cursors[m] + 1) % len(own)
        return out

    def _state(self) -> dict[str, Any]:
        return {"cursors": list(self.cursors), "credit": list(self.credit)}

    def _load(self, state: dict[str, Any]) -> None:
        self.cursors, self.credit = list(state["cursors"]), list(state["credit"])


class Uniform(TaskSampler):
    """Random tasks: members by weight, tasks within a member uniformly."""

    strategy = "uniform"

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        return draw_by_member(rng, self.pool, k)


def difficulty_weight(p: np.ndarray, epsilon: float) -> np.ndarray:
    """docs/algorithms.md §13 (online difficulty): a task's sampling weight p(1 − p) + ε, largest at p = 0.5."""
    return p * (1.0 - p) + epsilon


def ema_update(old: float | None, new: float, alpha: float) -> float:
    """An exponential average: ``new`` if there is no ``old``, else (1 − α)·old + α·new."""
    return new if old is None else (1.0 - alpha) * old + alpha * new


class Difficulty(TaskSampler):
    """Weight ∝ p(1 − p) + ε (see :class:`~turnrl.rl.config.tasks.DifficultyTasks`)."""

    strategy = "difficulty"

    def __init__(self, cfg: DifficultyTasks, pool: TaskPool, seed: int) -> None:
        super().__init__(cfg, pool, seed)
        self.task_p: dict[int, float] = {}
        self.member_p: list[float | None] = [None] * len(pool.names)

    def pass_rates(self) -> np.ndarray:
        """Every task's pass-rate estimate: its own, else its member's, else the prior."""
        by_member = np.array([self.cfg.prior if p is None else p for p in self.member_p])
        p = by_member[self.pool.member]
        if self.task_p:
            idx = np.fromiter(self.task_p, dtype=np.int64)
            p[idx] = np.fromiter(self.task_p.values(), dtype=np.float64)
        return p

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        return draw(rng, self.pool.task_weights() * difficulty_weight(self.pass_rates(), self.cfg.epsilon), k)

    def observe(self, step: int, results: Sequence[tuple[int, float]]) -> None:
        """Each task's groups update its pass rate; each member's mean over its groups updates the member's."""
        super().observe(step, results)
        by_task: dict[int, list[float]] = {}
        for task, ok in results:
            by_task.setdefault(task, []).append(ok)
        by_member: dict[int, list[float]] = {}
        for task, oks in by_task.items():
            s = sum(oks) / len(oks)
            first = self.member_p[int(self.pool.member[task])]  # a new task starts from its member's rate
            self.task_p[task] = ema_update(
                self.task_p.get(task, self.cfg.prior if first is None else first), s, self.cfg.ema
            )
            by_member.setdefault(int(self.pool.member[task]), []).append(s)
        for m, ss in by_member.items():
            self.member_p[m] = ema_update(self.member_p[m], sum(ss) / len(ss), self.cfg.ema)

    def estimates(self, tasks: Sequence[int]) -> list[float | None]:
        return list(self._rates(tasks))

    def _rates(self, tasks: Sequence[int]) -> list[float]:
        p = self.pass_rates()
        return [float(p[t]) for t in tasks]

    def metrics(self, chosen: Sequence[int]) -> dict[str, float]:
        out = super().metrics(chosen)
        if chosen:
            out["sampler_pass_estimate"] = float(np.mean(self._rates(chosen)))
        out["sampler_tracked"] = float(len(self.task_p))
        for name, p in zip(self.pool.names, self.member_p):
            if p is not None and len(self.pool.names) > 1:
                out[f"sampler_{name}_pass"] = p
        return out

    def _state(self) -> dict[str, Any]:
        return {"task_p": [[t, p] for t, p in self.task_p.items()], "member_p": list(self.member_p)}

    def _load(self, state: dict[str, Any]) -> None:
        self.task_p = {int(t): float(p) for t, p in state["task_p"]}
        self.member_p = list(state["member_p"])
