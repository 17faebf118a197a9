"""Loading a verifiers v1 task set (``verifiers:NAME`` where NAME exports a ``verifiers.v1.Taskset``) and playing
its episodes with verifiers' own machinery: :class:`TaskSet` holds the loaded ``Env`` (the task set, its harness and
runtime), its tasks, and the serving resources (verifiers' interception server) that every episode of the process
shares, up on the background event loop of :mod:`turnrl.envs.adapters.verifiers_bridge`.

An episode (:meth:`TaskSet.play`) is verifiers' ``Env.run_episode``: the harness runs its agent program in the
runtime (a subprocess by default), the program's model calls reach verifiers' interception server, which relays
them unchanged to an OpenAI-compatible ``base_url`` — a session of turnrl's gateway, which samples the policy and
records every call with its exact tokens — and the task's rewards score the finished trace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnrl.envs.adapters.verifiers_bridge import VerifiersEnvError, background_loop

V1_INSTALL = "pip install 'turnrl[verifiers-v1]'"
#: the verifiers releases whose v1 task-set API turnrl plays
SUPPORTED_V1 = f"verifiers 0.4's v1 task sets ({V1_INSTALL}, which installs verifiers 0.4)"
KEY_VAR = "TURNRL_GATEWAY_KEY_"  # + a digest of the key: the variable verifiers' client reads the gateway's key from


def version_of(vf: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verifiers")
    except PackageNotFoundError:
        return str(getattr(vf, "__version__", "of unknown version"))


def require_v1(name: str) -> Any:
    """``verifiers.v1`` with what this adapter uses, or a :class:`VerifiersEnvError` that names the installed
    version and the fix (verifiers 0.3 ships classic environments and an earlier, untested draft of v1)."""
    import verifiers

    version = version_of(verifiers)
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    if len(parts) == 2 and tuple(parts) < (0, 4):
        raise VerifiersEnvError(
            f"verifiers:{name} is a v1 task set (verifiers 0.4's task-set API), but the installed "
            f"verifiers {version} is the release of classic environments; turnrl plays "
            f"{SUPPORTED_V1}. One Python environment holds one verifiers release: use a second "
            "one for v1 task sets (in a turnrl checkout, scripts/setup.sh makes one: "
            "source .venv-verifiers-v1/bin/activate, then its turnrl)"
        )
    try:
        import verifiers.v1 as vf
        from verifiers.v1.utils import loaders

        for what in ("ModelContext", "SamplingConfig", "Taskset", "Env"):
            getattr(vf, what)
        for what in ("resolve_env_config", "load_environment", "default_harness_id"):
            getattr(loaders, what)
        from verifiers.v1.clients import EvalClientConfig  # noqa: F401 — present or not: the check
    except (ImportError, AttributeError) as e:
        raise VerifiersEnvError(
            f"verifiers:{name}: the installed verifiers {version} lacks the v1 API turnrl uses "
            f"({type(e).__name__}: {e}); turnrl plays {SUPPORTED_V1}: pip install "
            "'verifiers>=0.4,<0.5'"
        ) from None
    return vf


@dataclass
class TaskSet:
    """A loaded v1 task set: verifiers' ``Env`` for it, its tasks in ``load()`` order, and the serving resources of
    the process (entered on the background loop by the first episode)."""

    name: str
    env: Any
    tasks: list[Any]
    split: str | None
    serving: contextlib.AsyncExitStack | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def play(self, task: Any, base_url: str, api_key: str, model: str, timeout: float) -> Any:
        """One episode of ``task`` (verifiers' ``Env.run_episode``) whose model calls go to ``base_url`` (an
        OpenAI-compatible endpoint: a gateway session) with ``api_key``; its ``Episode``. Past ``timeout`` seconds
        the episode is cancelled (its runtime torn down) and :class:`VerifiersEnvError` says so."""
        import verifiers.v1 as vf
        from verifiers.v1.clients import EvalClientConfig

        loop = background_loop()
        self._serve(loop, timeout)
        var = KEY_VAR + hashlib.sha256(api_key.encode()).hexdigest()[:12]
        os.environ[var] = api_key  # verifiers' client reads its key from a variable; the gateway's is this one
        ctx = vf.ModelContext(
            model=model, client=EvalClientConfig(base_url=base_url, api_key_var=var), sampling=vf.SamplingConfig()
        )
        future = asyncio.run_coroutine_threadsafe(self.env.run_episode(task, ctx), loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise VerifiersEnvError(
                f"verifiers:{self.name}: the episode did not finish within timeout={timeout:g} s (cancelled)"
            ) from None

    def _serve(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        """Enter verifiers' ``Env.serving()`` (its interception server, shared tool servers) once for the process."""
        with self.lock:
            if self.serving is not None:
                return

            async def enter() -> contextlib.AsyncExitStack:
                stack = contextlib.AsyncExitStack()
                await stack.enter_async_context(self.env.serving())
                return stack

            future = asyncio.run_coroutine_threadsafe(enter(), loop)
            try:
                self.serving = future.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise VerifiersEnvError(
                    f"verifiers:{self.name}: its serving resources (verifiers' interception "
                    f"server) did not start within {timeout:g} s"
                ) from None


