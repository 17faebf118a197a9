"""The conformance harness's checks of tools and verifiers (used by :func:`turnrl.envs.conformance.contract.check_environment`).

* :func:`check_tools` calls each tool with arguments generated from its JSON schema. A tool may refuse valid
  input by raising :class:`~turnrl.tools.ToolError` (the model sees the message). A plain ``ValueError`` (Python's
  "right type, meaningless value", e.g. a date tool given ``"a"``) is a warning: at run time it too becomes an error
  message the model reads, only a less helpful one. Any other exception is a bug in the tool the report fails. Wrong types, a missing required argument and an unexpected argument must come back as an
  error message for the model (``ok=False``), never as an exception or a success.
* :func:`check_verifier` grades a wrong and the reference answer and checks that each gives a
  :class:`~turnrl.verifiers.base.Verdict`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import ValidationError

from turnrl.envs.conformance.report import CheckReport
from turnrl.envs.core import TextEnv
from turnrl.tools.base import Tool, ToolError, ToolOutput
from turnrl.types import ToolCall
from turnrl.verifiers.base import Verdict

VALID_CALLS = 6  # argument sets tried per tool

_SCALARS: dict[str, list[Any]] = {
    "string": ["a", "", "0", "hello world", "-1.5", "x" * 200],
    "integer": [1, 0, -1, 7, 1000, 2**40],
    "number": [1.5, 0, -2, 1, 1e6, 0.001],
    "boolean": [True, False],
    "null": [None],
}
_WRONG: dict[str, Any] = {  # a value of another JSON type that pydantic's lax mode does not coerce
    "string": {"not": "a string"},
    "integer": "not a number",
    "number": "not a number",
    "boolean": "not a boolean",
    "array": "not a list",
    "object": "not an object",
}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return defs.get(ref.rsplit("/", 1)[-1], {}) if isinstance(ref, str) else schema


def candidates(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> list[Any]:
    """Values that a JSON-schema ``schema`` admits (enums, examples, defaults, then typical and edge values)."""
    schema = _resolve(schema, defs)
    if "enum" in schema:
        return list(schema["enum"])
    if "const" in schema:
        return [schema["const"]]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [v for sub in schema[key] for v in candidates(sub, defs, depth + 1)[:3]]
    given = list(schema.get("examples", [])) + ([schema["default"]] if "default" in schema else [])
    kind = schema.get("type")
    if kind in _SCALARS:
        return given + _SCALARS[kind]
    if kind == "array" and depth < 3:
        items = candidates(schema.get("items", {}), defs, depth + 1)
        return [*given, items[:1], [], items[:3]]
    if kind == "object" and depth < 3:
        return [*given, arguments(schema, defs, 0, depth + 1), arguments(schema, defs, 1, depth + 1)]
    return given or ["a", 1, None]


def arguments(schema: dict[str, Any], defs: dict[str, Any], i: int, depth: int = 0) -> dict[str, Any]:
    """The ``i``-th generated argument set: every required property, the optional ones when ``i`` is odd."""
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    out = {}
    for j, (name, sub) in enumerate(props.items()):
        if name in required or i % 2:
            values = candidates(sub, defs, depth)
            out[name] = values[(i + j) % len(values)]
    return out


def _run(tool: Tool, args: dict[str, Any]) -> Any:
    """Validate ``args`` and call the tool's function, letting its exceptions through."""
    validated = dict(tool.args_model.model_validate(args))
    return asyncio.run(tool.fn(**validated)) if tool.is_async else tool.fn(**validated)


def _external_calls(env: TextEnv, tool: Tool, seed: int, report: CheckReport) -> int:
    """A tool that runs elsewhere (MCP, a remote environment): each generated call must come back as an output."""
    params = tool.schema()["function"]["parameters"]
    defs, ran, refused = params.get("$defs", {}), 0, []
    for i in range(VALID_CALLS):
        args = arguments(params, defs, i)
        env.reset(seed=seed)
        try:
            out = tool.invoke(ToolCall(name=tool.name, arguments=args))
        except Exception as e:  # the bug this check is for
            report.failures.append(
                f"tool {tool.name!r} raised {type(e).__name__}: {e} on arguments "
                f"{json.dumps(args, default=str)} instead of returning an output"
            )
            return ran + 1
        if not isinstance(out, ToolOutput) or not isinstance(out.content, str):
            report.failures.append(
                f"tool {tool.name!r} returned {out!r} for {json.dumps(args, default=str)}, not a ToolOutput"
            )
            continue
        ran += 1
        if not out.ok and out.content.startswith(f"Error: {tool.name} failed: "):  # an exception inside the tool
            report.failures.append(
                f"tool {tool.name!r} raised inside on arguments {json.dumps(args, default=str)}: "
                f"{out.content[:200]}; fix it, or raise turnrl.tools.ToolError('what to change') "
                "so that the model reads why"
            )
            return ran
        if not out.ok:
            refused.append(out.content)
    example = f", e.g. {refused[0][:120]!r}" if refused else ""
    report.notes.append(
        f"tool {tool.name!r} (runs elsewhere) answered {ran} generated call(s), refused {len(refused)}{example}"
    )
    return ran


