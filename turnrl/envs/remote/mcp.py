"""An environment server's ``/mcp`` route: the environment's tools over JSON-RPC 2.0, as OpenEnv serves them.

OpenEnv's ``MCPToolClient`` (and any JSON-RPC client) reaches an environment's tools here without playing an
episode: no observation, no reward, only the tool's answer. Over ``POST /ID/mcp`` a client first asks for a session
(``openenv/session/create`` → ``{"session_id"}``), names it in every call and ends it
(``openenv/session/close``); a call without a session runs on an environment made for that call alone. Over the
``/ID/mcp`` WebSocket the connection is the session.

Methods:

* ``tools/list`` ``{"session_id"?}`` → ``{"tools": [{"name", "description", "input_schema"}]}``
* ``tools/call`` ``{"name", "arguments", "session_id"?}`` → ``{"content": [{"type": "text", "text"}], "isError",
  "data"}`` (``data``: the tool's text, which ``MCPToolClient.call_tool`` returns)
* ``openenv/session/create`` → ``{"session_id"}``;
  ``openenv/session/close`` ``{"session_id"}`` → ``{"closed": true}``

Errors are JSON-RPC errors: ``-32700`` a body that is not JSON, ``-32600`` not a request, ``-32601`` an unknown
method, ``-32602`` bad parameters (an unknown session or tool arguments that are not an object), ``-32603`` the
environment failed or ran past its time.

Its namesake :mod:`turnrl.tools.mcp` is the other side of the same protocol: turnrl as an MCP client of someone
else's tools.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from turnrl.envs.remote.session import Refused, Session, tool_list

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
METHODS = ("tools/list", "tools/call", "openenv/session/create", "openenv/session/close")


class McpSessions:
    """The HTTP MCP sessions of one environment server.

    Args:
        open_session: makes a new session for an environment id and a client address (raises :class:`Refused`
            past the server's ``max_sessions`` or that client's ``max_sessions_per_client``).
        idle_timeout: seconds a session may go unused before :meth:`reap` closes it.
    """

    def __init__(self, open_session: Callable[[str, str], Session], idle_timeout: float) -> None:
        self.open_session, self.idle_timeout = open_session, idle_timeout
        self.sessions: dict[str, Session] = {}
        self.transient = 0  # sessions of one call (no session_id) under way

    async def reap(self) -> int:
        """Close the sessions idle for longer than ``idle_timeout``; how many were closed (a session a request
        used meanwhile, or one its client closed meanwhile, is left alone)."""
        closed = 0
        for key, session in list(self.sessions.items()):
            if time.monotonic() - session.last_used <= self.idle_timeout or session.busy:
                continue
            if self.sessions.get(key) is session:
                del self.sessions[key]
                await session.close()
                closed += 1
        return closed

    async def close_all(self) -> None:
        """Close every session (the server stops)."""
        while self.sessions:
            await self.sessions.popitem()[1].close()

    async def answer(
        self, raw: str | bytes, env_id: str, connection: Session | None = None, client: str = "unknown"
    ) -> dict[str, Any]:
        """The JSON-RPC reply to one request body for environment ``env_id``; ``connection``: the WebSocket's own
        session (HTTP requests name theirs by ``session_id``); ``client``: the address a new session counts for."""
        try:
            request = json.loads(raw)
        except json.JSONDecodeError as e:
            return _error(None, PARSE_ERROR, f"Parse error: {e}")
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return _error(
                None,
                INVALID_REQUEST,
                'a JSON-RPC request is {"jsonrpc": "2.0", "method": ..., "params": {...}, "id": ...}',
            )
        rid, method, params = request.get("id"), request["method"], request.get("params") or {}
        if not isinstance(params, dict):
            return _error(rid, INVALID_PARAMS, "params is a JSON object")
        if method not in METHODS:
            return _error(rid, METHOD_NOT_FOUND, f"unknown method {method!r}: {', '.join(METHODS)}")
        try:
            return {"jsonrpc": "2.0", "id": rid, "result": await self._run(method, params, env_id, connection, client)}
        except _BadParams as e:
            return _error(rid, INVALID_PARAMS, str(e))
        except Refused as e:
            return _error(rid, INVALID_PARAMS if e.keep else INTERNAL_ERROR, str(e), code_name=e.code)
        except TimeoutError:
            return _error(rid, INTERNAL_ERROR, f"{method} ran past the server's time limit")
        except Exception as e:  # the environment's own error: the client reads it
            return _error(rid, INTERNAL_ERROR, f"{type(e).__name__}: {e}")

    async def _run(
        self, method: str, params: dict[str, Any], env_id: str, connection: Session | None, client: str
    ) -> Any:
        session: Session | None
        if method == "openenv/session/create":
            if connection is not None:
                return {"session_id": "this-connection"}
            session = self.open_session(env_id, client)
            key = uuid.uuid4().hex
            self.sessions[key] = session
            return {"session_id": key}
        if method == "openenv/session/close":
            if connection is not None:
                return {"closed": True}
            session = self.sessions.pop(self._key(params), None)
            if session is not None:
                await session.close()
            return {"closed": True}
        session, own = connection, False
        if session is None and params.get("session_id") is not None:
            session = self.sessions.get(self._key(params))
            if session is None:
                raise _BadParams(
                    f"no session {params['session_id']!r} (it was closed, or idle for longer than "
                    f"{self.idle_timeout:g} s); create one with openenv/session/create"
                )
        if session is None:
            session, own = self.open_session(env_id, client), True
            self.transient += 1
        session.busy += 1
        try:
            async with session.lock:  # one request at a time on a session's environment
                session.last_used = time.monotonic()
                if method == "tools/list":
                    return {"tools": tool_list(await session.environment())}
                name, arguments = params.get("name"), params.get("arguments") or {}
                if not isinstance(name, str) or not isinstance(arguments, dict):
                    raise _BadParams('tools/call\'s params are {"name": str, "arguments": {...}}')
                text, ok = await session.call_tool(name, arguments)
                return {"content": [{"type": "text", "text": text}], "isError": not ok, "data": text}
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()
            if own:
                self.transient -= 1
                await session.close()

    @staticmethod
    def _key(params: dict[str, Any]) -> str:
        key = params.get("session_id")
        if not isinstance(key, str):
            raise _BadParams('name the session: {"session_id": ...} (from openenv/session/create)')
        return key


class _BadParams(ValueError):
    pass


def _error(rid: Any, code: int, message: str, **data: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}
