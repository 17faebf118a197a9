"""Writing OpenAI's Responses API answers (``POST /v1/responses``), shared by ``turnrl serve`` and the training
gateway; its sibling :mod:`turnrl.serving.responses_requests` reads the requests into the internal chat form and keeps
the stored responses.

The assistant message that the chat completions path returns (OpenAI chat form: ``content`` and ``tool_calls``)
becomes a response object (:func:`response_object`): ``resp_…`` and ``msg_…`` ids (:func:`new_id`), output items — a
``message`` with its ``output_text``, then a ``function_call`` (``fc_…``) per tool call (:func:`output_items`) —
``status`` (``incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` where the tokens ran out), usage,
and the request's settings echoed back. :mod:`turnrl.serving.responses` streams the same items as events. Errors take
OpenAI's shape (:class:`turnrl.serving.openai_api.APIError`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from turnrl.agents.base import Completion
from turnrl.serving.responses_requests import ResponsesRequest


def new_id(prefix: str) -> str:
    """An id such as ``resp_…``, ``msg_…``, ``fc_…``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def output_items(message: dict[str, Any], msg_id: str, complete: bool) -> list[dict[str, Any]]:
    """The assistant message (OpenAI chat form, as chat completions returns it) as Responses output items: a
    ``message`` with its text (if any), then a ``function_call`` per tool call."""
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append(
            {
                "type": "message",
                "id": msg_id,
                "status": "completed" if complete else "incomplete",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}],
            }
        )
    for call in message.get("tool_calls") or []:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{call['id'].removeprefix('call_')}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def response_object(
    resp_id: str,
    model: str,
    req: ResponsesRequest,
    message: dict[str, Any] | None,
    c: Completion | None,
    prompt_tokens: int,
    msg_id: str,
    created: int | None = None,
) -> dict[str, Any]:
    """A Responses API response object; ``message`` None: one still in progress (no output yet)."""
    status, incomplete, output, usage = "in_progress", None, [], None
    if message is not None and c is not None:
        complete = c.finish_reason != "length" or bool(message.get("tool_calls"))
        status = "completed" if complete else "incomplete"
        incomplete = None if complete else {"reason": "max_output_tokens"}
        output = output_items(message, msg_id, complete)
        n = len(c.token_ids)
        usage = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": n,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + n,
        }
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created or int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        "reasoning": {"effort": None, "summary": None},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "usage": usage,
        **req.echo,
    }
