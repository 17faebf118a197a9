"""The Ray cluster a placement runs on: joining or starting it (and what to do about a token it refuses), whether its
head still answers, stopping actors, and the error every Ray placement raises (:class:`RayPlacementError`). Shared by
the rollout workers (:mod:`turnrl.rl.placement.ray`), their T-PPO windows (:mod:`turnrl.rl.placement.ray_windows`)
and the learner group (:mod:`turnrl.rl.placement.learner_group`).

A driver whose cluster lost its head is ended by Ray without a word: at once when it writes to the object store of
the head's node (``ray.put``), otherwise after about a minute (Ray's ``gcs_rpc_server_reconnect_timeout_s``).
:func:`check_head` — before every ``ray.put`` of the placement (:func:`put`) and whenever the placement waits with
nothing arriving — turns that into :class:`HeadLostError`, which says what happened and how to resume.

Its namesake :mod:`turnrl.rl.config.cluster` is the same concept a layer down: the ``ray`` section's options for
this cluster.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any


class RayPlacementError(RuntimeError):
    """The Ray placement cannot go on (unreachable cluster, unplaceable or dead workers); the message says why."""


class HeadLostError(RayPlacementError):
    """The cluster's head stopped answering for ``ray.head_timeout`` seconds: the run cannot go on (resume it)."""


def ray_module() -> Any:
    """The ``ray`` package, or a :class:`RayPlacementError` that says how to install it."""
    try:
        import ray
    except ImportError as e:  # pragma: no cover — ray is a dependency; a broken install says so
        raise RayPlacementError("placement: ray needs the `ray` package: pip install ray") from e
    return ray


#: the connection :func:`connect` made, while it lasts: its Ray job's id and runtime environment (empty: none)
_CONNECTION: dict[str, Any] = {}


#: Ray's settings for a cluster this process starts: no idle workers started ahead for its driver (one per CPU):
#: every rollout worker and rank starts in a runtime environment of its own (its thread counts), which no prestarted
#: worker can serve, so they would only take CPU — their start, which ray.init waits for, then polling until Ray stops
#: idle workers past its soft limit. The tests' clusters start with the same.
LOCAL_SYSTEM_CONFIG: dict[str, Any] = {"prestart_worker_first_driver": False}


def connect(
    address: str | None, num_cpus: float | None, timeout: float, runtime_env: dict[str, Any] | None = None
) -> bool:
    """Join the cluster at ``address`` ('auto' or HOST:PORT) or start a local one, as a Ray job whose every worker
    starts in ``runtime_env`` (the user's code shipped: Ray uploads local folders only for a whole job); returns
    whether this call connected (the caller's ``stop`` then disconnects, and stops a local cluster it started).
    Where this process is connected already, nothing changes (:func:`ships_runtime_env` says whether it was this
    module, with which runtime environment).

    Raises:
        RayPlacementError: nothing answers at ``address`` within ``timeout`` seconds, no cluster runs for 'auto', the
            cluster refuses this driver (with what to do about its token), or Ray cannot ship ``runtime_env``.
    """
    ray = ray_module()
    if address not in (None, "auto", "local"):
        host, _, port = address.rpartition(":")
        host = host.removeprefix("ray://") or address
        try:
            with socket.create_connection((host, int(port) if port.isdigit() else 6379), timeout=min(timeout, 5.0)):
                pass
        except (OSError, ValueError) as e:
            raise RayPlacementError(
                f"cannot reach a Ray cluster at ray.address={address!r} ({e}); start one there "
                "with `ray start --head`, fix the address, or drop ray.address to start a "
                "local cluster"
            ) from e
    if ray.is_initialized():
        return False
    try:
        if address is None or address == "local":  # a cluster of its own, whatever RAY_ADDRESS or the last
            # `ray start` on this machine (/tmp/ray/ray_current_cluster) say; the CPUs this process may use
            ray.init(
                address="local",
                num_cpus=num_cpus or len(os.sched_getaffinity(0)),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                runtime_env=runtime_env,
                _system_config=LOCAL_SYSTEM_CONFIG,
            )
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False, runtime_env=runtime_env)
    except ConnectionError as e:
        raise RayPlacementError(
            f"could not join a Ray cluster at ray.address={address!r}: {e}. {auth_hint()} "
            "Start one with `ray start --head`, or drop ray.address to start a local "
            "cluster"
        ) from e
    except (ValueError, TypeError, OSError) as e:  # the runtime environment: a package too large, a bad field
        if ray.is_initialized():
            ray.shutdown()
        raise RayPlacementError(f"Ray could not ship ray.runtime_env: {type(e).__name__}: {e}") from e
    _CONNECTION.update(runtime_env=runtime_env, job=ray.get_runtime_context().get_job_id())
    return True


