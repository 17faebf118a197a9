"""Tools: typed Python functions with an OpenAI-style JSON schema, invoked safely from parsed calls.

A tool never raises into the rollout: :meth:`Tool.invoke` turns an unknown name, bad arguments or an exception
inside the tool into a :class:`ToolOutput` with ``ok=False`` and a message that tells the model what was wrong.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from turnrl.types import ToolCall


class ToolError(Exception):
    """Raise inside a tool to report a problem to the model (the message becomes the observation)."""


@dataclass(frozen=True)
class ToolOutput:
    """The result of one tool call: the text the model sees, and whether the call succeeded."""

    content: str
    ok: bool = True


def _param_docs(doc: str) -> dict[str, str]:
    """Parse Google-style ``Args:`` entries (``name: text``) from a docstring."""
    out: dict[str, str] = {}
    m = re.search(r"^\s*Args:\s*\n(.*?)(?:\n\s*\n|\n\s*\w+:\s*\n|\Z)", doc, re.S | re.M)
    if not m:
        return out
    for line in m.group(1).splitlines():
        pm = re.match(r"\s*(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
        if pm:
            out[pm.group(1)] = pm.group(2).strip()
    return out


def _jsonable(obj: Any) -> Any:
    """``json.dumps``'s fallback for tool results: models, dataclasses, sets and numpy values as JSON data."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if callable(getattr(obj, "tolist", None)):  # numpy arrays and scalars
        return obj.tolist()
    return str(obj)


def _summary(doc: str) -> str:
    """The docstring's first paragraph, on one line."""
    first = doc.strip().split("\n\n", 1)[0]
    return " ".join(first.split())


