"""The Ray placement: rollout workers as Ray actors that lose nothing (DESIGN.md §Trainers).

:class:`RayRunner` is the :class:`~turnrl.rl.sources.Runner` of ``placement: ray``. For each generation round it
fills a :class:`~turnrl.rl.placement.ledger.Ledger` with the round's jobs and leases them to the live workers; each
worker streams every finished episode back as it finishes (a Ray streaming generator), and the runner commits it
exactly once and appends it to a journal file. Before a worker plays a lease it holds the learner's current weights
(pushed through the object store after every update, with their version; a restarted worker fetches them first).

Faults: a worker that dies mid-step (``ray.kill``, a crash) is restarted by Ray (``max_restarts``) and its
unfinished jobs are re-leased; what it committed before stays. A worker that finishes no episode for
``episode_timeout`` seconds is killed and restarted the same way. An environment step that hangs is cut by
``rollout.env_timeout`` inside the worker: that episode ends with its error and the step goes on. A worker that
cannot be restarted is dropped; when none is left the run ends with an error that says what was collected. Every
wait has a timeout. The journal (``OUT_DIR/ray/step-N.jsonl``) lets a restarted driver reuse the episodes it had
committed in an unfinished step instead of re-running or losing them.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turnrl.rl.placement.ledger import Ledger
from turnrl.rl.run.config import TrainConfig
from turnrl.rl.sources.base import Job
from turnrl.storage import read_jsonl, write_jsonl
from turnrl.types import Trajectory

logger = logging.getLogger(__name__)


class RayPlacementError(RuntimeError):
    """The Ray placement cannot go on (unreachable cluster, unplaceable or dead workers); the message says why."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover — ray is a dependency; a broken install says so
        raise RayPlacementError("placement: ray needs the `ray` package: pip install ray") from e
    return ray


def connect(address: str | None, num_cpus: float | None, timeout: float) -> bool:
    """Join the cluster at ``address`` ('auto' or HOST:PORT) or start a local one; returns whether we started it.

    Raises:
        RayPlacementError: nothing answers at ``address`` within ``timeout`` seconds, or no cluster runs for 'auto'.
    """
    ray = _ray()
    if address not in (None, "auto", "local"):
        host, _, port = address.rpartition(":")
        host = host.removeprefix("ray://") or address
        try:
            with socket.create_connection((host, int(port) if port.isdigit() else 6379), timeout=min(timeout, 5.0)):
                pass
        except (OSError, ValueError) as e:
            raise RayPlacementError(f"cannot reach a Ray cluster at ray.address={address!r} ({e}); start one there "
                                    "with `ray start --head`, fix the address, or drop ray.address to start a "
                                    "local cluster") from e
    if ray.is_initialized():
        return False
    try:
        if address is None or address == "local":
            ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            return True
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except ConnectionError as e:
        raise RayPlacementError(f"could not join a Ray cluster at ray.address={address!r}: {e}. Start one with "
                                "`ray start --head`, or drop ray.address to start a local cluster") from e
    return False


def stop(actors: Sequence[Any], shutdown: bool) -> None:
    """Kill ``actors`` (never restarted; ones already gone are skipped) and, with ``shutdown``, the local cluster."""
    ray = _ray()
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001 — already gone
            pass
    if shutdown and ray.is_initialized():
        ray.shutdown()


def free_cpus(need: float, timeout: float = 5.0) -> float:
    """The cluster's free CPUs once ``need`` are free, or what is free after ``timeout`` seconds (actors killed a
    moment ago release their CPUs asynchronously)."""
    ray = _ray()
    deadline = time.monotonic() + timeout
    while True:
        free = ray.available_resources().get("CPU", 0.0)
        if free + 1e-9 >= need or time.monotonic() > deadline:
            return free
        time.sleep(0.2)


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
        rc = config.ray
        self.started = connect(rc.address, rc.num_cpus, rc.connect_timeout)
        ray = _ray()
        need = rc.rollout_workers * rc.worker_cpus
        free = free_cpus(need)
        if need > free + 1e-9:
            self.close()
            raise RayPlacementError(f"{rc.rollout_workers} rollout workers × ray.worker_cpus={rc.worker_cpus} need "
                                    f"{need:g} CPUs but the cluster has {free:g} free; lower ray.rollout_workers or "
                                    "ray.worker_cpus")
        from turnrl.rl.placement.worker import RolloutWorker

        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the modules the driver sees
        self._actor = ray.remote(RolloutWorker).options(num_cpus=rc.worker_cpus, num_gpus=rc.worker_gpus,
                                                        max_restarts=rc.max_restarts,
                                                        max_task_retries=0, runtime_env={"env_vars": env})
        self._model_ref = ray.put(learner.model)
        self._tokenizer = tokenizer
        self._env_spec = _env_spec(config.env.id)
        self.batch = config.rollout.prompts_per_step * config.rollout.group_size
        self.pushed: tuple[int, Any] | None = None
        self.on_commit: Callable[[Trajectory, Ledger], None] | None = None
        self.journal = Path(config.out_dir) / "ray"
        self.restarts = 0
        try:
            self.workers = [self._start() for _ in range(rc.rollout_workers)]
            self._await_ready(list(range(len(self.workers))), "starting")
            learner.connect_rollout(self.workers)  # a learner group streaming over NCCL opens its channel
        except BaseException:
            self.close()
            raise

    def _start(self) -> Any:
        return self._actor.remote(self.cfg.model_dump(), [self._model_ref], self._tokenizer, self._env_spec,
                                  self.batch)

    def _await_ready(self, idx: Sequence[int], doing: str) -> None:
        """Wait (``start_timeout``) until the workers answer; a worker that cannot start is an error. A worker that
        Ray is still restarting answers "unavailable": asked again until the deadline."""
        ray = _ray()
        deadline = time.monotonic() + self.cfg.ray.start_timeout
        for i in idx:
            while True:
                try:
                    ray.get(self.workers[i].ready.remote(), timeout=max(deadline - time.monotonic(), 0.1))
                    break
                except ray.exceptions.GetTimeoutError as e:
                    raise RayPlacementError(f"rollout worker {i} did not start within ray.start_timeout="
                                            f"{self.cfg.ray.start_timeout}s while {doing} (is the cluster out of "
                                            "CPUs or memory? `ray status` shows it)") from e
                except ray.exceptions.ActorUnavailableError as e:
                    if time.monotonic() > deadline:
                        raise RayPlacementError(f"rollout worker {i} still unavailable after ray.start_timeout="
                                                f"{self.cfg.ray.start_timeout}s while {doing}") from e
                    time.sleep(0.2)
                except ray.exceptions.RayError as e:
                    raise RayPlacementError(f"rollout worker {i} died while {doing}: {_cause(e)}") from e

    # ---- weights ----

    def _weights(self) -> tuple[int, Any]:
        """The learner's current ``(version, object ref)``, put in the object store once per version."""
        if self.pushed is None or self.pushed[0] != self.learner.version:
            self.pushed = self.learner.export_for_workers(_ray().put)
        return self.pushed

    def sync(self) -> int:
        """Push the learner's current weights to every worker now (they otherwise fetch them with their next lease);
        returns the version they hold."""
        ray = _ray()
        version, ref = self._weights()
        held = ray.get([w.set_weights.remote(version, [ref]) for w in self.workers], timeout=self.cfg.ray.start_timeout)
        if any(v != version for v in held):
            raise RayPlacementError(f"rollout workers hold versions {held} after a push of version {version}")
        return version

    # ---- one round ----

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job exactly once on the workers; returns the Trajectories (job order) and metrics."""
        ray = _ray()
        t0 = time.perf_counter()
        ledger = Ledger(jobs)
        reused = ledger.restore(self._journaled(jobs))
        version, ref = self._weights()
        streams: dict[Any, tuple[int, int]] = {}  # generator → (worker index, lease)
        alive = list(range(len(self.workers)))
        last = time.monotonic()
        while not ledger.complete:
            for job in ledger.pending:  # a job that broke every worker it ran on ends as an error episode
                if ledger.attempts.get(job.key, 0) > self.cfg.ray.max_restarts:
                    self._journal(ledger.fail(job.key, f"rollout failed on {ledger.attempts[job.key]} attempts"),
                                  job.step)
            if ledger.complete:
                break
            busy = {w for w, _ in streams.values()}
            idle = [w for w in alive if w not in busy]
            if ledger.pending and idle:
                share = -(-len(ledger.pending) // len(idle))  # spread what is pending over the idle workers
                for w in idle:
                    lease, leased = ledger.lease(share)
                    if leased:
                        streams[self.workers[w].run.remote(lease, leased, version, [ref])] = (w, lease)
            if not streams:
                raise RayPlacementError(f"no rollout worker left: {ledger.summary()} of step {jobs[0].step} "
                                        f"(restarts: {self.restarts})")
            ready, _ = ray.wait(list(streams), num_returns=1, timeout=1.0)
            if not ready:
                if time.monotonic() - last > self.cfg.ray.episode_timeout:
                    for gen, (w, lease) in list(streams.items()):  # hung: restart and hand its jobs out again
                        logger.warning("rollout worker %d finished no episode in %ss; restarting it", w,
                                       self.cfg.ray.episode_timeout)
                        ray.kill(self.workers[w], no_restart=False)
                        del streams[gen]
                        ledger.release(lease)
                        self._recover(w, alive)
                    last = time.monotonic()
                continue
            for gen in ready:
                w, lease = streams[gen]
                try:
                    got_lease, key, traj = ray.get(next(gen), timeout=self.cfg.ray.episode_timeout)
                except StopIteration:
                    del streams[gen]
                    ledger.release(lease)  # nothing should be left; if something is, it runs again
                    continue
                except (ray.exceptions.RayError, RuntimeError) as e:
                    logger.warning("rollout worker %d lost its lease (%s); re-running its unfinished jobs", w, _cause(e))
                    del streams[gen]
                    ledger.release(lease)
                    self._recover(w, alive)
                    continue
                last = time.monotonic()
                if ledger.commit(key, got_lease, traj):
                    self._journal(traj, jobs[0].step)
                    if self.on_commit is not None:
                        self.on_commit(traj, ledger)
        trajs = ledger.results()
        return trajs, {"generated_tokens": float(sum(sum(t.loss_mask or []) for t in trajs)),
                       "generate_s": time.perf_counter() - t0, "reused_episodes": float(reused),
                       "refused_commits": float(ledger.refused), "worker_restarts": float(self.restarts)}

    def _recover(self, w: int, alive: list[int]) -> None:
        """After worker ``w`` failed: wait for Ray's restart (it re-runs ``__init__``: version-0 weights, so the next
        lease carries the current ones); drop it when it cannot come back."""
        self.restarts += 1
        if self.cfg.learner.weight_sync == "nccl":
            raise RayPlacementError(f"rollout worker {w} failed, and a restarted vLLM worker cannot rejoin the NCCL "
                                    "weight transfer mid-run; resume the run from its checkpoint (or use "
                                    "learner.weight_sync=object_store, which survives restarts)")
        try:
            self._await_ready([w], "restarting")
        except RayPlacementError as e:
            logger.warning("dropping rollout worker %d: %s", w, e)
            alive.remove(w)

    # ---- the journal: committed episodes of unfinished steps survive a driver restart ----

    def _journal(self, traj: Trajectory, step: int) -> None:
        write_jsonl([traj], self.journal / f"step-{step}.jsonl", append=True)

    def _journaled(self, jobs: Sequence[Job]) -> list[Trajectory]:
        """Episodes of these jobs committed before a restart, under the weights the learner holds now."""
        path = self.journal / f"step-{jobs[0].step}.jsonl"
        if not path.exists():
            return []
        keys = {j.key for j in jobs}
        return [t for t in read_jsonl(path) if t.metadata.get("job") in keys
                and (t.metadata.get("policy_version") or [None])[0] == self.learner.version]

    def reset(self) -> None:
        """A fresh run: remove the journal of an earlier run in the same folder."""
        for path in self.journal.glob("step-*.jsonl"):
            path.unlink()

    def state_dict(self) -> dict[str, Any]:
        """The journal's folder (steps up to the learner's are trained: their journals are removed)."""
        for path in self.journal.glob("step-*.jsonl"):
            if int(path.stem.split("-")[1]) < self.learner.updates:
                path.unlink()
        return {"journal": str(self.journal)}

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
    return spec.id, spec.entry_point, dict(spec.kwargs or {})


def _cause(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"
