"""Weights from the learner group to vLLM rollout workers over NCCL (``learner.weight_sync: nccl``; GPUs only).

Built on vLLM's own weight-transfer API (vLLM ≥ 0.32: ``weight_transfer_config={"backend": "nccl"}`` on the
engine, :class:`vllm.distributed.weight_transfer.nccl_engine.NCCLTrainerWeightTransferEngine` on the trainer).
Rank 0 of the learner group is NCCL rank 0 of a transfer group with the engine's workers; it drives the workers
through their Ray actors (:class:`vllm.distributed.weight_transfer.clients.RayVLLMWeightSyncClient` against the
methods of :class:`~turnrl.rl.placement.worker.RolloutWorker`) and broadcasts the parameters in packed buffers;
the workers load them with the model's ``load_weights`` and reset their prefix caches. Every rank iterates the
same parameters (:class:`_ZeroSource`: ZeRO-3 partitions gathered bucket by bucket, in lockstep), only rank 0
sends. One vLLM engine per run (``ray.rollout_workers: 1``; tensor parallelism inside it is vLLM's business):
vLLM's client gives every engine the same ranks in the transfer group.

This module imports vLLM only when called. It has not run on a GPU in this project yet (see docs/SCALING.md); the
object-store path (the default ``weight_sync: object_store``) is the tested one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from turnrl.rl.placement.parameters import full_parameters, parameter_meta


def _source(policy: torch.nn.Module, zero3: bool, bucket_mb: float) -> Any:
    """A vLLM ``WeightSource`` over the policy (full tensors; ZeRO-3 partitions gathered)."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class _ZeroSource(WeightSource):
        def metadata(self) -> list[Any]:
            return [ParamMeta(name, dtype, shape) for name, dtype, shape in parameter_meta(policy)]

        def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
            for names, tensor in full_parameters(policy, zero3, bucket_mb):
                yield names[0], tensor

    return _ZeroSource()


class TrainerSync:
    """One learner rank's end of the transfer group: :meth:`send` streams the weights (rank 0) or takes part in
    the gathers (other ranks)."""

    def __init__(self, engine: Any, rank: int, workers: list[Any]) -> None:
        self.engine, self.rank, self.workers = engine, rank, workers

    def send(self, version: int) -> None:
        self.engine.send_weights()
        if self.rank == 0:  # the workers' own version counter, which the runner checks before each lease
            import ray

            ray.get([w.update_weight_version.remote(str(version)) for w in self.workers])


def open_trainer(
    policy: torch.nn.Module,
    zero3: bool,
    bucket_mb: float,
    rank: int,
    host: str,
    port: int,
    world_size: int,
    workers: list[Any],
) -> TrainerSync:
    """Join the transfer group as learner rank ``rank`` (rank 0 opens it at ``host:port`` and waits for the
    workers' ``world_size - 1`` engine ranks)."""
    from vllm.distributed.weight_transfer.clients import RayVLLMWeightSyncClient
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

    info = NCCLTrainerInitInfo(master_address=host, master_port=port, world_size=world_size, rank=rank)
    client = RayVLLMWeightSyncClient(workers if rank == 0 else [])
    engine = NCCLTrainerWeightTransferEngine.trainer_init(info, client=client, source=_source(policy, zero3, bucket_mb))
    return TrainerSync(engine, rank, workers)
