"""Writing Anthropic's Messages API answers (``POST /v1/messages``), shared by ``turnrl serve`` and the training
gateway; its sibling :mod:`turnrl.serving.anthropic_requests` reads the requests into the internal chat form.

The assistant message that the chat completions path returns (OpenAI form: ``content`` and ``tool_calls``)
becomes a Messages response (:func:`message_response`): a ``msg_…`` id (:func:`new_message_id`), content blocks — its
text, then a ``tool_use`` block per tool call (:func:`content_blocks`) — ``stop_reason`` with ``stop_sequence``
(:func:`stop_reason`), and usage in tokens. :mod:`turnrl.serving.messages` streams the same blocks as events.

Errors go out in Anthropic's shape (:func:`anthropic_error`, :func:`server_error`): ``{"type": "error", "error":
{"type", "message"}}``, the ``type`` from the HTTP status (:data:`ERROR_TYPES`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from turnrl.agents.base import Completion
from turnrl.serving.openai_api import APIError

#: the error ``type`` of each HTTP status
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(e: APIError) -> dict[str, Any]:
    """An error in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type(e.status), "message": str(e)}}


def server_error(e: BaseException) -> dict[str, Any]:
    """An unexpected failure in Anthropic's shape (``api_error``)."""
    return {"type": "error", "error": {"type": "api_error", "message": f"{type(e).__name__}: {e}"}}


def new_message_id() -> str:
    """A response id, ``msg_…``."""
    return f"msg_{uuid.uuid4().hex[:24]}"


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant message (OpenAI form, as chat completions returns it) as Messages content blocks: its text (if
    any), then a ``tool_use`` block per tool call."""
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": json.loads(call["function"]["arguments"] or "{}"),
            }
        )
    return blocks


def stop_reason(message: dict[str, Any], c: Completion, stops: tuple[str, ...]) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence`` of a reply: ``tool_use`` where it holds tool calls, ``stop_sequence``
    where a stop sequence ended it (the first in the text), ``max_tokens`` where it ran out, else ``end_turn``."""
    if message.get("tool_calls"):
        return "tool_use", None
    hits = [(at, s) for s in stops if (at := c.text.find(s)) >= 0]
    if hits:
        return "stop_sequence", min(hits)[1]
    return ("max_tokens" if c.finish_reason == "length" else "end_turn"), None


def message_response(
    msg_id: str, model: str, message: dict[str, Any], c: Completion, prompt_tokens: int, stops: tuple[str, ...]
) -> dict[str, Any]:
    """A Messages API response for one reply (``message``: the assistant message chat completions returns)."""
    reason, sequence = stop_reason(message, c, stops)
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(message),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": len(c.token_ids)},
    }