class Tool:
    """A callable tool with a name, a description and a pydantic argument model.

    Build one with the :func:`tool` decorator. ``tool.schema()`` gives the OpenAI function schema that goes
    into chat templates; ``tool.invoke(call)`` validates and runs a parsed :class:`~turnrl.types.ToolCall`.
    """

    #: Whether the tool is a Python function here (``fn``, ``args_model``); see :class:`ExternalTool` for the others.
    local = True
    #: Whether calls change state outside the environment that holds the tool (an MCP server's tools, a remote
    #: environment's): such an environment cannot be forked by copying it (:mod:`turnrl.envs.fork`).
    stateful = False

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        max_output_chars: int = 4000,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        self.description = description or _summary(doc) or self.name
        self.max_output_chars = max_output_chars
        self.is_async = inspect.iscoroutinefunction(fn)
        self.args_model = self._build_args_model(fn, _param_docs(doc))

    def _build_args_model(self, fn: Callable[..., Any], docs: dict[str, str]) -> type[BaseModel]:
        fields: dict[str, Any] = {}
        hints = inspect.get_annotations(fn, eval_str=True)
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args/**kwargs are not allowed in a tool signature")
            if p.name not in hints:
                raise TypeError(f"tool {self.name!r}: parameter {p.name!r} needs a type annotation")
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (hints[p.name], Field(default, description=docs.get(p.name)))
        return create_model(f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation, exceptions propagate)."""
        return self.fn(*args, **kwargs)

    @property
    def required(self) -> list[str]:
        """Names of the required parameters."""
        return [n for n, f in self.args_model.model_fields.items() if f.is_required()]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema: ``{"type": "function", "function": {name, description, parameters}}``."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    @property
    def parameter_names(self) -> list[str]:
        """Names of all parameters, in order."""
        return list(self.args_model.model_fields)

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        """The call's arguments; a plain-text (tag-style) call's text goes to the one required parameter, or to the
        only parameter."""
        if call.raw is None:
            return call.arguments
        fields = self.parameter_names
        if len(self.required) == 1:
            return {self.required[0]: call.raw}
        if len(fields) == 1:
            return {fields[0]: call.raw}
        raise ToolError(
            f"tool {self.name!r} takes several arguments ({', '.join(fields)}); "
            "call it with JSON arguments instead of plain text"
        )

    def _validate(self, call: ToolCall) -> BaseModel | ToolOutput:
        try:
            return self.args_model.model_validate(self._arguments(call))
        except ToolError as e:
            return ToolOutput(f"Error: {e}", ok=False)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in err['loc']) or 'arguments'}: {err['msg']}" for err in e.errors()
            )
            return ToolOutput(f"Error: invalid arguments for {self.name}: {problems}", ok=False)

    def _finish(self, result: Any) -> ToolOutput:
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=_jsonable)
        return ToolOutput(self._truncate(text))

    def _truncate(self, text: str) -> str:
        """``text`` cut to ``max_output_chars``, saying how much was cut."""
        if len(text) <= self.max_output_chars:
            return text
        cut = len(text) - self.max_output_chars
        return text[: self.max_output_chars] + f"\n[... output truncated, {cut} more characters]"

    def _failure(self, e: Exception) -> ToolOutput:
        if isinstance(e, ToolError):
            return ToolOutput(f"Error: {e}", ok=False)
        return ToolOutput(f"Error: {self.name} failed: {type(e).__name__}: {e}", ok=False)

    def invoke(self, call: ToolCall) -> ToolOutput:
        """Validate ``call``'s arguments and run the tool. Never raises for bad input or tool failures."""
        args = self._validate(call)
        if isinstance(args, ToolOutput):
            return args
        if self.is_async and _loop_running():
            return ToolOutput(
                f"Error: async tool {self.name!r} must be called with ainvoke inside an event loop", ok=False
            )
        try:
            result = asyncio.run(self.fn(**dict(args))) if self.is_async else self.fn(**dict(args))
            return self._finish(result)
        except Exception as e:  # a failing tool is an observation, not a crash
            return self._failure(e)

    async def ainvoke(self, call: ToolCall) -> ToolOutput:
        """Async :meth:`invoke`: awaits async tools, runs sync ones in a worker thread."""
        args = self._validate(call)
        if isinstance(args, ToolOutput):
            return args
        try:
            if self.is_async:
                result = await self.fn(**dict(args))
            else:
                result = await asyncio.to_thread(self.fn, **dict(args))
            return self._finish(result)
        except Exception as e:
            return self._failure(e)


class ExternalTool(Tool):
    """A tool that runs elsewhere — on an MCP server, in a remote environment — known by its name, description and
    JSON-schema ``parameters``. Subclasses implement :meth:`_call` (and :meth:`_acall` where they can wait without a
    thread); ``invoke`` keeps :class:`Tool`'s promise: bad input and failures come back as ``ok=False`` outputs.
    """

    local = False

    def __init__(
        self, name: str, description: str, parameters: dict[str, Any], *, max_output_chars: int = 4000
    ) -> None:
        # no local function (it runs elsewhere) and no pydantic model (its schema is JSON)
        self.fn = self.args_model = None  # type: ignore[assignment]  # both None: it runs elsewhere
        self.name = name
        self.description = description or name
        self.parameters = dict(parameters or {"type": "object", "properties": {}})
        self.max_output_chars = max_output_chars
        self.is_async = False

    def __call__(self, **arguments: Any) -> ToolOutput:
        """Run the tool with these arguments (as :meth:`invoke` does)."""
        return self.invoke(ToolCall(name=self.name, arguments=arguments))

    @property
    def required(self) -> list[str]:
        """Names of the required parameters."""
        return list(self.parameters.get("required") or [])

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema, with the parameters as the tool's owner gives them."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @property
    def parameter_names(self) -> list[str]:
        """Names of all parameters, in the schema's order."""
        return list(self.parameters.get("properties") or {})

    def _call(self, call: ToolCall) -> ToolOutput:
        raise NotImplementedError

    async def _acall(self, call: ToolCall) -> ToolOutput:
        return await asyncio.to_thread(self._call, call)

    def _prepare(self, call: ToolCall) -> ToolCall | ToolOutput:
        try:
            return ToolCall(name=self.name, arguments=self._arguments(call))
        except ToolError as e:
            return ToolOutput(f"Error: {e}", ok=False)

    def _clip(self, out: ToolOutput) -> ToolOutput:
        return ToolOutput(self._truncate(out.content), ok=out.ok)

    def invoke(self, call: ToolCall) -> ToolOutput:
        """Run ``call`` where the tool lives. Never raises for bad input or failures."""
        prepared = self._prepare(call)
        if isinstance(prepared, ToolOutput):
            return prepared
        try:
            return self._clip(self._call(prepared))
        except Exception as e:  # a failing tool is an observation, not a crash
            return self._failure(e)

    async def ainvoke(self, call: ToolCall) -> ToolOutput:
        """Async :meth:`invoke`."""
        prepared = self._prepare(call)
        if isinstance(prepared, ToolOutput):
            return prepared
        try:
            return self._clip(await self._acall(prepared))
        except Exception as e:
            return self._failure(e)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    max_output_chars: int = 4000,
) -> Any:
    """Decorator: turn a typed function into a :class:`Tool`.

    The description is the docstring's first paragraph; parameter descriptions come from its ``Args:``
    section. Every parameter needs a type annotation.

    Example::

        @tool
        def add(a: int, b: int) -> int:
            '''Add two integers.'''
            return a + b
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, max_output_chars=max_output_chars)

    return wrap(fn) if fn is not None else wrap


class Toolbox:
    """A name → tool mapping that dispatches parsed calls, with helpful errors for unknown names."""

    def __init__(self, tools: Sequence[Tool] = ()) -> None:
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(
                    f"expected a Tool (use the @tool decorator, or turnrl.tools.mcp_tools for an MCP "
                    f"server's), got {type(t).__name__}"
                )
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self):
        return iter(self.tools.values())

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI schemas of all tools, in order."""
        return [t.schema() for t in self.tools.values()]

    def _unknown(self, name: str) -> ToolOutput:
        available = ", ".join(self.tools) or "none"
        close = get_close_matches(name, list(self.tools), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return ToolOutput(f"Error: unknown tool {name!r}.{hint} Available tools: {available}.", ok=False)

    def invoke(self, call: ToolCall) -> ToolOutput:
        """Run one call; an unknown tool name gives an error observation."""
        t = self.tools.get(call.name)
        return t.invoke(call) if t is not None else self._unknown(call.name)

    async def ainvoke(self, call: ToolCall) -> ToolOutput:
        """Async :meth:`invoke`."""
        t = self.tools.get(call.name)
        return await t.ainvoke(call) if t is not None else self._unknown(call.name)
