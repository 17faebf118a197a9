"""The Ray placement: rollout workers as Ray actors that lose nothing (docs/concepts.md §8).

:class:`RayRunner` is the :class:`~turnrl.rl.sources.Runner` of ``placement: ray``. For each generation round it
fills a :class:`~turnrl.rl.placement.ledger.Ledger` with the round's jobs and leases them to the live workers; each
worker streams every finished episode back as it finishes (a Ray streaming generator), and the runner commits it
exactly once and appends it to a journal file. Before a worker plays a lease it holds the learner's current weights
(pushed through the object store after every update, with their version; a restarted worker fetches them first).

Overlap (``rollout.max_staleness`` = k ≥ 1): the on-policy source hands the next step's jobs over ahead
(:meth:`RayRunner.prefetch`), so a worker that has no job of the current step left starts them — with the weights
it holds — while the others finish and the learner updates; when the next round starts the learner's new weights
are pushed to every worker at once, and a worker in the middle of a lease loads them between two generation
calls (the tokens after that record the new version). The driver drops episodes with a token more than k versions
old (``stale_episodes``). k = 0 is the synchronous placement: nothing is started ahead, nothing pushed mid-lease.

Faults: a worker that dies mid-step (``ray.kill``, a crash, its whole node lost) has its unfinished jobs re-leased
to the others (``episodes_replayed``); what it committed before stays. Ray restarts it (``max_restarts``) where
its resources are, and it rejoins with the current weights (:mod:`turnrl.rl.placement.recovery`, which also counts
the nodes lost: ``nodes_lost``). A worker that finishes no episode for ``episode_timeout`` seconds is killed and
restarted the same way. An environment step that hangs is cut by ``rollout.env_timeout`` inside the worker: that
episode ends with its error and the step goes on. When no worker is left the run waits for one, then ends with an
error that says what was collected; a head that stops answering ends it with
:class:`~turnrl.rl.placement.cluster.HeadLostError`. Every wait has a timeout. The ledger's books (``ledger_lost``,
``ledger_duplicated``: 0) show every job handed to training once; the journal (``OUT_DIR/ray/step-N.jsonl``) lets a
restarted driver reuse the episodes it had committed in an unfinished step instead of re-running or losing them.
Each weight push's size and seconds per node: :mod:`turnrl.rl.placement.pushes`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turnrl.rl.config import TrainConfig
from turnrl.rl.core.policies import LearnerSet
from turnrl.rl.placement.cluster import RayPlacementError, check_head, connect, put, stop
from turnrl.rl.placement.cluster import cause as _cause
from turnrl.rl.placement.cluster import ray_module as _ray
from turnrl.rl.placement.ledger import Ledger
from turnrl.rl.placement.nodes import check_room, demand, record
from turnrl.rl.placement.parameters import to_shared
from turnrl.rl.placement.pushes import PushLog
from turnrl.rl.placement.recovery import KEYS, Recovery
from turnrl.rl.placement.shipping import actor_env, job_env, needed_modules, problem_text
from turnrl.rl.sources.base import Job, oldest_version
from turnrl.storage import read_jsonl, write_jsonl
from turnrl.types import Trajectory

logger = logging.getLogger(__name__)

#: the ledger's books in each step's metrics: metric → book (:meth:`~turnrl.rl.placement.ledger.Ledger.book`)
_BOOKS = {"episodes_replayed": "replayed", "ledger_lost": "lost", "ledger_duplicated": "duplicated"}


class RayRunner:
    """Plays jobs on Ray rollout workers (see the module docstring).

    Args:
        config: the run config (``ray`` options, ``rollout``, ``env``, ``out_dir``).
        learner: has ``model``, ``version`` and ``export_weights()``; its weights go to the workers.
        tokenizer: the policy's tokenizer (sent to the workers once).
    """

    def __init__(self, config: TrainConfig, learner: Any, tokenizer: Any) -> None:
        self.cfg, self.learner = config, learner
        self.workers: list[Any] = []
        self.alive: list[int] = []
        rc = config.ray
        job = job_env(config.ray)  # the user's code, shipped with the Ray job (local folders checked first)
        self.started = connect(rc.address, rc.num_cpus, rc.connect_timeout, job)
        ray = _ray()
        self.asks = demand(rc.worker_cpus, rc.worker_gpus, rc.worker_resources)
        try:
            check_room(
                "rollout worker",
                rc.rollout_workers,
                self.asks,
                KEYS,
                5.0 if rc.address is None else rc.placement_timeout,
            )
            self._env_spec = _env_spec(config.env.id)
            self.needs = needed_modules(
                config.algorithm.name, config.env.id, self._env_spec[1] if self._env_spec else None
            )
            # the worker's torch threads, also in the threads it computes on (OpenMP starts a new thread with
            # OMP_NUM_THREADS, whatever torch.set_num_threads said in the main thread: 1 would halve its speed)
            threads = str(max(1, int(rc.worker_cpus)))
            shipped = actor_env(
                config.ray,
                {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"},
                job,
            )
        except BaseException:
            self.close()
            raise
        from turnrl.rl.placement.worker import RolloutWorker

        self._actor = ray.remote(RolloutWorker).options(
            num_cpus=rc.worker_cpus,
            num_gpus=rc.worker_gpus,
            resources=rc.worker_resources or None,
            max_restarts=rc.max_restarts,
            max_concurrency=2,
            max_task_retries=0,
            runtime_env=shipped,
        )
        # The policy and tokenizer reach a worker with ``setup`` after each (re)start, never as constructor
        # arguments: Ray cannot always restart an actor whose constructor arguments were in the object store
        # (ray#53727). The runner holds these references for its whole life.
        # several trainable policies (multi_agent.policies): every policy's model, by name
        self._model_ref = ray.put(learner.worker_models() if isinstance(learner, LearnerSet) else learner.model)
        self._tokenizer_ref = ray.put(tokenizer)
        self.batch = config.rollout.prompts_per_step * config.rollout.group_size
        self.pushed: tuple[int, Any] | None = None
        self.on_commit: Callable[[Trajectory, Ledger], None] | None = None
        self.journal = Path(config.out_dir) / "ray"
        self.restarts = 0
        self.placed: list[dict[str, Any]] = []  # where each worker runs (OUT_DIR/placement.json)
        self.recovery = Recovery(self)  # lost workers on their way back, and the nodes lost
        self.pushes = PushLog(config.out_dir)  # each weight load's size and seconds, per worker and node
        self.ledger = Ledger()  # jobs of this step and, with max_staleness ≥ 1, of the next one
        self.streams: dict[Any, tuple[int, int]] = {}  # a lease's stream of episodes → (worker index, lease)
        self.inflight_version = 0  # the newest version pushed to workers while they play
        #: what a multi-agent run's workers play against this step (the league's drawn version and an object ref of
        #: its snapshot), sent with every lease; set by the source before each step's run (None: nothing to send)
        self.opponent: dict[str, Any] | None = None
        try:
            self.workers = [self._start() for _ in range(rc.rollout_workers)]
            self.alive = list(range(len(self.workers)))
            self._await_ready(list(range(len(self.workers))), "starting")
            learner.connect_rollout(self.workers)  # a learner group streaming over NCCL opens its channel
        except BaseException:
            self.close()
            raise

    def _start(self) -> Any:
        return self._actor.remote(self.cfg.model_dump(), self._env_spec, self.batch, self.needs)

    def _await_ready(self, idx: Sequence[int], doing: str) -> None:
        """Wait (``start_timeout``) until the workers answer; a worker that cannot start is an error. A worker that
        Ray is still restarting answers "unavailable": asked again until the deadline."""
        ray = _ray()
        deadline = time.monotonic() + self.cfg.ray.start_timeout
        for i in idx:
            while True:
                try:
                    state = ray.get(self.workers[i].ready.remote(), timeout=max(deadline - time.monotonic(), 0.1))
                    if state.get("problems"):  # the run's modules do not import on its node: nothing can play there
                        raise RayPlacementError(problem_text(f"rollout worker {i}", state["where"], state["problems"]))
                    self._place(i, state)
                    if not state["setup"]:
                        ray.get(
                            self.workers[i].setup.remote([self._model_ref], [self._tokenizer_ref]),
                            timeout=max(deadline - time.monotonic(), 0.1),
                        )
                    break
                except ray.exceptions.GetTimeoutError as e:
                    raise RayPlacementError(
                        f"rollout worker {i} did not start within ray.start_timeout="
                        f"{self.cfg.ray.start_timeout}s while {doing} (is the cluster out of "
                        "CPUs or memory? `ray status` shows it)"
                    ) from e
                except ray.exceptions.ActorUnavailableError as e:
                    if time.monotonic() > deadline:
                        raise RayPlacementError(
                            f"rollout worker {i} still unavailable after ray.start_timeout="
                            f"{self.cfg.ray.start_timeout}s while {doing}"
                        ) from e
                    time.sleep(0.2)
                except ray.exceptions.RayError as e:
                    env = (
                        " (Ray could not set up ray.runtime_env on its node)"
                        if isinstance(e, ray.exceptions.RuntimeEnvSetupError)
                        else ""
                    )
                    raise RayPlacementError(f"rollout worker {i} died while {doing}{env}: {_cause(e)}") from e

    def _place(self, i: int, state: dict[str, Any]) -> None:
        """Record where worker ``i`` runs (again after a restart: it may land on another node)."""
        entry = {"index": i, **state["where"], "asks": self.asks, "imports": state.get("imports", {})}
        while len(self.placed) <= i:
            self.placed.append({})
        if self.placed[i] and self.placed[i].get("pid") != entry["pid"]:
            entry["restarts"] = self.placed[i].get("restarts", 0) + 1
        self.placed[i] = entry
        if all(self.placed) and len(self.placed) == len(self.workers):
            record(self.cfg.out_dir, "rollout_workers", self.placed)

    # ---- weights ----

    def _weights(self) -> tuple[int, Any]:
        """The learner's current ``(version, object ref)``, put in the object store once per version."""
        if self.pushed is None or self.pushed[0] != self.learner.version:
            head = self.cfg.ray.head_timeout
            self.pushed = self.learner.export_for_workers(lambda state: put(to_shared(state), head))
        return self.pushed

    def sync(self) -> int:
        """Push the learner's current weights to every live worker now (they otherwise fetch them with their next
        lease); returns the version they hold."""
        ray = _ray()
        version, ref = self._weights()
        held = ray.get(
            [self.workers[w].set_weights.remote(version, [ref]) for w in self.alive], timeout=self.cfg.ray.start_timeout
        )
        if any(v != version for v in held):
            raise RayPlacementError(f"rollout workers hold versions {held} after a push of version {version}")
        return version

    # ---- rounds of jobs, and the next step's jobs in flight ----

    def prefetch(self, jobs: Sequence[Job], start: bool = True) -> None:
        """Queue ``jobs`` (a later step's): with ``start`` idle workers start them now, with the weights they are
        sent, while the learner updates; otherwise once the next :meth:`run` has no job of its own step left for
        them. :meth:`run` collects them (``rollout.max_staleness`` ≥ 1 bounds how old their tokens may be)."""
        self.ledger.add(jobs)
        if start:
            self._dispatch()

    def _push_inflight(self) -> None:
        """Send the learner's new weights to every worker now, without waiting: a worker playing a lease loads
        them between two generation calls (its episodes' later tokens record the new version)."""
        if self.cfg.rollout.max_staleness == 0 or self.inflight_version == self.learner.version:
            return
        version, ref = self._weights()
        for w in self.alive:
            self.workers[w].set_weights.remote(version, [ref])
        self.inflight_version = version

    def _dispatch(self, step: int | None = None) -> None:
        """Lease pending jobs to idle workers: those of the earliest step first, spread evenly."""
        busy = {w for w, _ in self.streams.values()}
        idle = [w for w in self.alive if w not in busy]
        while idle and self.ledger.pending:
            first = (
                step
                if step is not None and any(j.step == step for j in self.ledger.pending)
                else min(j.step for j in self.ledger.pending)
            )
            todo = [j for j in self.ledger.pending if j.step == first]
            # this step's jobs over the idle workers; a later step's over all, so that workers that finish this
            # step afterwards find some of it left
            share = -(-len(todo) // len(idle if step is None or first == step else self.alive))
            version, ref = self._weights()
            while idle and any(j.step == first for j in self.ledger.pending):
                w = idle.pop(0)
                lease, leased = self.ledger.lease(share, first)
                self.streams[self.workers[w].run.remote(lease, leased, version, [ref], self.opponent)] = (w, lease)

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job exactly once on the workers; returns the Trajectories (job order) and metrics. Jobs
        queued by :meth:`prefetch` are played (or already done) by now; the workers may go on with later ones."""
        ray, rc = _ray(), self.cfg.ray
        t0 = time.perf_counter()
        step = jobs[0].step
        self.recovery.poll(wait=0.5 if self.recovery.back else 0.0)  # workers back since the last step play it too
        self._push_inflight()
        ledger, keys = self.ledger, [j.key for j in jobs]
        ahead = sum(k in ledger.jobs for k in keys)  # prefetched: started before this call
        ledger.add(jobs)
        reused = ledger.restore(self._journaled(jobs))
        book, restarts, nodes_lost = ledger.book(), self.restarts, len(self.recovery.lost_nodes)
        last = time.monotonic()
        while not ledger.settled(keys):
            for job in jobs:  # a job that broke every worker it ran on ends as an error episode
                if (
                    job.key not in ledger.done
                    and ledger.lease_of.get(job.key) is None
                    and ledger.attempts.get(job.key, 0) > rc.max_restarts
                ):
                    self._journal([ledger.fail(job.key, f"rollout failed on {ledger.attempts[job.key]} attempts")])
            if ledger.settled(keys):
                break
            self._dispatch(step)
            if not self.streams:
                if not self.recovery.back:
                    raise RayPlacementError(
                        f"no rollout worker left: {ledger.summary()} at step {step} (restarts: {self.restarts})"
                    )
                self.recovery.await_any(step, ledger.summary())  # lost with their nodes: one must come back
                continue
            ready, _ = ray.wait(list(self.streams), num_returns=1, timeout=1.0)
            self.recovery.poll()  # (every half second at most) lost workers that are back take pending jobs
            self.recovery.watch_nodes(step)
            if not ready:
                check_head(rc.head_timeout)
                if time.monotonic() - last > rc.episode_timeout:
                    for gen, (w, lease) in list(self.streams.items()):  # hung: restart and hand its jobs out again
                        logger.warning(
                            "rollout worker %d finished no episode in %ss; restarting it", w, rc.episode_timeout
                        )
                        ray.kill(self.workers[w], no_restart=False)
                        del self.streams[gen]
                        ledger.release(lease, lost=True)
                        self._recover(w, step)
                    last = time.monotonic()
                continue
            for gen in ready:
                w, lease = self.streams[gen]
                try:
                    got_lease, key, traj = ray.get(next(gen), timeout=rc.episode_timeout)
                except StopIteration:
                    del self.streams[gen]
                    ledger.release(lease)  # nothing should be left; if something is, it runs again
                    continue
                except (ray.exceptions.RayError, RuntimeError) as e:
                    check_head(rc.head_timeout)  # every lease fails when the head is gone: say that instead
                    logger.warning(
                        "rollout worker %d lost its lease (%s); re-running its unfinished jobs", w, _cause(e)
                    )
                    del self.streams[gen]
                    ledger.release(lease, lost=True)
                    self._recover(w, step)
                    continue
                last = time.monotonic()
                if key is None:  # the weight loads since its last lease: their sizes and seconds
                    self.pushes.add(w, traj)
                    continue
                views = traj if isinstance(traj, list) else [traj]  # a game: every trained seat's view at once
                if ledger.commit(key, got_lease, views):
                    self._journal(views)
                    if self.on_commit is not None:
                        for view in views:
                            self.on_commit(view, ledger)
        for gen, (_w, lease) in list(self.streams.items()):  # leases with nothing left to play: their workers are free
            if not ledger.outstanding(lease):
                del self.streams[gen]
                ledger.release(lease)
        trajs = ledger.take(keys)
        self.recovery.watch_nodes(step, force=True)
        after = ledger.book()
        return trajs, {
            "generated_tokens": float(sum(sum(t.loss_mask or []) for t in trajs)),
            "generate_s": time.perf_counter() - t0,
            "reused_episodes": float(reused),
            "prefetched_episodes": float(ahead),
            "worker_restarts": float(self.restarts - restarts),
            "refused_commits": float(after["refused"] - book["refused"]),
            "nodes_lost": float(len(self.recovery.lost_nodes) - nodes_lost),
            "workers_waiting": float(len(self.recovery.back)),
            **{name: float(after[k] - book[k]) for name, k in _BOOKS.items()},
            **self.pushes.metrics(),
        }

    def _recover(self, w: int, step: int | None = None) -> None:
        """After worker ``w`` failed: out of the live workers until Ray has restarted it and it answers (its next
        lease carries the current weights: a restart re-runs ``__init__``, with version-0 weights)."""
        self.restarts += 1
        if self.cfg.learner.weight_sync == "nccl":
            raise RayPlacementError(
                f"rollout worker {w} failed, and a restarted vLLM worker cannot rejoin the NCCL "
                "weight transfer mid-run; resume the run from its checkpoint (or use "
                "learner.weight_sync=object_store, which survives restarts)"
            )
        self.recovery.lose(w, step)

    # ---- the journal: committed episodes of unfinished steps survive a driver restart ----

    def _journal(self, views: list[Trajectory]) -> None:
        """Append a committed job's Trajectories (a game's views in one write) to its step's journal."""
        step = Job.parse(views[0].metadata["job"]).step
        write_jsonl(views, self.journal / f"step-{step}.jsonl", append=True)

    def _journaled(self, jobs: Sequence[Job]) -> list[Trajectory]:
        """Episodes of these jobs committed before a restart, under the weights the learner holds now (with
        ``max_staleness`` k: none of whose tokens is more than k versions older); an episode that ended in an error
        is played again rather than reused."""
        path = self.journal / f"step-{jobs[0].step}.jsonl"
        if not path.exists():
            return []
        keys, k = {j.key for j in jobs}, self.cfg.rollout.max_staleness

        def usable(t: Trajectory) -> bool:  # synchronous: begun under these weights; else within the bound
            if t.error is not None:  # played again: the cause may be gone (a run stopped for it, then fixed)
                return False
            if k == 0:
                return (t.metadata.get("policy_version") or [None])[0] == self.learner.version
            oldest = oldest_version(t)
            return oldest is not None and self.learner.version - oldest <= k

        return [t for t in read_jsonl(path) if t.metadata.get("job") in keys and usable(t)]

    def reset(self) -> None:
        """A fresh run: remove the journal and the weight pushes' record of an earlier run in the same folder."""
        for path in self.journal.glob("step-*.jsonl"):
            path.unlink()
        self.pushes.reset()

    def state_dict(self) -> dict[str, Any]:
        """The journal's folder (steps up to the learner's are trained: their journals are removed)."""
        for path in self.journal.glob("step-*.jsonl"):
            if int(path.stem.removeprefix("step-")) < self.learner.updates:
                path.unlink()
        return {"journal": str(self.journal)}

    def windows(self) -> Any:
        """T-PPO's windows played on these workers, each unfinished episode where it began."""
        from turnrl.rl.placement.ray_windows import RayWindows

        return RayWindows(self)

    def close(self) -> None:
        """Stop the workers (and the local cluster this runner started)."""
        stop(self.workers, self.started)
        self.workers, self.started = [], False


def _env_spec(env_id: str) -> tuple[str, Any, dict[str, Any]] | None:
    """``(id, entry point, kwargs)`` of a registered env, for workers to register it too (None: not registered here,
    e.g. a ``module:Name-v0`` id that the worker's ``make`` imports itself)."""
    import gymnasium as gym

    spec = gym.registry.get(env_id)
    if spec is None:
        return None
    entry = spec.entry_point
    name = getattr(entry, "__qualname__", "")
    if callable(entry) and getattr(entry, "__module__", "__main__") != "__main__" and name.isidentifier():
        entry = f"{entry.__module__}:{name}"  # by name: a node without its module reports it, not fails unpickling
    return spec.id, entry, dict(spec.kwargs or {})
