"""A small OpenAI-compatible HTTP server over any turnrl agent (``turnrl serve``).

Endpoints: ``GET /v1/models``, ``POST /v1/completions`` (prompt as text or token ids; ``logprobs`` and vLLM's
``return_tokens_as_token_ids`` supported), ``POST /v1/chat/completions``. It serves local models to judges
and evaluation clients, and gives the OpenAI backend a real server to be tested against on 127.0.0.1.
Requests are handled one generation at a time.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError

from turnrl.agents.base import Completion, SamplingParams


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _params(body: dict[str, Any]) -> SamplingParams:
    stop = body.get("stop") or ()
    try:
        return SamplingParams(
            temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0),
            top_k=max(int(body.get("top_k", 0) or 0), 0),
            max_new_tokens=body.get("max_tokens", body.get("max_completion_tokens", 16)),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=body.get("seed"),
            n=body.get("n", 1),
        )
    except (ValidationError, TypeError, ValueError) as e:
        raise _BadRequest(400, f"invalid sampling parameters: {e}") from e


class AgentServer:
    """Serve ``agent`` under the model name ``model`` on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, agent: Any, model: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.agent, self.model = agent, model
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:  # noqa: N802
                try:
                    length = int(self.headers.get("Content-Length", 0))
                    try:
                        body = json.loads(self.rfile.read(length) or b"{}")
                    except json.JSONDecodeError as e:
                        raise _BadRequest(400, f"request body is not JSON: {e}") from e
                    if not isinstance(body, dict):
                        raise _BadRequest(400, "request body must be a JSON object")
                    if body.get("model") != server.model:
                        raise _BadRequest(404, f"model {body.get('model')!r} not found; this server has {server.model!r}")
                    route = self.path.rstrip("/")
                    if route == "/v1/completions":
                        self._send(200, server.completions(body))
                    elif route == "/v1/chat/completions":
                        self._send(200, server.chat(body))
                    else:
                        raise _BadRequest(404, f"no route {self.path}")
                except _BadRequest as e:
                    self._send(e.status, {"error": {"message": str(e), "type": "invalid_request_error"}})
                except Exception as e:  # noqa: BLE001
                    self._send(500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error"}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8123/v1``."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> AgentServer:
        """Serve in a background thread."""
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> AgentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        with self._lock:
            return self.agent.generate([prompt_ids], params)

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """Handle ``/v1/completions``."""
        prompt = body.get("prompt")
        tok = self.agent.tokenizer
        if isinstance(prompt, str):
            ids = list(tok.encode(prompt, add_special_tokens=False))
        elif isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            ids = prompt
        else:
            raise _BadRequest(400, "prompt must be a non-empty string or a list of token ids")
        outs = self._generate(ids, _params(body))
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices = []
        for i, c in enumerate(outs):
            choice: dict[str, Any] = {"index": i, "text": c.text, "finish_reason": c.finish_reason}
            if body.get("logprobs") is not None:
                tokens = [f"token_id:{t}" if as_ids else tok.decode([t]) for t in c.token_ids]
                choice["logprobs"] = {"tokens": tokens, "token_logprobs": c.logprobs}
            choices.append(choice)
        return self._envelope("text_completion", choices, len(ids), sum(len(c.token_ids) for c in outs))

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """Handle ``/v1/chat/completions``."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest(400, "messages must be a non-empty list")
        text = self.agent.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = list(self.agent.tokenizer.encode(text, add_special_tokens=False))
        outs = self._generate(ids, _params(body))
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason}
                   for i, c in enumerate(outs)]
        return self._envelope("chat.completion", choices, len(ids), sum(len(c.token_ids) for c in outs))

    def _envelope(self, kind: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": kind, "created": int(time.time()), "model": self.model,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }
