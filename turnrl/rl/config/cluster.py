"""What a run on a Ray cluster it did not start declares (docs/cluster.md): the custom resources its rollout workers
and learner ranks ask for (``ray.worker_resources``, ``learner.rank_resources``: checked here by
:func:`check_resources`), and the code and packages Ray ships to every node around them (``ray.runtime_env``:
:class:`RuntimeEnvConfig`). :mod:`turnrl.rl.config.sections` uses both; the placement reads them
(:mod:`turnrl.rl.placement.nodes`, :mod:`turnrl.rl.placement.shipping`).

Only the form is checked here: a worker or rank validates the run's config again on its own node, where the
driver's folders need not exist, so whether ``working_dir`` is a folder is the driver's check, made when the run
starts.

Its namesake :mod:`turnrl.rl.placement.cluster` is the same concept a layer up: the cluster this section describes,
connected and checked.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
