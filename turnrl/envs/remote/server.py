"""Serve registered environments over WebSocket sessions (``turnrl envs serve ID``), OpenEnv's protocol.

Each connection to ``ws://HOST:PORT/ID/ws`` (or ``/ws`` for the first id served) is one session with its own
environment, made on the session's first ``make`` or ``reset``. Many sessions run at once (``max_sessions``); a step
that runs past ``step_timeout`` ends its session with a ``TIMEOUT`` error (the environment's state is then unknown);
a session idle for ``idle_timeout`` is closed and its environment freed. Plain HTTP ``GET`` requests answer
``/health``, ``/metadata`` and ``/schema`` (as OpenEnv servers do) and ``/`` (the ids served).

The message formats are in :mod:`turnrl.envs.remote.protocol`.
"""

from __future__ import annotations

import asyncio
import http
import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from turnrl.envs.core import TextEnv
from turnrl.envs.remote import protocol as p
from turnrl.tools.base import _jsonable
from turnrl.types import ToolCall, Trajectory


class _DaemonThreads(ThreadPoolExecutor):
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
            except BaseException as e:  # noqa: BLE001 — handed to the awaiting coroutine
                future.set_exception(e)
            finally:
                self.running -= 1

        threading.Thread(target=run, name="turnrl-env-call", daemon=True).start()
        return future


