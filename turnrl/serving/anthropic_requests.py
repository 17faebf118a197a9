"""Reading Anthropic's Messages API requests (``POST /v1/messages``), shared by ``turnrl serve`` and the training
gateway; its sibling :mod:`turnrl.serving.anthropic_answers` writes the answers (responses, content blocks, stop
reasons, errors in Anthropic's shape).

A Messages request is checked and converted into the internal chat form that ``/v1/chat/completions`` uses
(:func:`messages_request`): the messages as chat templates expect them
(:func:`turnrl.serving.openai_api.chat_messages`), the tools as OpenAI function tools, the sampling parameters. The
server then builds the prompt, generates, parses tool calls and records exactly as for chat completions, and the
answer is converted back (:func:`turnrl.serving.anthropic_answers.message_response`).

* ``system``: a string or a list of text blocks → a system message first.
* ``messages``: roles ``user`` and ``assistant``; content a string or a list of blocks. ``text`` blocks (several in one
  message are joined with a blank line); ``tool_use`` (assistant: ``id``, ``name``, ``input`` object) → the
  assistant message's ``tool_calls``; ``tool_result`` (user: ``tool_use_id``, ``content`` as a string or text
  blocks, ``is_error``) → a ``tool`` message (an error's text starts with ``Error:``), in the order the blocks come.
  As the real API demands, every ``tool_result`` answers a ``tool_use`` of the assistant message just before it,
  and every ``tool_use`` that is followed by a user message is answered there.
* ``tools``: custom tools (``name``, ``description``, ``input_schema``) → OpenAI function tools; ``tool_choice``
  ``{"type": "auto"}`` (tool calls parsed) or ``{"type": "none"}`` (not parsed).
* ``max_tokens`` (required, as Anthropic requires), ``stop_sequences``, ``temperature`` (0–1, as Anthropic's range),
  ``top_p``, ``top_k``, ``stream``.

**Fields.** Unknown fields are refused, as the real API refuses them ("Extra inputs are not permitted"): a program
that runs here then runs against Anthropic, and a misspelt field is not silently dropped. Fields that change nothing
a local policy could honour are accepted and ignored: ``metadata``, ``service_tier``, ``cache_control`` (prompt
caching: the server keeps its own caches), ``inference_geo``, ``speed``, ``user_profile_id``, ``workspace_id``,
``diagnostics`` (and ``cache_control`` on blocks and tools). What the server cannot honour is refused with a 400 that
says why: forced tool use (``any``, ``tool``), ``disable_parallel_tool_use``, extended ``thinking``, server tools,
``strict`` tools, structured outputs (``output_config``, ``output_format``), ``container``, ``mcp_servers``,
``context_management``, image and document blocks, and a last message from the assistant (prefill: the prompt always
ends with the template's generation prompt).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turnrl.agents.base import SamplingParams
from turnrl.serving.openai_api import APIError, chat_messages

PARAMS = {
    "model",
    "max_tokens",
    "messages",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
}
#: accepted and ignored (see the module docstring)
IGNORED = {
    "metadata",
    "service_tier",
    "cache_control",
    "inference_geo",
    "speed",
    "user_profile_id",
    "workspace_id",
    "diagnostics",
}
#: known fields refused unless null, and why
UNSUPPORTED = {
    "container": "no code-execution containers",
    "mcp_servers": "no server-side MCP connector; give your tools as `tools` and run them yourself",
    "context_management": "no server-side context editing; the program manages its history",
    "output_config": "no structured outputs or effort levels; ask for JSON in the prompt and validate it",
    "output_format": "no structured outputs; ask for JSON in the prompt and validate it",
}
TEXT_FIELDS = {"type", "text", "cache_control", "citations"}
TOOL_USE_FIELDS = {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
TOOL_RESULT_FIELDS = {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
TOOL_FIELDS = {"type", "name", "description", "input_schema", "cache_control", "strict"}


def bad(message: str) -> APIError:
    """A 400 ``invalid_request_error``."""
    return APIError(400, message)


@dataclass
class MessagesRequest:
    """A checked Messages request in the internal chat form (see the module docstring)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool
    params: SamplingParams
    stream: bool


def messages_request(body: dict[str, Any]) -> MessagesRequest:
    """Check a ``/v1/messages`` body and convert it (see the module docstring); raises :class:`APIError` (400)."""
    unknown = sorted(set(body) - PARAMS - IGNORED - set(UNSUPPORTED))
    if unknown:
        raise bad(
            f"{unknown[0]}: Extra inputs are not permitted (this endpoint accepts "
            f"{', '.join(sorted(PARAMS | IGNORED))})"
        )
    for key, why in UNSUPPORTED.items():
        if body.get(key) is not None:
            raise bad(f"{key}: not supported by this server: {why}")
    thinking = body.get("thinking")
    if thinking is not None and (not isinstance(thinking, dict) or thinking.get("type") != "disabled"):
        raise bad(
            "thinking: extended thinking is not supported by this server (the policy's reasoning, if any, is "
            'part of its text); leave it out or send {"type": "disabled"}'
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad(f"stream: must be true or false, got {stream!r}")
    tools = _tools(body.get("tools"))
    parse_tools = _tool_choice(body.get("tool_choice"), tools)
    messages = [{"role": "system", "content": _text(body["system"], "system")}] if body.get("system") else []
    messages += _messages(body.get("messages"))
    return MessagesRequest(chat_messages(messages), tools, parse_tools, _params(body), stream)


def _params(body: dict[str, Any]) -> SamplingParams:
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise bad("max_tokens: Field required (the Messages API requires the most tokens to generate)")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad(f"max_tokens: must be an integer of at least 1, got {max_tokens!r}")
    for key, low, high in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        value = body.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high
        ):
            raise bad(f"{key}: must be a number from {low:g} to {high:g}, got {value!r}")
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise bad(f"top_k: must be an integer of at least 0, got {top_k!r}")
    stops = body.get("stop_sequences") or []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad("stop_sequences: must be a list of non-empty strings")
    try:
        return SamplingParams(
            temperature=1.0 if body.get("temperature") is None else body["temperature"],
            top_p=1.0 if body.get("top_p") is None else body["top_p"],
            top_k=top_k or 0,
            max_new_tokens=max_tokens,
            stop=tuple(stops),
        )
    except (ValidationError, TypeError, ValueError) as e:
        raise bad(f"invalid sampling parameters: {e}") from e


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """Custom tools → OpenAI function tools."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad('tools: must be a list of {"name", "description", "input_schema"} objects')
    out = []
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise bad(f"{where}: must be an object with name, description and input_schema")
        if tool.get("type") not in (None, "custom"):
            raise bad(
                f"{where}: server tools ({tool['type']!r}) are not supported by this server; define a custom "
                "tool (name, description, input_schema) and run it in your program"
            )
        _fields(tool, TOOL_FIELDS, where)
        if tool.get("strict"):
            raise bad(
                f"{where}.strict: not supported by this server: tool inputs are parsed from the model's text, "
                "not constrained to the schema"
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad(f"{where}.name: Field required (a non-empty string)")
        if not isinstance(tool.get("input_schema"), dict):
            raise bad(f"{where}.input_schema: Field required (a JSON schema object)")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise bad(f"{where}.description: must be a string")
        fn = {
            "name": tool["name"],
            **({"description": tool["description"]} if tool.get("description") else {}),
            "parameters": tool["input_schema"],
        }
        out.append({"type": "function", "function": fn})
    return out or None


def _tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> bool:
    """Whether to parse tool calls; refuses what cannot be honoured."""
    if choice is None:
        return tools is not None
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise bad('tool_choice: must be an object such as {"type": "auto"} or {"type": "none"}')
    if choice["type"] in ("any", "tool"):
        raise bad(
            f"tool_choice: {json.dumps(choice)} is not supported by this server: it would force a tool call, "
            'which it cannot guarantee; use {"type": "auto"} (the model decides) or {"type": "none"}'
        )
    if choice.get("disable_parallel_tool_use"):
        raise bad(
            "tool_choice.disable_parallel_tool_use: not supported by this server: it cannot guarantee at most "
            "one tool call per reply"
        )
    return choice["type"] == "auto" and tools is not None


def _fields(block: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(block) - allowed)
    if extra:
        raise bad(f"{where}.{extra[0]}: Extra inputs are not permitted")


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        raise bad(f"{where}: only text blocks are supported here, got {kind!r}")
    _fields(block, TEXT_FIELDS, where)
    if not isinstance(block.get("text"), str):
        raise bad(f"{where}.text: Field required (a string)")
    if block.get("citations"):
        raise bad(f"{where}.citations: citations are not supported by this server")
    return block["text"]


def _text(content: Any, where: str) -> str:
    """A string, or a list of text blocks joined with a blank line."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where}: must be a string or a list of text blocks")
    return "\n\n".join(_text_block(b, f"{where}.{i}") for i, b in enumerate(content))


