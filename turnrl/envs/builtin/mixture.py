"""``turnrl/Mixture-v0``: several environments as one, so that one run trains on all of them.

A mixture poses the tasks of its members under one index space. Each member is ``{"id": ..., "kwargs": {...},
"name": ..., "weight": ...}``; ``name`` (default: the id's name, e.g. ``arithmetic-v0``) must be unique, and
``weight`` (default 1) is the member's relative weight in the run's task sampler (``tasks:`` in a training
config): the ``sequential`` and ``uniform`` samplers draw members in proportion to it, ``difficulty`` multiplies it
by how informative the member's tasks are, ``pre-ppo`` draws its pool by it and ``curriculum`` its stages' members.
A zero weight keeps a member out of training while it is still evaluated; weights that are all zero are an error.

Index layout: members take turns (index 0 is member 0's task 0, index 1 member 1's task 0, …; a member whose tasks
run out drops out of the rotation), so the first N tasks — what ``turnrl eval --limit N`` and the trainer's
held-out evaluation play — cover every member evenly.

Splits: ``split=None`` leaves each member on its own kwargs; ``split="held-out"`` (:attr:`held_out_split`, what
held-out evaluation asks for) puts every member on *its* held-out split with its evaluation options (e.g. PAG's
``mode: eval``), so members whose held-out splits have different names (GSM8K's ``test``, HotPotQA's ``dev``) mix
(a member that declares no held-out split keeps its kwargs, and the mixture's ``split`` then reads ``"mixed"``: the
evaluation report does not call it held out); any other string is passed to every member as its ``split``.

Anything else asked of the mixture (an attribute it does not have) is the current member's — the member of the
last reset — so that algorithms that read an environment's own attributes (PAG's verdict texts) work on a
mixture of such environments.

Episodes: a task's ``task_id`` is ``"<member name>:<member's task id>"``, and :meth:`summarize_episodes` reports
``<name>_success``, ``<name>_episodes`` and each member's own figures under ``<name>_`` (so a run logs them per
member, and held-out evaluation reports them as ``eval_<name>_success``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnrl.envs.core import Obs, StepResult, Task, TextEnv
from turnrl.tools.base import Tool
from turnrl.types import Trajectory

HELD_OUT = "held-out"
_MEMBER_KEYS = {"id", "kwargs", "name", "weight"}


class MixtureError(ValueError):
    """A mixture's members are malformed (the message says which and how to fix it)."""


def _member_name(env_id: str) -> str:
    return env_id.rpartition(":")[2].rpartition("/")[2].lower()


