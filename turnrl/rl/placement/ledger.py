"""The job ledger of the Ray placement: every episode of a step is committed exactly once.

A job is *pending* until a worker takes it under a lease, *leased* while that worker plays it, and *done* once its
Trajectory is committed (a game of several agents commits every trained seat's view of it at once, as one job);
:meth:`Ledger.take` hands done jobs out and forgets them. The ledger may hold jobs of several steps at once
(rollouts of the next step start while the learner updates). A commit under a lease that is no longer the job's
current lease (the worker was declared dead or hung and the job handed to another) is refused, as is a second commit
of a done job; releasing a lease puts its unfinished jobs back to pending, so a killed worker's jobs are re-run and
nothing finished is lost.

The ledger keeps the books that prove it (:meth:`Ledger.book`): jobs collected (done: committed, restored from a
journal, or given up as errors), replayed (put back after their worker or its node was lost), handed to training,
and — each must stay 0 — lost (asked for but never done) and duplicated (handed to training a second time: refused).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from turnrl.rl.sources.base import Job
from turnrl.types import Trajectory

#: the steps whose handed-over keys the ledger remembers (a job's key names its step: an older one cannot recur)
_STEPS_KEPT = 8


class Ledger:
    """Jobs of one step: pending → leased → done (see the module docstring)."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.jobs: dict[str, Job] = {}
        self.lease_of: dict[str, int | None] = {}  # job key → current lease (None = pending)
        self.done: dict[str, list[Trajectory]] = {}  # job key → its Trajectories (one; a game's trained views)
        self.leases: dict[int, list[str]] = {}
        self.refused = 0
        self.attempts: dict[str, int] = {}
        self.collected = self.replayed = self.handed = self.lost = self.duplicated = 0
        self._handed: dict[int, set[str]] = {}  # keys handed to training, by step (the last _STEPS_KEPT steps)
        self._ids = itertools.count(1)
        self.add(jobs)

    def add(self, jobs: Iterable[Job]) -> None:
        """Register new pending jobs (already known keys are ignored)."""
        for job in jobs:
            if job.key not in self.jobs:
                self.jobs[job.key] = job
                self.lease_of[job.key] = None

    @property
    def pending(self) -> list[Job]:
        """Jobs nobody holds, in the order they were added."""
        return [self.jobs[k] for k, lease in self.lease_of.items() if lease is None and k not in self.done]

    def lease(self, n: int, step: int | None = None) -> tuple[int, list[Job]]:
        """Lease up to ``n`` pending jobs (of training step ``step`` only, if given); returns ``(lease id, jobs)``
        (no jobs when none are pending)."""
        jobs = [j for j in self.pending if step is None or j.step == step][:n]
        lease = next(self._ids)
        self.leases[lease] = [j.key for j in jobs]
        for j in jobs:
            self.lease_of[j.key] = lease
            self.attempts[j.key] = self.attempts.get(j.key, 0) + 1
        return lease, jobs

    def commit(self, key: str, lease: int, traj: Trajectory | Sequence[Trajectory]) -> bool:
        """Record a finished job: its Trajectory, or a game's trained views together. Returns False (and changes
        nothing) for a stale lease or a job already done."""
        if key in self.done or key not in self.jobs or self.lease_of.get(key) != lease:
            self.refused += 1
            return False
        self.done[key] = [traj] if isinstance(traj, Trajectory) else list(traj)
        self.collected += 1
        return True

    def release(self, lease: int, lost: bool = False) -> list[Job]:
        """Put the lease's unfinished jobs back to pending; returns them (``lost``: its worker was lost, so they are
        counted as replayed)."""
        back = []
        for key in self.leases.pop(lease, []):
            if key not in self.done and self.lease_of.get(key) == lease:
                self.lease_of[key] = None
                back.append(self.jobs[key])
        if lost:
            self.replayed += len(back)
        return back

    def fail(self, key: str, reason: str) -> Trajectory:
        """Give up on a pending job (it failed on every attempt): it is done, as an episode that ended in an error
        (left out of training, counted in the step's metrics)."""
        job = self.jobs[key]
        traj = Trajectory(group_id=job.group_id, error=reason, metadata={"job": key})
        self.done[key] = [traj]
        self.collected += 1
        return traj

    def outstanding(self, lease: int) -> list[str]:
        """Keys of the lease's jobs not yet done."""
        return [k for k in self.leases.get(lease, []) if k not in self.done and self.lease_of.get(k) == lease]

    def restore(self, trajectories: Sequence[Trajectory]) -> int:
        """Mark jobs done from trajectories committed before a restart (``metadata["job"]``; a game's views share
        their job's key and are restored together); returns how many jobs."""
        found: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            key = t.metadata.get("job")
            if key in self.jobs and key not in self.done:
                found.setdefault(key, []).append(t)
        self.done.update(found)
        self.collected += len(found)
        return len(found)

    def settled(self, keys: Sequence[str]) -> bool:
        """Whether every job of ``keys`` is done."""
        return all(k in self.done for k in keys)

    def take(self, keys: Sequence[str]) -> list[Trajectory]:
        """The committed Trajectories of ``keys`` (in that order; a game's views together), forgotten by the ledger
        (a later commit of one of them is refused as unknown). A key that is not done is counted lost; one already
        handed over is counted duplicated and not handed over again."""
        out: list[Trajectory] = []
        for k in keys:
            step = self.jobs[k].step if k in self.jobs else Job.parse(k).step
            handed = self._handed.setdefault(step, set())
            if k in handed:
                self.duplicated += 1
            elif k not in self.done:
                self.lost += 1
            else:
                handed.add(k)
                self.handed += 1
                out += self.done[k]
            self.done.pop(k, None)
            self.jobs.pop(k, None)
            self.lease_of.pop(k, None)
            self.attempts.pop(k, None)
        for step in sorted(self._handed)[:-_STEPS_KEPT]:
            del self._handed[step]
        return out

    def book(self) -> dict[str, int]:
        """The books since the ledger began: jobs ``collected``, ``replayed``, ``handed`` to training, ``lost`` and
        ``duplicated`` (both 0 when every job was trained exactly once) and commits ``refused``."""
        return {
            "collected": self.collected,
            "replayed": self.replayed,
            "handed": self.handed,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "refused": self.refused,
        }

    def summary(self) -> dict[str, Any]:
        """Counts for metrics and error messages."""
        return {"jobs": len(self.jobs), "done": len(self.done), "pending": len(self.pending), "refused": self.refused}
