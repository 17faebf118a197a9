"""Is the held-out split held out? ``check_splits(env_id)`` reads an environment's splits and counts, by canonical
form (:func:`turnrl.envs.splits.canonical_key`), the problems two splits share and the held-out problems that repeat.

An environment names its splits with ``split`` (the one it was made with: training, unless told otherwise),
``held_out_split``, ``validation_split`` and ``train_split`` (:class:`turnrl.envs.core.TextEnv`); every one it names
is read, whichever it was made with. The check makes the environment once
per split and reads its tasks through ``task_at`` — the first :data:`TRAIN_LIMIT` of a split that streams (a
generated training split of 100,000 indices), all of the others. A problem in the training split and in the
held-out or validation split is an **overlap**: a held-out figure on it measures memory, not skill, and the check
fails. A held-out problem posed twice is a **repeat**: not a failure, but a figure over ``n`` tasks then counts fewer
items (``turnrl eval`` collapses repeats; the report says how many distinct items it counted).

``turnrl envs check ID`` runs it after the conformance harness; ``held_out_overlap`` is the same question asked by a
training run before its first step, about the tasks it will train on and evaluate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from turnrl.envs.splits import canonical_key

TRAIN_LIMIT = 20_000  # tasks read from a split at most (a generated training split streams 100,000)
SHOWN = 3  # overlapping problems named in a message


def task_keys(env: Any, limit: int = TRAIN_LIMIT) -> list[str] | None:
    """The canonical forms of tasks ``0 .. min(len(env), limit) - 1``, or None when the environment has no list of
    tasks (no ``__len__`` or a ``task_at`` that returns None). Kept on the environment object, so that the checks
    of one run that read the same environment's tasks several times (held-out, validation) read them once."""
    base = getattr(env, "unwrapped", env)
    if not callable(getattr(base, "task_at", None)):
        return None
    try:
        n = min(len(base), limit)
    except TypeError:
        return None
    kept = getattr(base, "_turnrl_task_keys", None)
    if isinstance(kept, tuple) and kept[0] >= n:
        return kept[1][:n]
    keys = _read_keys(base, n)
    if keys is not None:
        try:
            base._turnrl_task_keys = (n, keys)
        except AttributeError:  # an environment that takes no new attributes: read again next time
            pass
    return keys


def task_items(env: Any, limit: int) -> dict[int, str]:
    """Each of the first ``limit`` tasks' canonical form by index — what a stored episode records as its ``item``,
    so that a run can refuse data posing its held-out problems; empty where the environment has no list of tasks or
    its own ``task_at`` fails (the episodes are stored all the same, without items)."""
    try:
        return dict(enumerate(task_keys(env, limit) or []))
    except Exception:  # an environment's own task_at: no task, no item
        return {}


def _read_keys(base: Any, n: int) -> list[str] | None:
    inner: Any = getattr(getattr(base, "env", None), "unwrapped", None)  # a wrapper's (PAG's) tasks are its inner env's
    keys = []
    for i in range(n):
        task = base.task_at(i)
        if task is None and callable(getattr(inner, "task_at", None)):
            task = inner.task_at(i)
        if task is None:
            return None
        keys.append(canonical_key(task))
    return keys


@dataclass
class SplitCheck:
    """What :func:`check_splits` found: per split the tasks read and their distinct problems; the problems each pair
    of splits shares; the held-out splits' repeats; notes on what could not be checked."""

    env_id: str
    tasks: dict[str, int] = field(default_factory=dict)
    distinct: dict[str, int] = field(default_factory=dict)
    overlaps: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No two splits share a problem."""
        return not any(self.overlaps.values())

    def lines(self) -> list[str]:
        """The report, a line each: splits, overlaps (FAIL), repeats, notes."""
        out = [
            f"split {name}: {self.tasks[name]} task(s) read, {self.distinct[name]} distinct problem(s)"
            for name in self.tasks
        ]
        for (a, b), shared in self.overlaps.items():
            if shared:
                out.append(
                    f"FAIL splits {a} and {b} share {len(shared)} problem(s), e.g. "
                    + ", ".join(repr(k) for k in shared[:SHOWN])
                )
            else:
                out.append(f"splits {a} and {b}: no problem in both")
        out += [
            f"note {name}: {n} task(s) repeat a problem posed earlier in the split (figures count distinct problems)"
            for name, n in self.repeats.items()
            if n
        ]
        out += [f"note {n}" for n in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join([f"{self.env_id} splits: {'OK' if self.ok else 'FAIL'}", *(f"  {x}" for x in self.lines())])


def _shared(a: list[str], b: list[str]) -> list[str]:
    other = set(b)
    return sorted({k for k in a if k in other})


def check_splits(env_id: str, kwargs: dict[str, Any] | None = None, *, limit: int = TRAIN_LIMIT) -> SplitCheck:
    """Check the splits of ``env_id`` made with ``kwargs`` (see the module docstring)."""
    from turnrl.envs.registry import make

    kwargs = dict(kwargs or {})
    report = SplitCheck(env_id)
    env = make(env_id, **kwargs)
    try:
        base = env.unwrapped
        own = getattr(base, "split", None)
        named = {
            "held-out": getattr(base, "held_out_split", None),
            "validation": getattr(base, "validation_split", None),
            "training": getattr(base, "train_split", None),
        }
        keys: dict[str, list[str]] = {}
        if own is None or named["held-out"] is None:
            report.notes.append("declares no split and held-out split: nothing to compare")
            return report
        first = task_keys(env, limit)
        if first is None:
            report.notes.append("has no list of tasks (task_at): its splits cannot be read here")
            return report
        keys[own] = first
    finally:
        env.close()
    for role, name in named.items():
        if name is None or name in keys:
            continue
        other = make(env_id, **{**kwargs, "split": name})
        try:
            found = task_keys(other, limit)
        finally:
            other.close()
        if found is None:
            report.notes.append(f"its {role} split {name!r} has no list of tasks: not compared")
            continue
        keys[name] = found
    held = named["held-out"]
    if own == held:
        report.notes.append(
            f"made with split {own!r}, which is its own held-out split: an evaluation set (a training "
            "run on it is refused)"
        )
    for name, found in keys.items():
        report.tasks[name], report.distinct[name] = len(found), len(set(found))
        if name in (held, named["validation"]):
            report.repeats[name] = sum(c - 1 for c in Counter(found).values())
    names = list(keys)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            report.overlaps[(a, b)] = _shared(keys[a], keys[b])
    return report


def held_out_overlap(train_env: Any, held_env: Any, n_held: int, limit: int = TRAIN_LIMIT) -> list[str] | None:
    """The problems among the first ``n_held`` tasks of ``held_env`` that ``train_env`` also poses (within its first
    ``limit`` tasks), by canonical form; None when either has no list of tasks."""
    train = task_keys(train_env, limit)
    held = task_keys(held_env, n_held)
    if train is None or held is None:
        return None
    return _shared(held, train)
