"""The DeepSpeed learner group (``learner: {backend: deepspeed, ranks: M, zero_stage: 0–3}``, ``placement: ray``).

:class:`LearnerGroup` stands where the driver expects a :class:`~turnrl.rl.core.learner.Learner` (``update``,
``version``, ``lr``, ``export_weights``, ``state_dict``) and runs the learner as ``M`` Ray actors that form one
DeepSpeed process group (:mod:`turnrl.rl.placement.deepspeed_rank`: gloo with ``DS_ACCELERATOR=cpu`` on CPU,
NCCL on GPUs). The update equals one process's on the whole batch (the rank module says how).

After each update the group publishes a versioned copy of the weights: every rank takes part in gathering them
(ZeRO-3 partitions, in buckets), rank 0 returns them into Ray's object store, and the rollout workers fetch that
object (:meth:`export_ref`); the driver's copy of the policy (held-out evaluation, ``checkpoint.pt``) loads it too.

Every remote wait has ``learner.timeout``; a rank that dies or overruns is an error that names the rank, its node
(and whether Ray found the node itself lost) and the operation, and the group is stopped (its process group cannot
continue without the rank): run the same command again, and it resumes from the last checkpoint — on any node with
the ranks' resources that can read ``OUT_DIR/deepspeed``. A head that stops answering meanwhile ends the wait with
:class:`~turnrl.rl.placement.cluster.HeadLostError` (``ray.head_timeout``). Checkpoints are
DeepSpeed's own, sharded (``OUT_DIR/deepspeed/update-N``); the driver's ``checkpoint.pt`` points at them and holds
the published weights, so ``init_from`` and ``turnrl eval`` read a group's run like any other.

On CPU nothing is compiled: DeepSpeed's shared-memory all-reduce op serves only its inference all-reduce,
never the group's training collectives (torch.distributed's, over gloo), so the ranks tell DeepSpeed it is
unavailable (:func:`~turnrl.rl.placement.deepspeed_rank.skip_cpu_op`) and it is never built or loaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.lora import check_resume, load_adapter, policy_state, restore
from turnrl.rl.config import TrainConfig
from turnrl.rl.core.learner import _trainable, warmup_factor
from turnrl.rl.placement.cluster import RayPlacementError, check_head, connect, put, stop
from turnrl.rl.placement.cluster import cause as _cause
from turnrl.rl.placement.cluster import ray_module as _ray
from turnrl.rl.placement.nodes import check_room, demand, record
from turnrl.rl.placement.parameters import from_shared
from turnrl.rl.placement.shipping import actor_env, job_env, needed_modules, problem_text
from turnrl.types import Trajectory
from turnrl.weights import mark_weights_changed

logger = logging.getLogger(__name__)


class LearnerGroupError(RayPlacementError):
    """A rank of the learner group died, overran ``learner.timeout``, or failed; the message names it."""


class LearnerGroup:
    """``learner.ranks`` DeepSpeed ranks on Ray, used like the local learner (see the module docstring).

    Args:
        config: the run config (``learner``, ``ray``, ``optim``, ``algorithm``, ``out_dir``).
        model, tokenizer: the starting policy (sent to every rank once) and its tokenizer; ``model`` stays in the
            driver as the published copy (it loads every new version).
    """

    def __init__(self, config: TrainConfig, model: Any, tokenizer: Any) -> None:
        try:
            import deepspeed  # noqa: F401 — fail here, with the fix, rather than in every rank
        except ImportError as e:
            raise LearnerGroupError(
                "learner.backend=deepspeed needs the `deepspeed` package; on CPU install it with "
                "`DS_BUILD_OPS=0 DS_ACCELERATOR=cpu pip install --no-build-isolation deepspeed` "
                "(scripts/setup.sh does)"
            ) from e
        self.cfg, self.model, self.tokenizer = config, model, tokenizer
        self.version = self.updates = 0
        self._lr = config.optim.lr * warmup_factor(0, config.optim.warmup_steps)  # the rate of the first update
        self.ranks: list[Any] = []
        self.where: list[dict[str, Any]] = []  # each rank's node (its check's answer)
        lc, rc = config.learner, config.ray
        job = job_env(config.ray)  # the user's code, shipped with the Ray job (local folders checked first)
        self.started = connect(rc.address, rc.num_cpus, rc.connect_timeout, job)
        ray = _ray()
        asks = demand(lc.rank_cpus, lc.rank_gpus, lc.rank_resources)
        try:
            keys = ("learner.ranks", "learner.rank_cpus, learner.rank_gpus or learner.rank_resources")
            check_room("learner rank", lc.ranks, asks, keys, 5.0 if rc.address is None else rc.placement_timeout)
            threads = str(max(1, int(lc.rank_cpus)))
            env = {
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
                "TOKENIZERS_PARALLELISM": "false",
            }
            if lc.rank_gpus == 0:
                env["DS_ACCELERATOR"] = "cpu"  # must be set before deepspeed is imported in the rank
            shipped = actor_env(config.ray, env, job)
        except RayPlacementError as e:
            self.close()
            raise LearnerGroupError(str(e)) from e
        from turnrl.rl.placement.deepspeed_rank import DeepSpeedRank, blueprint

        actor = ray.remote(DeepSpeedRank).options(
            num_cpus=lc.rank_cpus,
            num_gpus=lc.rank_gpus,
            max_restarts=0,
            resources=lc.rank_resources or None,
            runtime_env=shipped,
        )
        model_ref = ray.put(blueprint(model, config.learner.lora))
        self._published: tuple[int, Any] | None = None  # (version, ref) of the driver's copy
        self._streamed = -1  # the version last streamed over NCCL (weight_sync: nccl)
        try:
            # only what was set: a rank re-validates the config, and checks that read which options were set (e.g.
            # a step-wise source refusing data.batch_size) must see the same config as the driver
            needs = needed_modules(config.algorithm.name, None)  # a rank makes no environment
            self.ranks = [
                actor.remote(config.model_dump(exclude_unset=True), [model_ref], tokenizer, r, lc.ranks, needs)
                for r in range(lc.ranks)
            ]
            self._place(self._wait([r.check.remote() for r in self.ranks], "import check", lc.start_timeout), asks)
            host, port = self._wait([self.ranks[0].address.remote()], "rendezvous", lc.start_timeout, [0])[0]
            self.info = self._wait([r.setup.remote(host, port) for r in self.ranks], "setup", lc.start_timeout)
        except BaseException:
            self.close()
            raise

    def _place(self, checks: list[dict[str, Any]], asks: dict[str, float]) -> None:
        """Record where each rank runs; a rank that cannot import the run's modules stops the group."""
        for r, state in enumerate(checks):
            if state["problems"]:
                self.close()
                raise LearnerGroupError(problem_text(f"learner rank {r}", state["where"], state["problems"]))
        self.where = [s["where"] for s in checks]
        record(
            self.cfg.out_dir,
            "learner_ranks",
            [{"index": r, **s["where"], "asks": asks, "imports": s["imports"]} for r, s in enumerate(checks)],
        )

    # ---- waits that name the rank ----

    def _wait(
        self, refs: list[Any], op: str, timeout: float | None = None, which: Sequence[int] | None = None
    ) -> list[Any]:
        """Results of ``refs`` (one per rank in ``which``, default all) within ``timeout`` (``learner.timeout``);
        the first rank that fails or dies stops the group with an error naming it and ``op``."""
        ray = _ray()
        which = list(range(len(refs))) if which is None else list(which)
        timeout = self.cfg.learner.timeout if timeout is None else timeout
        rank_of = dict(zip(refs, which))
        results: dict[int, Any] = {}
        pending, deadline = list(refs), time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            done, pending = ray.wait(pending, num_returns=1, timeout=min(max(left, 0.0), 2.0))
            if not done and left > 2.0:  # nothing yet: is the cluster's head still there?
                try:
                    check_head(self.cfg.ray.head_timeout)
                except RayPlacementError:
                    self._halt()
                    raise
                continue
            if not done:
                late = sorted(rank_of[p] for p in pending)
                self._halt()
                raise LearnerGroupError(
                    f"learner rank(s) {late} did not finish {op} within learner.timeout={timeout:g}s; the group was "
                    "stopped"
                )
            r = rank_of[done[0]]
            try:
                results[r] = ray.get(done[0])
            except ray.exceptions.RayError as e:
                died = isinstance(e, ray.exceptions.RayActorError)
                where = self._node_of(r, died)
                self._halt()
                raise LearnerGroupError(
                    f"learner rank {r}{where} {'died' if died else 'failed'} during {op}: "
                    f"{_cause(e)}; the group was stopped — run the same command again to resume "
                    "from the last checkpoint (docs/cluster.md#node-loss)"
                ) from e
        return [results[r] for r in which]

    def _node_of(self, r: int, died: bool) -> str:
        """`` on node IP (ID…)`` of rank ``r``, and when it died whether Ray found its node lost (asked for up to
        5 s: Ray's health checks take a moment to mark a node whose raylet died) — asked once, with no wait, where the
        rank ran on the driver's own node, whose raylet the driver itself reaches Ray through."""
        if r >= len(self.where):
            return ""
        node, ip = self.where[r].get("node_id") or "?", self.where[r].get("node_ip")
        text = f" on node {ip} ({node[:8]})"
        if not died:
            return text
        ray = _ray()
        try:
            own = node == ray.get_runtime_context().get_node_id()
        except Exception:  # no runtime context to ask: look the node up as for any other
            own = False
        deadline = time.monotonic() + 5.0
        while True:
            try:
                if not any(n["NodeID"] == node and n.get("Alive") for n in ray.nodes()):
                    return f"{text}, which Ray found lost (its raylet and every worker on it),"
            except Exception:  # the head may be gone too: say what is known
                return text
            if own:  # no wait for Ray's health checks: the driver reaches Ray through this node's raylet
                return f"{text}, the driver's own node, which Ray has up,"
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        return f"{text} (Ray had not marked that node lost 5 s later: its process died, or the loss is not seen yet)"

    # ---- the learner interface ----

    @property
    def lr(self) -> float:
        """The policy's learning rate after the last update."""
        return self._lr

    def update(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One training step on every rank; the trained trajectories get the learner's metadata; the new weights
        are published."""
        ref = put(list(trajectories), self.cfg.ray.head_timeout)
        results = self._wait([r.update.remote(ref) for r in self.ranks], f"update {self.updates + 1}")
        metrics, notes = results[0]
        for traj, meta in zip(_trainable(trajectories), notes or []):
            traj.metadata.update(meta)
        if "skipped" not in metrics:
            self.updates += 1
            self.version = int(metrics["policy_version"])
        self._lr = metrics.pop("lr", self._lr)
        t0 = time.perf_counter()
        self._publish()
        metrics["export_s"] = time.perf_counter() - t0
        return metrics

    def connect_rollout(self, workers: list[Any]) -> None:
        """``learner.weight_sync: nccl``: open the NCCL transfer group between rank 0 and the vLLM worker (the
        runner calls this once its workers are up)."""
        if self.cfg.learner.weight_sync != "nccl":
            return
        host, port = self._wait([self.ranks[0].address.remote()], "transfer rendezvous", which=[0])[0]
        world = 1 + int(self.cfg.ray.vllm.get("tensor_parallel_size", 1))
        self._wait(
            [r.open_weight_sync.remote(host, port, world, workers) for r in self.ranks],
            "opening the NCCL weight transfer",
            self.cfg.learner.start_timeout,
        )
        self._streamed = 0  # the workers start from the same weights as the ranks

    def _publish(self) -> None:
        """Publish the current version: streamed into the vLLM worker (``weight_sync: nccl``; the driver's copy
        follows on demand), or gathered into the object store and the driver's copy."""
        if self.cfg.learner.weight_sync == "nccl":
            if self._streamed != self.version:
                self._wait(
                    [r.send_weights.remote(self.version) for r in self.ranks],
                    f"weight transfer of version {self.version}",
                )
                self._streamed = self.version
            return
        self.sync_driver()

    def export_ref(self) -> tuple[int, Any]:
        """``(version, object ref of the weights)`` for rollout workers (with ``weight_sync: nccl`` the workers
        already hold the version: the ref is None)."""
        self._publish()
        if self.cfg.learner.weight_sync == "nccl":
            return self.version, None
        assert self._published is not None
        return self._published

    def export_for_workers(self, put: Any) -> tuple[int, Any]:
        """``(version, object ref)`` for rollout workers: rank 0 already put the weights in the object store
        (:meth:`export_ref`; ``put`` is not needed)."""
        return self.export_ref()

    def sync_driver(self) -> None:
        """Bring the driver's copy of the policy to the current version (held-out evaluation, checkpoints)."""
        if self._published is not None and self._published[0] == self.version:
            return
        refs = [r.export.remote(self.cfg.learner.export_bucket_mb) for r in self.ranks]
        self._wait(refs, f"weight export of version {self.version}")
        state = from_shared(_ray().get(refs[0]))
        if self.cfg.learner.lora is not None:
            load_adapter(self.model, state)  # the ranks export a LoRA policy's adapters alone (marks the change)
        else:
            self.model.load_state_dict(state)
            mark_weights_changed(self.model)  # the driver's agent drops its session KV caches
        self._published = (self.version, refs[0])

    def export_weights(self) -> tuple[int, dict[str, Any]]:
        """``(version, CPU state dict)`` of the current weights."""
        self.sync_driver()
        assert self._published is not None
        return self._published[0], from_shared(_ray().get(self._published[1]))

    def score(self, input_ids: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        """The group's log-probabilities of fixed sequences (rank 0's answer; every rank takes part)."""
        return self._wait([r.score.remote(input_ids, temperature) for r in self.ranks], "score")[0]

    # ---- checkpoints ----

    def state_dict(self) -> dict[str, Any]:
        """Write DeepSpeed's sharded checkpoint and return what the driver's checkpoint keeps: where it is, the
        published weights (for ``init_from`` and ``turnrl eval``), version and update count."""
        folder, tag = str(Path(self.cfg.out_dir) / "deepspeed"), f"update-{self.updates}"
        self._wait([r.save.remote(folder, tag) for r in self.ranks], f"checkpoint {tag}")
        self.sync_driver()
        return {
            **policy_state(self.model, self.cfg.learner.lora),
            "deepspeed": {"folder": folder, "tag": tag},
            "version": self.version,
            "updates": self.updates,
            "lr": self._lr,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume every rank from the checkpoint :meth:`state_dict` wrote."""
        ds = state.get("deepspeed")
        if ds:  # before the ranks try to load adapters they do not have
            check_resume(state, self.cfg.learner.lora)
        if not ds:
            raise ValueError(
                "this checkpoint was written by the torch learner; resume it with learner.backend=torch "
                "(or start the DeepSpeed run fresh with init_from)"
            )
        got = self._wait([r.load.remote(ds["folder"], ds["tag"]) for r in self.ranks], f"resume from {ds['tag']}")
        self.version, self.updates, self._lr = got[0]["version"], got[0]["updates"], state.get("lr", self._lr)
        restore(self.model, state, self.cfg.learner.lora)
        self._published = None

    def _halt(self) -> None:
        """Stop the ranks after one failed, leaving the connection to Ray to :meth:`close` (the rollout workers the
        trainer also runs on it are stopped first)."""
        stop(self.ranks, False)
        self.ranks = []

    def close(self) -> None:
        """Stop the ranks (and the local cluster this group started)."""
        stop(self.ranks, self.started)
        self.ranks, self.started = [], False
