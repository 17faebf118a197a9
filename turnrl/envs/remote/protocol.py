"""The wire format between an environment server (``turnrl envs serve``) and its clients (``remote:`` ids).

It is OpenEnv's WebSocket protocol (the ``openenv-core`` package): one connection is one session with its own
environment; every message is a JSON object ``{"type": ..., "data": {...}}``.

Client → server (OpenEnv's four, then turnrl's additions, which an OpenEnv server answers with ``UNKNOWN_TYPE``):

* ``reset`` ``{"seed"?: int, "options"?: {...}}`` → ``observation``
* ``step`` ``{"message": str}`` (the assistant's text, OpenEnv's convention for text actions) → ``observation``
* ``state`` → ``state`` ``{"env_id", "turn", "started", "finished", "task_id"}``
* ``close`` → the server ends the session
* ``make`` ``{"kwargs": {...}}`` (first, before any reset) → ``spec``: what the client needs before the first
  reset (tools, turn cap, splits, stop strings, number of tasks)
* ``call`` ``{"method": name, "args": [...]}`` → ``result`` ``{"value": ...}``: the environment's own helpers that
  the trainer and the conformance harness use (``oracle_action``, ``wrong_action``, ``task_at``,
  ``summarize_episodes``)
* ``tool`` ``{"name", "arguments", "raw"?}`` → ``result`` ``{"content", "ok"}``: one tool call outside an episode
  step (the conformance harness calls tools this way)

Server → client: ``observation`` ``{"observation": {...}, "reward": float | null, "done": bool}`` (OpenEnv's shape;
turnrl's observation holds ``messages``, ``info``, ``terminated``, ``truncated``), ``state``, ``spec``, ``result``,
or ``error`` ``{"message", "code"}``.
"""

from __future__ import annotations

import math
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnrl.types import Message

PROTOCOL = "turnrl-env/1"
REMOTE_PREFIX = "remote:"

# Error codes: OpenEnv's (WSErrorCode) and turnrl's own.
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
FACTORY_ERROR = "FACTORY_ERROR"
SESSION_ERROR = "SESSION_ERROR"
TIMEOUT = "TIMEOUT"
NOT_FOUND = "NOT_FOUND"

#: The helpers a client may run with a ``call`` message (anything else is refused).
CALLABLE = ("oracle_action", "wrong_action", "task_at", "summarize_episodes")


class RemoteEnvError(RuntimeError):
    """The environment server could not be reached, answered with an error, timed out, or sent something that is
    not a valid answer. The message names the server and what to change."""


class Spec(BaseModel):
    """What a turnrl server tells a client about the session's environment (the answer to ``make``)."""

    model_config = ConfigDict(extra="ignore")

    protocol: str
    env_id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    max_turns: int = Field(ge=1)
    split: str | None = None
    held_out_split: str | None = None
    evaluation_options: dict[str, Any] = Field(default_factory=dict)
    #: The current values of the attributes that ``evaluation_options`` names.
    options: dict[str, Any] = Field(default_factory=dict)
    #: Which of :data:`CALLABLE` the environment defines itself (a client calls only these).
    helpers: list[str] = Field(default_factory=list)
    stop: list[str] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    size: int | None = None
    description: str = ""


class TurnObservation(BaseModel):
    """The ``observation`` field of a turnrl server's ``observation`` message."""

    model_config = ConfigDict(extra="ignore")

    messages: list[Message]
    info: dict[str, Any] = Field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False


class ObservationData(BaseModel):
    """The ``data`` of an ``observation`` message, in OpenEnv's shape."""

    model_config = ConfigDict(extra="ignore")

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False


class Reply(BaseModel):
    """Any server message: a type and its data."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["observation", "state", "spec", "result", "error"]
    data: dict[str, Any] = Field(default_factory=dict)


def error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    """An ``error`` message."""
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def observation(
    messages: tuple[Message, ...],
    info: dict[str, Any],
    reward: float | None,
    terminated: bool = False,
    truncated: bool = False,
) -> dict[str, Any]:
    """An ``observation`` message for a turnrl environment's reset or step."""
    return {
        "type": "observation",
        "data": {
            "observation": {
                "messages": [m.model_dump(exclude_none=True) for m in messages],
                "info": info,
                "terminated": terminated,
                "truncated": truncated,
            },
            "reward": reward,
            "done": bool(terminated or truncated),
        },
    }


