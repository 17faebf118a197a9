"""The user's code on the cluster's nodes (docs/cluster.md#shipping-your-code): the Ray runtime environment that
rollout workers and learner ranks start in, and the imports each of them checks before the first step.

:func:`job_env` turns ``ray.runtime_env`` (working_dir, py_modules, pip, env_vars, excludes) into Ray's
``runtime_env`` of the run's Ray job (Ray uploads local folders for a whole job only: the driver connects with it,
:func:`turnrl.rl.placement.cluster.connect`), local folders checked and made absolute on the driver;
:func:`actor_env` adds each actor's own variables. A cluster of this process (``ray.address`` unset) also hands the
driver's ``sys.path`` to its workers, which share this machine's files; a joined cluster does not — its nodes
import what they have installed and what ``runtime_env`` ships, so a module found only through the driver's own
folders fails on the first try, not on another machine.

:func:`needed_modules` names what the run imports outside turnrl (the environment's module, its entry point's, a
plug-in algorithm's); each worker and rank imports them first (:func:`import_problems`) and the driver refuses the
run with :func:`problem_text` — the node, the module and the import that failed — before any step.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.rl.config import RayConfig
from turnrl.rl.placement.cluster import RayPlacementError, ships_runtime_env


def _is_uri(path: str) -> bool:
    return "://" in path


def _local(path: str, key: str, kinds: Sequence[str]) -> str:
    """``path`` made absolute (relative: to the current folder), or a RayPlacementError when it is not one of
    ``kinds`` (``dir``, ``.py``, ``.whl``); a URI as it is."""
    if _is_uri(path):
        return path
    p = Path(path).expanduser().resolve()
    ok = (p.is_dir() and "dir" in kinds) or (p.is_file() and p.suffix in kinds)
    if not ok:
        what = " or ".join("a folder" if k == "dir" else f"a {k} file" for k in kinds)
        raise RayPlacementError(
            f"{key}={path!r}: {p} is not {what} (relative paths are from the current folder, "
            f"{Path.cwd()}; a remote zip needs its URI, e.g. s3://bucket/project.zip)"
        )
    return str(p)


def job_env(ray: RayConfig) -> dict[str, Any] | None:
    """Ray's ``runtime_env`` for the run's Ray job from the ``ray`` section's ``runtime_env`` (None: not set): local
    folders and files checked and made absolute, URIs as they are.

    Raises:
        RayPlacementError: a local ``working_dir``, ``py_modules`` entry or requirements file that does not exist.
    """
    spec = ray.runtime_env
    if spec is None:
        return None
    out: dict[str, Any] = {}
    if spec.working_dir:
        out["working_dir"] = _local(spec.working_dir, "ray.runtime_env.working_dir", ("dir",))
    if spec.py_modules:
        out["py_modules"] = [_local(p, "ray.runtime_env.py_modules", ("dir", ".py", ".whl")) for p in spec.py_modules]
    if spec.pip:
        out["pip"] = spec.pip if isinstance(spec.pip, list) else _local(spec.pip, "ray.runtime_env.pip", (".txt",))
    if spec.excludes:
        out["excludes"] = list(spec.excludes)
    if spec.env_vars:
        out["env_vars"] = dict(spec.env_vars)
    return out


def actor_env(ray: RayConfig, env_vars: dict[str, str], job: dict[str, Any] | None) -> dict[str, Any]:
    """The ``runtime_env`` of each worker or rank, on top of its job's: ``env_vars`` (turnrl's thread counts) and,
    on a cluster of this process (the ``ray`` section's ``address`` unset), the driver's ``sys.path``. Where the process joined Ray
    by itself (``ray.init`` before the run), the job carries nothing of the run's: ``job`` (:func:`job_env`) goes
    here instead, which Ray allows for all but local folders.

    Raises:
        RayPlacementError: ``job`` ships local folders but the job is not this run's.
    """
    variables = dict(env_vars)
    if ray.address is None:  # this machine's cluster: its workers see the modules the driver sees
        variables["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out: dict[str, Any] = {}
    if job and not ships_runtime_env():
        local = [p for p in [job.get("working_dir"), *job.get("py_modules", [])] if p and not _is_uri(p)]
        if local:
            raise RayPlacementError(
                f"ray.runtime_env ships {', '.join(local)}, which Ray uploads for a whole job "
                "only, and this process joined Ray by itself before the run (ray.init): pass "
                "the same runtime_env to that ray.init, or let the run connect (ray.address)"
            )
        out = {k: v for k, v in job.items() if k != "env_vars"}
        variables = {**job.get("env_vars", {}), **variables}
    out["env_vars"] = variables
    return out


def needed_modules(algorithm: str, env_id: str | None, entry_point: Any = None) -> list[str]:
    """The modules outside turnrl a worker or rank imports for this run: a plug-in algorithm's (``algorithm``, the
    run's ``algorithm.name``) and, with an ``env_id`` (None for a rank, which makes no environment), the
    environment's (``module:Name-v0``, those an adapter's id names: ``trl:MODULE:CLASS``'s MODULE, or a registered
    multi-agent id's entry's) and its registered entry point's (``entry_point``: a ``"module:attr"`` string or the callable)."""
    from turnrl.envs.multiagent.registry import MULTI_AGENT_ENVS
    from turnrl.envs.registry import adapter_of
    from turnrl.rl.algorithms import algorithm_class

    names = [algorithm_class(algorithm).__module__]
    env_id = str(env_id or "")
    adapter = adapter_of(env_id) if env_id else None
    if env_id in MULTI_AGENT_ENVS:  # a registered game: its entry's module
        entry = MULTI_AGENT_ENVS.entries[env_id]
        names.append(entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "") or "")
    elif adapter is not None:  # trl:MODULE:CLASS, pettingzoo:MODULE:FACTORY, …: the modules its adapter names
        names += adapter.modules(env_id)
    elif ":" in env_id:  # module:Name-v0
        names.append(env_id.partition(":")[0])
    if isinstance(entry_point, str):
        names.append(entry_point.partition(":")[0])
    elif entry_point is not None:
        names.append(getattr(entry_point, "__module__", None) or "")
    own = ("turnrl", "gymnasium", "__main__", "builtins", "")
    return list(dict.fromkeys(n for n in names if n.split(".")[0] not in own))


