"""One client's environment on an environment server, and the answers to its messages.

A :class:`Session` is what a WebSocket connection (``/ID/ws``), an HTTP MCP session (``openenv/session/create`` on
``POST /ID/mcp``) or one stateless HTTP call (``POST /ID/reset``, ``POST /ID/step``) holds: the environment, made on
its first use with the server's keyword arguments and the client's, and closed when the session ends. The message
formats are in :mod:`turnrl.envs.remote.protocol`; :meth:`Session.answer` turns one message into its reply.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from turnrl.envs.core import TextEnv
from turnrl.envs.remote import protocol as p
from turnrl.tools.base import _jsonable
from turnrl.types import ToolCall, Trajectory


class DaemonThreads(ThreadPoolExecutor):
    """Each call in its own daemon thread: a step that never returns (cut by ``step_timeout``) neither blocks the
    other sessions' calls nor the process's exit."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.running = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            self.running += 1
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the awaiting coroutine
                future.set_exception(e)
            finally:
                self.running -= 1

        threading.Thread(target=run, name="turnrl-env-call", daemon=True).start()
        return future


@dataclass(frozen=True)
class Limits:
    """What every session of a server is made with and held to (see :class:`~turnrl.envs.remote.server.EnvServer`)."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    step_timeout: float = 120.0
    make_timeout: float = 300.0


class Refused(Exception):
    """A message the session cannot answer: the reply is an ``error`` with ``code``; ``keep``: the session goes on;
    ``status``: the HTTP status a plain HTTP call answers with."""

    def __init__(self, message: str, code: str, keep: bool = True, status: int = 503) -> None:
        super().__init__(message)
        self.code, self.keep, self.status = code, keep, status


class Closed(Exception):
    """The client asked to end the session."""


class Session:
    """One client's environment (made on first use) and its counters.

    Args:
        env_id: the id the session's environment is made from.
        limits: the server's keyword arguments and timeouts.
    """

    def __init__(self, env_id: str, limits: Limits) -> None:
        self.env_id, self.limits = env_id, limits
        self.env: TextEnv | None = None
        self.episodes = 0
        self.last_used = time.monotonic()
        self.busy = 0  # requests under way (an HTTP MCP session may get several at once; the reaper waits)
        self.lock = asyncio.Lock()  # one environment is made, and one call runs on it, at a time
        self.release: Any = None  # gives the session back to its client's quota, on close

    # ---- the environment ----

    async def environment(self, kwargs: dict[str, Any] | None = None) -> TextEnv:
        """The session's environment, made now (with the server's kwargs updated by ``kwargs``) if it is not yet.

        Raises:
            Refused: making it failed (``FACTORY_ERROR``: a bad keyword argument, a missing file).
            TimeoutError: making it took longer than ``make_timeout``.
        """
        if self.env is None:
            from turnrl.envs.registry import make

            merged = {**self.limits.kwargs, **(kwargs or {})}
            try:
                self.env = await asyncio.wait_for(
                    asyncio.to_thread(make, self.env_id, **merged), self.limits.make_timeout
                )
            except TimeoutError:
                raise
            except Exception as e:  # a bad keyword argument, a missing file: the client reads it
                raise Refused(f"making {self.env_id} failed: {type(e).__name__}: {e}", p.FACTORY_ERROR) from e
        return self.env

    async def play_once(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Answer ``messages`` in order, then close: the last reply, or the first error (a plain HTTP call's
        session, which lives for that call alone)."""
        try:
            reply: dict[str, Any] | None = None
            for message in messages:
                reply, _ = await self.answer(json.dumps(message))
                if reply is None or reply["type"] == "error":
                    break
        finally:
            await self.close()
        assert reply is not None
        return reply

    async def close(self) -> None:
        """Close the environment (best effort) and forget it; the session no longer counts for its client."""
        release, self.release = self.release, None
        if release is not None:
            release()
        env, self.env = self.env, None
        if env is not None:
            await asyncio.to_thread(close_env, env)

    async def timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in a thread, cut at ``step_timeout`` (:class:`TimeoutError`)."""
        return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kwargs), self.limits.step_timeout)

    # ---- messages ----

    async def answer(self, raw: str | bytes) -> tuple[dict[str, Any] | None, bool]:
        """The reply to one WebSocket message (None: no reply), and whether the session goes on."""
        self.last_used = time.monotonic()
        try:
            message = json.loads(raw)
        except json.JSONDecodeError as e:
            return p.error(f"Invalid JSON: {e}", p.INVALID_JSON), True
        if not isinstance(message, dict) or not isinstance(message.get("data", {}), dict):
            return p.error('a message is a JSON object {"type": ..., "data": {...}}', p.VALIDATION_ERROR), True
        kind, data = message.get("type"), message.get("data") or {}
        handler = getattr(self, f"on_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            return p.error(
                f"Unknown message type: {kind!r} (reset, step, state, close, make, call, tool)", p.UNKNOWN_TYPE
            ), True
        try:
            return await handler(data)
        except TimeoutError:
            return self.timeout_error(str(kind)), False  # a handler's kind: a string
        except Refused as e:
            return p.error(str(e), e.code), e.keep
        except Closed:
            return None, False
        except Exception as e:  # the environment's own error: the client reads it
            return p.error(f"{type(e).__name__}: {e}", p.EXECUTION_ERROR), True

    def timeout_error(self, kind: str) -> dict[str, Any]:
        """The ``TIMEOUT`` error of a ``kind`` message that ran past its limit."""
        what = "making the environment" if self.env is None else f"the {kind}"
        limit = self.limits.make_timeout if self.env is None else self.limits.step_timeout
        return p.error(
            f"{what} took longer than {limit:g} s; the session is closed (the environment's state is unknown)",
            p.TIMEOUT,
        )

    async def on_make(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if self.env is not None:
            raise Refused("make must be the session's first message", p.VALIDATION_ERROR)
        kwargs = data.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise Refused('make\'s data is {"kwargs": {...}}', p.VALIDATION_ERROR)
        env = await self.environment(kwargs)
        return {"type": "spec", "data": spec_of(self.env_id, env)}, True

    async def on_reset(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        env = await self.environment()
        unknown = set(data) - {"seed", "options", "episode_id"}
        if unknown:
            raise Refused(f"unknown reset fields {sorted(unknown)}: reset takes seed and options", p.VALIDATION_ERROR)
        seed, options = data.get("seed"), data.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise Refused(f"a reset's seed is an integer, got {seed!r}", p.VALIDATION_ERROR)
        if options is not None and not isinstance(options, dict):
            raise Refused(f"a reset's options are a JSON object, got {options!r}", p.VALIDATION_ERROR)
        obs, info = await self.timed(env.reset, seed=seed, options=options)
        self.episodes += 1
        return p.observation(obs, info, None), True

    async def on_step(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if data.get("type") in ("list_tools", "call_tool"):  # OpenEnv's MCP actions (MCPToolClient over /ws)
            return await self.tool_action(data), True
        text = data.get("message")
        if not isinstance(text, str):
            raise Refused("a step's data is {\"message\": the assistant's text}", p.VALIDATION_ERROR)
        env = await self.environment()
        obs, reward, terminated, truncated, info = await asyncio.wait_for(env.astep(text), self.limits.step_timeout)
        return p.observation(obs, info, reward, terminated, truncated), True

    async def on_state(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return {"type": "state", "data": self.state()}, True

    def state(self) -> dict[str, Any]:
        """The session's state: OpenEnv's ``episode_id`` and ``step_count`` and turnrl's fields."""
        env = self.env
        task = getattr(env, "task", None)
        turn = env.turn if env is not None else 0
        return {
            "env_id": self.env_id,
            "episodes": self.episodes,
            "turn": turn,
            "started": bool(env is not None and env._started),
            "finished": bool(env is not None and env._finished),
            "task_id": getattr(task, "id", None),
            "episode_id": None,
            "step_count": turn,
        }

    async def on_close(self, data: dict[str, Any]) -> tuple[None, bool]:
        raise Closed

    async def on_call(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        method, args = data.get("method"), data.get("args") or []
        if method not in p.CALLABLE or not isinstance(args, list):
            raise Refused(
                f'call\'s data is {{"method": one of {", ".join(p.CALLABLE)}, "args": [...]}}', p.VALIDATION_ERROR
            )
        env = await self.environment()
        if method == "summarize_episodes":
            args = [[Trajectory.model_validate(t) for t in args[0]]] if args else [[]]
        value = await self.timed(getattr(env, method), *args)
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        return {"type": "result", "data": {"value": value}}, True

    async def on_tool(self, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        content, ok = await self.call_tool(str(data.get("name")), data.get("arguments") or {}, data.get("raw"))
        return {"type": "result", "data": {"content": content, "ok": ok}}, True

    async def tool_action(self, data: dict[str, Any]) -> dict[str, Any]:
        """OpenEnv's ``list_tools`` / ``call_tool`` step actions: the tools, or one call's result, as an observation
        outside the episode (no reward, not done)."""
        if data["type"] == "list_tools":
            env = await self.environment()
            obs: dict[str, Any] = {"tools": tool_list(env)}
        else:
            name, arguments = data.get("tool_name"), data.get("arguments") or {}
            if not isinstance(name, str):
                raise Refused(
                    'a call_tool action is {"type": "call_tool", "tool_name": ..., "arguments": {...}}',
                    p.VALIDATION_ERROR,
                )
            content, ok = await self.call_tool(name, arguments)
            obs = {
                "tool_name": name,
                "result": {"data": content} if ok else None,
                "error": None if ok else {"error_type": "execution_error", "message": content},
            }
        return {"type": "observation", "data": {"observation": obs, "reward": None, "done": False}}

    async def call_tool(self, name: str, arguments: Any, raw: str | None = None) -> tuple[str, bool]:
        """One call of the environment's tool ``name``: its text and whether it succeeded.

        Raises:
            Refused: the environment has no tools.
        """
        env = await self.environment()
        toolbox = getattr(env, "toolbox", None)
        if toolbox is None:
            raise Refused(f"{self.env_id} has no toolbox to call", p.VALIDATION_ERROR)
        if not isinstance(arguments, dict):
            raise Refused(f"a tool's arguments are a JSON object, got {arguments!r}", p.VALIDATION_ERROR)
        out = await asyncio.wait_for(
            toolbox.ainvoke(ToolCall(name=name, arguments=arguments, raw=raw)), self.limits.step_timeout
        )
        return out.content, out.ok


def tool_list(env: TextEnv) -> list[dict[str, Any]]:
    """The environment's tools as MCP lists them: ``{"name", "description", "input_schema"}`` each."""
    return [
        {
            "name": s["function"]["name"],
            "description": s["function"].get("description", ""),
            "input_schema": s["function"].get("parameters", {}),
        }
        for s in env.tool_schemas()
    ]


def close_env(env: TextEnv) -> None:
    """``env.close()``, best effort."""
    try:
        env.close()
    except Exception:  # closing is best effort
        pass


def spec_of(env_id: str, env: TextEnv) -> dict[str, Any]:
    """The answer to ``make``: what a client needs to know of the environment before its first reset."""
    size = len(env) if hasattr(env, "__len__") else None
    return p.Spec(
        protocol=p.PROTOCOL,
        env_id=env_id,
        kwargs=json.loads(json.dumps(dict(getattr(env.spec, "kwargs", None) or {}), default=repr)),
        max_turns=env.max_turns,
        split=env.split,
        held_out_split=env.held_out_split,
        evaluation_options=dict(env.evaluation_options),
        options={k: getattr(env, k, None) for k in env.evaluation_options},
        helpers=[m for m in p.CALLABLE if getattr(type(env), m, None) is not getattr(TextEnv, m)],
        stop=list(env.stop),
        tools=env.tool_schemas(),
        size=size,
        description=doc_line(env),
    ).model_dump(mode="json")


def doc_line(env: TextEnv) -> str:
    """The first line of the environment class's docstring (its description in ``/metadata`` and the spec)."""
    return ((type(env).__doc__ or "").strip().splitlines() or [""])[0]


def dumps(body: Any) -> str:
    """``body`` as JSON (tool results and infos may hold values JSON does not know: they are written as text)."""
    return json.dumps(body, default=_jsonable)
