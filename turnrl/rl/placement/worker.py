"""A rollout worker of the Ray placement: an agent backend and its own environments in one Ray actor.

The actor is created by :class:`turnrl.rl.placement.ray.RayRunner` (``ray.remote(RolloutWorker)``); this module
does not import Ray, so it can be read and unit-tested on its own. One torch thread per worker: on a small machine
several workers and the learner share the cores.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from turnrl.agents.base import capabilities_of
from turnrl.agents.hf import HFAgent
from turnrl.envs.registry import make, register
from turnrl.lora import adapter_state, base_state, is_lora, share_frozen_base
from turnrl.rl.config import TrainConfig
from turnrl.rl.core.policies import split_policies
from turnrl.rl.placement.nodes import here
from turnrl.rl.placement.parameters import from_shared, shared_bytes
from turnrl.rl.placement.shipping import import_problems
from turnrl.rl.placement.versioned import VersionedAgent, adopt_weights
from turnrl.rl.sources.base import Job
from turnrl.rl.sources.onpolicy import play_jobs
from turnrl.types import Trajectory

__all__ = ["RolloutWorker", "VersionedAgent", "adopt_weights"]  # the last two live in .versioned

#: the most weight loads a worker keeps to report (T-PPO's windows report none: the oldest are dropped)
_LOADS_KEPT = 16


class RolloutWorker:
    """Plays leased jobs with the policy weights of a given version and streams each finished episode back.

    The actor runs two calls at once (``max_concurrency=2``): weights pushed while a lease plays load between two
    generation calls (:class:`VersionedAgent`), and only ever move forward (an older version is ignored).

    The constructor takes only small arguments; the policy and its tokenizer arrive with :meth:`setup` (the
    runner calls it after every start and restart), so a restart never depends on a constructor argument kept in
    the object store (ray#53727).

    Args:
        config: the run config as a dict.
        env_spec: ``(env id, entry point, default kwargs)`` registered here before any env is made, so that
            environments registered only in the driver's process (a user's own) exist in the worker too.
        batch_size: the most sequences the agent decodes at once.
        needs: the run's modules outside turnrl (:func:`~turnrl.rl.placement.shipping.needed_modules`), imported first.
    """

    def __init__(
        self,
        config: dict[str, Any],
        env_spec: tuple[str, Any, dict[str, Any]] | None,
        batch_size: int = 64,
        needs: Sequence[str] = (),
    ) -> None:
        self.where = here()
        # the run's own modules first (a plug-in algorithm registers itself; the config names it): a node without
        # them answers ``ready`` with what failed, and the driver refuses the run before any step
        self.problems, self.imports = import_problems(needs)
        self.agent: Any = None
        if self.problems:
            return
        self.cfg = TrainConfig.model_validate(config)
        self.threads = max(1, int(self.cfg.ray.worker_cpus))  # the CPUs Ray reserved for this worker
        torch.set_num_threads(self.threads)
        try:
            if env_spec is not None:
                env_id, entry_point, kwargs = env_spec
                register(env_id, entry_point, **kwargs)
            if self.cfg.multi_agent is not None:  # a game with several agents: fail at start if it cannot be built
                from turnrl.envs.multiagent import make_multi_agent

                make_multi_agent(self.cfg.env.id, **self.cfg.env.kwargs).close()
            else:
                make(self.cfg.env.id, **self.cfg.env.kwargs).close()  # fail at start, not mid-step
        except ImportError as e:  # an import the run names indirectly (a mixture's member, the env's own imports)
            error = f"{type(e).__name__}: {e}"
            self.problems = [{"module": e.name or self.cfg.env.id, "missing": e.name, "error": error}]
            return
        self.batch_size = batch_size
        self.vllm = self.cfg.ray.rollout_backend == "vllm"
        self.version = 0
        self.lock = threading.Lock()  # generation calls and weight loads take turns
        self.load_lock = threading.Lock()  # in-flight loads, one at a time (generation goes on meanwhile)
        self.player: VersionedAgent | None = None
        self.adapter_config: Any = None  # a LoRA policy on vLLM: the adapters' peft config (weights come per version)
        self.pid = self.where["pid"]
        self.windows: Any = None  # T-PPO: a LocalWindows holding this worker's unfinished episodes (after setup)
        self.games: Any = None  # a multi-agent run: the MultiAgentRunner that plays this worker's games
        self.policies: dict[str, HFAgent] = {}  # several trainable policies: each one's agent, by name
        self.players: dict[str, VersionedAgent] = {}  # and each behind the lock, stamped with the version
        self.loads: list[dict[str, Any]] = []  # weight loads not yet reported (:meth:`run` hands them over)

    def setup(self, model: list[Any], tokenizer: list[Any]) -> dict[str, Any]:
        """Build the agent from ``model[0]`` (the policy at version 0; a run with several trainable policies: every
        policy's model by name) and ``tokenizer[0]`` — objects or object refs (in lists, so that Ray hands the
        references over); returns :meth:`ready`'s answer."""
        policy, tok = model[0], tokenizer[0]
        if not isinstance(policy, (torch.nn.Module, dict)):  # ObjectRefs (nested refs are not resolved by Ray)
            import ray

            policy, tok = ray.get([policy, tok], timeout=self.cfg.ray.start_timeout)
        self.players = {}
        if isinstance(policy, dict):  # several policies: an agent each, the frozen base tensors shared among them
            return self._setup_policies(policy, tok)
        if self.vllm and is_lora(policy):  # the base weights once; adapters from now on (new ones at every update)
            self.agent = self._vllm_agent()
            self.adapter_config = policy.peft_config["default"]
            self.agent.load_weights(base_state(policy))
            self.agent.load_adapter(adapter_state(policy), self.adapter_config)
        elif self.vllm:  # the engine loads the model's files, then the policy's weights (init_from may differ)
            self.agent = self._vllm_agent()
            if self.inflight:
                self.agent.update_weights(policy.state_dict(), 0)  # the engine labels these weights version 0
            else:
                self.agent.load_weights(policy.state_dict())
        else:
            self.agent = HFAgent(policy, tok, batch_size=self.batch_size, kv_cache_mb=self.cfg.rollout.kv_cache_mb)
        self.version = 0
        self.player = VersionedAgent(self.agent, self.lock, lambda: self.version)
        self.games = None  # built for this player on the first game
        from turnrl.rl.sources.windows import LocalWindows

        self.windows = LocalWindows(
            self.cfg.env, self.cfg.rollout, self.cfg.seed, self.player, lambda: self.version, per_episode_seeds=True
        )
        return self.ready()

    def _setup_policies(self, models: dict[str, torch.nn.Module], tokenizer: Any) -> dict[str, Any]:
        """One agent per trainable policy (``multi_agent.policies``): its own model — under LoRA its own adapters on
        a base shared in memory with the others — behind the worker's one lock and version (every policy's version
        is the run's step)."""
        if self.vllm:
            raise RuntimeError(
                "several trainable policies play on HF rollout workers (ray.rollout_backend: hf); "
                "vLLM workers with one adapter per policy are not built yet"
            )
        names = list(models)
        for name in names[1:]:
            share_frozen_base(models[names[0]], models[name])
        self.policies = {
            name: HFAgent(m, tokenizer, batch_size=self.batch_size, kv_cache_mb=self.cfg.rollout.kv_cache_mb)
            for name, m in models.items()
        }
        self.agent = self.policies[names[0]]
        self.version = 0
        self.players = {name: VersionedAgent(a, self.lock, lambda: self.version) for name, a in self.policies.items()}
        self.player = self.players[names[0]]
        self.games = None
        return self.ready()

    def _vllm_agent(self) -> Any:
        """vLLM's asynchronous engine where it can take weights in flight (``ray.vllm_inflight_updates``), else the
        plain one (whose loads wait for the running generation call)."""
        from turnrl.agents.vllm import VLLMAgent, lora_engine_kwargs
        from turnrl.agents.vllm_async import AsyncVLLMAgent, supports_inflight_updates

        options = dict(self.cfg.ray.vllm)
        if self.cfg.learner.weight_sync == "nccl":
            options.setdefault("weight_transfer_config", {"backend": "nccl"})
        if self.cfg.learner.lora is not None:  # adapters swap between two generation calls, never inside one
            return VLLMAgent(self.cfg.model, **{**lora_engine_kwargs(self.cfg.learner.lora.r), **options})
        if self.cfg.ray.vllm_inflight_updates and supports_inflight_updates():
            return AsyncVLLMAgent(self.cfg.model, timeout=self.cfg.ray.episode_timeout, **options)
        return VLLMAgent(self.cfg.model, **options)

    @property
    def inflight(self) -> bool:
        """Whether weight loads land inside running generation calls (the agent labels its tokens' versions)."""
        return capabilities_of(self.agent).inflight_updates

    def ready(self) -> dict[str, Any]:
        """Answer once started: the process id, the weights' version, whether :meth:`setup` ran, where it runs, and
        the run's modules — the file each came from, or what failed to import (then it can play nothing)."""
        return {
            "pid": self.where["pid"],
            "version": getattr(self, "version", 0),
            "setup": self.agent is not None,
            "where": self.where,
            "imports": self.imports,
            "problems": self.problems,
        }

    def set_weights(self, version: int, weights: list[Any]) -> int:
        """Load ``weights[0]`` (a state dict, or an object ref to one) as ``version`` if it is newer than the weights
        held (between two generation calls of a lease in play); returns the version held. Each load is noted — its
        size, the seconds to fetch it to this node and to load it — for :meth:`run` to report."""
        if version > self.version:
            t0 = time.perf_counter()
            state = weights[0]
            if not isinstance(state, dict):  # an ObjectRef: fetched only when the version is newer
                import ray

                state = ray.get(state, timeout=self.cfg.ray.start_timeout)
            fetched, size = time.perf_counter(), shared_bytes(state)
            if self._load(version, from_shared(state)):  # numpy arrays from the object store: no copy until the load
                self.loads = [
                    *self.loads[1 - _LOADS_KEPT :],
                    {
                        "version": version,
                        "bytes": size,
                        "fetch_s": fetched - t0,
                        "load_s": time.perf_counter() - fetched,
                        "node_id": self.where["node_id"],
                        "node_ip": self.where["node_ip"],
                        "pid": self.pid,
                    },
                ]
        return self.version

    def _load(self, version: int, state: dict[str, torch.Tensor]) -> bool:
        """Make ``state`` the weights of ``version`` unless a newer version landed meanwhile (checked again under
        the lock: a call with a newer version may have loaded while this one fetched); whether it loaded."""
        if self.inflight:  # pause → load → resume inside the engine; running requests go on under ``version``
            with self.load_lock:
                if version <= self.version:
                    return False
                self.agent.update_weights(state, version)
                self.version = version
                return True
        with self.lock:
            if version <= self.version:
                return False
            if self.vllm and self.adapter_config is not None:
                self.agent.load_adapter(state, self.adapter_config)  # a new adapter id: never the cached one
            elif self.vllm:
                self.agent.load_weights(state)  # into every engine worker; prefix cache reset
            elif self.players:  # several policies: each its own weights, by name
                for name, own in split_policies(state).items():
                    adopt_weights(self.policies[name].model, own)
                    self.policies[name].invalidate_sessions()
            else:
                adopt_weights(self.agent.model, state)
                self.agent.invalidate_sessions()  # storage swapped (addresses may recur): drop caches explicitly
            self.version = version
            return True

    # ---- vLLM's weight-transfer control plane (learner.weight_sync: nccl; driven by learner rank 0) ----

    def _engine(self, name: str, *args: Any) -> Any:
        """Call the vLLM engine's ``name`` (awaited on the engine's own loop where the engine is asynchronous)."""
        out = getattr(self.agent.llm, name)(*args)
        return self.agent.call(out) if self.inflight else out

    def init_weight_transfer_engine(self, request: Any) -> None:
        """Join the NCCL transfer group (blocks until the learner's rank 0 has opened it)."""
        self._engine("init_weight_transfer_engine", request)

    def start_weight_update(self) -> None:
        if self.inflight:
            self.agent.pause()  # running requests kept; they go on under the new weights after the resume
        self._engine("start_weight_update")

    def update_weights(self, request: Any) -> None:
        """Receive one round of broadcast weights (runs while rank 0 sends)."""
        self._engine("update_weights", request)

    def finish_weight_update(self) -> None:
        self._engine("finish_weight_update")
        if self.inflight:
            return  # the pause cleared the caches; :meth:`update_weight_version` labels the weights and resumes
        if hasattr(self.agent.llm, "reset_prefix_cache"):
            self.agent.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def update_weight_version(self, version: str) -> int:
        """The version the streamed weights are (the runner then sends no object-store copy)."""
        if self.inflight:
            self.agent.set_version(int(version))
            self.agent.resume()
        self.version = int(version)
        return self.version

    def shutdown_weight_transfer_engine(self) -> None:
        self._engine("shutdown_weight_transfer_engine")

    def score(self, input_ids: list[list[int]], temperature: float = 1.0) -> tuple[int, list[list[float]]]:
        """``(version held, the log-probabilities of fixed sequences under those weights)``."""
        torch.set_num_threads(self.threads)  # this call runs on one of the actor's threads
        if self.vllm:
            if temperature != 1.0:
                raise ValueError("a vLLM worker scores at temperature 1 (vLLM's prompt log-probabilities)")
            return self.version, self.agent.score(input_ids)
        from turnrl.rl.core.forward import sequence_logprobs

        return self.version, sequence_logprobs(self.agent.model, input_ids, temperature)

    def play_window(
        self,
        step: int,
        carried: list[Job],
        jobs: list[Job],
        window: int,
        snapshots: bool,
        version: int,
        weights: list[Any],
    ) -> Any:
        """T-PPO's successive batching with weights ``version``: :meth:`turnrl.rl.sources.windows.LocalWindows.play`
        on the episodes this worker holds (a restarted worker holds none: its carried jobs come back ``lost``);
        returns the :class:`~turnrl.rl.sources.windows.Window`."""
        if self.windows is None:
            raise RuntimeError(f"rollout worker {self.pid} has no policy yet (restarted without setup)")
        torch.set_num_threads(self.threads)
        self.set_weights(version, weights)
        out = self.windows.play(step, carried, jobs, window, snapshots)
        for traj in out.finished + out.snapshots:
            traj.metadata["worker"] = self.pid
        return out

    def run(
        self, lease: int, jobs: list[Job], version: int, weights: list[Any], opponent: dict[str, Any] | None = None
    ) -> Iterator[tuple[int, str | None, Any]]:
        """Play ``jobs`` with weights ``version`` (fetched first if this worker holds another); yield
        ``(lease, job key, Trajectory)`` for each episode as soon as it finishes (a game: its trained views, as one
        list; a tree: its leaves, as one list, once the lease's trees are grown) — first, ``(lease, None, loads)``
        when weights were loaded since the last lease (:meth:`set_weights`' figures). ``opponent``: a league's drawn
        version for this step's games (``{"version": v, "weights": [ref]}``,
        the snapshot as the driver's league holds it), or None."""
        if self.player is None:
            raise RuntimeError(f"rollout worker {self.pid} has no policy yet (restarted without setup)")
        self.set_weights(version, weights)
        if self.loads:  # the weight loads since the last lease: their figures first, under no job
            loads, self.loads = self.loads, []
            yield lease, None, loads
        done: queue.Queue[Trajectory | list[Trajectory] | BaseException | None] = (
            queue.Queue()
        )  # a tree's leaves: a list

        def sink(traj: Trajectory) -> None:
            traj.metadata["worker"] = self.pid
            done.put(traj)

        def work() -> None:
            torch.set_num_threads(self.threads)  # per thread: a new thread's OpenMP team starts from OMP_NUM_THREADS
            c = self.cfg
            try:
                if c.multi_agent is not None:
                    self._play_games(jobs, done, opponent)
                elif c.rollout.tree is not None:  # a tree's leaves share its job: committed together
                    trajs, _ = play_jobs(
                        c.env,
                        c.rollout,
                        c.algorithm,
                        c.seed,
                        self.player,
                        jobs,
                        lambda: self.version,
                        per_episode_seeds=True,
                    )
                    trees: dict[str, list[Trajectory]] = {}
                    for traj in trajs:
                        traj.metadata["worker"] = self.pid
                        trees.setdefault(traj.metadata["job"], []).append(traj)
                    for leaves in trees.values():
                        done.put(leaves)
                else:
                    play_jobs(
                        c.env,
                        c.rollout,
                        c.algorithm,
                        c.seed,
                        self.player,
                        jobs,
                        lambda: self.version,
                        per_episode_seeds=True,
                        sink=sink,
                    )
                done.put(None)
            except BaseException as e:  # reported to the driver, which re-runs the jobs
                done.put(e)

        threading.Thread(target=work, daemon=True, name="turnrl-rollout").start()
        while True:  # each Trajectory as its episode finishes (the rollout's sink)
            item = done.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise RuntimeError(f"rollout worker {self.pid} failed: {type(item).__name__}: {item}") from item
            first = item[0] if isinstance(item, list) else item  # a game: every trained seat's view, committed together
            yield lease, first.metadata["job"], item

    def _play_games(self, jobs: list[Job], done: queue.Queue[Any], opponent: dict[str, Any] | None) -> None:
        """Play each job's game (:class:`~turnrl.rl.sources.multi.MultiAgentRunner`, the same rules and seeds as on
        the local placement; a league's version as the driver drew it) and put each game's trained views on
        ``done`` as one list."""
        from turnrl.rl.sources.multi import MultiAgentRunner

        if self.games is None:
            self.games = MultiAgentRunner(
                self.cfg, self.player, lambda: self.version, policies=self.players, drawn_by_driver=True
            )
        if opponent is not None:  # the league's pick: its snapshot from the object store
            import ray

            self.games.given = (
                int(opponent["version"]),
                ray.get(opponent["weights"][0], timeout=self.cfg.ray.start_timeout),
            )
        else:
            self.games.given = None
        trajs, _ = self.games.run(jobs)
        by_job: dict[str, list[Trajectory]] = {}
        for t in trajs:
            t.metadata["worker"] = self.pid
            by_job.setdefault(t.metadata["job"], []).append(t)
        for job in jobs:
            done.put(by_job[job.key])
