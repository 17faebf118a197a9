"""An OpenAI- and Anthropic-compatible HTTP server over any turnrl agent (``turnrl serve``), on Werkzeug.

Endpoints: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/completions`` (prompt as text, texts, or token
ids; ``logprobs=k``; vLLM's ``return_tokens_as_token_ids``), ``POST /v1/chat/completions``, Anthropic's ``POST
/v1/messages`` (:mod:`turnrl.serving.messages`: a Messages request converted into a chat request, run through the
same path, and answered in Anthropic's shape, events and errors included) and OpenAI's ``POST /v1/responses``
(:mod:`turnrl.serving.responses`: the Responses API run through the same path, with ``previous_response_id`` over
the last 1,000 responses, answered as response objects and the Responses event stream;
:mod:`turnrl.serving.responses_requests`, :mod:`turnrl.serving.responses_answers`). ``/v1/completions`` and
``/v1/chat/completions`` support ``stream`` (server-sent events sent while the tokens are generated, with
``stream_options.include_usage``;
:mod:`turnrl.serving.streaming`), logprobs with ``top_logprobs`` (recorded while sampling by the HF agent), ``stop``
(cut from the returned text, as OpenAI does), ``seed`` and ``n``; chat supports ``tools`` with ``tool_choice``
``"auto"``/``"none"`` and returns parsed ``tool_calls`` (Hermes ``<tool_call>`` blocks). Tools are rendered by the
chat template; where it cannot render them (or earlier turns' tool calls), they are written into the messages
instead (:mod:`turnrl.template_tools`), so no model silently loses them. Anything else — penalties, ``logit_bias``,
``response_format`` other than text, forced tool choice, ``echo``, unknown parameters — is refused with a 400 in
OpenAI's error shape that names the parameter (:mod:`turnrl.serving.openai_api`); on ``/v1/messages`` errors take
Anthropic's shape (:mod:`turnrl.serving.anthropic_answers`). One generation runs at a time.

With ``api_key`` every request must carry it (``Authorization: Bearer KEY``; on ``/v1/messages`` also ``x-api-key:
KEY``: the ``anthropic`` SDK has sent its key either way); listening on anything but a loopback address requires one.
Subclasses (the training gateway, :mod:`turnrl.gateway`) add routes and a per-request context through
:meth:`AgentServer.rules`, :meth:`~AgentServer.context`, :meth:`~AgentServer.chat_prompt`,
:meth:`~AgentServer.generate`, :meth:`~AgentServer.answered` and :meth:`~AgentServer.response_store`.

Its namesakes are the other servers, each its room's: :mod:`turnrl.gateway.server` (the same APIs, every call
recorded for training) and :mod:`turnrl.envs.remote.server` (environments, not policies).
"""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Self

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from turnrl.agents.base import Completion, SamplingParams, capabilities_of
from turnrl.serving.anthropic_answers import anthropic_error, server_error
from turnrl.serving.endpoints import OpenAIEndpoints
from turnrl.serving.messages import MessagesEndpoint
from turnrl.serving.openai_api import (
    APIError,
)
from turnrl.serving.responses import ResponsesEndpoint
from turnrl.serving.responses_requests import ResponseStore
from turnrl.tokens import ChatRenderer
from turnrl.wsgi import quiet_server, serve_in_thread, stop

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_ANTHROPIC_PATH = re.compile(r"/v1/messages(/|$)")


