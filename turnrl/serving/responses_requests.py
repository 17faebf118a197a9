"""Reading OpenAI's Responses API requests (``POST /v1/responses``) and keeping the conversations that
``previous_response_id`` continues, shared by ``turnrl serve`` and the training gateway; its sibling
:mod:`turnrl.serving.responses_answers` writes the answers (response objects, output items, ids).

A Responses request is checked and converted into the internal chat form that ``/v1/chat/completions`` uses
(:func:`responses_request`): ``instructions`` as a system message first, then the conversation of the previous
response (``previous_response_id``), then the ``input`` items as chat messages
(:func:`turnrl.serving.openai_api.chat_messages`), the function tools as chat tools, the sampling parameters. The
server then builds the prompt, generates, parses tool calls (Hermes ``<tool_call>``) and records exactly as for chat
completions, and the answer is converted back (:func:`turnrl.serving.responses_answers.response_object`).

* ``input``: a string (one user message) or a list of items: messages (``{"role": "user"|"assistant"|"system"|
  "developer", "content": str | [{"type": "input_text"|"output_text", "text"}]}``, with or without ``"type":
  "message"``, ``id`` and ``status`` as the SDK sends its output back); ``function_call`` (``call_id``, ``name``,
  ``arguments`` as a JSON string) → a tool call of the assistant message just before (or of a new one);
  ``function_call_output`` (``call_id``, ``output`` as a string or text parts) → a ``tool`` message. As the real API
  demands, every output answers an earlier call and every call is answered before the conversation goes on.
* ``instructions`` → a system message first. As in OpenAI's API, the instructions of a previous response are not
  carried over by ``previous_response_id``: only its input and output items are.
* ``previous_response_id``: the server keeps each response's conversation (:class:`ResponseStore`; ``turnrl serve``:
  the last 1,000 responses; the gateway: per session, dropped when the session closes); an unknown or evicted id is
  refused with a 404 (``previous_response_not_found``). ``store: false`` keeps nothing.
* ``tools``: ``{"type": "function", "name", "description", "parameters", "strict"}``; ``strict`` is accepted and
  ignored as on ``/v1/chat/completions`` (the arguments are parsed from the model's text, not constrained — the
  Agents SDK sends ``strict: true`` on every tool). ``tool_choice`` ``auto`` or ``none``.
* ``max_output_tokens`` (default 512, as chat completions), ``temperature``, ``top_p``, ``stream``.

**Fields.** Unknown fields are refused with a 400 that names them, as OpenAI refuses them (``Unknown parameter``).
Accepted and ignored (they change nothing a local policy could honour): ``user``, ``safety_identifier``,
``prompt_cache_key``, ``prompt_cache_retention``, ``prompt_cache_options``, ``service_tier``, ``stream_options``,
``text.verbosity`` (a hint); ``metadata`` is echoed back. Refused with a 400 that says why: forced tool choice
(``required``, a named function), ``parallel_tool_calls: false`` (at most one call per reply cannot be guaranteed),
``reasoning`` that asks for an effort or a summary (the policy's reasoning, if any, is part of its text: no effort
control and no summaries — a program that needs them would silently get neither), ``truncation: "auto"`` (a prompt
past the context is refused, not silently cut: on the gateway that would change the recorded episode), structured
outputs (``text.format`` other than ``text``), ``include`` entries, ``top_logprobs``, built-in tools, images and
files, ``background``, ``conversation``, ``prompt`` and the other server-side features. A ``max_output_tokens`` that
runs out answers ``status: "incomplete"`` with ``incomplete_details.reason`` ``max_output_tokens``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from turnrl.agents.base import SamplingParams
from turnrl.serving.openai_api import (
    CHAT_MAX_TOKENS,
    APIError,
    chat_messages,
    unsupported,
)

PARAMS = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "store",
    "previous_response_id",
    "parallel_tool_calls",
    "metadata",
    "truncation",
    "reasoning",
    "text",
    "include",
    "top_logprobs",
}
#: accepted and ignored (see the module docstring)
IGNORED = {
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "service_tier",
    "stream_options",
}
#: known fields refused unless null, and why
UNSUPPORTED = {
    "background": "responses are answered while the client waits; leave it out",
    "conversation": "no server-side conversations; send the history as `input` or use previous_response_id",
    "prompt": "no stored prompt templates; send `instructions` and `input`",
    "context_management": "no server-side compaction; the program manages its history",
    "max_tool_calls": "no built-in tools to limit",
    "moderation": "no moderation here",
    "image": "a text model serves here",
    "access_programs": "no server-side programs",
    "background_options": "responses are answered while the client waits",
}
MESSAGE_FIELDS = {"type", "role", "content", "id", "status", "phase"}
PART_FIELDS = {"input_text": {"type", "text"}, "output_text": {"type", "text", "annotations", "logprobs"}}
CALL_FIELDS = {"type", "call_id", "name", "arguments", "id", "status", "namespace"}
OUTPUT_FIELDS = {"type", "call_id", "output", "id", "status"}
TOOL_FIELDS = {"type", "name", "description", "parameters", "strict", "defer_loading"}
STORE_SIZE = 1000  # responses `turnrl serve` keeps for previous_response_id


def bad(message: str, param: str | None) -> APIError:
    """A 400 ``invalid_request_error`` naming ``param``."""
    return APIError(400, message, param=param)


class ResponseStore:
    """The conversations of the last ``limit`` stored responses, by id (for ``previous_response_id``)."""

    def __init__(self, limit: int | None = STORE_SIZE) -> None:
        self.limit = limit
        self.items: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self.lock = threading.Lock()

    def put(self, response_id: str, conversation: list[dict[str, Any]]) -> None:
        """Keep a response's conversation (its input and output, in chat form, without its instructions)."""
        with self.lock:
            self.items[response_id] = conversation
            while self.limit is not None and len(self.items) > self.limit:
                self.items.popitem(last=False)

    def get(self, response_id: str) -> list[dict[str, Any]]:
        """The conversation of a stored response; a 404 for an unknown or evicted one."""
        with self.lock:
            found = self.items.get(response_id)
        if found is None:
            kept = f"the last {self.limit} stored responses" if self.limit is not None else "its session's responses"
            raise APIError(
                404,
                f"Previous response with id {response_id!r} not found: this server keeps {kept} "
                "(not those sent with store=false); send the whole conversation as `input` instead",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return list(found)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


@dataclass
class ResponsesRequest:
    """A checked Responses request in the internal chat form; ``history`` is the conversation without the
    instructions (what a continuation of this response starts from)."""

    messages: list[dict[str, Any]]
    history: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool
    params: SamplingParams
    stream: bool
    store: bool
    echo: dict[str, Any] = field(default_factory=dict)  # the request's settings the response repeats


def responses_request(body: dict[str, Any], store: ResponseStore) -> ResponsesRequest:
    """Check a ``/v1/responses`` body and convert it (see the module docstring); raises :class:`APIError`."""
    unknown = sorted(set(body) - PARAMS - IGNORED - set(UNSUPPORTED))
    if unknown:
        raise APIError(
            400,
            f"Unknown parameter: {unknown[0]!r} (this endpoint accepts {', '.join(sorted(PARAMS | IGNORED))})",
            param=unknown[0],
            code="unknown_parameter",
        )
    for key, why in UNSUPPORTED.items():
        if body.get(key) is not None:
            raise unsupported(key, why)
    _refuse_features(body)
    for key in ("stream", "store", "parallel_tool_calls"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise bad(f"{key} must be true or false, got {body[key]!r}", key)
    if body.get("parallel_tool_calls") is False:
        raise unsupported(
            "parallel_tool_calls",
            "false would promise at most one tool call per reply, which this "
            "server cannot guarantee; leave it out or true",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions must be a string", "instructions")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise bad("previous_response_id must be a string", "previous_response_id")
    history = store.get(previous) if previous else []
    history += _items(body.get("input"), history)
    messages = chat_messages(([{"role": "system", "content": instructions}] if instructions else []) + history)
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise unsupported(
            "tool_choice",
            f"{json.dumps(choice)} would force a tool call, which this server cannot "
            'guarantee; use "auto" (the model decides) or "none"',
        )
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("metadata must be an object of strings", "metadata")
    echo = {
        "instructions": instructions,
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": metadata or {},
        "parallel_tool_calls": True,
        "previous_response_id": previous,
        "temperature": body.get("temperature", 1.0),
        "tool_choice": choice or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "user": body.get("user"),
        "store": body.get("store", True) is not False,
    }
    return ResponsesRequest(
        messages,
        chat_messages(history) if history else [],
        tools,
        tools is not None and choice != "none",
        _params(body),
        bool(body.get("stream")),
        echo["store"],
        echo,
    )


def _refuse_features(body: dict[str, Any]) -> None:
    reasoning = body.get("reasoning")
    if reasoning is not None and (
        not isinstance(reasoning, dict)
        or reasoning.get("effort") not in (None, "none")
        or reasoning.get("summary")
        or reasoning.get("generate_summary")
    ):
        raise unsupported(
            "reasoning",
            "no reasoning effort or summaries: the policy's reasoning, if any, is part of its text; leave it out",
        )
    if body.get("truncation") not in (None, "disabled"):
        raise unsupported(
            "truncation", 'a prompt past the context is refused, not cut; trim the history yourself ("disabled")'
        )
    text = body.get("text")
    if text is not None:
        if not isinstance(text, dict) or set(text) - {"format", "verbosity"}:
            raise bad("text must be an object with `format` (and `verbosity`)", "text")
        fmt = text.get("format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            raise unsupported(
                "text.format",
                "no structured outputs (json_schema, json_object); ask for JSON in the prompt and validate it",
            )
    if body.get("include"):
        raise unsupported(
            "include", f"{body['include']!r}: no extra output data (logprobs, reasoning, tool sources) from this server"
        )
    if body.get("top_logprobs"):
        raise unsupported("top_logprobs", "no logprobs on /v1/responses here; use /v1/chat/completions")


def _params(body: dict[str, Any]) -> SamplingParams:
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise bad(f"max_output_tokens must be an integer of at least 1, got {max_tokens!r}", "max_output_tokens")
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise bad(f"{key} must be a number, got {value!r}", key)
    try:
        return SamplingParams(
            temperature=1.0 if body.get("temperature") is None else body["temperature"],
            top_p=1.0 if body.get("top_p") is None else body["top_p"],
            max_new_tokens=CHAT_MAX_TOKENS if max_tokens is None else max_tokens,
        )
    except (ValidationError, TypeError, ValueError) as e:
        raise bad(f"invalid sampling parameters: {e}", None) from e


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """Responses function tools → chat function tools."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad('tools must be a list of {"type": "function", "name", "parameters"} objects', "tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise unsupported(
                f"{where}.type",
                f"{kind!r}: only function tools; built-in tools (web search, "
                "file search, code interpreter, …) do not run here — define a function, run it yourself",
            )
        _fields(tool, TOOL_FIELDS, where)
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad(f"{where}.name: a non-empty string is required", f"{where}.name")
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise bad(f"{where}.parameters must be a JSON schema object", f"{where}.parameters")
        fn = {
            "name": tool["name"],
            **({"description": tool["description"]} if tool.get("description") else {}),
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        }
        out.append({"type": "function", "function": fn})
    return out or None


def _fields(item: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(item) - allowed)
    if extra:
        raise bad(f"Unknown parameter: '{where}.{extra[0]}'", f"{where}.{extra[0]}")


def _string(item: dict[str, Any], key: str, where: str, *, empty: bool = False) -> str:
    if not isinstance(item.get(key), str) or not (empty or item[key]):
        raise bad(f"{where}.{key}: a {'' if empty else 'non-empty '}string is required", f"{where}.{key}")
    return item[key]


def _parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """Content at ``where`` (a string or text parts of ``kinds``) as text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where} must be a string or a list of content parts", where)
    texts = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise bad(
                f"{at}.type: {kind!r} is not supported here (a text model serves: send {' or '.join(kinds)} parts)",
                f"{at}.type",
            )
        _fields(part, PART_FIELDS[kind], at)
        texts.append(_string(part, "text", at, empty=True))
    return "".join(texts)


def _items(items: Any, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``input`` → chat messages (see the module docstring); ``history`` is what precedes it."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not (items or history):
        raise bad("input must be a string or a non-empty list of items", "input")
    out: list[dict[str, Any]] = []
    calls: dict[str, bool] = {}  # call_id -> answered
    for m in history:
        calls.update({c["id"]: False for c in m.get("tool_calls") or []})
        if m.get("tool_call_id") in calls:
            calls[m["tool_call_id"]] = True
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{where} must be an object", where)
        kind = item.get("type", "message")
        if kind == "message":
            _fields(item, MESSAGE_FIELDS, where)
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad(f"{where}.role must be user, assistant, system or developer, got {role!r}", f"{where}.role")
            _unanswered(calls, where)
            kinds = ("output_text",) if role == "assistant" else ("input_text",)
            out.append({"role": role, "content": _parts(item.get("content"), f"{where}.content", kinds)})
        elif kind == "function_call":
            _fields(item, CALL_FIELDS, where)
            call_id, name = _string(item, "call_id", where), _string(item, "name", where)
            arguments = _string(item, "arguments", where, empty=True)
            try:
                json.loads(arguments or "{}")
            except json.JSONDecodeError as e:
                raise bad(f"{where}.arguments is not JSON: {e}", f"{where}.arguments") from e
            if call_id in calls:
                raise bad(f"{where}.call_id: {call_id!r} is repeated", f"{where}.call_id")
            calls[call_id] = False
            last = out[-1] if out else None
            if last is None or last["role"] != "assistant":  # calls join the assistant message just before
                last = {"role": "assistant", "content": ""}
                out.append(last)
            last.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            )
        elif kind == "function_call_output":
            _fields(item, OUTPUT_FIELDS, where)
            call_id = _string(item, "call_id", where)
            if call_id not in calls:
                raise bad(
                    f"{where}: No tool call found for function call output with call_id {call_id!r}", f"{where}.call_id"
                )
            calls[call_id] = True
            output = item.get("output")
            text = output if isinstance(output, str) else _parts(output, f"{where}.output", ("input_text",))
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise bad(
                f"{where}.type: items of type {kind!r} are not supported here; send messages, function_call "
                "and function_call_output items",
                f"{where}.type",
            )
    _unanswered(calls, "input")
    return out


def _unanswered(calls: dict[str, bool], where: str) -> None:
    missing = [k for k, done in calls.items() if not done]
    if missing:
        raise bad(
            f"{where}: No tool output found for function call {missing[0]} (each function_call needs its "
            "function_call_output before the conversation goes on)",
            where,
        )
