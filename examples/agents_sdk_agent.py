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

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable

from agents import (
    Agent,
    ItemHelpers,
    MaxTurnsExceeded,
    Model,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from calculator_tool import HINT
from calculator_tool import calculator as evaluate
from openai import AsyncOpenAI

set_tracing_disabled(True)  # never upload traces to OpenAI

MAX_TURNS = 4  # model calls per task
MAX_TOKENS = 96  # tokens per model call


@function_tool  # the SDK's tool over calculator_tool.py's arithmetic (plain Python)
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


def opening(task: dict) -> tuple[list[str], list[dict]]:
    """The task's system texts (the agent's instructions start with them) and its other opening messages (the
    conversation the agent is run on)."""
    messages = task.get("messages") or [{"role": "user", "content": task["question"]}]
    system = [m["content"] for m in messages if m["role"] in ("system", "developer")]
    return system, [
        {"role": m["role"], "content": m["content"]} for m in messages if m["role"] not in ("system", "developer")
    ]


async def run_agent(agent: Agent, conversation: list[dict]) -> str:
    """The agent's final answer: the SDK's `Runner` owns the tool loop (at most MAX_TURNS model calls, tracing off)."""
    try:
        result = await Runner.run(agent, conversation, max_turns=MAX_TURNS, run_config=RunConfig(tracing_disabled=True))
    except (MaxTurnsExceeded, ModelBehaviorError) as e:  # the model kept calling tools, or named no real tool
        return _last_text(e)
    return str(result.final_output or "")


def calculator_agent(system: list[str], model: Model) -> Agent:
    """The agent: its instructions the task's system text, then the hint (one system message); the calculator tool;
    at most MAX_TOKENS tokens a model call."""
    return Agent(
        name="calculator agent",
        instructions="\n\n".join([*system, HINT]),
        tools=[calculator],
        model=model,
        model_settings=ModelSettings(max_tokens=MAX_TOKENS),
    )


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = task.get("model") or (await client.models.list()).data[0].id
        system, conversation = opening(task)
        agent = calculator_agent(system, OpenAIChatCompletionsModel(model=model, openai_client=client))
        return await run_agent(agent, conversation)


def main(run: Callable[[str, str, dict], Awaitable[str]]) -> None:
    """The command line of an agent of this folder's: a question by hand, or a turnrl `program.command`'s task."""
    if len(sys.argv) > 1:  # by hand: the question on the command line
        print(
            asyncio.run(
                run(
                    os.environ["OPENAI_BASE_URL"],
                    os.environ.get("OPENAI_API_KEY", "x"),
                    {"question": " ".join(sys.argv[1:])},
                )
            )
        )
    else:  # as a turnrl `program.command`: the task in TURNRL_TASK, the answer as the last line
        print(
            json.dumps(
                asyncio.run(
                    run(
                        os.environ["OPENAI_BASE_URL"],
                        os.environ["OPENAI_API_KEY"],
                        json.loads(os.environ["TURNRL_TASK"]),
                    )
                )
            )
        )


if __name__ == "__main__":
    main(run)
