"""Anthropic's Messages API endpoint of :class:`turnrl.serving.server.AgentServer` (which derives from
:class:`MessagesEndpoint`): ``POST /v1/messages`` and its server-sent events.

A Messages request runs through the chat completions path: :func:`turnrl.serving.anthropic_requests.messages_request`
converts it into the internal chat form, the server's hooks build the prompt (``chat_prompt``), generate
(``generate``) and record (``answered``, with ``endpoint`` ``"messages"``) as for ``/v1/chat/completions``
(:meth:`~turnrl.serving.endpoints.OpenAIEndpoints.run_chat`), and the answer is converted back
(:func:`~turnrl.serving.anthropic_answers.message_response`); tool calls come from the same Hermes ``<tool_call>``
parser, with ``toolu_`` ids.

A stream sends the events the official ``anthropic`` SDK parses, as the tokens are generated (the same
:class:`~turnrl.serving.streaming.Generation` and :class:`~turnrl.serving.streaming.TextStream` as chat streams:
text held back only where it may still change — half a character, the start of a stop sequence, a ``<tool_call>``):
``message_start``; a text block (``content_block_start``, ``content_block_delta`` with ``text_delta`` …,
``content_block_stop``) once there is text; per tool call a ``tool_use`` block whose input arrives as one
``input_json_delta``; ``message_delta`` (``stop_reason``, ``stop_sequence``, ``usage.output_tokens``);
``message_stop``. Each is ``event: NAME`` + ``data: {...}``. A failure after the stream started is an ``error``
event in Anthropic's shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from turnrl.serving.anthropic_answers import (
    anthropic_error,
    message_response,
    new_message_id,
    server_error,
    stop_reason,
)
from turnrl.serving.anthropic_requests import messages_request
from turnrl.serving.hooks import Endpoints, ServerHooks
from turnrl.serving.openai_api import APIError, ChatCall
from turnrl.serving.streaming import TOOL_TAG, Generation, TextStream, framed


class MessagesEndpoint(Endpoints):
    """Anthropic's Messages endpoint of :class:`~turnrl.serving.server.AgentServer`; it reaches the server only through
    its hooks (``self.hooks``, :class:`~turnrl.serving.hooks.ServerHooks`: the agent, the model name, ``chat_prompt``,
    ``run_chat``, how streams end)."""

    def messages(self, body: dict[str, Any], ctx: Any = None) -> dict[str, Any] | Iterator[str]:
        """Handle ``/v1/messages``: a Messages response, or an iterator of server-sent events when streaming."""
        req = messages_request(body)
        server = self.hooks
        call = ChatCall(
            server.chat_prompt(req.messages, req.tools, ctx),
            req.params,
            req.messages,
            req.tools,
            req.parse_tools,
            False,
            0,
            endpoint="messages",
            id_prefix="toolu_",
        )
        if req.stream:
            return message_events(server, call, ctx)
        envelope, outs = server.run_chat(call, ctx)
        return message_response(
            new_message_id(),
            server.model,
            envelope["choices"][0]["message"],
            outs[0],
            len(call.prompt),
            call.params.stop,
        )


def event(name: str, payload: dict[str, Any]) -> str:
    """One server-sent event of the Messages API: ``event: NAME`` and its ``data``."""
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n"


def error_event(e: BaseException) -> str:
    """A failure after the stream started, as Anthropic's ``error`` event."""
    return event("error", anthropic_error(e) if isinstance(e, APIError) else server_error(e))


def message_events(server: ServerHooks, call: ChatCall, ctx: Any) -> Iterator[str]:
    """The events of a streamed Messages request (``call``: the checked request in chat form); the generation has
    started (or failed, raising, so the client gets an HTTP error) when this returns."""
    gen = Generation(
        lambda on_token: server.run_chat(call, ctx, on_token),
        cancellable=server.cancel_streams,
        timeout=server.stream_timeout,
    ).start()
    return framed(gen, _events(server, call, gen), error=error_event, done=None)


def _events(server: ServerHooks, call: ChatCall, gen: Generation) -> Iterator[str]:
    yield event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": new_message_id(),
                "type": "message",
                "role": "assistant",
                "model": server.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": len(call.prompt), "output_tokens": 0},
            },
        },
    )
    hold = (*call.params.stop, *((TOOL_TAG,) if call.parse_tools else ()))
    stream = TextStream(server.agent.tokenizer, hold, hold_trailing_space=call.parse_tools)
    index = 0  # the block being sent
    text_open = False

    def text(piece: str) -> Iterator[str]:
        nonlocal text_open
        if not text_open:
            text_open = True
            yield event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            )
        yield event(
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
        )

    for _, token, logprob, top in gen:
        ready = stream.push(token, logprob, top)
        if ready and (piece := "".join(stream.pieces[j] or "" for j in ready)):
            yield from text(piece)
    envelope, outs = gen.result
    message = envelope["choices"][0]["message"]
    if rest := stream.rest(message["content"] or ""):
        yield from text(rest)
    if text_open:
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    for tool in message.get("tool_calls") or []:
        fn = tool["function"]
        yield event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": tool["id"], "name": fn["name"], "input": {}},
            },
        )
        yield event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": fn["arguments"]},
            },
        )
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    reason, sequence = stop_reason(message, outs[0], call.params.stop)
    yield event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": {"output_tokens": len(outs[0].token_ids)},
        },
    )
    yield event("message_stop", {"type": "message_stop"})
