"""What every task sampler shares (see :mod:`turnrl.rl.sources.tasks`): the pool of tasks, the seeded streams and
draws, the success of played episodes, and the :class:`TaskSampler` base class."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np


@dataclass
class TaskPool:
    """The tasks a sampler chooses from: ``member[i]`` poses task ``i``; ``names`` and ``weights`` per member."""

    names: list[str]
    weights: np.ndarray
    member: np.ndarray

    @classmethod
    def of(cls, env: Any) -> TaskPool:
        """The pool of an environment (a mixture's members, or the environment as one member)."""
        u = env.unwrapped
        if hasattr(u, "task_members") and hasattr(u, "names") and hasattr(u, "weights"):
            return cls(list(u.names), np.asarray(u.weights, dtype=np.float64), u.task_members())
        spec = u.spec
        return cls([spec.id if spec is not None else type(u).__name__], np.ones(1), np.zeros(len(u), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.member)

    @cached_property
    def tasks_of(self) -> list[np.ndarray]:
        """Each member's task indices, in order."""
        return [np.flatnonzero(self.member == m) for m in range(len(self.names))]

    def sizes(self) -> np.ndarray:
        """Tasks per member."""
        return np.bincount(self.member, minlength=len(self.names))

    def task_weights(self, members: Sequence[int] | None = None) -> np.ndarray:
        """Per task: its member's weight shared among the member's tasks (``members``: only those members)."""
        w = self.weights.copy()
        if members is not None:
            keep = np.zeros_like(w)
            keep[list(members)] = 1.0
            w = w * keep
        return (w / np.maximum(self.sizes(), 1))[self.member]


def stream(seed: int, step: int, round_: int) -> np.random.Generator:
    """The random stream of one round's choice (step −1: choices made before training, e.g. Pre-PPO's pool)."""
    return np.random.default_rng([seed % 2**32, step + 1, round_, 0x7A5C])


def draw(rng: np.random.Generator, weights: np.ndarray, k: int) -> list[int]:
    """``k`` task indices with probability ∝ ``weights``, distinct where enough tasks have a positive weight."""
    positive = int(np.count_nonzero(weights > 0))
    if positive == 0:
        raise ValueError("no task has a positive weight to draw from")
    return [int(i) for i in rng.choice(len(weights), size=k, replace=k > positive, p=weights / weights.sum())]


def draw_by_member(rng: np.random.Generator, pool: TaskPool, k: int, members: Sequence[int] | None = None) -> list[int]:
    """``k`` tasks: each slot's member drawn by weight (only ``members`` where given), then that many distinct tasks
    of each member uniformly (with replacement only where a member has fewer tasks than slots) — so the members'
    shares follow their weights exactly in expectation."""
    w = pool.weights.copy()
    if members is not None:
        keep = np.zeros_like(w)
        keep[list(members)] = 1.0
        w = w * keep
    counts = rng.multinomial(k, w / w.sum())
    out: list[int] = []
    for m in np.flatnonzero(counts):
        own = pool.tasks_of[m]
        out += [int(own[i]) for i in rng.choice(len(own), size=int(counts[m]), replace=counts[m] > len(own))]
    return [out[i] for i in rng.permutation(len(out))]


def group_success(trajectories: Sequence[Any]) -> list[tuple[int, float]]:
    """(task, success) per episode that ended without an error; success is ``correct`` where the environment
    grades, else whether the reward was positive. The task is read from the episode's job key."""
    out = []
    for t in trajectories:
        if t.error is not None or "job" not in t.metadata:
            continue
        ok = t.correct if t.correct is not None else t.total_reward > 0
        out.append((int(str(t.metadata["job"]).rsplit("-", 2)[-2]), float(bool(ok))))
    return out


class TaskSampler:
    """Chooses each round's tasks (see the module docstring). Subclasses implement :meth:`_choose` and keep their
    state in :meth:`_state`/:meth:`_load`."""

    strategy: ClassVar[str] = ""

    def __init__(self, cfg: Any, pool: TaskPool, seed: int) -> None:
        self.cfg, self.pool, self.seed = cfg, pool, seed
        self._chosen: dict[tuple[int, int], list[int]] = {}
        self._assumed: dict[tuple[int, int], list[float | None]] = {}  # estimates at choice time (for the log)

    def tasks(self, step: int, round_: int, k: int) -> list[int]:
        """The ``k`` tasks of ``step``'s round ``round_`` (chosen on the first call, the same ever after)."""
        key = (step, round_)
        if key not in self._chosen:
            self._chosen[key] = self._choose(step, round_, k, stream(self.seed, step, round_))
            self._assumed[key] = self.estimates(self._chosen[key])
        return list(self._chosen[key])

    def assumed(self, step: int, round_: int, tasks: Sequence[int]) -> list[float | None]:
        """The pass rates the sampler assumed of ``tasks`` when it chose the round (now, if it chose before a resume)."""
        by_task = dict(zip(self._chosen.get((step, round_), []), self._assumed.get((step, round_), [])))
        return [by_task[t] if t in by_task else self.estimates([t])[0] for t in tasks]

    def _choose(self, step: int, round_: int, k: int, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError

    def observe(self, step: int, results: Sequence[tuple[int, float]]) -> None:
        """Step ``step`` is over: ``results`` are (task, success) of its episodes. Forgets the step's choices."""
        self._chosen = {key: v for key, v in self._chosen.items() if key[0] > step}
        self._assumed = {key: v for key, v in self._assumed.items() if key[0] > step}

    def metrics(self, chosen: Sequence[int]) -> dict[str, float]:
        """Figures of a step's choice: each member's share of the tasks (mixtures)."""
        if len(self.pool.names) < 2 or not chosen:
            return {}
        counts = np.bincount(self.pool.member[list(chosen)], minlength=len(self.pool.names))
        return {f"tasks_{n}": float(c) / len(chosen) for n, c in zip(self.pool.names, counts)}

    def estimates(self, tasks: Sequence[int]) -> list[float | None]:
        """The pass rate the sampler assumed of each task when choosing (None: it tracks none)."""
        return [None] * len(tasks)

    def prepare(self, play: Callable[[list[int], int], list[tuple[int, float]]]) -> dict[str, float]:
        """Work before the first step (Pre-PPO scores its pool with ``play(tasks, samples)``); figures about it."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The choices made ahead and the strategy's own state."""
        return {"strategy": self.strategy, "chosen": [[s, r, t] for (s, r), t in self._chosen.items()], **self._state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (a checkpoint of another strategy is refused)."""
        if state.get("strategy") != self.strategy:
            raise ValueError(
                f"the checkpoint's task sampler is {state.get('strategy')!r}, this run's is "
                f"{self.strategy!r}: resume with the same `tasks:` settings"
            )
        self._chosen = {(int(s), int(r)): [int(x) for x in t] for s, r, t in state["chosen"]}
        self._load(state)

    def _state(self) -> dict[str, Any]:
        return {}

    def _load(self, state: dict[str, Any]) -> None:
        pass
