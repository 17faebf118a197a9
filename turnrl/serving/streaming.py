"""Server-sent events while the tokens are generated, for :class:`turnrl.serving.server.AgentServer`.

The generation runs in a thread of its own; an agent that reports its tokens as it samples them (``generate(...,
on_token=...)``, the HF agent) feeds a queue that the response reads, so the first chunk leaves as soon as the
first token whose text is certain exists. Text is held back only where it may still change: half a character
(a token that decodes to part of a UTF-8 sequence), the start of a stop string (OpenAI leaves stop strings out),
and — when tool calls are parsed — everything from ``<tool_call>`` on (it is sent as ``tool_calls`` at the end).
Agents that cannot report tokens stream the same chunks once their generation has finished.

A client that goes away stops the generation at its next token (where the server allows it: the training gateway
lets it finish, so that the call is recorded). A generation error after the stream has started arrives as an
``error`` event, as OpenAI's streams send it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from turnrl.serving.openai_api import APIError, common_prefix, sse, token_pieces

TOOL_TAG = "<tool_call>"


class ClientGone(Exception):
    """Raised from the token callback to stop a generation whose client disconnected."""


class TextStream:
    """One completion's text as its tokens arrive: which tokens are certain enough to send.

    Args:
        tokenizer: decodes the tokens.
        hold: strings whose first characters are held back until the text shows whether they follow (stop
            strings, ``<tool_call>``); the text from a complete one on is never sent as content.
        hold_trailing_space: also hold whitespace at the end until more text follows (where tool calls are parsed,
            the content before a call is returned without its trailing whitespace).
    """

    def __init__(self, tokenizer: Any, hold: tuple[str, ...], *, hold_trailing_space: bool = False) -> None:
        self.tokenizer, self.hold = tokenizer, tuple(h for h in hold if h)
        self.hold_trailing_space = hold_trailing_space
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[Any] = []
        self.pieces: list[str | None] = []  # each token's share of the text; None: half a character so far
        self.text = ""
        self.sent = 0  # tokens sent
        self.chars = 0  # characters sent
        self.offsets: list[int] = []  # where each sent token's text begins

    def push(self, token: int, logprob: float, top: Any = None) -> list[int]:
        """Add a token; returns the indices of the tokens that can be sent now (in order)."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        self.tops.append(top)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            self.pieces.append(None)
            return []
        self.pieces = ["" if p is None else p for p in self.pieces]  # half characters: completed by this token
        self.pieces.append(text[common_prefix(self.text, text) :])
        self.text = text
        limit = self.safe_length(text)
        ready = []
        while self.sent < len(self.pieces) and self.chars + len(self.pieces[self.sent] or "") <= limit:
            ready.append(self.sent)
            self.offsets.append(self.chars)
            self.chars += len(self.pieces[self.sent] or "")
            self.sent += 1
        return ready

    def rest(self, final: str) -> str:
        """What of the ``final`` text has not been sent."""
        sent = "".join(p or "" for p in self.pieces[: self.sent])
        # from where the two part: all that follows the sent text, or — with a tokenizer whose decoding is not
        # prefix-stable (clean_up_tokenization_spaces), where what was sent cannot be taken back — the final text
        # from its first difference, rather than lose its end
        return final[common_prefix(sent, final) :]

    def safe_length(self, text: str) -> int:
        """How much of ``text`` cannot change: up to the first held string, or a partial one at its end."""
        limit = len(text)
        for h in self.hold:
            at = text.find(h)
            if at >= 0:
                limit = min(limit, at)
                continue
            for k in range(min(len(h) - 1, len(text)), 0, -1):
                if text.endswith(h[:k]):
                    limit = min(limit, len(text) - k)
                    break
        if self.hold_trailing_space:
            limit = len(text[:limit].rstrip())
        return limit


def remainder(pieces: list[str], start: int, budget: int) -> list[str]:
    """The pieces of tokens ``start``… cut so that together they hold at most ``budget`` characters."""
    out = []
    for piece in pieces[start:]:
        piece = piece[: max(budget, 0)]
        budget -= len(piece)
        out.append(piece)
    return out


