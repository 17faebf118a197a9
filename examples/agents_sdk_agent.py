"""An agent written with the OpenAI Agents SDK (`pip install openai-agents`) — nothing from turnrl — trained
unchanged by turnrl.

The same task as openai_agent.py (a calculator tool, then the answer), written the way a user of an agent
framework writes it: an `Agent` with instructions and a `@function_tool`, run by the SDK's `Runner`, which owns the
loop — it sends the tool schema, executes the tool calls the model makes, feeds the results back and stops at the
first reply without a tool call (or after `MAX_TURNS` model calls).

Why this framework: it is OpenAI's own, the usual next step for code written against the `openai` client, and it
talks to any OpenAI-compatible server through Chat Completions (`OpenAIChatCompletionsModel` over an
`AsyncOpenAI(base_url=...)`), which is what turnrl's training gateway serves. Two settings keep it local:

* tracing is off (`set_tracing_disabled(True)` and the run config's `tracing_disabled`): by default the SDK
  uploads traces to OpenAI's servers;
* the model is a model object over our own client, never a model *name*, so the SDK never builds its default
  OpenAI client (the one that would read OPENAI_API_KEY and call api.openai.com).

The SDK sends nothing the gateway refuses: with these settings its requests carry `model`, `messages`, `tools` and
`max_tokens` only (`parallel_tool_calls`, `store`, `tool_choice`, `stream_options` and `metadata` are left out
unless set, and `store` / `stream_options` are only defaulted for api.openai.com).

Run it by hand against any OpenAI-compatible server (`turnrl serve`, vLLM, …):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x python examples/agents_sdk_agent.py "What is 17 + 25?"

or train it (from this folder): `turnrl train agents_sdk_agent.yaml` — each episode is one call of `run` below
(an `async def`: turnrl runs it in its own event loop), with a `base_url` that points at the policy being trained.
"""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import os
import sys
import threading

from agents import (
    Agent,
    ItemHelpers,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from openai import AsyncOpenAI

set_tracing_disabled(True)  # never upload traces to OpenAI

MAX_TURNS = 4  # model calls per task
MAX_TOKENS = 96  # tokens per model call
# The server describes the tool (its template, or turnrl's gateway for templates that cannot render tools).
HINT = "Use the calculator tool for arithmetic. When you know the answer, reply with it."

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg, ast.UAdd: operator.pos}

_PARSE = threading.Lock()  # turnrl runs several episodes of this program at once, in threads


def evaluate(expression: str) -> str:
    """Arithmetic only (no names, no calls), or an error message the model can read."""
    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value,
                                                                                                        bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("only numbers and + - * / ( ) are allowed")

    try:
        with _PARSE:  # Python 3.11's parser is not safe in several threads at once (cpython#106905)
            tree = ast.parse(str(expression), mode="eval")
        value = ev(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, OverflowError) as e:
        return f"error: {e}"
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: the expression, e.g. "(3 + 4) * 2".
    """
    return evaluate(expression)


def _last_text(error: AgentsException) -> str:
    """The last assistant text of a run that stopped early (too many turns, a call to an unknown tool)."""
    data = error.run_data
    if data is None:
        return ""
    texts = [ItemHelpers.text_message_outputs([item]) for item in data.new_items]
    return next((t for t in reversed(texts) if t), "")


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = task.get("model") or (await client.models.list()).data[0].id
        opening = task.get("messages") or [{"role": "user", "content": task["question"]}]
        system = [m["content"] for m in opening if m["role"] in ("system", "developer")]
        agent = Agent(
            name="calculator agent",
            instructions="\n\n".join([*system, HINT]),  # one system message: the task's, then the hint
            tools=[calculator],
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            model_settings=ModelSettings(max_tokens=MAX_TOKENS),
        )
        conversation = [{"role": m["role"], "content": m["content"]} for m in opening
                        if m["role"] not in ("system", "developer")]
        try:
            result = await Runner.run(agent, conversation, max_turns=MAX_TURNS,
                                      run_config=RunConfig(tracing_disabled=True))
        except (MaxTurnsExceeded, ModelBehaviorError) as e:  # the model kept calling tools, or named no real tool
            return _last_text(e)
        return str(result.final_output or "")


if __name__ == "__main__":
    if len(sys.argv) > 1:  # by hand: the question on the command line
        print(asyncio.run(run(os.environ["OPENAI_BASE_URL"], os.environ.get("OPENAI_API_KEY", "x"),
                              {"question": " ".join(sys.argv[1:])})))
    else:  # as a turnrl `program.command`: the task in TURNRL_TASK, the answer as the last line
        print(json.dumps(asyncio.run(run(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"],
                                         json.loads(os.environ["TURNRL_TASK"])))))