class MixtureEnv(TextEnv):
    """``turnrl/Mixture-v0`` (see the module docstring).

    Args:
        envs: the members, each ``{"id", "kwargs"?, "name"?, "weight"?}``; default: Arithmetic levels 1–5, one
            member each (``arith-l1`` … ``arith-l5``).
        split: None, ``"held-out"`` or a split name every member takes (see the module docstring).
    """

    def __init__(self, envs: Sequence[dict[str, Any]] | None = None, split: str | None = None) -> None:
        super().__init__(max_turns=10**9)  # each member caps its own episodes

        if envs is None:
            envs = [{"id": "turnrl/Arithmetic-v0", "kwargs": {"level": k}, "name": f"arith-l{k}"} for k in range(1, 6)]
        if not isinstance(envs, (list, tuple)) or not envs:
            raise MixtureError(
                "envs must be a non-empty list of members such as {id: turnrl/Arithmetic-v0, "
                "kwargs: {level: 1}, weight: 1}"
            )
        self.names: list[str] = []
        self.weights: list[float] = []
        self._specs: list[tuple[str, dict[str, Any]]] = []
        for i, m in enumerate(envs):
            if not isinstance(m, dict) or "id" not in m:
                raise MixtureError(
                    f"member {i} must be a mapping with an `id` (and optional kwargs, name, weight), got {m!r}"
                )
            if unknown := set(m) - _MEMBER_KEYS:
                raise MixtureError(
                    f"member {i} ({m['id']}): unknown keys {sorted(unknown)}; a member takes {sorted(_MEMBER_KEYS)}"
                )
            name = str(m.get("name") or _member_name(str(m["id"])))
            if name in self.names:
                raise MixtureError(f"two members are named {name!r}: give each a distinct `name` (e.g. name: arith-l1)")
            if not name or any(c in name for c in ":/ "):
                raise MixtureError(f"member {i}: name {name!r} must be non-empty without ':', '/' or spaces")
            weight = m.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
                raise MixtureError(f"member {name!r}: weight must be a number >= 0, got {weight!r}")
            self.names.append(name)
            self.weights.append(float(weight))
            self._specs.append((str(m["id"]), dict(m.get("kwargs") or {})))
        if sum(self.weights) <= 0:
            raise MixtureError(
                f"every member of the mixture has weight 0 ({', '.join(self.names)}): nothing would "
                "be trained on; give at least one a positive weight"
            )
        self.split, self.held_out_split = split, HELD_OUT
        self._lacking: list[str] = []  # members without a held-out split (held-out mode)
        self._members: list[TextEnv] = [self._member(i, kw) for i, kw in self._specs]
        self.sizes = [len(e) for e in self._members]  # type: ignore[arg-type]  # each counts its tasks
        if empty := [n for n, size in zip(self.names, self.sizes) if size == 0]:
            raise MixtureError(f"members {empty} have no tasks (check their split and data)")
        splits = {getattr(e, "split", None) for e in self._members}
        if split is None:
            self.split = splits.pop() if len(splits) == 1 else "mixed"
        elif split == HELD_OUT and self._lacking:  # not every member could be put on a held-out split
            self.split = "mixed"
        # rounds[r]: the tasks before round r (round r holds task r of every member with more than r tasks)
        ordered = np.sort(self.sizes)
        alive = len(ordered) - np.searchsorted(ordered, np.arange(max(self.sizes)), side="right")  # members in round r
        self._rounds = np.concatenate([[0], np.cumsum(alive)])
        self._current: TextEnv | None = None
        self._current_name = ""

    def _member(self, env_id: str, kwargs: dict[str, Any]) -> TextEnv:
        """A member built under the mixture's split (see the module docstring). Held-out: the member as configured
        says its held-out split and evaluation options; it is rebuilt with them only where they change its kwargs."""
        from turnrl.envs.registry import make

        if self.split is None:
            return make(env_id, **kwargs)
        if self.split != HELD_OUT:
            return make(env_id, **{**kwargs, "split": self.split})
        probe = make(env_id, **kwargs)
        held = getattr(probe, "held_out_split", None)
        out = dict(kwargs)
        if held is not None:
            out["split"] = held
        else:
            self._lacking.append(env_id)
        for key, value in (getattr(probe, "evaluation_options", None) or {}).items():
            out.setdefault(key, value)
        if out == kwargs:
            return probe
        probe.close()
        return make(env_id, **out)

    # ---- the index space ----

    def __len__(self) -> int:
        return sum(self.sizes)

    def locate(self, index: int) -> tuple[int, int]:
        """(member, the member's own task index) of mixture task ``index`` (members take turns)."""
        if not 0 <= index < len(self):
            raise ValueError(f"options['index'] must be an integer in [0, {len(self)}), got {index!r}")
        r = int(np.searchsorted(self._rounds, index, side="right")) - 1
        alive = [m for m, s in enumerate(self.sizes) if s > r]
        return alive[index - int(self._rounds[r])], r

    def task_members(self) -> np.ndarray:
        """The member of every task index (an int array of ``len(self)``), computed without a loop over tasks."""
        sizes = np.asarray(self.sizes)
        out = np.empty(len(self), dtype=np.int64)
        for m, size in enumerate(self.sizes):
            j = np.arange(size)
            ahead = (sizes[:m, None] > j[None, :]).sum(axis=0)  # members before m still in round j
            out[self._rounds[j] + ahead] = m
        return out

    def member_of(self, index: int) -> int:
        """The member (its position in ``names``) that poses mixture task ``index``."""
        return self.locate(index)[0]

    # ---- the episode: the current member's ----

    @property
    def member(self) -> TextEnv:
        """The member posing the current episode (the first before any reset)."""
        return self._current if self._current is not None else self._members[0]

    @property
    def tools(self) -> Sequence[Tool]:
        return self.member.tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.member.tool_schemas()

    @property
    def stop(self) -> tuple[str, ...]:  # type: ignore[override]  # the current member's
        return tuple(getattr(self.member, "stop", ()) or ())

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        if unknown := set(options) - {"index"}:
            raise ValueError(f"{type(self).__name__}.reset takes options {{'index': i}} only, got {sorted(unknown)}")
        index = options["index"] if "index" in options else int(self.np_random.integers(len(self)))
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"options['index'] must be an integer in [0, {len(self)}), got {index!r}")
        m, local = self.locate(index)
        self._current, self._current_name = self._members[m], self.names[m]
        seed = int(self.np_random.integers(2**31))
        obs, info = self._current.reset(seed=seed, options={"index": local})
        info = dict(info)
        info["task_id"] = f"{self._current_name}:{info.get('task_id', local)}"
        info["mixture_member"] = self._current_name
        return obs, info

    def _step(self, action: str) -> StepResult:
        return self.member.step(action)

    async def _astep(self, action: str) -> StepResult:
        return await self.member.astep(action)

    def __getattr__(self, name: str) -> Any:
        """Anything else the mixture lacks is the current member's (e.g. a PAG member's ``verdict_texts``, which
        PAG's rollout hooks read)."""
        if name.startswith("_") or "_members" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.member, name)

    def fork_parts(self) -> list[TextEnv]:
        """The members, which a fork copies with the mixture (turnrl/envs/fork.py checks that each can be)."""
        return list(self._members)

    def task_at(self, index: int) -> Task | None:
        """The member's task behind mixture index ``index``."""
        m, local = self.locate(index)
        return self._members[m].unwrapped.task_at(local)

    def oracle_action(self) -> str | None:
        return self.member.oracle_action()

    def wrong_action(self) -> str:
        return self.member.wrong_action()

    # ---- figures ----

    def summarize_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Per member: ``<name>_episodes``, ``<name>_success`` and the member's own figures as ``<name>_<figure>``."""
        out: dict[str, float] = {}
        for name, env in zip(self.names, self._members):
            mine = [t for t in trajectories if (t.task_id or "").startswith(f"{name}:")]
            if not mine:
                continue
            out[f"{name}_episodes"] = float(len(mine))
            out[f"{name}_success"] = sum(bool(t.correct) for t in mine) / len(mine)
            for k, v in env.summarize_episodes(mine).items():
                out[f"{name}_{k}"] = v
        return out
