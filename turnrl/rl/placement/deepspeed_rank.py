"""One rank of the DeepSpeed learner group: a Ray actor that is one process of a data-parallel DeepSpeed group.

:class:`turnrl.rl.placement.learner_group.LearnerGroup` starts ``learner.ranks`` of these (``ray.remote(
DeepSpeedRank)``); this module imports neither Ray nor DeepSpeed at the top, so it can be read on its own.

How a rank computes exactly what one process computes (:class:`RankLearner`, the learner core with four hooks):

* Every rank receives the whole step's Trajectories and prepares them (advantages over whole groups and over the
  batch — whitening needs every row). The *training* is split: each optimizer step's rows (the local learner's
  window of ``grad_accum × minibatch_size`` rows) are cut into one contiguous part per rank, at a group boundary
  where one is near (:func:`shard_rows`), so a group's shared prompt mostly stays on one rank.
* The loss normalizers (token counts, sequence counts) of a window are **all-reduced**: each micro-batch's loss is
  divided by the count over every rank's micro-batches, as in one process.
* DeepSpeed averages gradients over the ranks (a ``1/M`` the single process does not have) and, by default,
  divides each loss by the accumulation steps: the rank multiplies its loss by ``M``, calls ``backward`` with
  ``scale_wrt_gas=False`` and marks the accumulation boundary itself. Summed gradients = the single process's.
* Ranks run the same number of passes per step (ZeRO-3 gathers parameters in every forward, and every backward
  takes part in the gradient reduction): a rank with fewer micro-batches runs stand-ins whose loss is multiplied
  by 0. Under ZeRO-3 the shared-prompt pass is off, so every micro-batch is exactly one forward call on every rank.

Weights leave the group through :meth:`DeepSpeedRank.export`: every rank gathers the ZeRO-3 partitions bucket by
bucket in the same order, and rank 0 keeps a CPU copy. Every collective has the process group's timeout
(``learner.timeout``), so a dead peer is an error, not a hang.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from turnrl.lora import AdapterOff, LoraConfig, adapter_state, apply_lora, base_state, is_lora, load_adapter
from turnrl.rl.algorithms import Experience, get_algorithm
from turnrl.rl.config import LearnerConfig, OptimConfig, RolloutConfig, TrainConfig
from turnrl.rl.core.experience import Objective
from turnrl.rl.core.learner import Learner, _trainable
from turnrl.rl.placement.nodes import here
from turnrl.rl.placement.parameters import full_parameters, to_shared
from turnrl.rl.placement.shipping import import_problems
from turnrl.types import Trajectory


def shard_rows(groups: list[int], world: int) -> list[list[int]]:
    """Cut positions ``0..len(groups)-1`` into ``world`` contiguous parts of about equal size.

    Each cut moves to the nearest boundary between groups when one lies within half a part's size (so that a group's
    shared prompt stays on one rank); otherwise it falls inside a group (one large group is split rather than left
    to one rank). A part may be empty (fewer rows than ranks). Pure: every rank computes every rank's part the same
    way."""
    n = len(groups)
    bounds = [0] + [i for i in range(1, n) if groups[i] != groups[i - 1]] + [n]
    cuts, last = [0], 0
    for r in range(1, world):
        ideal = round(r * n / world)
        near = min(bounds, key=lambda b: (abs(b - ideal), b))
        cut = near if abs(near - ideal) <= n / (2 * world) else ideal
        last = max(last, cut)
        cuts.append(last)
    cuts.append(n)
    return [list(range(cuts[r], cuts[r + 1])) for r in range(world)]


def skip_cpu_op() -> None:
    """Declare DeepSpeed's shared-memory all-reduce op (``deepspeed_shm_comm``) unavailable, on CPU before
    ``init_distributed``, so that it is neither compiled (a minute of C++ the first time, per Python environment) nor
    loaded. It serves only ``inference_all_reduce`` (tensor-parallel inference); the group's training collectives
    (ZeRO's all-reduces, reduce-scatters, all-gathers; the weights' gathering) are torch.distributed's over gloo either
    way. DeepSpeed reads ``deepspeed.ops.__compatible_ops__``, a dict it keeps for edits like this one, when its
    communication backend starts (``build_shm_op``; docs/training.md says what it does not stop)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def blueprint(model: Any, lora: LoraConfig | None = None) -> dict[str, Any]:  # a transformers model
    """What a rank rebuilds the policy from: its class, config and weights — of a LoRA policy (``lora``: its
    settings) the base model's and the adapters'. The model object itself is not sent: a transformers model
    unpickled in another process returns no hidden states (``output_hidden_states``), which the value head needs."""
    if lora is not None:
        base = model.get_base_model()
        return {
            "cls": type(base),
            "config": base.config,
            "state": {k: v.cpu() for k, v in base_state(model).items()},
            "lora": lora.model_dump(),
            "adapter": adapter_state(model),
        }
    return {
        "cls": type(model),
        "config": model.config,
        "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }


def rebuild(spec: dict[str, Any]) -> torch.nn.Module:
    """The policy of :func:`blueprint` (same class, config and weights, adapters included), in eval mode."""
    model = spec["cls"](spec["config"])
    dtype = next(iter(spec["state"].values())).dtype
    model.to(dtype).load_state_dict(spec["state"])
    if spec.get("lora"):
        model = apply_lora(model, spec["lora"])
        load_adapter(model, spec["adapter"])
    return model.eval()


class _Trainable(torch.nn.Module):
    """The modules DeepSpeed wraps as one: the policy and, for critic algorithms, the value head or critic."""

    def __init__(self, policy: torch.nn.Module, value: torch.nn.Module | None) -> None:
        super().__init__()
        self.policy = policy
        self.value = value

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover — the learner calls the parts
        return self.policy(*args, **kwargs)


class RankLearner(Learner):
    """The learner core as rank ``rank`` of ``world`` (see the module docstring); the optimizer is DeepSpeed's.

    It takes the sections it reads, as :class:`~turnrl.rl.core.learner.Learner` does, and the ``learner`` section
    (the ZeRO stage and ``lora``).
    """

    def __init__(
        self,
        algorithm: Objective,
        model: Any,
        tokenizer: Any,
        rank: int,
        world: int,
        *,
        optim: OptimConfig,
        rollout: RolloutConfig,
        learner: LearnerConfig,
        seed: int = 0,
    ) -> None:
        import deepspeed

        o = optim
        if learner.zero_stage == 3 and (o.share_prompts or o.lanes or o.prefix_tree is not False):  # one forward
            # call per micro-batch on every rank: ZeRO-3 gathers each layer's weights in lock-step with the peers
            o = o.model_copy(update={"share_prompts": False, "lanes": False, "prefix_tree": False})
        super().__init__(algorithm, model, tokenizer, optim=o, rollout=rollout, lora=learner.lora, seed=seed)
        self.rank, self.world = rank, world
        ds_config = {
            "train_micro_batch_size_per_gpu": optim.minibatch_size,
            "gradient_accumulation_steps": 1,  # the boundary is set by hand (see backward)
            "gradient_clipping": optim.grad_clip,
            "zero_optimization": {"stage": learner.zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }
        value = self.critic or self.value_head
        self.engine, *_ = deepspeed.initialize(
            model=_Trainable(model, value), optimizer=self.optimizer, config=ds_config, dist_init_required=False
        )
        self.model = self.policy = self.engine.module.policy
        self.ref_engine = None
        if isinstance(self.ref_model, torch.nn.Module) and learner.zero_stage == 3:  # partitioned like the policy (a
            # LoRA policy's reference is the policy itself with the adapters off: nothing of its own to partition)
            ref_config = {
                "train_micro_batch_size_per_gpu": optim.minibatch_size,
                "zero_optimization": {"stage": 3},
                "steps_per_print": 2**31 - 1,
                "wall_clock_breakdown": False,
            }
            self.ref_engine, *_ = deepspeed.initialize(
                model=self.ref_model, config=ref_config, dist_init_required=False
            )
            self.ref_model = self.ref_engine.module.eval()

    def reference_share(self) -> float:
        """The share of the reference model's parameters this rank holds (1: a full copy; about 1/world under
        ZeRO-3; 0: none of its own, the LoRA policy with its adapters off)."""
        if self.ref_model is None or isinstance(self.ref_model, AdapterOff):
            return 0.0
        held = sum(
            int(p.ds_tensor.numel()) if hasattr(p, "ds_tensor") else int(p.numel()) for p in self.ref_model.parameters()
        )
        full = sum(int(getattr(p, "ds_numel", p.numel())) for p in self.ref_model.parameters())
        return held / max(full, 1)

    def scoring_rows(self, batch: Any) -> torch.Tensor:
        """This rank's share of whole groups (:func:`shard_rows`): each rank scores its rows before the update."""
        mine = shard_rows(batch.group_ids.tolist(), self.world)[self.rank]
        return torch.tensor(mine, dtype=torch.long, device=batch.group_ids.device)

    def micro_loss(self, mb: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True) -> Any:
        # What DeepSpeed's engine.forward does first: ZeRO counts micro-steps here (without it, ZeRO-3 overwrites
        # the gradients of a step's earlier micro-batches instead of summing them). The learner calls the policy
        # itself, not engine.forward, which drops the hidden states the value head needs.
        clear = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()
        return super().micro_loss(mb, counts, train_policy)

    # ---- the hooks of the learner core ----

    def micro_batches(self, window: torch.Tensor, exp: Experience) -> list[torch.Tensor | None]:
        mine = window[shard_rows(exp.batch.group_ids[window].tolist(), self.world)[self.rank]]
        chunks = super().micro_batches(mine, exp)  # this rank's share, cut as one process cuts a window
        most = int(self.all_reduce(torch.tensor(float(len(chunks))), "max"))
        return chunks + [None] * (most - len(chunks))

    def all_reduce(self, value: torch.Tensor, op: str = "sum") -> torch.Tensor:
        import torch.distributed as dist

        t = value.detach().to(self.device).clone()
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.to(value.device)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        # DeepSpeed averages gradients over the ranks; the loss is already normalized over all of them.
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss * self.world, scale_wrt_gas=False)

    def optimizer_step(self) -> torch.Tensor:
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if norm is None else float(norm))