def import_problems(modules: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Import ``modules`` here (in a worker or rank, before anything else); returns the failures — each
    ``{"module", "missing", "error"}``, ``missing`` the module Python could not find (the one named, or one it
    imports) — and the file each imported module came from."""
    problems, files = [], {}
    for name in modules:
        try:
            files[name] = str(getattr(importlib.import_module(name), "__file__", None) or "(namespace)")
        except ImportError as e:
            problems.append({"module": name, "missing": e.name, "error": f"{type(e).__name__}: {e}"})
        except Exception as e:  # importing it raised: say what and where
            frames = traceback.extract_tb(e.__traceback__)
            at = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
            problems.append({"module": name, "missing": None, "error": f"{type(e).__name__}: {e}{at}"})
    return problems, files


def problem_text(what: str, where: dict[str, Any], problems: list[dict[str, Any]]) -> str:
    """The error for ``what`` (``rollout worker 1``) that could not import ``problems`` on the node ``where``."""
    node = f"node {where.get('node_ip')} ({(where.get('node_id') or '?')[:8]}, host {where.get('host')})"
    parts = []
    for p in problems:
        missing = p.get("missing")
        via = "" if missing in (None, p["module"]) else f" (it imports {missing!r}, which is not there)"
        parts.append(f"cannot import {p['module']!r}{via}: {p['error']}")
    return (
        f"{what} on {node} {'; '.join(parts)}. Ship your project's code to the nodes with ray.runtime_env "
        "(working_dir or py_modules; a missing package: pip) or install it on every node "
        "(docs/cluster.md#shipping-your-code)"
    )
