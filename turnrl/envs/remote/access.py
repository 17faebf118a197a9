"""Who may use an environment server (``turnrl envs serve``), and how much: its API key and its bounds.

* **The key.** A server that listens on anything but a loopback address needs one (``--api-key KEY`` or
  ``$TURNRL_ENV_API_KEY``; ``turnrl serve``'s ``$TURNRL_API_KEY`` is another variable, so ``remote:`` clients
  never send a model server's key to an environment server); on loopback it is optional, and honoured when given. With a key, every
  request — each HTTP route, the ``/ws`` and ``/mcp`` WebSockets — carries it, as ``Authorization: Bearer KEY`` or as
  HTTP Basic credentials whose password is the key (what a URL ``http://turnrl:KEY@HOST:PORT/ID`` makes an OpenEnv
  client or ``httpx`` send); anything else is answered 401 with a JSON error before the application sees it, so no
  environment is made and nothing runs. Keys are compared in constant time.
* **Sessions per client.** One client address holds at most ``max_sessions_per_client`` sessions at once
  (:class:`ClientQuota`); one more is refused with ``CAPACITY_REACHED`` (HTTP 429).
* **Request sizes.** An HTTP body or a WebSocket message holds at most ``max_request_bytes``: a larger body is
  answered 413 before it is read (:func:`read_body`); uvicorn closes a WebSocket whose message is larger (code
  1009, "message too big").
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
from collections import Counter
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from turnrl.envs.remote import protocol as p
from turnrl.envs.remote.session import Refused, dumps

#: The environment variable ``turnrl envs serve`` reads its key from, and ``remote:`` clients theirs.
KEY_VARIABLE = "TURNRL_ENV_API_KEY"

UNAUTHORIZED = "UNAUTHORIZED"
TOO_LARGE = "REQUEST_TOO_LARGE"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, ``127.x.y.z``, ``::1``): only this machine reaches it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name (or 0.0.0.0's like): other machines may reach it
        return False


def require_key(host: str, api_key: str | None) -> None:
    """Refuse to serve off loopback without a key.

    Raises:
        ValueError: ``host`` is not a loopback address and there is no key (the message says how to give one).
    """
    if not is_loopback(host) and not api_key:
        raise ValueError(
            f"listening on {host} (not a loopback address) needs an API key: pass --api-key KEY or set "
            f"{KEY_VARIABLE} (EnvServer(api_key=...) in Python), or listen on 127.0.0.1"
        )


def presented_key(authorization: str) -> str:
    """The key an ``Authorization`` header carries: a Bearer token, or the password of Basic credentials ('' if
    none)."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return ""


def unauthorized_message() -> str:
    """What a client without the right key is told."""
    return (
        "this environment server needs its API key: send `Authorization: Bearer KEY` (a remote: id sends "
        f"${KEY_VARIABLE} or its remote_api_key keyword argument; an OpenEnv client takes the key in its URL, "
        "http://turnrl:KEY@HOST:PORT/ID)"
    )


class KeyGuard:
    """ASGI middleware: every HTTP request and WebSocket handshake carries ``api_key``, or is answered 401 (a JSON
    ``{"error", "code": "UNAUTHORIZED"}``) before ``app`` runs anything. Without a key it passes everything on."""

    def __init__(self, app: Any, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.api_key is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = presented_key(HTTPConnection(scope).headers.get("authorization", ""))
        if hmac.compare_digest(given.encode(), self.api_key.encode()):
            await self.app(scope, receive, send)
            return
        response = Response(
            dumps({"error": unauthorized_message(), "code": UNAUTHORIZED}) + "\n",
            status_code=401,
            media_type="application/json",
            headers={"WWW-Authenticate": 'Bearer realm="turnrl"'},
        )
        if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong API key"})
            return
        await response(scope, receive, send)  # (a WebSocket handshake gets the same answer, as HTTP)


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes.

    Raises:
        HTTPException: 413, before reading, when ``Content-Length`` is larger; or once the bytes read pass it.
    """
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise HTTPException(413, too_large(int(length), limit))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, too_large(None, limit))
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int | None, limit: int) -> str:
    """The 413 message."""
    what = f"{size} bytes" if size is not None else "more"
    return (
        f"the request body is {what}; this server takes at most {limit} bytes per request (max_request_bytes, "
        "`turnrl envs serve --max-request-bytes`)"
    )


def client_of(connection: HTTPConnection) -> str:
    """The address a request or WebSocket comes from (behind a proxy: the proxy's)."""
    return connection.client.host if connection.client is not None else "unknown"


class ClientQuota:
    """How many sessions each client address holds; :meth:`take` refuses one more than ``per_client``."""

    def __init__(self, per_client: int) -> None:
        if per_client < 1:
            raise ValueError(f"max_sessions_per_client must be at least 1, got {per_client}")
        self.per_client = per_client
        self.held: Counter[str] = Counter()

    def take(self, client: str) -> Callable[[], None]:
        """Count one more session of ``client``; returns what gives it back (once).

        Raises:
            Refused: ``client`` holds ``per_client`` sessions already (``CAPACITY_REACHED``, HTTP 429).
        """
        if self.held[client] >= self.per_client:
            raise Refused(
                f"this client ({client}) holds {self.per_client} sessions already "
                "(max_sessions_per_client); close one or try again later",
                p.CAPACITY_REACHED,
                keep=False,
                status=429,
            )
        self.held[client] += 1
        given: list[bool] = []  # one entry once released

        def release() -> None:
            if given:
                return
            given.append(True)
            self.held[client] -= 1
            if self.held[client] <= 0:
                del self.held[client]

        return release
