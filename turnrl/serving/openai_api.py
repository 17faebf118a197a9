"""OpenAI's API contract, shared by ``turnrl serve`` and the training gateway: request checks, sampling parameters,
messages in the form chat templates expect, tool calls parsed from generated text, errors in OpenAI's shape and
server-sent events.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from turnrl.agents.base import SamplingParams

_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "n",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "user",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
}
CHAT_PARAMS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "metadata",
    "store",
}
COMPLETION_PARAMS = _COMMON | {
    "prompt",
    "echo",
    "best_of",
    "suffix",
    "return_tokens_as_token_ids",
    "skip_special_tokens",
}
CHAT_MAX_TOKENS = 512  # when a chat request gives no max_tokens (OpenAI's default is the model's whole context)


class APIError(Exception):
    """A request the server refuses, sent as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def payload(self) -> dict[str, Any]:
        """The OpenAI error body."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def unsupported(param: str, why: str) -> APIError:
    return APIError(400, f"{param!r} is not supported by this server: {why}", param=param, code="unsupported_parameter")


def check_params(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise APIError(
            400,
            f"unsupported parameter(s) {unknown}; this endpoint accepts {sorted(allowed)}",
            param=unknown[0],
            code="unsupported_parameter",
        )
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key):
            raise unsupported(key, "leave it out or 0 (sampling is plain temperature/top-p/top-k)")
    if body.get("logit_bias"):
        raise unsupported("logit_bias", "no logit biasing")
    if body.get("stream_options") is not None and not body.get("stream"):
        raise APIError(400, "'stream_options' is only allowed with stream=true", param="stream_options")


def sampling_params(body: dict[str, Any], default_max: int) -> SamplingParams:
    stop = body.get("stop") or ()
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    try:
        return SamplingParams(
            temperature=1.0 if body.get("temperature") is None else body["temperature"],
            top_p=1.0 if body.get("top_p") is None else body["top_p"],
            top_k=max(int(body.get("top_k") or 0), 0),
            max_new_tokens=default_max if max_tokens is None else max_tokens,
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=body.get("seed"),
            n=1 if body.get("n") is None else body["n"],
        )
    except (ValidationError, TypeError, ValueError) as e:
        raise APIError(400, f"invalid sampling parameters: {e}") from e


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """OpenAI leaves the stop sequence out of the returned text."""
    cuts = [i for s in stop if (i := text.find(s)) >= 0]
    return text[: min(cuts)] if cuts else text


def tool_choice(choice: Any, tools: Any) -> bool:
    """Whether to parse tool calls; refuses what cannot be honoured."""
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
        raise APIError(400, 'tools must be a list of {"type": "function", "function": {...}} objects', param="tools")
    if choice in (None, "auto"):
        return True
    if choice == "none":
        return False
    raise unsupported(
        "tool_choice",
        f"{json.dumps(choice)} would force a tool call, which this server cannot "
        'guarantee; use "auto" (the model decides) or "none"',
    )


def common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def token_pieces(tok: Any, ids: list[int]) -> list[str]:
    """Each generated token's share of the decoded text (special tokens contribute nothing)."""
    out, prev = [], ""
    for i in range(len(ids)):
        text = tok.decode(ids[: i + 1], skip_special_tokens=True)
        if text.endswith("\ufffd") and i + 1 < len(ids):  # half a character: it comes with the next token
            out.append("")
            continue
        out.append(text[common_prefix(prev, text) :])
        prev = text
    return out


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        kinds = {p.get("type") for p in content} - {"text"}
        if kinds:
            raise APIError(
                400, f"{where}: only text content parts are supported, got {sorted(map(str, kinds))}", param="messages"
            )
        return "".join(str(p.get("text", "")) for p in content)
    raise APIError(400, f"{where}: content must be a string or a list of text parts", param="messages")


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI messages → the dicts chat templates expect (tool-call arguments as objects, text content)."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise APIError(
                400, f"messages[{i}] needs a role of system, developer, user, assistant or tool", param="messages"
            )
        msg: dict[str, Any] = {
            "role": "system" if m["role"] == "developer" else m["role"],
            "content": _text_of(m.get("content"), f"messages[{i}]"),
        }
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None:
                msg[key] = m[key]
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = dict(call.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                    except json.JSONDecodeError as e:
                        raise APIError(
                            400, f"messages[{i}].tool_calls: arguments are not JSON: {e}", param="messages"
                        ) from e
                calls.append({**call, "function": fn})
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def parse_tool_calls(text: str, id_prefix: str = "call_") -> tuple[list[dict[str, Any]], str]:
    """Hermes ``<tool_call>`` blocks in ``text`` as OpenAI ``tool_calls`` (new ids start with ``id_prefix``: ``call_``,
    or ``toolu_`` for Anthropic's Messages API), and the text left around them."""
    from turnrl.tools.parsers import HermesParser

    parsed = HermesParser().parse(text)
    calls = [
        {
            "id": call.id or f"{id_prefix}{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in parsed.calls
    ]
    # the text around the calls; only its end is stripped, so that it is what a stream sent (which holds back
    # trailing whitespace where tool calls are parsed: it cannot know whether a call follows)
    rest = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S).rstrip() if calls else text
    return calls, rest


@dataclass
class ChatCall:
    """A checked chat request: its token prompt, sampling, messages, tools and what to return; ``endpoint`` names the
    route it came by (``chat``, or ``messages`` for Anthropic's Messages API, which runs through the same path) and
    ``id_prefix`` starts the ids of the tool calls it returns."""

    prompt: list[int]
    params: SamplingParams
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool
    want_lp: bool
    k: int
    endpoint: str = "chat"
    id_prefix: str = "call_"


@dataclass
class CompletionCall:
    """A checked ``/v1/completions`` request: token prompts, sampling, ``logprobs`` (k or None), token-id names."""

    prompts: list[list[int]]
    params: SamplingParams
    k: int | None
    as_ids: bool