class DeepSpeedRank:
    """A Ray actor: one rank of the learner group.

    Args:
        config: the run config as a dict.
        model: ``[blueprint or ObjectRef to one]`` — the starting policy (:func:`blueprint`; every rank starts from
            the same weights).
        tokenizer: the policy's tokenizer.
        rank, world: this rank and the group's size.
        needs: the run's modules outside turnrl (a plug-in algorithm's), imported first; :meth:`check` says how.
    """

    def __init__(
        self, config: dict[str, Any], model: list[Any], tokenizer: Any, rank: int, world: int, needs: Sequence[str] = ()
    ) -> None:
        self.where = here()
        self.problems, self.imports = import_problems(needs)  # before the config, which names the algorithm
        self.rank, self.world = rank, world
        self._model, self.tokenizer = model[0], tokenizer
        self.learner: RankLearner | None = None
        if not self.problems:
            self.cfg = TrainConfig.model_validate(config)
            torch.set_num_threads(max(1, int(self.cfg.learner.rank_cpus)))

    def check(self) -> dict[str, Any]:
        """Where this rank runs, the file each of the run's modules came from, and what failed to import."""
        return {"where": self.where, "imports": self.imports, "problems": self.problems}

    def address(self) -> tuple[str, int]:
        """Rank 0: the host and a free port for the group's rendezvous."""
        try:
            import ray

            host = ray.util.get_node_ip_address()
        except Exception:  # outside Ray (a test calling the class directly)
            host = "127.0.0.1"
        with socket.socket() as s:
            s.bind(("", 0))
            return host, s.getsockname()[1]

    def setup(self, master: str, port: int) -> dict[str, Any]:
        """Join the process group (gloo on CPU, NCCL with a GPU; collectives time out after ``learner.timeout``)
        and build the DeepSpeed engine. Returns the pid, the device and whether DeepSpeed loaded its CPU op."""
        import deepspeed

        spec = self._model
        if not isinstance(spec, dict):  # an ObjectRef (nested refs are not resolved by Ray)
            import ray

            spec = ray.get(spec, timeout=self.cfg.learner.start_timeout)
        policy = rebuild(spec)
        gpu = self.cfg.learner.rank_gpus > 0 and torch.cuda.is_available()
        if not gpu:
            skip_cpu_op()
        os.environ.update(
            MASTER_ADDR=master,
            MASTER_PORT=str(port),
            RANK=str(self.rank),
            LOCAL_RANK="0",
            WORLD_SIZE=str(self.world),
            LOCAL_WORLD_SIZE="1",
        )
        deepspeed.init_distributed(
            "nccl" if gpu else "gloo",
            auto_mpi_discovery=False,
            timeout=datetime.timedelta(seconds=self.cfg.learner.timeout),
        )
        if gpu:
            policy = policy.to("cuda")
        cfg = self.cfg
        self.learner = RankLearner(
            get_algorithm(cfg.algorithm),
            policy,
            self.tokenizer,
            self.rank,
            self.world,
            optim=cfg.optim,
            rollout=cfg.rollout,
            learner=cfg.learner,
            seed=cfg.seed,
        )
        self._model = None
        shm = getattr(deepspeed.comm.comm.cdb, "shm_comm_op", None) is not None  # DeepSpeed's CPU op loaded
        return {"rank": self.rank, "pid": os.getpid(), "device": str(self.learner.device), "shm_op": shm}

    def _ready(self) -> RankLearner:
        if self.learner is None:
            raise RuntimeError(f"learner rank {self.rank} is not set up (setup() was not called)")
        return self.learner

    def update(self, trajectories: list[Trajectory]) -> tuple[dict[str, float], list[dict[str, Any]] | None]:
        """One training step on the whole batch (this rank trains its share). Rank 0 also returns, per trained
        trajectory, the metadata the learner wrote (advantages, learner log-probabilities)."""
        learner = self._ready()
        metrics = learner.update(trajectories)
        metrics["lr"] = learner.lr
        if learner.ref_model is not None:
            metrics["reference_share"] = learner.reference_share()
        if self.rank != 0:
            return metrics, None
        keys = ("advantages", "learner_logprobs", "learner_logprobs_after")
        return metrics, [{k: t.metadata[k] for k in keys if k in t.metadata} for t in _trainable(trajectories)]

    def export(self, bucket_mb: float) -> dict[str, Any] | None:
        """The policy's full weights on rank 0 (None elsewhere), as :func:`~turnrl.rl.placement.parameters.to_shared`
        arrays (readers get them from the object store without a copy). Under ZeRO-3 every rank must call this:
        partitions are gathered in buckets of about ``bucket_mb``, in the same order on every rank."""
        model = self._ready().policy
        if is_lora(model):
            return self._export_adapter(model)
        keys = list(model.state_dict().keys())
        if self.cfg.learner.zero_stage < 3:
            return (
                to_shared({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
                if self.rank == 0
                else None
            )
        out: dict[str, torch.Tensor] = {}
        for names, tensor in full_parameters(model, True, bucket_mb):
            if self.rank == 0:
                copy = tensor.to("cpu", copy=True)
                out.update((k, copy) for k in names)  # tied names share one copy
        if self.rank != 0:
            return None
        buffers = dict(model.named_buffers())
        out.update((k, buffers[k].detach().to("cpu", copy=True)) for k in keys if k not in out and k in buffers)
        return to_shared({k: out[k] for k in keys})

    def _export_adapter(self, model: Any) -> dict[str, Any] | None:
        """A LoRA policy's adapters alone (what rollout workers and the driver's copy load), gathered under ZeRO-3
        (every rank calls this)."""
        gathered: Any = contextlib.nullcontext()
        if self.cfg.learner.zero_stage == 3:
            import deepspeed

            gathered = deepspeed.zero.GatheredParameters(
                [p for p in model.parameters() if p.requires_grad], modifier_rank=None
            )
        with gathered:  # copies: the gathered tensors are released on exit
            state = {k: v.clone() for k, v in adapter_state(model).items()} if self.rank == 0 else None
        return to_shared(state) if state is not None else None

    # ---- weights over NCCL to vLLM workers (learner.weight_sync: nccl; GPU only) ----

    def open_weight_sync(self, host: str, port: int, world_size: int, workers: list[Any]) -> int:
        """Join the NCCL group with the vLLM rollout workers (rank 0 sends; every rank takes part in the gathers).
        Blocks until the workers have joined; returns this rank."""
        from turnrl.rl.placement.weight_sync import open_trainer

        learner = self._ready()
        self._sync = open_trainer(
            learner.policy,
            self.cfg.learner.zero_stage == 3,
            self.cfg.learner.export_bucket_mb,
            self.rank,
            host,
            port,
            world_size,
            workers,
        )
        return self.rank

    def send_weights(self, version: int) -> int:
        """Stream the current weights to the vLLM workers (bucketed NCCL broadcasts; the workers load them with the
        model's ``load_weights`` and reset the prefix cache); rank 0 then tells them the version."""
        if getattr(self, "_sync", None) is None:
            raise RuntimeError(f"learner rank {self.rank}: open_weight_sync() was not called")
        self._sync.send(version)
        return version

    def score(self, input_ids: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
        """The policy's log-probability of each token given the ones before (position 0: 0.0). Every rank calls
        this under ZeRO-3 (the forward gathers parameters)."""
        from turnrl.rl.core.forward import sequence_logprobs

        return sequence_logprobs(self._ready().model, input_ids, temperature)

    # ---- checkpoints ----

    def save(self, folder: str, tag: str) -> str:
        """Write DeepSpeed's sharded checkpoint ``folder/tag`` (every rank writes its shard) with the scheduler,
        version and update count; rank 0 then removes older tags."""
        import torch.distributed as dist

        learner = self._ready()
        learner.engine.save_checkpoint(
            folder,
            tag=tag,
            client_state={
                "scheduler": learner.scheduler.state_dict(),
                "version": learner.version,
                "updates": learner.updates,
            },
        )
        dist.barrier()
        if self.rank == 0:
            for old in Path(folder).iterdir():
                if old.is_dir() and old.name != tag:
                    shutil.rmtree(old, ignore_errors=True)
        return tag

    def load(self, folder: str, tag: str) -> dict[str, int]:
        """Restore :meth:`save`'s checkpoint (parameters, optimizer, scheduler, version)."""
        learner = self._ready()
        path, client = learner.engine.load_checkpoint(
            folder, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if path is None:
            raise FileNotFoundError(f"learner rank {self.rank}: no DeepSpeed checkpoint {tag!r} in {folder}")
        learner.scheduler.load_state_dict(client["scheduler"])
        learner.version, learner.updates = client["version"], client["updates"]
        return {"version": learner.version, "updates": learner.updates}

    def close(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