class _Session:
    """One connection's environment and its counters."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id
        self.env: TextEnv | None = None
        self.episodes = 0


class EnvServer:
    """Environments served over WebSocket sessions.

    Args:
        env_ids: the ids to serve (registered ids or ``module:Name-v0``); the first is also served at ``/ws``.
        kwargs: keyword arguments every session's environment is made with; a client's ``make`` adds to them.
        host, port: where to listen (port 0: any free port; :attr:`port` says which).
        max_sessions: sessions open at once; one more is refused with ``CAPACITY_REACHED`` (a trainer holds one per
            episode of a step: at least ``prompts_per_step × group_size``, plus its held-out evaluation's batch).
        step_timeout: seconds a reset, step or call may take; past it the session ends with ``TIMEOUT``.
        idle_timeout: seconds a session may wait for its next message before it is closed.
        make_timeout: seconds making a session's environment may take.

    Raises:
        UnknownEnvironmentError, InvalidEnvKwargs, EnvImportError: an id or a keyword argument is wrong (each id is
            made once here, so that a mistake shows before the first client connects).
    """

    def __init__(self, env_ids: Sequence[str], *, kwargs: dict[str, Any] | None = None, host: str = "127.0.0.1",
                 port: int = 8000, max_sessions: int = 1024, step_timeout: float = 120.0, idle_timeout: float = 600.0,
                 make_timeout: float = 300.0) -> None:
        from turnrl.envs.registry import make, resolve

        if not env_ids:
            raise ValueError("name at least one environment id to serve")
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        for name, value in (("step_timeout", step_timeout), ("idle_timeout", idle_timeout),
                            ("make_timeout", make_timeout)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.kwargs = dict(kwargs or {})
        if any(i.startswith(p.REMOTE_PREFIX) for i in env_ids):
            raise ValueError("a remote: id cannot be served again; serve the environment where it is registered")
        self.env_ids = [resolve(i) for i in env_ids]  # module:Name-v0 → Name-v0 (the module registers it)
        self.descriptions: dict[str, str] = {}
        for env_id in self.env_ids:
            probe = make(env_id, **self.kwargs)
            self.descriptions[env_id] = _doc_line(probe)
            probe.close()
        self.host, self.port = host, port
        self.max_sessions, self.step_timeout = max_sessions, step_timeout
        self.idle_timeout, self.make_timeout = idle_timeout, make_timeout
        self.sessions: set[_Session] = set()
        self.served_sessions = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._threads: _DaemonThreads | None = None

    # ---- running ----

    @property
    def url(self) -> str:
        """The base URL of the first environment: ``http://HOST:PORT/ID``."""
        return f"http://{self.host}:{self.port}/{self.env_ids[0]}"

    def urls(self) -> dict[str, str]:
        """Each id served and its URL (what ``remote:`` ids name)."""
        return {i: f"http://{self.host}:{self.port}/{i}" for i in self.env_ids}

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._threads = _DaemonThreads()
        loop.set_default_executor(self._threads)
        self._loop, self._stop = loop, asyncio.Event()
        async with serve(self._session, self.host, self.port, process_request=self._http, max_size=2**24,
                         ping_interval=20, ping_timeout=60) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C) or :meth:`stop`."""
        try:
            asyncio.run(self._main())
        except KeyboardInterrupt:
            pass

    def start(self, timeout: float = 30.0) -> int:
        """Serve in a background thread; returns the port once listening.

        Raises:
            OSError: the port could not be bound (or the server did not start within ``timeout``).
        """

        def run() -> None:
            try:
                asyncio.run(self._main())
            except BaseException as e:  # noqa: BLE001 — reported to start()
                self._failed = e
                self._ready.set()

        self._thread = threading.Thread(target=run, name="turnrl-env-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._failed is not None:
            raise OSError(f"the environment server did not start on {self.host}:{self.port}: {self._failed}")
        return self.port

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open sessions end) and wait for the thread."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> EnvServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- HTTP ----

    def _route(self, path: str) -> str | None:
        """The id a session path names (``/ID/ws``; ``/ws`` is the first id), or None."""
        path = path.split("?", 1)[0].rstrip("/")
        if path == "/ws":
            return self.env_ids[0]
        if path.endswith("/ws"):
            name = path[1:-3]
            return name if name in self.env_ids else None
        return None

    def _json(self, conn: ServerConnection, status: http.HTTPStatus, body: Any) -> Response:
        response = conn.respond(status, json.dumps(body, default=_jsonable) + "\n")
        response.headers["Content-Type"] = "application/json"
        return response

    def _http(self, conn: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0].rstrip("/") or "/"
        if path.endswith("/ws"):
            if self._route(path) is not None:
                return None  # a session: go on with the WebSocket handshake
            return self._json(conn, http.HTTPStatus.NOT_FOUND, {
                "error": f"no environment is served at {path}; this server serves {', '.join(self.env_ids)} "
                         f"at /ID/ws (and the first at /ws)", "code": p.NOT_FOUND})
        head, _, tail = path.rpartition("/")
        env_id = head.lstrip("/") or self.env_ids[0]
        if path == "/":
            return self._json(conn, http.HTTPStatus.OK, {"protocol": p.PROTOCOL, "environments": self.env_ids})
        if tail == "health":
            busy = self._threads.running if self._threads is not None else 0
            return self._json(conn, http.HTTPStatus.OK, {"status": "healthy", "sessions": len(self.sessions),
                                                         "max_sessions": self.max_sessions,
                                                         "calls_running": busy})
        if env_id in self.env_ids and tail == "metadata":
            return self._json(conn, http.HTTPStatus.OK, {
                "name": env_id, "description": self.descriptions[env_id], "version": p.version(),
                "protocol": p.PROTOCOL})
        if env_id in self.env_ids and tail == "schema":
            return self._json(conn, http.HTTPStatus.OK, p.SCHEMAS)
        return self._json(conn, http.HTTPStatus.NOT_FOUND, {
            "error": f"unknown path {path}: GET /, /health, /ID/metadata, /ID/schema; sessions at /ID/ws",
            "code": p.NOT_FOUND})

    # ---- sessions ----

    async def _session(self, conn: ServerConnection) -> None:
        env_id = self._route(conn.request.path)
        if len(self.sessions) >= self.max_sessions:
            await conn.send(json.dumps(p.error(
                f"the server holds {self.max_sessions} sessions already (max_sessions); try again later",
                p.CAPACITY_REACHED, active_sessions=len(self.sessions), max_sessions=self.max_sessions)))
            await conn.close()
            return
        session = _Session(env_id)
        self.sessions.add(session)
        self.served_sessions += 1
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(conn.recv(), self.idle_timeout)
                except TimeoutError:
                    await conn.send(json.dumps(p.error(
                        f"the session was idle for {self.idle_timeout:g} s and is closed", p.SESSION_ERROR)))
                    break
                reply, keep = await self._answer(session, raw)
                if reply is not None:
                    await conn.send(json.dumps(reply, default=_jsonable))
                if not keep:
                    break
        except ConnectionClosed:
            pass
        finally:
            self.sessions.discard(session)
            if session.env is not None:
                await asyncio.to_thread(_close, session.env)
            await conn.close()

    async def _answer(self, session: _Session, raw: str | bytes) -> tuple[dict[str, Any] | None, bool]:
        """The reply to one message, and whether the session goes on."""
        try:
            message = json.loads(raw)
        except json.JSONDecodeError as e:
            return p.error(f"Invalid JSON: {e}", p.INVALID_JSON), True
        if not isinstance(message, dict) or not isinstance(message.get("data", {}), dict):
            return p.error("a message is a JSON object {\"type\": ..., \"data\": {...}}", p.VALIDATION_ERROR), True
        kind, data = message.get("type"), message.get("data") or {}
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            return p.error(f"Unknown message type: {kind!r} (reset, step, state, close, make, call, tool)",
                           p.UNKNOWN_TYPE), True
        try:
            return await handler(session, data)
        except TimeoutError:
            what = "making the environment" if session.env is None else f"the {kind}"
            limit = self.make_timeout if session.env is None else self.step_timeout
            return p.error(f"{what} took longer than {limit:g} s; the session is closed (the environment's state is "
                           "unknown)", p.TIMEOUT), False
        except _Refused as e:
            return p.error(str(e), e.code), e.keep
        except _Closed:
            return None, False
        except Exception as e:  # noqa: BLE001 — the environment's own error: the client reads it
            return p.error(f"{type(e).__name__}: {e}", p.EXECUTION_ERROR), True

    async def _env(self, session: _Session, kwargs: dict[str, Any] | None = None) -> TextEnv:
        if session.env is None:
            from turnrl.envs.registry import make

            merged = {**self.kwargs, **(kwargs or {})}
            try:
                session.env = await asyncio.wait_for(asyncio.to_thread(make, session.env_id, **merged),
                                                     self.make_timeout)
            except TimeoutError:
                raise
            except Exception as e:  # noqa: BLE001 — a bad keyword argument, a missing file: the client reads it
                raise _Refused(f"making {session.env_id} failed: {type(e).__name__}: {e}", p.FACTORY_ERROR) from e
        return session.env

    async def _timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kwargs), self.step_timeout)

    async def _on_make(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        if session.env is not None:
            raise _Refused("make must be the session's first message", p.VALIDATION_ERROR)
        kwargs = data.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise _Refused("make's data is {\"kwargs\": {...}}", p.VALIDATION_ERROR)
        env = await self._env(session, kwargs)
        return {"type": "spec", "data": _spec(session.env_id, env)}, True

    async def _on_reset(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        env = await self._env(session)
        unknown = set(data) - {"seed", "options", "episode_id"}
        if unknown:
            raise _Refused(f"unknown reset fields {sorted(unknown)}: reset takes seed and options", p.VALIDATION_ERROR)
        obs, info = await self._timed(env.reset, seed=data.get("seed"), options=data.get("options"))
        session.episodes += 1
        return p.observation(obs, info, None), True

    async def _on_step(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        text = data.get("message")
        if not isinstance(text, str):
            raise _Refused("a step's data is {\"message\": the assistant's text}", p.VALIDATION_ERROR)
        env = await self._env(session)
        obs, reward, terminated, truncated, info = await asyncio.wait_for(env.astep(text), self.step_timeout)
        return p.observation(obs, info, reward, terminated, truncated), True

    async def _on_state(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        env = session.env
        task = getattr(env, "task", None)
        return {"type": "state", "data": {
            "env_id": session.env_id, "episodes": session.episodes, "turn": env.turn if env is not None else 0,
            "started": bool(env is not None and env._started), "finished": bool(env is not None and env._finished),
            "task_id": getattr(task, "id", None)}}, True

    async def _on_close(self, session: _Session, data: dict[str, Any]) -> tuple[None, bool]:
        raise _Closed

    async def _on_call(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        method, args = data.get("method"), data.get("args") or []
        if method not in p.CALLABLE or not isinstance(args, list):
            raise _Refused(f"call's data is {{\"method\": one of {', '.join(p.CALLABLE)}, \"args\": [...]}}",
                           p.VALIDATION_ERROR)
        env = await self._env(session)
        if method == "summarize_episodes":
            args = [[Trajectory.model_validate(t) for t in args[0]]] if args else [[]]
        value = await self._timed(getattr(env, method), *args)
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        return {"type": "result", "data": {"value": value}}, True

    async def _on_tool(self, session: _Session, data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        env = await self._env(session)
        toolbox = getattr(env, "toolbox", None)
        if toolbox is None:
            raise _Refused(f"{session.env_id} has no toolbox to call", p.VALIDATION_ERROR)
        call = ToolCall(name=str(data.get("name")), arguments=data.get("arguments") or {}, raw=data.get("raw"))
        out = await asyncio.wait_for(toolbox.ainvoke(call), self.step_timeout)
        return {"type": "result", "data": {"content": out.content, "ok": out.ok}}, True


class _Refused(Exception):
    def __init__(self, message: str, code: str, keep: bool = True) -> None:
        super().__init__(message)
        self.code, self.keep = code, keep


class _Closed(Exception):
    pass


def _close(env: TextEnv) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 — closing is best effort
        pass


def _spec(env_id: str, env: TextEnv) -> dict[str, Any]:
    size = len(env) if hasattr(env, "__len__") else None
    return p.Spec(
        protocol=p.PROTOCOL, env_id=env_id,
        kwargs=json.loads(json.dumps(dict(getattr(env.spec, "kwargs", None) or {}), default=repr)),
        max_turns=env.max_turns, split=env.split, held_out_split=env.held_out_split,
        evaluation_options=dict(env.evaluation_options),
        options={k: getattr(env, k, None) for k in env.evaluation_options},
        helpers=[m for m in p.CALLABLE if getattr(type(env), m, None) is not getattr(TextEnv, m)],
        stop=list(env.stop), tools=env.tool_schemas(), size=size, description=_doc_line(env),
    ).model_dump(mode="json")


def _doc_line(env: TextEnv) -> str:
    """The first line of the environment class's docstring (its description in ``/metadata`` and the spec)."""
    return ((type(env).__doc__ or "").strip().splitlines() or [""])[0]
