"""Parsers that turn assistant text into tool calls.

Two styles built in (:data:`TOOL_PARSERS`, by the name an environment's ``tool_style`` gives):

* ``hermes``, :class:`HermesParser` — Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* ``tags``, :class:`TagParser` — XML-tag styles such as ``<calculator>2+3</calculator>`` or SWiRL's
  ``<search_query>…</search_query>``.

Installed packages add styles under the ``turnrl.tool_parsers`` entry-point group, a module of yours with
``TOOL_PARSERS.register(name, build)``: ``build(tool_names) -> ToolCallParser``.

A parser never raises on model text: malformed calls are reported in :attr:`ParseResult.errors` with a message
meant for the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnrl.plugins import Registry
from turnrl.template_tools import describe_tools
from turnrl.types import ToolCall


@dataclass
class ParseResult:
    """Tool calls found in one message, in order of appearance, and problems met while parsing."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """Whether the message attempted any tool call (well-formed or not)."""
        return bool(self.calls or self.errors)


class ToolCallParser(Protocol):
    """What a tool-call parser provides."""

    style: str

    def parse(self, text: str) -> ParseResult:
        """Find the tool calls in ``text``."""
        ...

    def instructions(self, tools: Sequence[Any]) -> str:
        """Plain-text instructions that tell a model how to call ``tools`` in this style."""
        ...


def extract_tag(text: str, tag: str) -> list[str]:
    """Contents of every complete ``<tag>…</tag>`` in ``text`` (stripped), in order."""
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.S)
    return [m.group(1).strip() for m in pattern.finditer(text)]


class HermesParser:
    """Hermes/Qwen style: ``<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>``.

    ``arguments`` may also be a JSON-encoded string, and one block may hold a JSON list of calls.
    """

    style = "hermes"
    _block = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)

    def parse(self, text: str) -> ParseResult:
        """Find the ``<tool_call>`` blocks in ``text``."""
        result = ParseResult()
        for m in self._block.finditer(text):
            self._parse_block(m.group(1).strip(), result)
        closed = text.count("</tool_call>")
        if text.count("<tool_call>") > closed:
            result.errors.append("a <tool_call> tag was opened but never closed with </tool_call>")
        return result

    def _parse_block(self, body: str, result: ParseResult) -> None:
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as e:
            result.errors.append(
                f"the tool call is not valid JSON ({e.msg} at position {e.pos}); "
                'write <tool_call>{"name": "...", "arguments": {...}}</tool_call>'
            )
            return
        for item in payload if isinstance(payload, list) else [payload]:
            call = self._to_call(item, result)
            if call is not None:
                result.calls.append(call)

    @staticmethod
    def _to_call(item: Any, result: ParseResult) -> ToolCall | None:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            result.errors.append('a tool call must be a JSON object with a "name" string and an "arguments" object')
            return None
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                result.errors.append(f'the "arguments" of tool call {item["name"]!r} are not a JSON object')
                return None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            result.errors.append(f'the "arguments" of tool call {item["name"]!r} must be a JSON object')
            return None
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        return ToolCall(name=item["name"], arguments=args, id=call_id)

    def format_call(self, call: ToolCall) -> str:
        """``call`` as a model would write it in this style."""
        return "<tool_call>" + json.dumps({"name": call.name, "arguments": call.arguments}) + "</tool_call>"

    def instructions(self, tools: Sequence[Any]) -> str:
        """Describe the tools and the ``<tool_call>`` format (:func:`turnrl.template_tools.describe_tools`)."""
        return describe_tools([t.schema() for t in tools])


class TagParser:
    """XML-tag style: ``<TAG>text</TAG>`` calls the tool mapped to ``TAG`` with ``text`` as its input.

    Args:
        tags: tag names (each calls the tool of the same name) or a mapping ``{tag: tool_name}``, e.g.
            ``{"search_query": "search", "math_exp": "calculator"}`` for SWiRL's tags.
    """

    style = "tags"

    def __init__(self, tags: Sequence[str] | Mapping[str, str]) -> None:
        self.tags: dict[str, str] = dict(tags) if isinstance(tags, Mapping) else {t: t for t in tags}
        for tag in self.tags:
            if not re.fullmatch(r"[A-Za-z_][\w\-]*", tag):
                raise ValueError(f"invalid tag name {tag!r}")
        alternation = "|".join(re.escape(t) for t in self.tags)
        self._block = re.compile(rf"<({alternation})>(.*?)</\1>", re.S) if self.tags else None

    def parse(self, text: str) -> ParseResult:
        """Find the tool tags in ``text``."""
        result = ParseResult()
        if self._block is None:
            return result
        for m in self._block.finditer(text):
            result.calls.append(ToolCall(name=self.tags[m.group(1)], raw=m.group(2).strip()))
        for tag in self.tags:
            if text.count(f"<{tag}>") > text.count(f"</{tag}>"):
                result.errors.append(f"a <{tag}> tag was opened but never closed with </{tag}>")
        return result

    def format_call(self, call: ToolCall) -> str:
        """``call`` as a model would write it in this style (its raw text, or its single argument's value)."""
        tag = {v: k for k, v in self.tags.items()}.get(call.name, call.name)
        if call.raw is not None:
            text = call.raw
        elif len(call.arguments) == 1:
            text = str(next(iter(call.arguments.values())))
        else:
            raise ValueError(f"the tag style passes one text input; {call.name!r} got {sorted(call.arguments)}")
        return f"<{tag}>{text}</{tag}>"

    def instructions(self, tools: Sequence[Any]) -> str:
        """Describe the tools and their tags."""
        by_tool = {v: k for k, v in self.tags.items()}
        lines = ["You can use these tools:"]
        for t in tools:
            tag = by_tool.get(t.name, t.name)
            lines.append(f"- {t.name}: {t.description} Write <{tag}>INPUT</{tag}>.")
        lines.append("After a tool tag, stop; the result comes back in the next message.")
        return "\n".join(lines)


def hermes(tool_names: Sequence[str]) -> ToolCallParser:
    """The ``hermes`` style: one JSON call per ``<tool_call>`` block, for any tool."""
    return HermesParser()


def tags(tool_names: Sequence[str]) -> ToolCallParser:
    """The ``tags`` style: each tool's calls in a tag of its own name."""
    return TagParser(list(tool_names))


#: Tool-call styles by name: ``build(tool_names) -> ToolCallParser`` (the module docstring says how to add one).
TOOL_PARSERS: Registry[Callable[[Sequence[str]], ToolCallParser]] = Registry(
    "tool-call style",
    "turnrl.tool_parsers",
    {"hermes": hermes, "tags": tags},
    hint="or pass a parser object",
)


def get_parser(style: str | ToolCallParser, tool_names: Sequence[str] = ()) -> ToolCallParser:
    """A parser by style name (:data:`TOOL_PARSERS`: ``"hermes"``, or ``"tags"`` whose tags are the tool names) or
    the parser given.

    Raises:
        ValueError: a style nobody registered (with the closest name and the list).
    """
    if not isinstance(style, str):
        return style
    return TOOL_PARSERS.get(style)(tool_names)