class Generation:
    """Runs ``work(on_token)`` in a thread and hands its tokens and result over a queue.

    ``work`` gets the token callback (``(index, token_id, logprob, top)``) and returns the finished result; a
    :meth:`close` before it ends makes the callback raise :class:`ClientGone` when ``cancellable``.
    """

    def __init__(self, work: Callable[[Callable[..., None]], Any], *, cancellable: bool, timeout: float) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.closed = threading.Event()
        self.cancellable, self.timeout = cancellable, timeout
        self._first: tuple[str, Any] | None = None  # the event start() waited for
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True, name="turnrl-stream")
        self.thread.start()

    def _on_token(self, index: int, token: int, logprob: float, top: Any = None) -> None:
        if self.cancellable and self.closed.is_set():
            raise ClientGone("the client closed the stream")
        self.events.put(("token", (index, token, logprob, top)))

    def _run(self, work: Callable[[Callable[..., None]], Any]) -> None:
        try:
            self.events.put(("done", work(self._on_token)))
        except BaseException as e:  # the response reports it
            self.events.put(("error", e))

    def _next(self) -> tuple[str, Any]:
        try:
            return self.events.get(timeout=self.timeout)
        except queue.Empty:
            raise APIError(
                504,
                f"no token for {self.timeout:g}s: the generation is stuck or too slow",
                kind="server_error",
                code="timeout",
            ) from None

    def start(self) -> Generation:
        """Wait for the first token (or the end): a generation that fails before it raises here, so the request
        still gets its HTTP error status rather than an error event in a stream that already said 200."""
        try:
            self._first = self._next()
        except BaseException:
            self.close()  # the client gets the error: the generation stops (where allowed)
            raise
        if self._first[0] == "error":
            self.close()
            raise self._first[1]
        return self

    def __iter__(self) -> Iterator[tuple[int, int, float, Any]]:
        """The tokens as they come; then :attr:`result` holds the result (or the error is raised)."""
        while True:
            kind, payload = self._first or self._next()
            self._first = None
            if kind == "token":
                yield payload
            elif kind == "done":
                self.result = payload
                return
            else:
                raise payload

    def close(self) -> None:
        """The client is gone (or the response ended): stop at the next token where allowed."""
        self.closed.set()


def error_event(e: BaseException) -> str:
    """An error that happened after the stream started, in OpenAI's shape."""
    if isinstance(e, APIError):
        return sse(e.payload())
    return sse({"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error", "param": None, "code": None}})


def framed(
    gen: Generation,
    events: Iterator[str],
    *,
    error: Callable[[BaseException], str] = error_event,
    done: str | None = "data: [DONE]\n\n",
) -> Iterator[str]:
    """``events``, then ``done`` (OpenAI's ``[DONE]``; None: nothing, as Anthropic's streams end); an error on the way
    is an event (``error`` writes it; the stream has started), and the generation is told when the stream ends,
    however it ends (a client that hung up)."""
    try:
        yield from events
    except Exception as e:
        yield error(e)
    finally:
        gen.close()
    if done is not None:
        yield done


def usage(head: dict[str, Any], body: dict[str, Any], envelope: dict[str, Any]) -> Iterator[str]:
    """The closing usage chunk, where the request asked for it (``stream_options.include_usage``)."""
    if (body.get("stream_options") or {}).get("include_usage"):
        yield sse({**head, "choices": [], "usage": envelope["usage"]})


def chat_events(server: Any, call: Any, body: dict[str, Any], ctx: Any) -> Iterator[str]:
    """The events of a streamed chat completion (``call``: the server's checked request); the generation has
    started (or failed, raising) when this returns."""
    gen = Generation(
        lambda on_token: server.run_chat(call, ctx, on_token),
        cancellable=server.cancel_streams,
        timeout=server.stream_timeout,
    ).start()
    return framed(gen, _chat_events(server, call, body, gen))


