"""An environment that runs on a server: ``remote:http://HOST:PORT/ID`` ids.

``make("remote:http://127.0.0.1:8000/turnrl/Arithmetic-v0", split="test")`` opens one session (a WebSocket
connection) to a ``turnrl envs serve`` server, which makes the environment there with those keyword arguments; the
client is then a :class:`~turnrl.envs.core.TextEnv` like any other — tools, turn cap, splits and stop strings come
from the server — so every command, config and placement takes the id.

An OpenEnv server (``openenv-core``) works too: the client finds out from its answer to ``make`` and maps text onto
the environment's action (the action's single text field, or a JSON object the model writes) and the observation's
fields onto a message. See :class:`RemoteEnv` for what differs.

A server that asks for an API key (``turnrl envs serve --api-key KEY``, required off loopback) gets it as
``Authorization: Bearer KEY``: the ``remote_api_key`` keyword argument, else ``$TURNRL_ENV_API_KEY``.

Faults: a server that does not answer within ``remote_timeout`` seconds, closes the connection or sends something
malformed raises :class:`~turnrl.envs.remote.protocol.RemoteEnvError` from ``reset``/``step``; a rollout records it
in that episode's ``Trajectory.error`` and goes on, and the next ``reset`` opens a new session.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from gymnasium.envs.registration import EnvSpec
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection, connect

from turnrl.envs.core import Obs, StepResult, Task, TextEnv, pick_index
from turnrl.envs.remote import openenv
from turnrl.envs.remote import protocol as p
from turnrl.envs.remote.protocol import RemoteEnvError
from turnrl.tools.base import ExternalTool, ToolOutput, _jsonable
from turnrl.types import Message, ToolCall, Trajectory

#: How many tasks an OpenEnv environment is taken to have (task i: the one its reset poses for seed i), so that
#: samplers and evaluations can number them; ``openenv_tasks`` changes it.
OPENENV_TASKS = 100_000

#: Seconds a client waits for the server to make a session's environment (the server's own limit, make_timeout, is
#: 300 s by default).
MAKE_TIMEOUT = 300.0

#: Threads that wait on servers for ``astep`` (a rollout steps many remote episodes at once).
_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="turnrl-remote")


class _Lost(RemoteEnvError):
    """The connection broke (closed by the server, a network error): a new session may work."""


class RemoteTool(ExternalTool):
    """A tool of a remote environment: its schema for the chat template; calling it runs it on the server."""

    stateful = True

    def __init__(self, env: RemoteEnv, schema: dict[str, Any]) -> None:
        fn = schema.get("function", schema)
        super().__init__(fn["name"], fn.get("description", ""), fn.get("parameters") or {"type": "object"})
        self._env = weakref.ref(env)  # no cycle: an environment dropped by its rollout ends its session at once

    def _call(self, call: ToolCall) -> ToolOutput:
        env = self._env()
        if env is None:
            raise RemoteEnvError(f"tool {self.name}: its remote environment is gone")
        data = env._request(
            {"type": "tool", "data": call.model_dump(exclude_none=True)}, f"tool {self.name}", new_session=True
        ).data
        return ToolOutput(str(data.get("content", "")), ok=bool(data.get("ok", False)))


class RemoteEnv(TextEnv):
    """One session with an environment served at ``url`` (``http://HOST:PORT/ID``; see the module docstring).

    Args:
        url: the environment's URL, with or without the ``remote:`` prefix.
        remote_timeout: seconds to wait for each answer (a reset, step or call) before the episode fails.
        remote_connect_timeout: seconds to wait for the server to accept a session.
        remote_api_key: the server's API key, sent with every connection (``Authorization: Bearer KEY``); default
            ``$TURNRL_ENV_API_KEY`` (none if unset). Kept by the client: the server never sees it as a keyword argument.
        **kwargs: the environment's keyword arguments, made on the server (a turnrl server; an OpenEnv server
            makes its environment itself and takes only ``max_turns`` and ``openenv_tasks``, which the client keeps).

    With an OpenEnv server: the opening observation and each step's observation become one user message (the
    observation's only text field, or its fields as JSON); the step's action is the text in the action's only text
    field (``message`` for most), or, when the action has several fields, the JSON object the model writes (text that
    is no such object is answered with an error message, as a malformed tool call is); ``done`` ends the episode
    (``terminated``), the client's ``max_turns`` (default 1) truncates it. It poses its own tasks: the client numbers
    them (``openenv_tasks``, default 100 000) and task ``i`` is the one the server poses when reset with seed ``i``
    (so that the samples of a group share their task where the environment is seeded).

    Raises:
        RemoteEnvError: no server answers at ``url``, nothing is served at its path, or the server refuses the
            keyword arguments (the message says which and why).
    """

    fork_mode = None
    fork_refusal = (
        "its state lives in a session on the server, which the client cannot copy (a server that can "
        "clone a session would need a fork call in the protocol)"
    )

    def __init__(
        self,
        url: str,
        *,
        remote_timeout: float = 120.0,
        remote_connect_timeout: float = 10.0,
        remote_api_key: str | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.url = p.split_remote_id(url)
        key = remote_api_key if remote_api_key is not None else os.environ.get("TURNRL_ENV_API_KEY")
        self.headers = {} if not key or urlsplit(self.url).password else {"Authorization": f"Bearer {key}"}
        self.remote_timeout, self.remote_connect_timeout = float(remote_timeout), float(remote_connect_timeout)
        if not (self.remote_timeout > 0 and self.remote_connect_timeout > 0):
            raise ValueError("remote_timeout and remote_connect_timeout must be positive")
        self.env_kwargs = dict(kwargs)
        self._lock = threading.RLock()
        self._conn: ClientConnection | None = None
        spec = self._open()
        self.openenv = spec is None
        if spec is None:
            max_turns = self.env_kwargs.pop("max_turns", 1)
            tasks = self.env_kwargs.pop("openenv_tasks", OPENENV_TASKS)
            if self.env_kwargs:
                self._drop()
                raise RemoteEnvError(
                    f"{p.redact(self.url, self.url)} is an OpenEnv server, which makes its environment itself: it "
                    f"takes no keyword arguments ({', '.join(sorted(self.env_kwargs))} given); only max_turns and "
                    "openenv_tasks, which the client keeps"
                )
            if not isinstance(tasks, int) or isinstance(tasks, bool) or tasks < 1:
                raise ValueError(f"openenv_tasks must be a positive integer, got {tasks!r}")
            spec = self._openenv_spec(max_turns, tasks)
        self.remote = spec
        super().__init__(max_turns=spec.max_turns, render_mode=render_mode)
        self.split, self.held_out_split = spec.split, spec.held_out_split
        self.evaluation_options = dict(spec.evaluation_options)
        for key, value in spec.options.items():  # what held-out evaluation compares with evaluation_options
            setattr(self, key, value)
        self.stop = tuple(spec.stop)
        self._tools = [RemoteTool(self, s) for s in spec.tools]
        kept = {"max_turns": spec.max_turns, "openenv_tasks": spec.size} if self.openenv else spec.kwargs
        self.spec: EnvSpec = EnvSpec(id=spec.env_id, entry_point=f"{p.REMOTE_PREFIX}{self.url}", kwargs=kept)

    # ---- the session ----

    @property
    def where(self) -> str:
        return f"the environment server at {p.redact(self.url, self.url)}"  # never its key

    def _connect(self) -> ClientConnection:
        local = urlsplit(self.url).hostname in ("127.0.0.1", "localhost", "::1")
        try:
            return connect(
                p.ws_url(self.url),
                open_timeout=self.remote_connect_timeout,
                max_size=2**24,
                close_timeout=2,
                proxy=None if local else True,
                additional_headers=self.headers,
            )
        except InvalidStatus as e:
            body = e.response.body.decode(errors="replace").strip() if e.response.body else ""
            try:
                body = json.loads(body).get("error", body)
            except (json.JSONDecodeError, AttributeError):
                pass
            raise RemoteEnvError(
                f"{self.where} refused the session (HTTP {e.response.status_code}): "
                f"{body or 'no environment at this path'}"
            ) from None
        except (OSError, TimeoutError, InvalidURI, WebSocketException) as e:
            raise RemoteEnvError(
                f"cannot reach {self.where}: {type(e).__name__}: {p.redact(str(e), self.url)}. Is a server running "
                "there? Start one with `turnrl envs serve ID --port PORT` (or an OpenEnv server) and name it as "
                "remote:http://HOST:PORT/ID"
            ) from None

    def _open(self) -> p.Spec | None:
        """Open the session (``self._conn``) and send ``make``: a turnrl server answers with the spec (returned); an
        OpenEnv server does not know it (None). A server at capacity is asked again until ``remote_connect_timeout``
        has passed."""
        deadline, pause = time.monotonic() + self.remote_connect_timeout, 0.1
        while True:
            self._conn = self._connect()
            try:
                reply = self._exchange(
                    self._conn,
                    {"type": "make", "data": {"kwargs": self.env_kwargs}},
                    "make",
                    timeout=max(self.remote_timeout, MAKE_TIMEOUT),
                )
            except RemoteEnvError:
                self._drop()
                raise
            if reply.type != "error" or reply.data.get("code") != p.CAPACITY_REACHED:
                break
            self._drop()
            if time.monotonic() + pause > deadline:
                raise RemoteEnvError(
                    f"{self.where} is at capacity and no session freed within "
                    f"{self.remote_connect_timeout:g} s (remote_connect_timeout): "
                    f"{reply.data.get('message')}"
                )
            time.sleep(pause)
            pause = min(2 * pause, 1.0)
        if reply.type == "error" and reply.data.get("code") == p.UNKNOWN_TYPE:
            return None
        if reply.type == "error":
            self._drop()
            raise RemoteEnvError(f"{self.where} could not make the environment: {reply.data.get('message')}")
        if reply.type != "spec":
            self._drop()
            raise RemoteEnvError(f"{self.where} answered make with a {reply.type!r} message, not a spec")
        try:
            spec = p.Spec.model_validate(reply.data)
        except ValueError as e:
            self._drop()
            raise RemoteEnvError(f"{self.where} sent a malformed spec: {e}") from None
        return spec

    def _exchange(
        self, conn: ClientConnection, message: dict[str, Any], what: str, timeout: float | None = None
    ) -> p.Reply:
        timeout = timeout or self.remote_timeout
        try:
            try:
                conn.send(json.dumps(message, default=_jsonable))
            except ConnectionClosed:
                raw = conn.recv(timeout=0.5)  # the server said why before it closed (e.g. CAPACITY_REACHED)
            else:
                raw = conn.recv(timeout=timeout)
        except TimeoutError:
            self._drop()
            raise RemoteEnvError(
                f"{self.where} did not answer the {what} within {timeout:g} s "
                "(remote_timeout); the session is dropped, the next reset opens a new one"
            ) from None
        except ConnectionClosed as e:
            self._drop()
            big = (
                " (the message was larger than the server takes: its max_request_bytes)"
                if (e.rcvd is not None and e.rcvd.code == 1009)
                else ""
            )
            raise _Lost(
                f"{self.where} closed the session during the {what} ({e}){big}; the next reset opens a new one"
            ) from None
        except OSError as e:
            self._drop()
            raise _Lost(f"{self.where}: the {what} failed: {e}") from None
        return p.parse_reply(raw, self.where)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken
                pass

    def _request(self, message: dict[str, Any], what: str, *, new_session: bool = False) -> p.Reply:
        """Send one message and read its answer; an ``error`` answer raises :class:`RemoteEnvError`."""
        with self._lock:
            for attempt in (0, 1):
                if self._conn is None:
                    if not new_session:
                        raise RemoteEnvError(f"the session with {self.where} was lost; call reset() to start a new one")
                    self._reopen()
                assert self._conn is not None  # open, or just reopened
                try:
                    reply = self._exchange(self._conn, message, what)
                except _Lost:
                    if attempt or not new_session:
                        raise
                    continue  # the server had closed this session (idle, restarted): once more on a new one
                if new_session and not attempt and reply.type == "error" and reply.data.get("code") == p.SESSION_ERROR:
                    self._drop()
                    continue
                break
        if reply.type == "error":
            code = reply.data.get("code")
            if code in (p.TIMEOUT, p.SESSION_ERROR, p.CAPACITY_REACHED, p.FACTORY_ERROR):
                self._drop()
            raise RemoteEnvError(f"{self.where} answered the {what} with {code}: {reply.data.get('message')}")
        return reply

    def _reopen(self) -> None:
        spec = self._open()
        if spec is not None and spec != self.remote:
            self.remote = spec
            self._tools = [RemoteTool(self, t) for t in spec.tools]

    def close(self) -> None:
        """End the session (the server frees its environment)."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.send(json.dumps({"type": "close"}))
                    self._conn.recv(timeout=1.0)  # the server closes the session; wait for it, briefly
                except Exception:  # closing is best effort
                    pass
            self._drop()
        super().close()

    def __del__(self) -> None:
        # No close() here: it joins the connection's reader thread, which can deadlock inside garbage collection.
        # Shutting the socket down ends that thread and tells the server the session is over.
        conn = getattr(self, "_conn", None)
        if conn is not None:
            try:
                conn.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---- the TextEnv contract ----

    @property
    def tools(self) -> list[RemoteTool]:
        """The environment's tools (they run on the server)."""
        return list(self._tools)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas as the server gives them."""
        return list(self.remote.tools)

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        data: dict[str, Any] = {}
        seed = getattr(self, "_next_seed", None)
        if seed is not None:
            data["seed"] = seed
        if self.openenv:  # the server poses its own tasks: task i is the one it poses for seed i
            unknown = sorted(set(options) - {"index"})
            if unknown:
                raise ValueError(f"an OpenEnv server takes no reset options (got {unknown}); it poses its own task")
            if "index" in options:
                data["seed"] = pick_index(self, self.remote.size or 0, options)
        elif options:
            data["options"] = options
        reply = self._request({"type": "reset", "data": data}, "reset", new_session=True)
        if self.openenv:
            obs, _, _, _, info = openenv.turn(reply, self.where)
            if data.get("seed") is not None and info.get("task_id") is None:  # task i: what seed i poses
                info["task_id"] = f"{self.spec.id.removeprefix('remote/')}/seed/{data['seed']}"
        else:
            obs, _, _, _, info = p.parse_turn(reply, self.where)
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """Start an episode on the server (a new session if the last one was lost)."""
        self._next_seed = seed
        return super().reset(seed=seed, options=options)

    def _step(self, action: str) -> StepResult:
        if self.openenv:
            payload = self.openenv_action.payload(action)
            if isinstance(payload, str):  # the text is no action: the model reads why, as with a malformed tool call
                return (Message(role="user", content=payload),), 0.0, False, False, {"error": payload}
            return openenv.turn(self._request({"type": "step", "data": payload}, f"step {self.turn}"), self.where)
        return p.parse_turn(
            self._request({"type": "step", "data": {"message": action}}, f"step {self.turn}"), self.where
        )

    async def _astep(self, action: str) -> StepResult:
        return await asyncio.get_running_loop().run_in_executor(_POOL, self._step, action)

    # ---- helpers the trainer and the harness use ----

    def _call(self, method: str, *args: Any) -> Any:
        if method not in self.remote_helpers:
            return None
        return self._request(
            {"type": "call", "data": {"method": method, "args": list(args)}}, method, new_session=True
        ).data.get("value")

    @property
    def remote_helpers(self) -> tuple[str, ...]:
        """The helpers this session's environment defines itself (none on an OpenEnv server)."""
        return tuple(self.remote.helpers)

    def oracle_action(self) -> str | None:
        """The server environment's oracle action, if it has one."""
        value = self._call("oracle_action") if self._started else None
        return value if isinstance(value, str) else None

    def wrong_action(self) -> str:
        """The server environment's certainly-wrong action."""
        value = self._call("wrong_action") if self._started or self._conn is not None else None
        return value if isinstance(value, str) else super().wrong_action()

    def task_at(self, index: int) -> Task | None:
        """Task ``index`` of the server environment (None if it has no such list)."""
        value = self._call("task_at", index)
        return Task.model_validate(value) if isinstance(value, dict) else None

    def summarize_episodes(self, trajectories: Any) -> dict[str, float]:
        """The server environment's own figures over these episodes."""
        if not trajectories or "summarize_episodes" not in self.remote_helpers:
            return {}
        value = self._call(
            "summarize_episodes", [t.model_dump(mode="json") if isinstance(t, Trajectory) else t for t in trajectories]
        )
        return {k: float(v) for k, v in (value or {}).items()}

    # ---- OpenEnv servers (the mapping is in turnrl.envs.remote.openenv) ----

    def _openenv_spec(self, max_turns: Any, tasks: int) -> p.Spec:
        self.openenv_action = openenv.Action.fetch(self.url, self.remote_connect_timeout, self.headers)
        return p.Spec(protocol="openenv", env_id=self.openenv_action.env_id, max_turns=max_turns, size=tasks)


class SizedRemoteEnv(RemoteEnv):
    """A remote environment whose server says how many tasks it has (``len(env)``)."""

    def __len__(self) -> int:
        return int(self.remote.size or 0)


def make_remote(env_id: str, **kwargs: Any) -> RemoteEnv:
    """The client environment of a ``remote:`` id: a :class:`SizedRemoteEnv` when the server says how many tasks it
    has (so that ``len(env)`` works exactly where it does on the server), else a :class:`RemoteEnv`."""
    env = RemoteEnv(env_id, **kwargs)
    if env.remote.size is not None:
        env.__class__ = SizedRemoteEnv
    return env
