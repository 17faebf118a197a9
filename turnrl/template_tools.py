"""Tools for chat templates that cannot render them.

An OpenAI-style request carries ``tools`` (JSON schemas), assistant messages with structured ``tool_calls`` and
``tool`` messages with results. Many chat templates (SmolLM2's, for one) ignore the ``tools`` argument and drop the
``tool_calls`` of earlier assistant turns: the model would then never learn that it has tools, nor see the calls it
made. :func:`template_support` probes what a tokenizer's template renders; :func:`fit_to_template` rewrites a
request so that nothing is lost — the tools are described in the system message with the Hermes call format
(``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, what the server parses back), earlier calls become that
text in their assistant turns, and tool results become user turns where the template cannot render the ``tool``
role. turnrl's own environments describe their tools themselves (``ToolEnv(describe_tools=True)``); this is for
requests from outside (``turnrl serve``, the training gateway).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

_PROBE_TOOL = "turnrl_probe_tool_7391"
_PROBE_RESULT = "turnrl probe result 5527"
_SCHEMA = [
    {
        "type": "function",
        "function": {"name": _PROBE_TOOL, "description": "probe", "parameters": {"type": "object", "properties": {}}},
    }
]
_CALL = {"id": "call_probe", "type": "function", "function": {"name": _PROBE_TOOL, "arguments": {"x": 1}}}


@dataclass(frozen=True)
class TemplateSupport:
    """What a chat template renders: ``tools`` (the schemas passed as ``tools=``), ``tool_calls`` (structured calls
    of assistant messages), ``tool_role`` (messages with role ``tool``) and ``system_role`` (a system message; some
    templates refuse one)."""

    tools: bool
    tool_calls: bool
    tool_role: bool
    system_role: bool = True

    @property
    def complete(self) -> bool:
        """Whether requests with tools need no rewriting."""
        return self.tools and self.tool_calls and self.tool_role


_cache: dict[str, TemplateSupport] = {}
_cache_lock = threading.Lock()


def template_support(tokenizer: Any) -> TemplateSupport:
    """Probe (once per template text) what ``tokenizer``'s chat template renders."""
    key = str(getattr(tokenizer, "chat_template", None))
    with _cache_lock:
        if key in _cache:
            return _cache[key]

    def renders(messages: list[dict[str, Any]], needle: str, **kwargs: Any) -> bool:
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        except Exception:  # a template that raises on it does not render it
            return False
        return needle in text

    user = {"role": "user", "content": "hello"}
    support = TemplateSupport(
        tools=renders([user], _PROBE_TOOL, tools=_SCHEMA),
        tool_calls=renders([user, {"role": "assistant", "content": "", "tool_calls": [_CALL]}], _PROBE_TOOL),
        tool_role=renders(
            [
                user,
                {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                {"role": "tool", "content": _PROBE_RESULT, "tool_call_id": "call_probe", "name": _PROBE_TOOL},
            ],
            _PROBE_RESULT,
        ),
        system_role=renders([{"role": "system", "content": _PROBE_RESULT}, user], _PROBE_RESULT),
    )
    with _cache_lock:
        _cache[key] = support
    return support


def describe_tools(schemas: list[dict[str, Any]]) -> str:
    """Plain-text instructions naming each tool (OpenAI function schemas) and the ``<tool_call>`` format; the text
    turnrl's Hermes-style environments put in their system prompts."""
    lines = ["You can call these tools:"]
    for schema in schemas:
        fn = schema.get("function") or {}
        description = f" {fn['description']}" if fn.get("description") else ""
        lines.append(
            f"- {fn.get('name')}:{description} Arguments (JSON schema): "
            f"{json.dumps(fn.get('parameters') or {'type': 'object', 'properties': {}})}"
        )
    lines.append(
        'To call a tool, write <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call> and stop; '
        "the result comes back in the next message."
    )
    return "\n".join(lines)


def call_text(call: dict[str, Any]) -> str:
    """One structured tool call as the text a model writes: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``."""
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except json.JSONDecodeError:
            pass  # kept as the string it is
    return "<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args}) + "</tool_call>"


def fit_to_template(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, support: TemplateSupport
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``messages`` and ``tools`` rewritten for a template with ``support`` (see the module docstring): returns the
    messages and the tools to pass to the template (None when they were moved into the system message)."""
    out: list[dict[str, Any]] = []
    for m in (dict(m) for m in messages):
        if m.get("role") == "assistant" and m.get("tool_calls") and not support.tool_calls:
            calls = "\n".join(call_text(c) for c in m.pop("tool_calls"))
            m["content"] = f"{m.get('content') or ''}\n{calls}".lstrip("\n") if m.get("content") else calls
        elif m.get("role") == "tool" and not support.tool_role:
            name = f' name="{m["name"]}"' if m.get("name") else ""
            result = f"<tool_response{name}>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("tool_results"):  # the results of one turn's calls: one user turn
                out[-1]["content"] += "\n" + result
                continue
            m = {"role": "user", "content": result, "tool_results": True}
        out.append(m)
    for m in out:
        m.pop("tool_results", None)
    if tools and not support.tools:
        text = describe_tools(tools)
        if out and out[0].get("role") == "system":
            out[0]["content"] = f"{out[0].get('content') or ''}\n\n{text}".lstrip()
        elif support.system_role:
            out.insert(0, {"role": "system", "content": text})
        else:  # a template without a system role: the description opens the first user turn
            first = next((m for m in out if m.get("role") == "user"), None)
            if first is None:
                out.insert(0, {"role": "user", "content": text})
            else:
                first["content"] = f"{text}\n\n{first.get('content') or ''}"
        tools = None
    return out, tools


def tools_note(tokenizer: Any) -> str | None:
    """What a server tells its user about a template that cannot render tools (None: it can, or has no template)."""
    if getattr(tokenizer, "chat_template", None) is None:
        return None
    s = template_support(tokenizer)
    missing = [
        what
        for what, ok in (("tools", s.tools), ("assistant tool calls", s.tool_calls), ("tool messages", s.tool_role))
        if not ok
    ]
    if not missing:
        return None
    return (
        f"note: this model's chat template does not render {' or '.join(missing)}; requests that use them get "
        "them written into the messages instead (tools described in the system message with the "
        '<tool_call>{"name": …, "arguments": {…}}</tool_call> format, which is parsed back into tool_calls)'
    )