def _chat_events(server: Any, call: Any, body: dict[str, Any], gen: Generation) -> Iterator[str]:
    head = {
        "id": server.new_id("chat.completion"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": server.model,
        "system_fingerprint": None,
    }
    hold = (*call.params.stop, *((TOOL_TAG,) if call.parse_tools else ()))
    texts = [
        TextStream(server.agent.tokenizer, hold, hold_trailing_space=call.parse_tools) for _ in range(call.params.n)
    ]

    def chunk(i: int, delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> str:
        return sse({**head, "choices": [{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})

    for i in range(call.params.n):
        yield chunk(i, {"role": "assistant", "content": ""})
    for i, token, logprob, top in gen:
        s = texts[i]
        ready = s.push(token, logprob, top)
        if call.want_lp:
            for j in ready:
                entry = server.lp_entry(s.tokens[j], s.logprobs[j], s.tops[j], call.k)
                yield chunk(i, {"content": s.pieces[j] or ""}, {"content": [entry], "refusal": None})
        elif ready and (text := "".join(s.pieces[j] or "" for j in ready)):
            yield chunk(i, {"content": text})
    envelope, outs = gen.result
    for choice, c, s in zip(envelope["choices"], outs, texts):
        i, message = choice["index"], choice["message"]
        rest = s.rest(message["content"] or "")
        entries = (choice["logprobs"] or {}).get("content")
        if entries is not None and message.get("tool_calls"):  # the text left around the calls, in one piece
            if rest or entries[s.sent :]:
                yield chunk(i, {"content": rest}, {"content": entries[s.sent :], "refusal": None})
        elif entries is not None:
            pieces = remainder(token_pieces(server.agent.tokenizer, c.token_ids), s.sent, len(rest))
            for entry, piece in zip(entries[s.sent :], pieces):
                yield chunk(i, {"content": piece}, {"content": [entry], "refusal": None})
        elif rest:
            yield chunk(i, {"content": rest})
        if message.get("tool_calls"):
            calls = [{"index": j, **tc} for j, tc in enumerate(message["tool_calls"])]
            yield chunk(i, {"tool_calls": calls})
        yield chunk(i, {}, finish=choice["finish_reason"])
    yield from usage(head, body, envelope)


def completion_events(server: Any, call: Any, body: dict[str, Any], ctx: Any) -> Iterator[str]:
    """The events of a streamed ``/v1/completions`` request (``call``: the server's checked request); the
    generation has started (or failed, raising) when this returns."""
    gen = Generation(
        lambda on_token: server.run_completions(call, ctx, on_token),
        cancellable=server.cancel_streams,
        timeout=server.stream_timeout,
    ).start()
    return framed(gen, _completion_events(server, call, body, gen))


def _completion_events(server: Any, call: Any, body: dict[str, Any], gen: Generation) -> Iterator[str]:
    head = {
        "id": server.new_id("text_completion"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.model,
    }
    hold = () if call.as_ids else call.params.stop  # token-level clients get every token's text
    texts = [TextStream(server.agent.tokenizer, hold) for _ in range(call.params.n * len(call.prompts))]

    def chunk(i: int, text: str, logprobs: Any = None, finish: str | None = None) -> str:
        return sse({**head, "choices": [{"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}]})

    for i, token, logprob, top in gen:
        s = texts[i]
        ready = s.push(token, logprob, top)
        if call.k is not None:
            for j in ready:
                yield chunk(
                    i,
                    s.pieces[j] or "",
                    server.completion_lp(call, s.tokens[j], s.logprobs[j], s.tops[j], s.offsets[j]),
                )
        elif ready and (text := "".join(s.pieces[j] or "" for j in ready)):
            yield chunk(i, text)
    envelope, outs = gen.result
    for choice, c, s in zip(envelope["choices"], outs, texts):
        i, lp, rest = choice["index"], choice["logprobs"], s.rest(choice["text"])
        if lp is not None:
            pieces = remainder(token_pieces(server.agent.tokenizer, c.token_ids), s.sent, len(rest))
            for j, piece in enumerate(pieces, start=s.sent):
                one = {
                    key: (lp[key][j : j + 1] if lp[key] is not None else None)
                    for key in ("tokens", "token_logprobs", "text_offset", "top_logprobs")
                }
                yield chunk(i, piece, one)
        elif rest:
            yield chunk(i, rest)
        yield chunk(i, "", finish=choice["finish_reason"])
    yield from usage(head, body, envelope)