def _messages(messages: Any) -> list[dict[str, Any]]:
    """Messages API messages → OpenAI-form chat messages (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise bad('messages: must be a non-empty list of {"role", "content"} objects')
    out: list[dict[str, Any]] = []
    open_uses: list[str] = []  # the tool_use ids of the assistant message just before, still unanswered
    last_uses: set[str] = set()
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"{where}: needs a role of user or assistant (the system prompt goes in `system`)")
        _fields(m, {"role", "content"}, where)
        content = m.get("content")
        if content is None:
            raise bad(f"{where}.content: Field required")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise bad(f"{where}.content: must be a string or a list of content blocks")
        if m["role"] == "assistant":
            if open_uses:
                raise _unanswered(open_uses, i)
            uses = _assistant(blocks, where, out)
            open_uses, last_uses = list(uses), set(uses)
        else:
            answered = _user(blocks, where, out, last_uses)
            missing = [u for u in open_uses if u not in answered]
            if missing:
                raise _unanswered(missing, i)
            open_uses, last_uses = [], set()
    if messages[-1].get("role") == "assistant":
        raise bad(
            "messages: the last message is from the assistant (prefill), which this server does not support: "
            "the prompt always ends where a new assistant turn begins; end with a user message"
        )
    return out


def _unanswered(ids: list[str], at: int) -> APIError:
    return bad(
        f"messages.{at}: tool_use ids were found without tool_result blocks immediately after: "
        f"{', '.join(ids)}. Each tool_use block must have a corresponding tool_result block in the next message"
    )


def _kind(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad(f"{where}: a content block must be an object with a `type`")
    return block["type"]


def _unsupported_block(kind: str, where: str, allowed: str) -> APIError:
    return bad(
        f"{where}: content blocks of type {kind!r} are not supported by this server (it serves a text model); "
        f"send {allowed}"
    )


def _blocks(blocks: list[Any], where: str, texts: list[str]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """A message's content blocks in order: a text block's text is appended to ``texts``, each other block is
    yielded as (its type, the block, where it stands) — so a caller sees the texts before a block when it comes."""
    for j, block in enumerate(blocks):
        at = f"{where}.content.{j}"
        kind = _kind(block, at)
        if kind == "text":
            texts.append(_text_block(block, at))
        else:
            yield kind, block, at


def _assistant(blocks: list[Any], where: str, out: list[dict[str, Any]]) -> list[str]:
    """An assistant message's blocks → one assistant message; returns its tool_use ids."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for kind, block, at in _blocks(blocks, where, texts):
        if kind == "tool_use":
            _fields(block, TOOL_USE_FIELDS, at)
            if not isinstance(block.get("id"), str) or not block["id"]:
                raise bad(f"{at}.id: Field required (a non-empty string)")
            if not isinstance(block.get("name"), str) or not block["name"]:
                raise bad(f"{at}.name: Field required (a non-empty string)")
            if not isinstance(block.get("input"), dict):
                raise bad(f"{at}.input: must be an object (the tool's arguments)")
            if block["id"] in {c["id"] for c in calls}:
                raise bad(f"{at}.id: tool_use ids must be unique, {block['id']!r} is repeated")
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": block["input"]},
                }
            )
        else:
            raise _unsupported_block(kind, at, "text and tool_use blocks in assistant messages")
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    out.append(message)
    return [c["id"] for c in calls]


def _user(blocks: list[Any], where: str, out: list[dict[str, Any]], uses: set[str]) -> set[str]:
    """A user message's blocks → tool messages and user messages, in order; returns the tool_use ids answered."""
    texts: list[str] = []
    answered: set[str] = set()

    def flush() -> None:
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
            texts.clear()

    for kind, block, at in _blocks(blocks, where, texts):
        if kind == "tool_result":
            _fields(block, TOOL_RESULT_FIELDS, at)
            use = block.get("tool_use_id")
            if not isinstance(use, str) or not use:
                raise bad(f"{at}.tool_use_id: Field required (the id of the tool_use block it answers)")
            if use not in uses:
                raise bad(
                    f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {use}. Each tool_result "
                    "block must have a corresponding tool_use block in the previous message"
                )
            if use in answered:
                raise bad(f"{at}: tool_use {use} is answered twice")
            is_error = block.get("is_error")
            if is_error is not None and not isinstance(is_error, bool):
                raise bad(f"{at}.is_error: must be true or false")
            raw = block.get("content")
            text = "" if raw is None else _text(raw, f"{at}.content")
            flush()
            out.append({"role": "tool", "tool_call_id": use, "content": f"Error: {text}" if is_error else text})
            answered.add(use)
        else:
            raise _unsupported_block(kind, at, "text and tool_result blocks in user messages")
    flush()
    if not blocks:
        out.append({"role": "user", "content": ""})
    return answered
