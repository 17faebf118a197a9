"""Tools from Model Context Protocol servers (the official ``mcp`` SDK; ``pip install 'turnrl[mcp]'``).

``mcp_tools("python notes_server.py")`` (a command: the server runs as a subprocess over stdio) or
``mcp_tools("http://127.0.0.1:8000/mcp")`` (streamable HTTP) returns one :class:`MCPTool` per tool the server lists,
ready for a :class:`~turnrl.envs.tool_env.ToolEnv`'s ``tools``: the schema goes into the chat template as the server
gives it, a call is checked against that schema here (a missing or unknown argument, a wrong type: an error message
for the model), then runs on the server; a result marked ``isError``, a call past ``timeout`` seconds or a server
that has gone away come back as ``ok=False`` outputs, never as exceptions.

One connection per server (command or URL) is shared by every environment in the process; calls run concurrently
over it. A server's state is therefore shared by all episodes: an environment whose tools change state must give
each episode its own (a key in the arguments, or a reset tool its ``reset`` calls).

Its namesake :mod:`turnrl.envs.remote.mcp` is the other side of the same protocol: an environment server offering
its tools over MCP.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import shlex
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnrl.tools.base import ExternalTool, ToolOutput
from turnrl.types import ToolCall


class MCPServerError(RuntimeError):
    """An MCP server did not start, did not answer its handshake, or lists no tools; the message says which."""


class MCPServer(BaseModel):
    """Where an MCP server is and how to use its tools.

    Give ``command`` (stdio) or ``url`` (streamable HTTP), not both.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] | None = Field(
        None, description="the command that starts the server (stdio), e.g. ['python', 'notes_server.py']"
    )
    url: str | None = Field(None, description="the server's streamable-HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    env: dict[str, str] | None = Field(
        None,
        description="environment variables for a command (added to PATH, HOME and the like, which the SDK passes on)",
    )
    cwd: str | None = Field(None, description="the working folder of a command")
    headers: dict[str, str] | None = Field(
        None, description="HTTP headers sent with every request to a url, e.g. {Authorization: Bearer KEY}"
    )
    timeout: float = Field(30.0, gt=0, description="seconds one tool call may take")
    startup_timeout: float = Field(30.0, gt=0, description="seconds the server may take to start and list its tools")
    include: tuple[str, ...] | None = Field(None, description="take only these tools (default: all it lists)")
    prefix: str = Field("", description="prepended to each tool's name (two servers with a tool of the same name)")

    @model_validator(mode="after")
    def _one_target(self) -> MCPServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either a command (stdio) or a url (streamable HTTP)")
        if self.command is not None and not self.command:
            raise ValueError("the MCP server's command is empty")
        if self.headers and self.url is None:
            raise ValueError("headers go with an MCP server's url (a command's server gets env instead)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"an MCP server's url starts with http:// or https://, got {self.url!r}")
        return self

    @classmethod
    def parse(cls, spec: MCPServer | str | Sequence[str] | dict[str, Any], **defaults: Any) -> MCPServer:
        """A server from a URL, a command line (``"python server.py --flag"``), an argv list or a dict."""
        if isinstance(spec, MCPServer):
            return spec.model_copy(update=defaults) if defaults else spec
        if isinstance(spec, str):
            spec = {"url": spec} if spec.startswith(("http://", "https://")) else {"command": shlex.split(spec)}
        elif not isinstance(spec, dict):
            spec = {"command": list(spec)}
        return cls.model_validate({**defaults, **spec})

    @property
    def label(self) -> str:
        """The server as a person would name it: its command line or URL."""
        return self.url or shlex.join(self.command or ())

    def key(self) -> str:
        """What identifies one connection (the same server started the same way)."""
        return json.dumps([self.command, self.url, self.env, self.cwd, self.headers])


class _Connection:
    """One live session with an MCP server, owned by a background thread with its own event loop."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.loop: asyncio.AbstractEventLoop | None = None
        self.client: Any = None
        self.tools: list[Any] = []
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._closing: asyncio.Event | None = None
        # closed by close(): the server's stderr, kept for the whole session
        self._stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115 — closed by close()
        self._thread = threading.Thread(target=self._main, name="turnrl-mcp", daemon=True)
        self._thread.start()
        if not self._ready.wait(server.startup_timeout):
            self.close()
            raise MCPServerError(
                f"the MCP server {server.label} did not answer within {server.startup_timeout:g} s "
                f"(startup_timeout){self._stderr_tail()}"
            )
        if self.error is not None:
            what = "did not start" if server.command is not None else "refused the connection"
            hint = "" if server.command is not None else " (check the URL, and any credentials it wants in headers)"
            raise MCPServerError(
                f"the MCP server {server.label} {what}: {_describe(self.error)}{self._stderr_tail()}{hint}"
            ) from None

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().strip()
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {text[-600:]}" if text else ""

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # reported to whoever waits
            self.error = self.error or e
        finally:
            self.client = None
            self._ready.set()

    async def _run(self) -> None:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self.loop, self._closing = asyncio.get_running_loop(), asyncio.Event()
        s = self.server
        async with contextlib.AsyncExitStack() as stack:
            if s.command is not None:
                params = StdioServerParameters(
                    command=s.command[0], args=list(s.command[1:]), cwd=s.cwd, env=_child_env(s.env)
                )
                target: Any = stdio_client(params, errlog=self._stderr)
            elif s.headers:
                assert s.url is not None  # a server without a command has a url (the config checks)
                import httpx2  # the mcp SDK's HTTP client
                from mcp.client.streamable_http import streamable_http_client

                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=dict(s.headers), timeout=httpx2.Timeout(30.0, read=300.0))
                )
                target = streamable_http_client(s.url, http_client=http)
            else:
                target = s.url
            client = await stack.enter_async_context(Client(target))
            tools, cursor = [], None
            while True:
                listed = await client.list_tools(cursor=cursor)
                tools += list(listed.tools)
                cursor = getattr(listed, "next_cursor", None)
                if not cursor:
                    break
            self.client, self.tools = client, tools
            self._ready.set()
            await self._closing.wait()

    @property
    def alive(self) -> bool:
        return self.client is not None and self._thread.is_alive()

    def call(self, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Run one tool call on the server's loop; raises TimeoutError or the SDK's error."""
        if not self.alive or self.loop is None:
            raise ConnectionError(f"the MCP server {self.server.label} is gone{self._stderr_tail()}")
        future = asyncio.run_coroutine_threadsafe(self.client.call_tool(name, arguments), self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError from None

    def close(self) -> None:
        if self.loop is not None and self._closing is not None and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._closing.set)
            except RuntimeError:
                pass
        self._thread.join(5)


_CONNECTIONS: dict[str, _Connection] = {}
_LOCK = threading.Lock()
_STARTING: dict[str, threading.Lock] = {}


def _connection(server: MCPServer) -> _Connection:
    """The shared connection to ``server`` (started, or restarted when it has died). Starting one server holds only
    that server's lock, so calls to the others go on meanwhile."""
    key = server.key()
    with _LOCK:
        conn = _CONNECTIONS.get(key)
        if conn is not None and conn.alive:
            return conn
        starting = _STARTING.setdefault(key, threading.Lock())
    with starting:
        with _LOCK:
            conn = _CONNECTIONS.get(key)
        if conn is not None and conn.alive:
            return conn  # another thread started it meanwhile
        if conn is not None:
            conn.close()
        conn = _Connection(server)
        with _LOCK:
            _CONNECTIONS[key] = conn
        return conn


def _forget(server: MCPServer, conn: _Connection) -> None:
    """Drop ``conn`` (it died) if it is still ``server``'s connection; the next call makes a new one."""
    with _LOCK:
        if _CONNECTIONS.get(server.key()) is not conn:
            return  # already replaced by a newer connection: leave that one alone
        del _CONNECTIONS[server.key()]
    conn.close()


def _connection_lost(e: BaseException) -> bool:
    import anyio

    e = _innermost(e)
    code = getattr(getattr(e, "error", None), "code", getattr(e, "code", None))
    # -32000: the transport closed; "Session terminated": a streamable-HTTP server that restarted forgot the session
    return (
        code == -32000
        or "session terminated" in str(e).lower()
        or isinstance(e, (anyio.ClosedResourceError, anyio.BrokenResourceError, EOFError))
    )


@atexit.register
def close_all() -> None:
    """Close every MCP connection of this process (stdio servers exit)."""
    with _LOCK:
        for conn in _CONNECTIONS.values():
            conn.close()
        _CONNECTIONS.clear()


class MCPTool(ExternalTool):
    """One tool of an MCP server (see the module docstring)."""

    stateful = True  # the server may keep state between calls, which a fork of the environment would share

    def __init__(self, server: MCPServer, listed: Any) -> None:
        schema = dict(getattr(listed, "input_schema", None) or {})
        schema.setdefault("type", "object")
        super().__init__(server.prefix + listed.name, listed.description or listed.name, schema)
        self.server, self.remote_name = server, listed.name

    def _problem(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the schema (None if they do): JSON Schema, and no argument it does not
        name unless it allows more (the model should hear of a misspelt argument, not have it dropped)."""
        from jsonschema import validators

        props = self.parameters.get("properties") or {}
        if self.parameters.get("additionalProperties") is not True and props:
            unknown = sorted(set(arguments) - set(props))
            if unknown:
                return f"unexpected argument(s) {', '.join(unknown)}; it takes {', '.join(props)}"
        cls = validators.validator_for(self.parameters)
        errors = sorted(cls(self.parameters).iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(x) for x in errors[0].path)
            return f"{where + ': ' if where else ''}{errors[0].message}"
        return None

    def _call(self, call: ToolCall) -> ToolOutput:
        problem = self._problem(call.arguments)
        if problem:
            return ToolOutput(f"Error: invalid arguments for {self.name}: {problem}", ok=False)
        conn = None
        try:
            conn = _connection(self.server)
            result = conn.call(self.remote_name, call.arguments, self.server.timeout)
        except TimeoutError:
            return ToolOutput(f"Error: {self.name} did not answer within {self.server.timeout:g} s", ok=False)
        except (ConnectionError, MCPServerError) as e:
            return ToolOutput(f"Error: {self.name} is unavailable: {e}", ok=False)
        except Exception as e:  # the SDK's protocol errors (e.g. an unknown tool)
            if _connection_lost(e) and conn is not None:  # the next call starts the server again
                _forget(self.server, conn)
                return ToolOutput(
                    f"Error: {self.name} is unavailable: the MCP server {self.server.label} closed the connection",
                    ok=False,
                )
            return ToolOutput(f"Error: {self.name}: {_describe(e)}", ok=False)
        return _output(result)


def _output(result: Any) -> ToolOutput:
    """A ``CallToolResult`` as the text the model reads: its structured content as JSON where it has some (one
    compact value, where a list would come as one text block per element), else its content blocks."""
    failed = bool(getattr(result, "is_error", False))
    structured = getattr(result, "structured_content", None)
    if structured is not None and not failed:
        if isinstance(structured, dict) and list(structured) == ["result"]:
            structured = structured["result"]
        return ToolOutput(
            structured if isinstance(structured, str) else json.dumps(structured, ensure_ascii=False, default=str)
        )
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'content'}: {getattr(block, 'mime_type', '')}]")
    text = "\n".join(parts)
    if failed and not text.startswith("Error"):
        text = f"Error: {text or 'the tool failed'}"
    return ToolOutput(text, ok=not failed)


def _describe(e: BaseException) -> str:
    """One line for an exception, looking inside the exception groups that anyio raises."""
    e = _innermost(e)
    return f"{type(e).__name__}: {e}"


def _innermost(e: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups; ``e`` itself if it is none."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def _child_env(extra: dict[str, str] | None) -> dict[str, str] | None:
    if extra is None:
        return None
    from mcp.client.stdio import get_default_environment

    return {**get_default_environment(), **extra}


def mcp_tools(*servers: MCPServer | str | Sequence[str] | dict[str, Any], **defaults: Any) -> list[MCPTool]:
    """The tools of one or more MCP servers, in the order they list them.

    Args:
        *servers: each a URL (streamable HTTP), a command line or argv list (stdio), a dict of :class:`MCPServer`
            fields, or an :class:`MCPServer`.
        **defaults: :class:`MCPServer` fields for every server given as a URL, command or dict (e.g. ``timeout=10``).

    Raises:
        ImportError: the ``mcp`` package is missing.
        MCPServerError: a server does not start, lists no tools, or lacks a tool named in ``include``.
        ValueError: two tools end up with the same name (give one server a ``prefix``).
    """
    try:
        import mcp  # noqa: F401 — present or not: the check
    except ImportError as e:
        raise ImportError("MCP tools need the mcp package: pip install 'turnrl[mcp]'") from e
    out: list[MCPTool] = []
    for spec in servers:
        server = MCPServer.parse(spec, **defaults)
        listed = _connection(server).tools
        if server.include is not None:
            names = {t.name for t in listed}
            missing = [n for n in server.include if n not in names]
            if missing:
                raise MCPServerError(
                    f"the MCP server {server.label} has no tool {', '.join(missing)}; it lists "
                    f"{', '.join(sorted(names)) or 'none'}"
                )
            listed = [t for t in listed if t.name in server.include]
        if not listed:
            raise MCPServerError(f"the MCP server {server.label} lists no tools; an environment needs at least one")
        out += [MCPTool(server, t) for t in listed]
    seen: set[str] = set()
    for t in out:
        if t.name in seen:
            raise ValueError(f"two MCP tools are named {t.name!r}; give one server a prefix (MCPServer(prefix=...))")
        seen.add(t.name)
    return out
