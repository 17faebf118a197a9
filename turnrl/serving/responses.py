"""OpenAI's Responses API endpoint of :class:`turnrl.serving.server.AgentServer` (which derives from
:class:`ResponsesEndpoint`): ``POST /v1/responses`` and its server-sent events.

A Responses request runs through the chat completions path: :func:`turnrl.serving.responses_requests.responses_request`
converts it into the internal chat form (``previous_response_id`` resolved through :meth:`ResponsesEndpoint.
response_store`), the server's hooks build the prompt (``chat_prompt``), generate (``generate``) and record
(``answered``, with ``endpoint`` ``"responses"``) as for ``/v1/chat/completions``
(:meth:`~turnrl.serving.endpoints.OpenAIEndpoints.run_chat`), and the answer is converted back
(:func:`~turnrl.serving.responses_answers.response_object`); tool calls come from the same Hermes ``<tool_call>`` parser
and become ``function_call`` items. The response's conversation is stored once it is generated — also when a
streaming client hung up and the generation ran on (the gateway) — so that ``previous_response_id`` can continue it.

A stream sends the events the official ``openai`` client parses (``client.responses.stream``), as the tokens are
generated (the same :class:`~turnrl.serving.streaming.Generation` and :class:`~turnrl.serving.streaming.TextStream`
as chat streams: text held back only where it may still change — half a character, a ``<tool_call>``):
``response.created``, ``response.in_progress``; once there is text a message item (``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` …, ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``); per tool call a ``function_call`` item whose
arguments arrive as one ``response.function_call_arguments.delta`` (then ``.done``); and ``response.completed`` (or
``response.incomplete`` where ``max_output_tokens`` ran out, as OpenAI ends such streams). Each is ``event: TYPE`` +
``data: {"type": TYPE, "sequence_number": n, ...}``. A failure after the stream started is an ``error`` event
followed by ``response.failed``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from turnrl.serving.hooks import Endpoints, ServerHooks
from turnrl.serving.openai_api import APIError, ChatCall, chat_messages
from turnrl.serving.responses_answers import new_id, response_object
from turnrl.serving.responses_requests import ResponsesRequest, ResponseStore, responses_request
from turnrl.serving.streaming import TOOL_TAG, Generation, TextStream, framed


class ResponsesEndpoint(Endpoints):
    """OpenAI's Responses endpoint of :class:`~turnrl.serving.server.AgentServer`; it reaches the server only through
    its hooks (``self.hooks``, :class:`~turnrl.serving.hooks.ServerHooks`: the agent, the model name, ``chat_prompt``,
    ``run_chat``, ``response_store``, how streams end), and keeps the server's bounded store of responses
    (``stored_responses``, made by the server) as the default :meth:`response_store`."""

    stored_responses: ResponseStore  # set by the server (declared for the type checker)

    def response_store(self, ctx: Any = None) -> ResponseStore:
        """Where the responses of a request's context are kept for ``previous_response_id``: the server's bounded
        store (the gateway: the session's own)."""
        return self.stored_responses

    def responses(self, body: dict[str, Any], ctx: Any = None) -> dict[str, Any] | Iterator[str]:
        """Handle ``/v1/responses``: a response object, or an iterator of server-sent events when streaming."""
        server = self.hooks
        store = server.response_store(ctx)
        req = responses_request(body, store)
        call = ChatCall(
            server.chat_prompt(req.messages, req.tools, ctx),
            req.params,
            req.messages,
            req.tools,
            req.parse_tools,
            False,
            0,
            endpoint="responses",
        )
        ids = (new_id("resp"), new_id("msg"), int(time.time()))

        def finish(result: tuple[dict[str, Any], list[Any]]) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
            envelope, outs = result
            message = envelope["choices"][0]["message"]
            response = response_object(ids[0], server.model, req, message, outs[0], len(call.prompt), ids[1], ids[2])
            if req.store:  # what a continuation starts from: this conversation and the reply, in chat form
                store.put(ids[0], req.history + chat_messages([message]))
            return envelope, outs, response

        if req.stream:
            return response_events(server, call, req, ctx, ids, finish)
        return finish(server.run_chat(call, ctx))[2]


def event(kind: str, seq: Iterator[int], **fields: Any) -> str:
    """One server-sent event of the Responses API: ``event: TYPE`` and its ``data`` with the next sequence number."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(seq), **fields})}\n\n"


def response_events(
    server: ServerHooks,
    call: ChatCall,
    req: ResponsesRequest,
    ctx: Any,
    ids: tuple[str, str, int],
    finish: Callable[[Any], Any],
) -> Iterator[str]:
    """The events of a streamed Responses request; the generation has started (or failed, raising, so the client
    gets an HTTP error) when this returns."""
    gen = Generation(
        lambda on_token: finish(server.run_chat(call, ctx, on_token)),
        cancellable=server.cancel_streams,
        timeout=server.stream_timeout,
    ).start()
    seq = itertools.count()
    first = response_object(ids[0], server.model, req, None, None, len(call.prompt), ids[1], ids[2])

    def failed(e: BaseException) -> str:
        code = (e.code if isinstance(e, APIError) else None) or "server_error"
        message = str(e) if isinstance(e, APIError) else f"{type(e).__name__}: {e}"
        return event("error", seq, code=code, message=message, param=getattr(e, "param", None)) + event(
            "response.failed", seq, response={**first, "status": "failed", "error": {"code": code, "message": message}}
        )

    return framed(gen, _events(server, call, gen, first, ids[1], seq), error=failed, done=None)


def _events(
    server: ServerHooks, call: ChatCall, gen: Generation, first: dict[str, Any], msg_id: str, seq: Iterator[int]
) -> Iterator[str]:
    yield event("response.created", seq, response=first)
    yield event("response.in_progress", seq, response=first)
    hold = (TOOL_TAG,) if call.parse_tools else ()
    stream = TextStream(server.agent.tokenizer, hold, hold_trailing_space=call.parse_tools)
    where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    opened = False

    def text(piece: str) -> Iterator[str]:
        nonlocal opened
        if not opened:
            opened = True
            yield event(
                "response.output_item.added",
                seq,
                output_index=0,
                item={"type": "message", "id": msg_id, "status": "in_progress", "role": "assistant", "content": []},
            )
            yield event(
                "response.content_part.added",
                seq,
                **where,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        yield event("response.output_text.delta", seq, **where, delta=piece, logprobs=[])

    for _, token, logprob, top in gen:
        ready = stream.push(token, logprob, top)
        if ready and (piece := "".join(stream.pieces[j] or "" for j in ready)):
            yield from text(piece)
    _, _, response = gen.result
    items = response["output"]
    has_message = bool(items) and items[0]["type"] == "message"
    if rest := stream.rest(items[0]["content"][0]["text"] if has_message else ""):
        yield from text(rest)
    if opened:
        part = items[0]["content"][0]
        yield event("response.output_text.done", seq, **where, text=part["text"], logprobs=[])
        yield event("response.content_part.done", seq, **where, part=part)
        yield event("response.output_item.done", seq, output_index=0, item=items[0])
    for index, item in enumerate(items[1 if has_message else 0 :], start=1 if has_message else 0):
        yield event(
            "response.output_item.added",
            seq,
            output_index=index,
            item={**item, "arguments": "", "status": "in_progress"},
        )
        at = {"item_id": item["id"], "output_index": index}
        yield event("response.function_call_arguments.delta", seq, **at, delta=item["arguments"])
        yield event("response.function_call_arguments.done", seq, **at, name=item["name"], arguments=item["arguments"])
        yield event("response.output_item.done", seq, output_index=index, item=item)
    done = "response.completed" if response["status"] == "completed" else "response.incomplete"
    yield event(done, seq, response=response)