#: per head address, since when it has not answered (time.monotonic); absent while it answers
_SILENT: dict[str, float] = {}


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def check_head(timeout: float) -> None:
    """Return once the cluster's head answers (a connection to its GCS port); while it does not, ask again every
    half second until it has been silent for ``timeout`` seconds (``ray.head_timeout``: a head with GCS fault
    tolerance may come back), then raise :class:`HeadLostError`. Nothing to check outside Ray."""
    ray = ray_module()
    if not ray.is_initialized():
        return
    try:
        address = ray.get_runtime_context().gcs_address
    except Exception:  # not connected after all
        return
    while not _answers(address):
        since = _SILENT.setdefault(address, time.monotonic())
        if time.monotonic() - since >= timeout:
            raise HeadLostError(
                f"lost the Ray cluster's head: nothing has answered at {address} (its GCS) for {timeout:g}s "
                "(ray.head_timeout), so the run stops here — Ray would end this process without a word. Start the "
                "head (and its nodes) again and run the same command: it resumes from the last checkpoint "
                "(docs/cluster.md#node-loss)"
            )
        time.sleep(0.5)
    _SILENT.pop(address, None)


def put(value: Any, head_timeout: float) -> Any:
    """``ray.put(value)`` once the head answers (:func:`check_head`): a driver that writes to the object store of a
    head that is gone is ended by Ray on the spot, without an error of its own."""
    check_head(head_timeout)
    return ray_module().put(value)


def ships_runtime_env() -> bool:
    """Whether this process's connection to Ray is :func:`connect`'s, whose job carries the run's runtime
    environment (False: the process called ``ray.init`` itself)."""
    ray = ray_module()
    return ray.is_initialized() and _CONNECTION.get("job") == ray.get_runtime_context().get_job_id()


def auth_hint() -> str:
    """What this driver does about Ray's token authentication, for an error joining a cluster: a cluster started
    with a token (the default of `ray start --head` where a token exists, and of Ray 2.60's local clusters) refuses
    a driver that sends none or another one (docs/cluster.md#token-authentication)."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if (mode or "").lower() != "token":
        return (
            f"RAY_AUTH_MODE is {mode or 'unset'} here, so no token is sent: a cluster started with token "
            "authentication refuses this driver — set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to a file "
            "holding the head's token (or RAY_AUTH_TOKEN to the token)."
        )
    source = (
        "RAY_AUTH_TOKEN"
        if os.environ.get("RAY_AUTH_TOKEN")
        else f"RAY_AUTH_TOKEN_PATH={os.environ['RAY_AUTH_TOKEN_PATH']}"
        if os.environ.get("RAY_AUTH_TOKEN_PATH")
        else "~/.ray/auth_token"
    )
    return f"The token this driver sends comes from {source}: is it the head's?"


def stop(actors: Sequence[Any], shutdown: bool) -> None:
    """Kill ``actors`` (never restarted; ones already gone are skipped) and, with ``shutdown``, leave the cluster
    (stopping it where this process started it)."""
    ray = ray_module()
    if not ray.is_initialized():  # gone already: a call below would start a new local cluster (Ray's auto-init)
        return
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # already gone
            pass
    if shutdown and ray.is_initialized():
        ray.shutdown()
        _CONNECTION.clear()


def cause(e: BaseException) -> str:
    """An exception in one line (its type and its last line), for errors about workers and ranks."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"