def _valid_calls(env: TextEnv, tool: Tool, seed: int, report: CheckReport) -> int:
    if not tool.local:
        return _external_calls(env, tool, seed, report)
    params = tool.schema()["function"]["parameters"]
    defs = params.get("$defs", {})
    ran, warned = 0, False
    for i in range(VALID_CALLS):
        args = arguments(params, defs, i)
        env.reset(seed=seed)  # tools may read or spend the episode's state
        try:
            _run(tool, args)
        except ValidationError:
            continue  # the generated values break a constraint of the schema: not valid input
        except ToolError:
            pass  # a deliberate message for the model
        except ValueError as e:  # the value refused: the model reads "Error: NAME failed: ValueError: …" (a warning)
            if not warned:
                warned = True
                error = f"{type(e).__name__}: {e}"
                report.warnings.append(
                    f"tool {tool.name!r} raised {error} on schema-valid arguments {json.dumps(args, default=str)}; "
                    f"the model reads 'Error: {tool.name} failed: {error}'. Fix it if the tool should take this value, "
                    "or raise turnrl.tools.ToolError('what to change') so that the model reads how to call it"
                )
        except Exception as e:  # the bug this check is for
            report.failures.append(
                f"tool {tool.name!r} raised {type(e).__name__}: {e} on valid arguments {json.dumps(args, default=str)}; "
                "fix it, or raise turnrl.tools.ToolError('what to change') so that the model reads why"
            )
            return ran + 1
        ran += 1
    return ran


def _malformed(params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    defs = params.get("$defs", {})
    good = arguments(params, defs, 0)
    cases = [("an unexpected argument", {**good, "no_such_argument": 1})]
    required = list(params.get("required", []))
    if required:
        missing = {k: v for k, v in good.items() if k != required[0]}
        cases.append((f"the required argument {required[0]!r} missing", missing))
    for name, sub in params.get("properties", {}).items():
        kind = _resolve(sub, defs).get("type")
        if kind in _WRONG:
            cases.append((f"{name!r} of the wrong type", {**good, name: _WRONG[kind]}))
            break
    return cases


def check_tools(env: TextEnv, seed: int, report: CheckReport) -> None:
    """Call every tool of ``env`` with generated valid and malformed arguments; report what goes wrong."""
    for tool in env.tools:
        if not isinstance(tool, Tool):
            report.failures.append(f"env.tools holds {tool!r}, not a turnrl Tool: decorate the function with @tool")
            continue
        ran = _valid_calls(env, tool, seed, report)
        if ran == 0:
            report.notes.append(f"tool {tool.name!r}: no generated arguments satisfied its schema; not called")
        refused = 0
        for label, args in _malformed(tool.schema()["function"]["parameters"]):
            env.reset(seed=seed)
            try:
                out = tool.invoke(ToolCall(name=tool.name, arguments=args))
            except Exception as e:
                report.failures.append(
                    f"tool {tool.name!r} raised {type(e).__name__} for {label} instead of "
                    "returning an error message for the model"
                )
                continue
            if out.ok or not out.content:
                report.failures.append(
                    f"tool {tool.name!r} accepted {label} ({json.dumps(args, default=str)}); "
                    "a bad call must come back as an error message (ok=False)"
                )
            else:
                refused += 1
        report.notes.append(f"tool {tool.name!r}: {ran} generated call(s) ran, {refused} malformed call(s) refused")


def check_verifier(env: TextEnv, seed: int, report: CheckReport) -> None:
    """If ``env`` grades answers with ``score(text)`` (a ToolEnv does, through its verifier), grade a wrong and the
    reference answer; each must give a Verdict."""
    score = getattr(env, "score", None)
    if not callable(score):
        return
    env.reset(seed=seed)
    reference = getattr(getattr(env, "task", None), "answer", None)
    format_answer = getattr(env, "format_answer", None)
    right = format_answer(reference) if callable(format_answer) and reference is not None else None
    answers = [("a wrong answer", env.wrong_action())] + ([("the reference answer", right)] if right else [])
    for label, text in answers:
        try:
            verdict = score(text)
        except Exception as e:  # ToolEnv.score says when the verifier returned no Verdict
            report.failures.append(f"grading {label} raised {type(e).__name__}: {e}")
            continue
        if not isinstance(verdict, Verdict):
            report.failures.append(
                f"grading {label} gave {type(verdict).__name__} ({verdict!r:.60}), not a Verdict: "
                "return turnrl.verifiers.Verdict(correct=ok, score=1.0 if ok else 0.0)"
            )
