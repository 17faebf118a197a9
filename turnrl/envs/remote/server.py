"""Serve registered environments as OpenEnv servers do (``turnrl envs serve ID``): WebSocket sessions, plain HTTP
calls and the environment's tools over MCP.

Routes, for each id served (``/ID/...``; the first id is also served without the prefix, at ``/ws``, ``/reset``, …):

* ``/ID/ws`` (WebSocket): one session with its own environment, made on the session's first ``make`` or ``reset``;
  the messages are in :mod:`turnrl.envs.remote.protocol`. This is where multi-turn episodes are played (``remote:``
  ids and OpenEnv's ``GenericEnvClient`` connect here).
* ``POST /ID/reset`` ``{"seed"?, "options"?, "episode_id"?}`` → ``{"observation", "reward": null, "done": false}``:
  the first observation of an episode on an environment made for this request alone (HTTP holds no session).
* ``POST /ID/step`` ``{"action": {"message": TEXT}, "seed", "options"?}`` → ``{"observation", "reward", "done"}``:
  the first turn of the episode that ``POST /reset`` with the same ``seed`` and ``options`` starts, answered with
  ``TEXT`` — so a one-turn task is played and graded over plain HTTP. A step without a seed would answer a task the
  caller never saw and is refused (409); the next turns of a longer episode need a session (``/ws``), and the answer
  says so where the episode did not end.
* ``GET /ID/state``: a fresh session's state (HTTP holds no episode). ``GET /health``, ``/ID/metadata``,
  ``/ID/schema`` and ``/`` (the ids served) as OpenEnv's servers answer them.
* ``POST /ID/mcp`` and the ``/ID/mcp`` WebSocket: the environment's tools over JSON-RPC
  (:mod:`turnrl.envs.remote.mcp`).

Every request gets an answer: a JSON body with ``error`` and ``code`` for a path not served (404), a method the path
does not take (405, naming the methods it takes), a malformed body (422) or a failure of the environment (500).

Many sessions run at once (``max_sessions``: WebSocket and MCP sessions together; ``max_sessions_per_client`` from
one client address); a step that runs past ``step_timeout`` ends its session with a ``TIMEOUT`` error (the
environment's state is then unknown); a session idle for ``idle_timeout`` is closed and its environment freed.

With ``api_key`` (required off loopback) every route, ``/ws`` and ``/mcp`` included, answers a request without the key
401 before anything runs; bodies and WebSocket messages hold at most ``max_request_bytes`` (413 / close 1009). See
:mod:`turnrl.envs.remote.access`.

Its namesakes are the other servers, each its room's: :mod:`turnrl.serving.server` and :mod:`turnrl.gateway.server`
(policies behind OpenAI's and Anthropic's APIs, not environments).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from turnrl.asgi import ListeningApp
from turnrl.envs.remote import protocol as p
from turnrl.envs.remote.access import TOO_LARGE, ClientQuota, KeyGuard, client_of, require_key
from turnrl.envs.remote.mcp import McpSessions
from turnrl.envs.remote.plain_http import PlainHttp
from turnrl.envs.remote.session import DaemonThreads, Limits, Refused, Session, doc_line, dumps

logger = logging.getLogger(__name__)


class EnvServer(PlainHttp):
    """Environments served over WebSocket sessions, plain HTTP and MCP (see the module docstring for the routes).

    Args:
        env_ids: the ids to serve (registered ids or ``module:Name-v0``); the first is also served without its prefix
            (``/ws``, ``/reset``, ``/step``, ``/state``, ``/metadata``, ``/schema``, ``/mcp``).
        kwargs: keyword arguments every session's environment is made with; a client's ``make`` adds to them.
        host, port: where to listen (port 0: any free port; :attr:`port` says which).
        max_sessions: sessions open at once; one more is refused with ``CAPACITY_REACHED`` (a trainer holds one per
            episode of a step: at least ``prompts_per_step × group_size``, plus its held-out evaluation's batch).
        max_sessions_per_client: sessions one client address holds at once; one more is refused with
            ``CAPACITY_REACHED`` (HTTP 429).
        api_key: the key every request must carry (``Authorization: Bearer KEY``, or Basic credentials whose password
            is the key); required when ``host`` is not a loopback address. None: no key asked for.
        max_request_bytes: the largest HTTP body (413 past it) or WebSocket message (the connection closes, 1009).
        step_timeout: seconds a reset, step or call may take; past it the session ends with ``TIMEOUT``.
        idle_timeout: seconds a session may wait for its next message before it is closed.
        make_timeout: seconds making a session's environment may take.

    Raises:
        ValueError: ``host`` is not a loopback address and there is no ``api_key`` (checked first, before anything is
            made or bound), or a bound is not positive.
        UnknownEnvironmentError, InvalidEnvKwargs, EnvImportError: an id or a keyword argument is wrong (each id is
            made once here, so that a mistake shows before the first client connects).
    """

    def __init__(
        self,
        env_ids: Sequence[str],
        *,
        kwargs: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_sessions: int = 1024,
        step_timeout: float = 120.0,
        idle_timeout: float = 600.0,
        make_timeout: float = 300.0,
        max_sessions_per_client: int = 512,
        api_key: str | None = None,
        max_request_bytes: int = 2**24,
    ) -> None:
        from turnrl.envs.registry import make, resolve

        require_key(host, api_key)
        if not env_ids:
            raise ValueError("name at least one environment id to serve")
        if max_sessions < 1 or max_request_bytes < 1:
            raise ValueError(
                f"max_sessions and max_request_bytes must be at least 1, got {max_sessions}, {max_request_bytes}"
            )
        self.quota = ClientQuota(max_sessions_per_client)
        self.api_key, self.max_request_bytes = api_key or None, max_request_bytes
        for name, value in (
            ("step_timeout", step_timeout),
            ("idle_timeout", idle_timeout),
            ("make_timeout", make_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.kwargs = dict(kwargs or {})
        if any(i.startswith(p.REMOTE_PREFIX) for i in env_ids):
            raise ValueError("a remote: id cannot be served again; serve the environment where it is registered")
        self.env_ids = [resolve(i) for i in env_ids]  # module:Name-v0 → Name-v0 (the module registers it)
        self.descriptions: dict[str, str] = {}
        for env_id in self.env_ids:
            probe = make(env_id, **self.kwargs)
            self.descriptions[env_id] = doc_line(probe)
            probe.close()
        self.host, self._port = host, port
        self.max_sessions, self.idle_timeout = max_sessions, idle_timeout
        self.limits = Limits(kwargs=self.kwargs, step_timeout=step_timeout, make_timeout=make_timeout)
        self.step_timeout, self.make_timeout = step_timeout, make_timeout
        #: The WebSocket sessions open now (MCP sessions are in ``self.mcp.sessions``).
        self.sessions: set[Session] = set()
        self.served_sessions = 0
        self.stateless = 0  # single plain-HTTP calls under way, each with an environment of its own
        self.mcp = McpSessions(self._open_session, idle_timeout)
        self._listening: ListeningApp | None = None
        self._threads: DaemonThreads | None = None

    # ---- running ----

    @property
    def url(self) -> str:
        """The base URL of the first environment: ``http://HOST:PORT/ID``."""
        return f"http://{self.host}:{self.port}/{self.env_ids[0]}"

    def urls(self) -> dict[str, str]:
        """Each id served and its URL (what ``remote:`` ids name)."""
        return {i: f"http://{self.host}:{self.port}/{i}" for i in self.env_ids}

    @property
    def port(self) -> int:
        """The port served (the one bound, once listening: a port of 0 asks for any free one)."""
        return self._listening.port if self._listening is not None else self._port

    @property
    def running(self) -> bool:
        """Whether the server (started with :meth:`start`) still serves."""
        return self._listening is not None and self._listening.running

    def _listen(self) -> ListeningApp:
        self._listening = ListeningApp(
            self.app(),
            self.host,
            self._port,
            name="the environment server",
            lifespan="on",
            ws_max_size=self.max_request_bytes,
            ws_ping_interval=20,
            ws_ping_timeout=60,
            timeout_graceful_shutdown=5,
        )
        return self._listening

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C) or :meth:`stop`.

        Raises:
            OSError: the port could not be bound.
        """
        self._listen().serve_forever()

    def start(self, timeout: float = 30.0) -> int:
        """Serve in a background thread; returns the port once listening.

        Raises:
            OSError: the port could not be bound (or the server did not start within ``timeout``).
        """
        return self._listen().start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open sessions end, their environments are closed) and wait for the thread."""
        if self._listening is not None:
            self._listening.stop(timeout)

    def __enter__(self) -> EnvServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._threads = DaemonThreads()
        asyncio.get_running_loop().set_default_executor(self._threads)
        reaper = asyncio.create_task(self._reap())
        try:
            yield
        finally:
            reaper.cancel()
            await self.mcp.close_all()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.idle_timeout / 2))
            try:
                await self.mcp.reap()
            except Exception:  # one failed close must not stop the reaping of the others
                logger.exception("closing idle MCP sessions failed")

    # ---- the application ----

    def app(self) -> Any:
        """The ASGI application (any ASGI server can run it; :meth:`start` runs it with uvicorn): the routes behind
        the key check (:class:`~turnrl.envs.remote.access.KeyGuard`)."""
        routes: list[Any] = [Route("/", self._index, methods=["GET"])]
        for prefix, env_id in [("", self.env_ids[0])] + [(f"/{i}", i) for i in self.env_ids]:
            routes += [
                Route(f"{prefix}/health", self._health, methods=["GET"]),
                Route(f"{prefix}/metadata", self._bound(self._metadata, env_id), methods=["GET"]),
                Route(f"{prefix}/schema", self._bound(self._schema, env_id), methods=["GET"]),
                Route(f"{prefix}/state", self._bound(self._state, env_id), methods=["GET"]),
                Route(f"{prefix}/reset", self._bound(self._reset, env_id), methods=["POST"]),
                Route(f"{prefix}/step", self._bound(self._step, env_id), methods=["POST"]),
                Route(f"{prefix}/mcp", self._bound(self._mcp, env_id), methods=["POST"]),
                Route(f"{prefix}/ws", self._bound(self._ws_over_http, env_id), methods=["GET", "POST"]),
                WebSocketRoute(f"{prefix}/ws", self._bound(self._session, env_id)),
                WebSocketRoute(f"{prefix}/mcp", self._bound(self._mcp_session, env_id)),
            ]
        routes.append(WebSocketRoute("/{path:path}", self._no_session))
        return KeyGuard(
            Starlette(
                routes=routes,
                lifespan=self._lifespan,
                exception_handlers={HTTPException: self._http_error, Exception: self._crash},
            ),
            self.api_key,
        )

    @staticmethod
    def _bound(handler: Any, env_id: str) -> Any:
        async def endpoint(request: Any) -> Any:
            return await handler(request, env_id)

        return endpoint

    def _where(self) -> str:
        return (
            f"this server serves {', '.join(self.env_ids)}: sessions at /ID/ws (the first id also at /ws); "
            "POST /ID/reset, /ID/step, /ID/mcp; GET /, /health, /ID/metadata, /ID/schema, /ID/state"
        )

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return self._json(
                {"error": f"nothing is served at {request.url.path}; {self._where()}", "code": p.NOT_FOUND}, 404
            )
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return self._json(
                {
                    "error": f"{request.method} is not answered at {request.url.path}; it takes {allowed}",
                    "code": "METHOD_NOT_ALLOWED",
                },
                405,
                headers={"Allow": allowed},
            )
        code = TOO_LARGE if exc.status_code == 413 else p.VALIDATION_ERROR
        return self._json({"error": str(exc.detail), "code": code}, exc.status_code)

    async def _crash(self, request: Request, exc: Exception) -> Response:
        return self._json({"error": f"the server failed: {type(exc).__name__}: {exc}", "code": p.EXECUTION_ERROR}, 500)

    @property
    def open_sessions(self) -> int:
        """Sessions holding (or making) an environment now: WebSocket, HTTP MCP, and those of single HTTP calls."""
        return len(self.sessions) + len(self.mcp.sessions) + self.mcp.transient + self.stateless

    def _open_session(self, env_id: str, client: str) -> Session:
        """A new session of ``client`` (an address), or :class:`Refused` once it holds ``max_sessions_per_client`` or
        ``max_sessions`` are open."""
        release = self.quota.take(client)
        if self.open_sessions >= self.max_sessions:
            release()
            raise Refused(
                f"the server holds {self.max_sessions} sessions already (max_sessions); try again later",
                p.CAPACITY_REACHED,
                keep=False,
            )
        self.served_sessions += 1
        session = Session(env_id, self.limits)
        session.release = release
        return session

    # ---- WebSocket sessions ----

    async def _no_session(self, websocket: WebSocket) -> None:
        body = {"error": f"no environment is served at {websocket.url.path}; {self._where()}", "code": p.NOT_FOUND}
        try:
            await websocket.send_denial_response(self._json(body, 404))
        except RuntimeError:  # a server without the denial extension: refuse the handshake
            await websocket.close(code=1008, reason=body["error"][:120])

    async def _receive(self, websocket: WebSocket) -> str | bytes | None:
        """The next message, or None when the client has gone; :class:`TimeoutError` past ``idle_timeout``."""
        message = await asyncio.wait_for(websocket.receive(), self.idle_timeout)
        if message["type"] == "websocket.disconnect":
            return None
        return message.get("text") if message.get("text") is not None else message.get("bytes")

    async def _session(self, websocket: WebSocket, env_id: str) -> None:
        """A ``/ws`` session: turnrl's and OpenEnv's messages (:meth:`Session.answer`)."""

        async def refuse(e: Refused) -> dict[str, Any]:
            return p.error(str(e), e.code, active_sessions=len(self.sessions), max_sessions=self.max_sessions)

        async def idle() -> dict[str, Any]:
            return p.error(f"the session was idle for {self.idle_timeout:g} s and is closed", p.SESSION_ERROR)

        await self._serve(websocket, env_id, lambda session, raw: session.answer(raw), refuse, idle)

    async def _mcp_session(self, websocket: WebSocket, env_id: str) -> None:
        """An ``/mcp`` WebSocket: JSON-RPC requests, the connection being their session."""

        async def answer(session: Session, raw: str | bytes) -> tuple[dict[str, Any], bool]:
            return await self.mcp.answer(raw, env_id, connection=session), True

        async def refuse(e: Refused) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": str(e)}}

        await self._serve(websocket, env_id, answer, refuse, None)

    async def _serve(self, websocket: WebSocket, env_id: str, answer: Any, refuse: Any, idle: Any) -> None:
        """One WebSocket connection, one session: each message's reply from ``answer``, until the client closes, the
        answer ends the session or the connection is idle for ``idle_timeout`` (``idle()``'s message, then close)."""
        await websocket.accept()
        try:
            session = self._open_session(env_id, client_of(websocket))
        except Refused as e:
            await websocket.send_text(dumps(await refuse(e)))
            await websocket.close()
            return
        self.sessions.add(session)
        try:
            while True:
                try:
                    raw = await self._receive(websocket)
                except TimeoutError:
                    if idle is not None:
                        await websocket.send_text(dumps(await idle()))
                    break
                if raw is None:
                    return
                reply, keep = await answer(session, raw)
                if reply is not None:
                    await websocket.send_text(dumps(reply))
                if not keep:
                    break
            await websocket.close()
        except (WebSocketDisconnect, RuntimeError):  # the client went away mid-answer
            pass
        finally:
            self.sessions.discard(session)
            await session.close()
