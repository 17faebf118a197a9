"""Which node holds what: the room a placement's actors need on the cluster's nodes, checked before they are asked
for, and where they landed, recorded in the run's ``placement.json`` and said on the console (docs/cluster.md).

Rollout workers (:mod:`turnrl.rl.placement.ray`) and learner ranks (:mod:`turnrl.rl.placement.learner_group`)
each ask for their CPUs, GPUs and custom resources (``ray.worker_resources``, ``learner.rank_resources``).
:func:`check_room` refuses, naming the resource, a request that no node can hold or that the cluster has no room for
within ``ray.placement_timeout`` — rather than leaving Ray to keep the actors pending for ever. :func:`here` runs
inside an actor and says where it is; :func:`record` keeps it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from turnrl.rl.placement.cluster import RayPlacementError, ray_module

logger = logging.getLogger(__name__)

RECORD = "placement.json"
_ROLES = {"rollout_workers": "rollout worker", "learner_ranks": "learner rank"}
_HIDDEN = ("memory", "object_store_memory", "node:")  # in node listings: Ray's own accounting, not what runs ask for


def demand(cpus: float, gpus: float, resources: dict[str, float]) -> dict[str, float]:
    """What one actor asks Ray for: its CPUs, its GPUs if any, and its custom resources."""
    return {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **resources}


def here() -> dict[str, Any]:
    """Where the calling actor runs: its node's id and address, its host name and process id (asked inside a Ray
    worker; outside one, the node is None)."""
    import socket

    try:
        import ray

        node_id, ip = ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()
    except Exception:  # outside Ray (a test calling the actor class directly)
        node_id, ip = None, None
    return {"node_id": node_id, "node_ip": ip, "host": socket.gethostname(), "pid": os.getpid()}


def nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes: id, address, name and total resources (Ray's own accounting left out)."""
    out = []
    for n in ray_module().nodes():
        if n.get("Alive"):
            resources = {k: v for k, v in (n.get("Resources") or {}).items() if not k.startswith(_HIDDEN)}
            out.append(
                {
                    "node_id": n["NodeID"],
                    "node_ip": n.get("NodeManagerAddress"),
                    "name": n.get("NodeName"),
                    "resources": resources,
                }
            )
    return out


def _fits(total: dict[str, float], need: dict[str, float]) -> int:
    """How many actors asking for ``need`` a node with ``total`` resources could hold at once."""
    counts = [math.floor(total.get(r, 0.0) / v + 1e-9) for r, v in need.items() if v > 0]
    return min(counts) if counts else 1 << 30


def _show(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


def shortfall(role: str, count: int, need: dict[str, float], keys: tuple[str, str]) -> str | None:
    """Why ``count`` actors of ``role`` asking ``need`` each do not fit now (None: they do)."""
    count_key, ask_key = keys
    many = f"{count} {role}{'s' if count != 1 else ''}"
    live = nodes()
    listing = "; ".join(f"{n['node_ip']} ({n['node_id'][:8]}) {_show(n['resources'])}" for n in live) or "none"
    missing = [r for r in need if r != "CPU" and not any(n["resources"].get(r, 0) > 0 for n in live)]
    if missing:
        r = missing[0]
        return (
            f"no node of the cluster has the resource {r!r} that each {role} asks for ({_show(need)}); the "
            f'nodes: {listing}. Start a node that has it (`ray start --address=HEAD --resources=\'{{"{r}": '
            f"{count:g}}}'`) or change {ask_key}"
        )
    room = sum(_fits(n["resources"], need) for n in live)
    if room < count:
        which = [r for r in need if sum(n["resources"].get(r, 0.0) for n in live) < need[r] * count]
        what = f" (its {', '.join(repr(r) for r in which)} is too little for all)" if which else ""
        return (
            f"the cluster's nodes have room for {room} of the {many} asking {_show(need)} each{what}; the "
            f"nodes: {listing}. Add nodes, or lower {count_key} or {ask_key}"
        )
    free = ray_module().available_resources()
    busy = [r for r, v in need.items() if free.get(r, 0.0) + 1e-9 < v * count]
    if busy:
        r = busy[0]
        return (
            f"{many} need {need[r] * count:g} {r!r} in all ({_show(need)} each) but only "
            f"{free.get(r, 0.0):g} is free: other actors hold the rest (`ray status` shows them); lower "
            f"{count_key} or {ask_key}"
        )
    return None


def check_room(role: str, count: int, need: dict[str, float], keys: tuple[str, str], timeout: float) -> None:
    """Return once the cluster can hold ``count`` actors of ``role`` that each ask for ``need``; asked again until
    ``timeout`` seconds have passed (nodes joining, actors leaving), then refused.

    Raises:
        RayPlacementError: what is short — a resource no node has, nodes too small or too few, or resources held by
            other actors — naming the resource, the nodes and ``keys`` (the options that set the count and what
            each asks for).
    """
    deadline = time.monotonic() + timeout
    while True:
        why = shortfall(role, count, need, keys)
        if why is None:
            return
        if time.monotonic() >= deadline:
            raise RayPlacementError(f"cannot place the {role}s: {why} (waited {timeout:g}s: ray.placement_timeout)")
        time.sleep(0.5)


def describe(role: str, entry: dict[str, Any]) -> str:
    """One line that says where a worker or rank runs and what it asked for."""
    node = entry.get("node_id") or "?"
    text = (
        f"{_ROLES[role]} {entry['index']}: node {entry.get('node_ip')} ({node[:8]}), pid {entry.get('pid')}, "
        f"asks {_show(entry.get('asks', {}))}"
    )
    if entry.get("restarts"):
        text += f", restarted {entry['restarts']}x"
    return text


def record(out_dir: str | Path, role: str, entries: list[dict[str, Any]]) -> list[str]:
    """Write where the ``role``'s actors (``rollout_workers`` or ``learner_ranks``) run into ``OUT_DIR/placement.json``
    with the cluster's nodes, log it and return its lines. The file holds one driver's run: a record from another
    process or Ray session is replaced, not merged."""
    _write(out_dir, role, entries)
    lines = [describe(role, e) for e in entries]
    for line in lines:
        logger.info("%s", line)
    return lines


def record_lost(out_dir: str | Path, lost: list[dict[str, Any]]) -> None:
    """Keep the nodes the run lost (each: its id and address, the step, the rollout workers it held) in
    ``OUT_DIR/placement.json`` as ``lost_nodes``."""
    _write(out_dir, "lost_nodes", lost)


def _write(out_dir: str | Path, key: str, value: Any) -> None:
    """Set ``key`` of this driver's ``placement.json`` (with the driver and the live nodes, as of now)."""
    ray = ray_module()
    path = Path(out_dir) / RECORD
    session = {"pid": os.getpid(), "job_id": ray.get_runtime_context().get_job_id()}
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
    if data.get("driver", {}).get("session") != session:
        data = {}
    data["driver"] = {**here(), "session": session}
    data["nodes"] = nodes()
    data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def summary(out_dir: str | Path) -> list[str]:
    """The lines of the ``placement.json`` this process wrote in ``out_dir`` (none when it wrote none): each worker
    and rank's node."""
    path = Path(out_dir) / RECORD
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if data.get("driver", {}).get("session", {}).get("pid") != os.getpid():
        return []  # an earlier run's
    return [describe(role, e) for role in _ROLES for e in data.get(role, [])]