class AgentServer(OpenAIEndpoints, MessagesEndpoint, ResponsesEndpoint):
    """Serve ``agent`` under the model name ``model`` on ``host:port`` (port 0 picks a free one)."""

    #: a streamed generation stops at its next token once its client is gone
    cancel_streams = True
    #: the longest wait for the next token of a stream, in seconds
    stream_timeout = 600.0

    def __init__(
        self, agent: Any, model: str, host: str = "127.0.0.1", port: int = 0, *, api_key: str | None = None
    ) -> None:
        if host not in LOOPBACK and not api_key:
            raise ValueError(
                f"listening on {host!r} (not a loopback address) needs an API key: pass api_key "
                "(`turnrl serve --api-key KEY`), or listen on 127.0.0.1"
            )
        self.agent, self.model, self.api_key = agent, model, api_key
        self.stored_responses = ResponseStore()  # for previous_response_id on /v1/responses
        self.generation_lock = threading.Lock()  # one generation (or scoring) at a time
        try:  # an agent that reports its tokens as it samples them (a live stream)
            self._agent_streams = capabilities_of(agent).on_token
        except (AttributeError, TypeError, ValueError):
            self._agent_streams = False
        self.urls = Map(self.rules(), strict_slashes=False)
        self.httpd = quiet_server(host, port, self._wsgi)
        self.thread: threading.Thread | None = None

    def rules(self) -> list[Rule]:
        """The routes: ``models``, ``model``, ``completions``, ``chat``, ``messages`` and ``responses`` endpoints
        (subclasses add their own)."""
        return [
            Rule("/v1/models", endpoint="models", methods=["GET"]),
            Rule("/v1/models/<path:name>", endpoint="model", methods=["GET"]),
            Rule("/v1/completions", endpoint="completions", methods=["POST"]),
            Rule("/v1/chat/completions", endpoint="chat", methods=["POST"]),
            Rule("/v1/messages", endpoint="messages", methods=["POST"]),
            Rule("/v1/responses", endpoint="responses", methods=["POST"]),
        ]

    def endpoints(self) -> str:
        """The routes as a client reads them: ``POST /v1/chat/completions, …`` (each method and path once, in order)."""
        seen: list[str] = []
        for rule in self.rules():
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", rule.rule)  # `<path:name>` reads `<name>`
            for method in sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}):
                if f"{method} {path}" not in seen:
                    seen.append(f"{method} {path}")
        return ", ".join(seen)

    # ---- serving ----

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123/v1``."""
        return f"http://{self.httpd.host}:{self.httpd.server_port}/v1"

    def start(self) -> Self:
        """Serve in a background thread."""
        self.thread = serve_in_thread(self.httpd)
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        stop(self.httpd)

    def __enter__(self) -> AgentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        # Anthropic's routes answer errors in Anthropic's shape (also a wrong method on /v1/messages)
        anthropic = bool(_ANTHROPIC_PATH.search(request.path))
        try:
            try:
                endpoint, args = self.urls.bind_to_environ(environ).match()
            except HTTPException as e:  # a path or method this server does not answer: say which it does
                raise APIError(
                    e.code or 404,
                    f"{request.method} {request.path}: {e.name}; this server answers {self.endpoints()}",
                    kind="not_found_error" if e.code == 404 else "invalid_request_error",
                ) from e
            anthropic = endpoint == "messages"
            self._authorize(request, endpoint)
            ctx = self.context(request, args, endpoint)
            if endpoint == "models":
                response = self._json({"object": "list", "data": [self._model_card()]})
            elif endpoint == "model":
                if args["name"] != self.model:
                    raise APIError(
                        404,
                        f"model {args['name']!r} not found; this server has {self.model!r}",
                        param="model",
                        code="model_not_found",
                        kind="not_found_error",
                    )
                response = self._json(self._model_card())
            else:
                body = self._body(request)
                handle = {
                    "completions": self.completions,
                    "chat": self.chat,
                    "messages": self.messages,
                    "responses": self.responses,
                }[endpoint]
                result = handle(body, ctx)
                if isinstance(result, dict):
                    response = self._json(result)
                else:
                    response = Response(result, mimetype="text/event-stream", headers={"Cache-Control": "no-cache"})
        except APIError as e:
            response = self._json(anthropic_error(e) if anthropic else e.payload(), e.status)
        except Exception as e:  # any failure is an answer in the API's shape
            response = self._json(
                server_error(e)
                if anthropic
                else {
                    "error": {
                        "message": f"{type(e).__name__}: {e}",
                        "type": "server_error",
                        "param": None,
                        "code": None,
                    }
                },
                500,
            )
        return response(environ, start_response)

    def _authorize(self, request: Request, endpoint: str) -> None:
        """Check the key: ``Authorization: Bearer KEY``, or on ``/v1/messages`` also ``x-api-key: KEY``."""
        if self.api_key is None:
            return
        given = request.headers.get("Authorization", "")
        tokens = [given[7:].strip() if given.lower().startswith("bearer ") else ""]
        if endpoint == "messages":  # either may hold it (the anthropic SDK sends both where both are set)
            tokens.append(request.headers.get("x-api-key", "").strip())
        if not any(hmac.compare_digest(token.encode(), self.api_key.encode()) for token in tokens):
            how = (
                "`x-api-key: KEY` or `Authorization: Bearer KEY` (the anthropic client's api_key)"
                if endpoint == "messages"
                else "`Authorization: Bearer KEY` (the OpenAI client's api_key)"
            )
            raise APIError(
                401, f"missing or wrong API key: send {how}", code="invalid_api_key", kind="authentication_error"
            )

    def context(self, request: Request, args: Mapping[str, Any], endpoint: str) -> Any:
        """What a request carries besides its body (the gateway: its session); ``endpoint`` names the route
        (``chat``, ``messages``, …). None here."""
        return None

    @staticmethod
    def _json(payload: dict[str, Any], status: int = 200) -> Response:
        return Response(json.dumps(payload), status=status, mimetype="application/json")

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": 0, "owned_by": "turnrl"}

    def _body(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(request.get_data() or b"{}")
        except json.JSONDecodeError as e:
            raise APIError(400, f"request body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise APIError(400, "request body must be a JSON object")
        if body.get("model") != self.model:
            raise APIError(
                404,
                f"model {body.get('model')!r} not found; this server has {self.model!r}",
                param="model",
                code="model_not_found",
                kind="not_found_error",
            )
        return body

    # ---- generation ----

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: Any = None, on_token: Any = None
    ) -> list[Completion]:
        """``params.n`` completions of one token prompt (here: one generation at a time). ``on_token`` (streaming)
        is passed to agents whose ``generate`` takes it."""
        with self.generation_lock:
            if on_token is not None and self._agent_streams:
                return self.agent.generate([prompt_ids], params, on_token=on_token)
            return self.agent.generate([prompt_ids], params)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, ctx: Any = None
    ) -> list[int]:
        """The token prompt of a chat request: the chat template's rendering of ``messages`` and ``tools`` — where
        the template cannot render tools or tool calls, they are written into the messages
        (:mod:`turnrl.template_tools`)."""
        renderer = ChatRenderer(self.agent.tokenizer, tools, fit_tools=True)
        try:
            text = renderer.render(messages, add_generation_prompt=True)
        except Exception as e:  # the template refused these messages (e.g. an unsupported role)
            raise APIError(
                400,
                f"the model's chat template cannot render these messages: {type(e).__name__}: {e}",
                param="messages",
            ) from e
        return renderer.encode(text)

    def answered(self, ctx: Any, prompt: list[int], outs: list[Completion], request: dict[str, Any]) -> None:
        """Called with every answered generation request before the response is sent (the gateway records it):
        the token prompt, the completions and ``request`` — ``{"endpoint": "chat"|"messages"|"responses",
        "messages", "tools", "returned": the assistant messages sent back, one per completion}`` (chat, and
        Anthropic's Messages API and OpenAI's Responses API in the same internal chat form) or ``{"endpoint":
        "completions"}``. Nothing here."""
