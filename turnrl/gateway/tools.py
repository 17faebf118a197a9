"""The environment's tools for gateway programs, as an MCP server (``program.mcp_tools: true``; the ``mcp`` extra).

An agent that reaches its tools through the Model Context Protocol (the OpenAI Agents SDK's
``MCPServerStreamableHttp``, LangChain's MCP adapters, the ``mcp`` SDK's own client) trains on a turnrl
environment's tools unchanged: each episode's task carries ``mcp_url`` = ``http://HOST:PORT/s/SESSION/mcp``, a
streamable-HTTP MCP server (stateless, JSON responses) whose tools are that episode's environment's:

* ``tools/list`` answers the environment's tool schemas (name, description, JSON schema of the arguments; none for
  an environment without tools);
* ``tools/call`` runs the call through the environment's own tools (its toolbox) — so unknown tools, bad arguments,
  a tool that raises and a tool with a timeout of its own are turnrl's tool contract, and come back as MCP tool
  errors (``isError``) carrying the message the model would have seen in a native episode. A call still running
  after ``call_timeout`` seconds (the program's timeout, in training) is answered with an error. Tools that block
  run on the server's own threads (``workers``, the program's concurrency in training), never on its event loop.

Every call is recorded on its session (name, arguments, ok, seconds) and lands in the episode's
``metadata["mcp_calls"]``; :meth:`ToolServer.detach` waits for calls still running. A URL whose session is not open
(never opened, or its episode is over) answers 404.
Given a key (the gateway's, in training), the server wants it with every request (``Authorization: Bearer KEY``,
the header an OpenAI client sends the gateway), or answers 401.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from turnrl.asgi import ListeningApp
from turnrl.tools.base import Toolbox
from turnrl.types import ToolCall

_PATH = re.compile(r"/s/([A-Za-z0-9._-]{1,128})/mcp/?")


def _mcp() -> Any:
    try:
        from mcp import types
        from mcp.server.lowlevel import Server
    except ImportError as e:
        raise ImportError("program.mcp_tools needs the mcp package: pip install 'turnrl[mcp]'") from e
    return types, Server


class ToolServer:
    """Serves each open session's environment tools over MCP (see the module docstring).

    Args:
        host: where to listen (a free port is picked).
        api_key: required with every request as ``Authorization: Bearer KEY`` (None: no key).
        call_timeout: seconds one tool call may take before it is answered with an error.
        workers: threads for tools that block (calls beyond them wait their turn).
        start_timeout: seconds to wait for the server to listen.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        api_key: str | None = None,
        call_timeout: float = 120.0,
        workers: int = 32,
        start_timeout: float = 30.0,
    ) -> None:
        self.host, self.api_key, self.call_timeout, self.start_timeout = host, api_key, call_timeout, start_timeout
        self._envs: dict[str, tuple[Any, Toolbox]] = {}
        self._calls: dict[str, list[dict[str, Any]]] = {}
        self._busy: dict[str, int] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="turnrl-mcp-tool")
        self._listening: ListeningApp | None = None
        self.port = 0

    # ---- sessions ----

    def url(self, session: str) -> str:
        """The MCP endpoint of ``session``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/s/{session}/mcp"

    def attach(self, session: str, env: Any) -> str:
        """Serve ``env``'s tools (as it holds them now: reset it first) at :meth:`url` of ``session`` until
        :meth:`detach`; returns the URL."""
        if not _PATH.fullmatch(f"/s/{session}/mcp"):
            raise ValueError(f"a session id may hold letters, digits, '-', '_' and '.', got {session!r}")
        inner = env.unwrapped
        toolbox = getattr(inner, "toolbox", None) or Toolbox(list(getattr(inner, "tools", ())))
        with self._lock:
            self._envs[session] = (inner, toolbox)
            self._calls[session] = []
            self._busy[session] = 0
        return self.url(session)

    def detach(self, session: str, *, wait: float = 30.0) -> list[dict[str, Any]]:
        """Stop serving ``session`` (its URL answers 404 from now on); returns the calls it made, after waiting up to
        ``wait`` seconds for calls still running (one still running then is left out)."""
        with self._idle:
            self._envs.pop(session, None)
            self._idle.wait_for(lambda: not self._busy.get(session), timeout=max(wait, 0.0))
            self._busy.pop(session, None)
            return self._calls.pop(session, [])

    def _env(self, session: str) -> tuple[Any, Toolbox] | None:
        with self._lock:
            return self._envs.get(session)

    # ---- MCP ----

    def _mcp_server(self) -> Any:
        types, Server = _mcp()

        def session_of(ctx: Any) -> tuple[str, Any, Toolbox]:
            scope = getattr(ctx.request, "scope", None) or {}
            sid = scope.get("turnrl_session", "")
            held = self._env(sid)
            if held is None:  # the episode ended while the request was in flight
                raise ValueError(f"session {sid!r} is not open (its episode is over)")
            return sid, *held

        async def list_tools(ctx: Any, params: Any) -> Any:
            _, env, _ = session_of(ctx)
            tools = []
            for schema in env.tool_schemas():
                fn = schema["function"]
                tools.append(
                    types.Tool(
                        name=fn["name"],
                        description=fn.get("description") or "",
                        input_schema=fn.get("parameters") or {"type": "object", "properties": {}},
                    )
                )
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: Any) -> Any:
            sid, _, toolbox = session_of(ctx)
            call = ToolCall(name=params.name, arguments=dict(params.arguments or {}))
            t0 = time.perf_counter()
            with self._lock:
                self._busy[sid] = self._busy.get(sid, 0) + 1
            text, ok = f"Error: tool {call.name!r} was cancelled", False
            try:
                out = await asyncio.wait_for(toolbox.ainvoke(call), self.call_timeout)
                text, ok = out.content, out.ok
            except TimeoutError:
                text, ok = f"Error: tool {call.name!r} timed out after {self.call_timeout:g}s", False
            except Exception as e:  # the toolbox maps tool failures itself; anything else is reported
                text, ok = f"Error: tool {call.name!r} failed: {type(e).__name__}: {e}", False
            finally:
                with self._idle:
                    if sid in self._calls:
                        self._calls[sid].append(
                            {
                                "name": call.name,
                                "arguments": call.arguments,
                                "ok": ok,
                                "seconds": round(time.perf_counter() - t0, 4),
                            }
                        )
                    if sid in self._busy:
                        self._busy[sid] -= 1
                    self._idle.notify_all()
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not ok)

        return Server("turnrl-env-tools", on_list_tools=list_tools, on_call_tool=call_tool)

    def _app(self) -> Any:
        """The ASGI app: ``/s/SESSION/mcp`` to the MCP transport (the session put in the request's scope), the rest
        404; the key checked where one is needed."""
        server = self._mcp_server()
        mcp_app = server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True, host=self.host
        )
        manager = server.session_manager
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

        transport = StreamableHTTPASGIApp(manager)

        async def reply(send: Any, status: int, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            await send(
                {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "lifespan":
                asyncio.get_running_loop().set_default_executor(self._pool)  # where tools that block run
                await mcp_app(scope, receive, send)  # runs the MCP session manager for the server's life
                return
            if scope["type"] != "http":
                return
            m = _PATH.fullmatch(scope["path"])
            if m is None:
                await reply(send, 404, "not found: the environment's tools are at /s/SESSION/mcp")
                return
            if self.api_key:
                auth = dict(scope.get("headers") or []).get(b"authorization", b"")
                if not hmac.compare_digest(auth, f"Bearer {self.api_key}".encode()):
                    await reply(send, 401, "send the gateway's key as 'Authorization: Bearer KEY'")
                    return
            if self._env(m.group(1)) is None:
                await reply(send, 404, f"session {m.group(1)!r} is not open (never opened, or its episode is over)")
                return
            await transport({**scope, "turnrl_session": m.group(1)}, receive, send)

        return app

    def start(self) -> ToolServer:
        """Listen (in a thread of this process); returns self once the server answers.

        Raises:
            RuntimeError: the server did not start within ``start_timeout``.
        """
        self._listening = ListeningApp(
            self._app(), self.host, 0, name="the MCP tool server", lifespan="on", timeout_graceful_shutdown=2
        )
        try:
            self.port = self._listening.start(self.start_timeout)
        except OSError as e:
            self._pool.shutdown(wait=False, cancel_futures=True)
            raise RuntimeError(str(e)) from e
        return self

    def stop(self) -> None:
        """Stop serving (waits a few seconds for the thread)."""
        if self._listening is not None:
            self._listening.stop(10)
        self._listening = None
        self._pool.shutdown(wait=False, cancel_futures=True)