_cache: dict[str, TaskSet] = {}
_cache_lock = threading.Lock()


def load_taskset(
    name: str,
    taskset_args: dict[str, Any],
    *,
    harness: str | dict[str, Any] | None = None,
    runtime: dict[str, Any] | None = None,
    num_tasks: int | None = None,
    search: Sequence[str | Path] = (),
) -> TaskSet:
    """The v1 task set ``name`` with its config's fields ``taskset_args`` (``--env.taskset.*`` in verifiers' own
    command line), played by ``harness`` (an id or a harness config; default: the task set's own harness, else
    verifiers' ``bash``) in ``runtime`` (default: ``{"type": "subprocess"}``, a process on this machine); loaded
    once per process for the same arguments.

    Raises:
        VerifiersEnvError: verifiers is not a release whose v1 API turnrl plays, the settings are not valid, the task
            set fails to load, or it is infinite and ``num_tasks`` is not set.
    """
    require_v1(name)
    from pydantic import ValidationError
    from verifiers.v1.utils.loaders import (
        default_harness_id,
        load_environment,
        resolve_env_config,
    )

    for folder in [*(str(Path(f).resolve()) for f in search), str(Path.cwd())]:
        if folder not in sys.path:
            sys.path.append(folder)
    if isinstance(harness, str):
        harness = {"id": harness}
    agent: dict[str, Any] = {"runtime": dict(runtime or {"type": "subprocess"})}
    try:
        if harness is not None:
            agent["harness"] = {"id": default_harness_id(name), **harness}
        raw = {"taskset": {"id": name, **taskset_args}, "agent": agent}
        key = json.dumps([raw, num_tasks], sort_keys=True, default=repr)
        with _cache_lock:
            if key in _cache:
                return _cache[key]
            config = resolve_env_config(raw)
            env = load_environment(config)
            taskset = env.taskset
            if num_tasks is not None:
                taskset = taskset.take(num_tasks)
            elif not taskset.bounded:
                raise VerifiersEnvError(
                    f"verifiers:{name} is an infinite task set: say how many of its tasks to pose with num_tasks"
                )
            tasks = list(taskset)
    except VerifiersEnvError:
        raise
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:5])
        raise VerifiersEnvError(f"verifiers:{name}: its settings are not valid: {problems}") from None
    except Exception as e:  # the task set's own code and verifiers' loader: say it in one line
        raise VerifiersEnvError(f"verifiers:{name}: loading the v1 task set failed: {type(e).__name__}: {e}") from None
    if not tasks:
        raise VerifiersEnvError(f"verifiers:{name} has no tasks with these settings ({taskset_args})")
    loaded = TaskSet(name, env, tasks, split=getattr(config.taskset, "split", None))
    with _cache_lock:
        return _cache.setdefault(key, loaded)


def outcome(name: str, episode: Any, success_at: float) -> dict[str, Any]:
    """A finished v1 episode as a program's result for the gateway: its trace's reward, ``correct`` (the reward
    reached ``success_at``) and its metrics.

    Raises:
        VerifiersEnvError: the episode failed (its last error), played more than one agent, or its reward is not
            finite.
    """
    traces = list(episode.traces)
    if not episode.ok:
        errors = [*episode.errors, *(e for t in traces for e in t.errors)]
        last = errors[-1] if errors else None
        said = f"{last.type}: {last.message}" if last is not None else "no error recorded"
        raise VerifiersEnvError(f"verifiers:{name}: the episode failed: {said[:2000]}")
    if len(traces) != 1:
        raise VerifiersEnvError(
            f"verifiers:{name}: its env played {len(traces)} agent runs in one episode; turnrl "
            "trains episodes of one agent (verifiers' SingleAgentEnv)"
        )
    trace = traces[0]
    retried = [*episode.errors, *trace.errors]  # a good attempt after failed ones carries their errors
    if retried:
        raise VerifiersEnvError(
            f"verifiers:{name}: the episode succeeded only after verifiers retried it "
            f"({len(retried)} earlier error(s), the first {retried[0].type}: "
            f"{str(retried[0].message)[:300]}); the gateway session holds every attempt's calls, "
            "which the last attempt's reward would score: set the task set's retries to 0"
        )
    reward = float(trace.reward)
    if not math.isfinite(reward):
        raise VerifiersEnvError(f"verifiers:{name}: its rewards sum to {reward}")
    metrics = {
        k: float(v)
        for k, v in (trace.metrics or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }
    return {
        "reward": reward,
        "correct": reward >= success_at,
        "metrics": metrics,
        "stop_condition": trace.stop_condition,
    }
