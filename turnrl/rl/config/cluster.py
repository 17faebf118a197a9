"""Where a run runs (docs/cluster.md): the ``ray`` section (:class:`RayConfig`: the Ray placement's rollout workers
and the cluster they start or join) and the ``learner`` section (:class:`LearnerConfig`: the learner in the driver's
process, or a group of DeepSpeed ranks on Ray), with what both declare to a cluster the run did not start: the custom
resources its rollout workers and learner ranks ask for (``ray.worker_resources``, ``learner.rank_resources``: checked
here by :func:`check_resources`), and the code and packages Ray ships to every node around them
(``ray.runtime_env``: :class:`RuntimeEnvConfig`). The sections about the training itself are in
:mod:`turnrl.rl.config.sections`; the placement reads these (:mod:`turnrl.rl.placement.nodes`,
:mod:`turnrl.rl.placement.shipping`).

Only the form is checked here: a worker or rank validates the run's config again on its own node, where the
driver's folders need not exist, so whether ``working_dir`` is a folder is the driver's check, made when the run
starts.

Its namesake :mod:`turnrl.rl.placement.cluster` is the same concept a layer up: the cluster these sections describe,
connected and checked.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from turnrl.lora import LoraConfig

#: resources a config names through their own keys (``worker_cpus``, ``worker_gpus``, ``rank_cpus``, ``rank_gpus``)
#: or that Ray accounts for by itself
RESERVED = {"CPU": "cpus", "GPU": "gpus", "memory": None, "object_store_memory": None}


def check_resources(resources: dict[str, float], key: str) -> dict[str, float]:
    """``resources`` if every name is a custom resource and every amount one Ray can grant (above 0; a whole number
    above 1), else a ValueError that names ``key`` and what to write instead."""
    for name, amount in resources.items():
        if not name or name != name.strip():
            raise ValueError(f"{key}: resource name {name!r} is empty or has surrounding spaces")
        if name in RESERVED:
            instead = RESERVED[name]
            hint = (
                f"set {key.rsplit('_', 1)[0]}_{instead} instead"
                if instead
                else "Ray accounts for it itself; name a custom resource of your nodes"
            )
            raise ValueError(f"{key}: {name!r} is not a custom resource: {hint}")
        if not amount > 0:
            raise ValueError(f"{key}: {name} must be more than 0, got {amount}")
        if amount > 1 and amount != int(amount):
            raise ValueError(f"{key}: {name}={amount}: Ray grants amounts above 1 in whole units only")
    return resources


class RuntimeEnvConfig(BaseModel):
    """Your project's code and packages on every node (Ray's runtime environment around each rollout worker and
    learner rank): an environment, verifier or algorithm module that lives in your project folder, installed on no
    node, imports there. Before the first step every worker and rank imports what the run names (the environment's
    module, its entry point's, a plug-in algorithm's) and a failure is an error naming the node and the import
    (docs/cluster.md#shipping-your-code)."""

    model_config = ConfigDict(extra="forbid")
    working_dir: str | None = Field(
        None,
        description=(
            "a folder (relative: to the folder `turnrl train` runs in) uploaded to every node, where each worker starts "
            "and imports from (its relative paths resolve there); or the URI of a zip (s3://, gs://, https://)"
        ),
    )
    py_modules: list[str] = Field(
        default_factory=list,
        description=(
            "module folders (packages), single .py files or .whl files uploaded and put on every worker's sys.path, or "
            "their URIs"
        ),
    )
    pip: list[str] | str | None = Field(
        None,
        description=(
            "packages pip installs for the workers on every node (a list of requirements, or a requirements.txt path); "
            "the node's own packages stay visible"
        ),
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict,
        description=("environment variables of every worker and rank (on top of the thread counts turnrl sets)"),
    )
    excludes: list[str] = Field(
        default_factory=list,
        description=("gitignore-style patterns left out of the working_dir upload (data, checkpoints, .venv, runs/)"),
    )

    @field_validator("py_modules")
    @classmethod
    def _no_empty(cls, paths: list[str]) -> list[str]:
        if any(not p.strip() for p in paths):
            raise ValueError("ray.runtime_env.py_modules: an entry is empty")
        return paths


class RayConfig(BaseModel):
    """The Ray placement: rollout workers as Ray actors (``placement: ray``)."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(
        None,
        description="'auto' or HOST:PORT joins a running cluster (its workers import "
        "what the nodes have and `runtime_env` ships; docs/cluster.md); None starts a local "
        "one, whose workers see the driver's sys.path",
    )
    rollout_workers: int = Field(2, ge=1)
    worker_cpus: float = Field(
        0.5,
        gt=0,
        description="CPUs reserved per worker (fractional on small machines); a "
        "worker runs max(1, int(worker_cpus)) torch threads",
    )
    num_cpus: float | None = Field(None, gt=0, description="CPUs of a local cluster (default: the machine's)")
    max_restarts: int = Field(2, ge=0, description="restarts of a worker that dies before the run fails")
    start_timeout: float = Field(120.0, gt=0, description="seconds a worker may take to start (load the model)")
    episode_timeout: float = Field(
        600.0,
        gt=0,
        description="seconds a worker may go without finishing an episode before it is restarted and its jobs re-run",
    )
    connect_timeout: float = Field(30.0, gt=0, description="seconds to reach the cluster at `address`")
    rollout_backend: Literal["hf", "vllm"] = Field(
        "hf",
        description="what generates in a worker: the policy in "
        "transformers (CPU or GPU), or a vLLM engine (GPU; extra gpu)",
    )
    worker_gpus: float = Field(
        0.0, ge=0, description="GPUs per rollout worker (fractional to share one GPU with a learner rank)"
    )
    vllm: dict[str, Any] = Field(
        default_factory=dict,
        description="vllm.LLM options of vLLM workers, e.g. "
        "{gpu_memory_utilization: 0.3, dtype: bfloat16, enforce_eager: true}",
    )
    vllm_inflight_updates: bool = Field(
        True,
        description="vLLM workers take new weights while requests run "
        "(pause, load, resume: nothing is dropped, each token records the version "
        "that sampled it), where the installed vLLM can (>= 0.32); false: a load "
        "waits for the running generation call to finish",
    )
    worker_resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "custom resources each rollout worker asks for, e.g. {rollout: 1}: workers go only to nodes started with "
            "them (`ray start --resources='{\"rollout\": 2}'`); CPUs and GPUs are worker_cpus and worker_gpus"
        ),
    )
    placement_timeout: float = Field(
        60.0,
        gt=0,
        description=(
            "seconds a joined cluster may take to have room for the rollout workers and learner ranks (nodes still "
            "joining, actors still leaving) before the run is refused, naming the resource that is short; without "
            "`address` (a cluster of this process) 5 s; also how long a run whose rollout workers were all lost with "
            "their nodes waits for a node that can hold one to join"
        ),
    )
    head_timeout: float = Field(
        30.0,
        gt=0,
        description=(
            "seconds the cluster's head may stay silent before the run stops with an error that says so (keep it under "
            "Ray's gcs_rpc_server_reconnect_timeout_s, 60 s, after which Ray ends the driver without a word)"
        ),
    )
    runtime_env: RuntimeEnvConfig | None = Field(
        None,
        description=(
            "your project's code and packages shipped to every node (Ray's runtime_env): working_dir, py_modules, "
            "pip, env_vars, excludes"
        ),
    )

    @field_validator("worker_resources")
    @classmethod
    def _worker_resources(cls, value: dict[str, float]) -> dict[str, float]:
        return check_resources(value, "ray.worker_resources")


class LearnerConfig(BaseModel):
    """Where the learner runs: in the driver's process (``torch``), or as a group of data-parallel DeepSpeed ranks
    on Ray (``deepspeed``; needs ``placement: ray`` and the ``deepspeed`` package)."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["torch", "deepspeed"] = "torch"
    ranks: int = Field(1, ge=1, description="data-parallel ranks (Ray actors), one DeepSpeed process group")
    zero_stage: int = Field(
        2,
        ge=0,
        le=3,
        description="ZeRO stage: 0 = plain data parallel, 1 optimizer states, "
        "2 + gradients, 3 + parameters partitioned over the ranks",
    )
    rank_cpus: float = Field(
        0.5, gt=0, description="CPUs reserved per rank; a rank runs max(1, int(rank_cpus)) torch threads"
    )
    rank_gpus: float = Field(0.0, ge=0, description="GPUs per rank (NCCL when > 0, gloo on CPU otherwise)")
    timeout: float = Field(
        600.0,
        gt=0,
        description="seconds any collective or any wait on a rank may take before "
        "it is an error that names the rank and the operation",
    )
    export_bucket_mb: float = Field(
        256.0, gt=0, description="weights are gathered and published in buckets of about this size, never all at once"
    )
    start_timeout: float = Field(
        300.0,
        gt=0,
        description="seconds the ranks may take to start (import DeepSpeed, load the model, join the process group)",
    )
    weight_sync: Literal["object_store", "nccl"] = Field(
        "object_store",
        description="how new weights reach the rollout workers: rank 0's CPU copy through Ray's "
        "object store (any backend), or NCCL broadcasts from rank 0 into one vLLM engine (GPU, "
        "ray.rollout_backend: vllm, ray.rollout_workers: 1)",
    )
    lora: LoraConfig | None = Field(
        None, description="train low-rank adapters (peft) instead of the whole policy; checkpoints hold the adapters"
    )
    rank_resources: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "custom resources each learner rank asks for, e.g. {learner: 1}: ranks go only to nodes started with them; "
            "CPUs and GPUs are rank_cpus and rank_gpus"
        ),
    )

    @field_validator("rank_resources")
    @classmethod
    def _rank_resources(cls, value: dict[str, float]) -> dict[str, float]:
        return check_resources(value, "learner.rank_resources")

    @model_validator(mode="after")
    def _ranks_need_deepspeed(self) -> LearnerConfig:
        if self.backend == "torch" and self.ranks > 1:
            raise ValueError(
                f"learner.ranks={self.ranks} needs learner.backend=deepspeed (the torch learner is one process)"
            )
        return self