def parse_reply(raw: str | bytes, where: str) -> Reply:
    """A server message, or :class:`RemoteEnvError` saying how it is malformed."""
    try:
        return Reply.model_validate_json(raw)
    except ValidationError as e:
        raise RemoteEnvError(f"{where} sent a malformed message ({_problems(e)}): {_clip(raw)}") from None


def parse_turn(reply: Reply, where: str) -> tuple[tuple[Message, ...], float, bool, bool, dict[str, Any]]:
    """``(messages, reward, terminated, truncated, info)`` from a turnrl server's ``observation`` message."""
    try:
        data = ObservationData.model_validate(reply.data)
        turn = TurnObservation.model_validate(data.observation)
    except ValidationError as e:
        raise RemoteEnvError(
            f"{where} sent a malformed observation ({_problems(e)}): {_clip(str(reply.data))}"
        ) from None
    reward = 0.0 if data.reward is None else float(data.reward)
    if not math.isfinite(reward):
        raise RemoteEnvError(f"{where} sent a non-finite reward {reward}")
    terminated, truncated = turn.terminated, turn.truncated
    if data.done and not (terminated or truncated):
        terminated = True
    return tuple(turn.messages), reward, terminated, truncated, turn.info


def _problems(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'message'}: {err['msg']}" for err in e.errors()[:3])


def _clip(raw: Any, n: int = 200) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return text if len(text) <= n else text[:n] + " …"


def split_remote_id(env_id: str) -> str:
    """``"remote:http://host:port/ns/Name-v0"`` → ``"http://host:port/ns/Name-v0"`` (checked)."""
    url = env_id[len(REMOTE_PREFIX) :] if env_id.startswith(REMOTE_PREFIX) else env_id
    parts = urlsplit(url)
    env_id = redact(env_id, url)  # only for the messages
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
        raise ValueError(
            f"{env_id!r} is not of the form 'remote:http://HOST:PORT/namespace/Name-v0' (or "
            "'remote:http://HOST:PORT' for the server's first environment)"
        )
    try:
        parts.port  # noqa: B018 — raises on a port that is not a number
    except ValueError:
        raise ValueError(f"{env_id!r}: the port must be a number") from None
    return url


def redact(text: str, url: str) -> str:
    """``text`` with the password of ``url``'s credentials (``http://turnrl:KEY@HOST:PORT/ID``: the server's API
    key) written ``***`` wherever the URL appears in it: what error messages, logs and trajectories may hold."""
    password = urlsplit(url).password
    return text.replace(f":{password}@", ":***@") if password else text


def ws_url(url: str) -> str:
    """The session endpoint of an environment URL: ``http://h:p/ns/Name-v0`` → ``ws://h:p/ns/Name-v0/ws`` (OpenEnv
    clients add ``/ws`` to their base URL the same way)."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def http_url(url: str, endpoint: str) -> str:
    """``http://h:p/ns/Name-v0`` + ``schema`` → ``http://h:p/ns/Name-v0/schema``."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/ws") else path
    return urlunsplit((scheme, parts.netloc, f"{path}/{endpoint}", "", ""))


def version() -> str:
    """``turnrl X.Y.Z``, for ``/metadata``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return f"turnrl {installed('turnrl')}"
    except PackageNotFoundError:
        return "turnrl"


#: The JSON schemas ``GET /schema`` answers (OpenEnv's ``action``, ``observation`` and ``state``).
SCHEMAS = {
    "action": {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "the assistant's text"}},
        "required": ["message"],
    },
    "observation": {
        "type": "object",
        "properties": {
            "messages": {"type": "array", "items": Message.model_json_schema()},
            "info": {"type": "object"},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
        },
    },
    "state": {
        "type": "object",
        "properties": {
            "env_id": {"type": "string"},
            "episodes": {"type": "integer"},
            "turn": {"type": "integer"},
            "started": {"type": "boolean"},
            "finished": {"type": "boolean"},
            "task_id": {"type": ["string", "null"]},
        },
    },
}
