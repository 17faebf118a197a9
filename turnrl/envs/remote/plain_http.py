"""The plain-HTTP routes of an environment server (:class:`~turnrl.envs.remote.server.EnvServer`): ``GET /``,
``/health``, ``/ID/metadata``, ``/ID/schema``, ``/ID/state``, ``POST /ID/reset``, ``/ID/step`` and ``/ID/mcp``, and
``/ID/ws`` asked over plain HTTP (426). HTTP holds no session: each reset or step runs on an environment made for
that request alone (the routes' answers are described in :mod:`turnrl.envs.remote.server`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from turnrl.envs.remote import protocol as p
from turnrl.envs.remote.access import client_of, read_body
from turnrl.envs.remote.mcp import McpSessions
from turnrl.envs.remote.session import DaemonThreads, Limits, Refused, Session, dumps


class PlainHttp:
    """The plain-HTTP handlers; :class:`~turnrl.envs.remote.server.EnvServer` has the attributes they use."""

    env_ids: list[str]
    descriptions: dict[str, str]
    limits: Limits
    max_sessions: int
    max_request_bytes: int
    stateless: int
    mcp: McpSessions
    _threads: DaemonThreads | None

    def _json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return Response(dumps(body) + "\n", status_code=status, media_type="application/json", headers=headers)

    @property
    def open_sessions(self) -> int:
        raise NotImplementedError

    def _open_session(self, env_id: str, client: str) -> Session:
        raise NotImplementedError

    async def _index(self, request: Request) -> Response:
        return self._json({"protocol": p.PROTOCOL, "environments": self.env_ids})

    async def _health(self, request: Request) -> Response:
        busy = self._threads.running if self._threads is not None else 0
        return self._json(
            {
                "status": "healthy",
                "sessions": self.open_sessions,
                "max_sessions": self.max_sessions,
                "calls_running": busy,
            }
        )

    async def _metadata(self, request: Request, env_id: str) -> Response:
        return self._json(
            {"name": env_id, "description": self.descriptions[env_id], "version": p.version(), "protocol": p.PROTOCOL}
        )

    async def _schema(self, request: Request, env_id: str) -> Response:
        return self._json(p.SCHEMAS)

    async def _state(self, request: Request, env_id: str) -> Response:
        return self._json(Session(env_id, self.limits).state())

    async def _ws_over_http(self, request: Request, env_id: str) -> Response:
        return self._json(
            {
                "error": f"{request.url.path} is a WebSocket endpoint (connect with ws://…); over plain "
                "HTTP use POST …/reset and …/step",
                "code": "UPGRADE_REQUIRED",
            },
            426,
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        raw = await read_body(request, self.max_request_bytes)
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as e:
            raise HTTPException(422, f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise HTTPException(422, "the body is a JSON object")
        return body

    async def _stateless(self, request: Request, env_id: str, messages: list[dict[str, Any]]) -> Response:
        """Play ``messages`` on an environment made for this request: the last reply's data, or its error (503 once
        ``max_sessions`` environments are open, 429 once the client holds ``max_sessions_per_client``)."""
        try:
            session = self._open_session(env_id, client_of(request))
        except Refused as e:
            return self._json({"error": str(e), "code": e.code}, e.status)
        self.stateless += 1
        try:
            reply = await session.play_once(messages)
        finally:
            self.stateless -= 1
        if reply["type"] == "error":
            code = reply["data"]["code"]
            status = {p.VALIDATION_ERROR: 422, p.FACTORY_ERROR: 422, p.TIMEOUT: 504}.get(code, 500)
            return self._json({"error": reply["data"]["message"], "code": code}, status)
        return self._json(reply["data"])

    async def _reset(self, request: Request, env_id: str) -> Response:
        body = await self._body(request)
        return await self._stateless(request, env_id, [{"type": "reset", "data": body}])

    async def _step(self, request: Request, env_id: str) -> Response:
        body = await self._body(request)
        action = body.pop("action", None)
        for extra in ("timeout_s", "request_id"):  # OpenEnv's StepRequest fields that a turnrl step does not use
            body.pop(extra, None)
        if not isinstance(action, dict) or not isinstance(action.get("message"), str):
            raise HTTPException(
                422,
                'a step\'s body is {"action": {"message": the assistant\'s text}, "seed": '
                'the seed of the reset it answers, "options"?: {...}}',
            )
        if body.get("seed") is None:
            return self._json(
                {
                    "error": "a step over plain HTTP needs the seed of the reset it answers (HTTP holds no "
                    "session, so the step plays the first turn of the episode POST /reset with "
                    "the same seed and options starts); play multi-turn episodes over the /ws "
                    "WebSocket",
                    "code": "NO_SESSION",
                },
                409,
            )
        response = await self._stateless(
            request, env_id, [{"type": "reset", "data": body}, {"type": "step", "data": {"message": action["message"]}}]
        )
        if response.status_code == 200:
            data = json.loads(bytes(response.body))
            if not data.get("done"):
                data["observation"].setdefault("info", {})["session"] = (
                    "the episode goes on, but HTTP holds no session: play its next turns over the /ws WebSocket"
                )
                return self._json(data)
        return response

    async def _mcp(self, request: Request, env_id: str) -> Response:
        raw = await read_body(request, self.max_request_bytes)
        return self._json(await self.mcp.answer(raw, env_id, client=client_of(request)))
