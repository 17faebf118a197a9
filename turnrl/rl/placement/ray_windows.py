"""T-PPO's successive batching on Ray rollout workers (docs/algorithms.md §6): an unfinished episode stays in the
worker that began it — its environment, token-exact state and KV cache live there — and continues there in the
next step's window.

Each step, :class:`RayWindows` sends every live worker the jobs it holds that are still in play and a share of the
new jobs (the least loaded workers first), with the learner's current weights; the workers play their window at
once and answer with what finished, snapshots of the rest and the jobs they still hold. A worker that dies, hangs
(``ray.episode_timeout``) or is dropped loses its episodes in play: their jobs, and the new jobs it was given, are
returned as ``lost`` and the source plays them again from the start (``regenerated_episodes``). A step commits a
worker's finished episodes only when its whole answer arrived, so an episode is trained once or (lost) not at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from turnrl.rl.sources.base import Job
from turnrl.rl.sources.windows import Window

logger = logging.getLogger(__name__)


class RayWindows:
    """Plays windows on a :class:`~turnrl.rl.placement.ray.RayRunner`'s workers (see the module docstring)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.owner: dict[str, int] = {}  # job key → the worker index holding its episode

    def assign(
        self, carried: Sequence[Job], jobs: Sequence[Job]
    ) -> tuple[dict[int, tuple[list[Job], list[Job]]], list[Job]]:
        """Per live worker, ``(its carried jobs, new jobs)`` — new jobs go one by one to the least loaded worker —
        and the carried jobs whose worker is gone (lost)."""
        alive = list(self.runner.alive)
        plan: dict[int, tuple[list[Job], list[Job]]] = {w: ([], []) for w in alive}
        lost: list[Job] = []
        for job in carried:
            w = self.owner.get(job.key)
            (plan[w][0] if w in plan else lost).append(job)
        for job in jobs:
            w = min(alive, key=lambda i: (len(plan[i][0]) + len(plan[i][1]), i))
            plan[w][1].append(job)
        return plan, lost

    def play(self, step: int, carried: Sequence[Job], jobs: Sequence[Job], window: int, snapshots: bool) -> Window:
        """One window on every live worker (see the module docstring)."""
        from turnrl.rl.placement.cluster import RayPlacementError
        from turnrl.rl.placement.cluster import cause as _cause
        from turnrl.rl.placement.cluster import ray_module as _ray

        ray, runner = _ray(), self.runner
        t0 = time.perf_counter()
        runner.recovery.poll(wait=0.5 if runner.recovery.back else 0.0)  # lost workers that are back play again
        if not runner.alive and runner.recovery.back:  # all lost with their nodes: wait for one to come back
            runner.recovery.await_any(step, {"in_play": len(carried), "new": len(jobs)})
        if not runner.alive:
            raise RayPlacementError(f"no rollout worker left at step {step} (restarts: {runner.restarts})")
        plan, lost = self.assign(carried, jobs)
        version, ref = runner._weights()
        calls = {
            runner.workers[w].play_window.remote(step, old, new, window, snapshots, version, [ref]): w
            for w, (old, new) in plan.items()
            if old or new
        }
        out = Window(lost=lost)
        tokens = 0.0
        deadline = time.monotonic() + runner.cfg.ray.episode_timeout
        self.owner = {}
        restarts = runner.restarts
        while calls:
            ready, _ = ray.wait(list(calls), num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
            if not ready:  # hung: restart the workers still playing; their episodes are lost
                for w in calls.values():
                    logger.warning(
                        "rollout worker %d did not finish its window in ray.episode_timeout=%ss; restarting it",
                        w,
                        runner.cfg.ray.episode_timeout,
                    )
                    ray.kill(runner.workers[w], no_restart=False)
                    out.lost += plan[w][0] + plan[w][1]
                    runner._recover(w, step)
                break
            w = calls.pop(ready[0])
            try:
                got = ray.get(ready[0], timeout=runner.cfg.ray.episode_timeout)
            except (ray.exceptions.RayError, RuntimeError) as e:
                logger.warning("rollout worker %d failed in its window (%s); its episodes play again", w, _cause(e))
                out.lost += plan[w][0] + plan[w][1]
                runner._recover(w, step)
                continue
            out.finished += got.finished
            out.snapshots += got.snapshots
            out.lost += got.lost
            out.in_play += got.in_play
            self.owner.update({j.key: w for j in got.in_play})
            tokens += got.stats.get("generated_tokens", 0.0)
        out.stats = {
            "generated_tokens": tokens,
            "generate_s": time.perf_counter() - t0,
            "worker_restarts": float(runner.restarts - restarts),
        }
        return out

    def close(self) -> None:
        """Nothing of its own: the runner (closed by the trainer) stops the workers."""
