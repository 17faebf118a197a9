"""The Ray cluster a placement runs on: joining or starting it, stopping actors, free CPUs, and the error every Ray
placement raises (:class:`RayPlacementError`). Shared by the rollout workers (:mod:`turnrl.rl.placement.ray`), their
T-PPO windows (:mod:`turnrl.rl.placement.ray_windows`) and the learner group
(:mod:`turnrl.rl.placement.learner_group`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any


class RayPlacementError(RuntimeError):
    """The Ray placement cannot go on (unreachable cluster, unplaceable or dead workers); the message says why."""


def ray_module() -> Any:
    """The ``ray`` package, or a :class:`RayPlacementError` that says how to install it."""
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
    ray = ray_module()
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
    ray = ray_module()
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
    ray = ray_module()
    deadline = time.monotonic() + timeout
    while True:
        free = ray.available_resources().get("CPU", 0.0)
        if free + 1e-9 >= need or time.monotonic() > deadline:
            return free
        time.sleep(0.2)


def cause(e: BaseException) -> str:
    """An exception in one line (its type and its last line), for errors about workers and ranks."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"
