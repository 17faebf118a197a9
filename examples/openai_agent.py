"""An agent written against the official `openai` client only — nothing from turnrl — trained unchanged by turnrl.

A ReAct-style loop: the model may call a calculator tool (OpenAI `tools`, answered with `role: tool` messages) and
then gives its answer. The agent keeps its own history short: past `KEEP_EXCHANGES` tool exchanges, the oldest are
dropped (turnrl records the calls after such a rewrite as a new segment of the episode, still token-exact).

Run it by hand against any OpenAI-compatible server (`turnrl serve`, vLLM, …):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x python examples/openai_agent.py "What is 17 + 25?"

or train it (from this folder): `turnrl train openai_agent.yaml` — each episode is one call of `run` below, with a
`base_url` that points at the policy being trained.
"""

from __future__ import annotations

import json
import os
import sys

from calculator_tool import DESCRIPTION, HINT, calculator
from openai import OpenAI

# calculator_tool.py: the tool itself (arithmetic, in plain Python), the hint and the tool's description
MAX_STEPS = 4  # model calls per task
KEEP_EXCHANGES = 2  # tool exchanges kept in the history (older ones are dropped)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def trim(messages: list[dict]) -> list[dict]:
    """The opening messages and the last KEEP_EXCHANGES tool exchanges (an assistant call and its results)."""
    first = (
        next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        if any(m["role"] == "assistant" for m in messages)
        else len(messages)
    )
    head, rest = messages[:first], messages[first:]
    starts = [i for i, m in enumerate(rest) if m["role"] == "assistant"]
    return head + rest[starts[-KEEP_EXCHANGES] :] if len(starts) > KEEP_EXCHANGES else messages


def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    model = task.get("model") or client.models.list().data[0].id
    opening = task.get("messages") or [{"role": "user", "content": task["question"]}]
    messages = [*opening[:-1], {"role": "system", "content": HINT}, opening[-1]]
    text = ""
    for _ in range(MAX_STEPS):
        reply = client.chat.completions.create(model=model, messages=trim(messages), tools=TOOLS, max_tokens=96)
        message = reply.choices[0].message
        text = message.content or ""
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        if not message.tool_calls:
            return text
        for call in message.tool_calls:
            try:
                args = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            result = (
                calculator(args.get("expression", ""))
                if call.function.name == "calculator"
                else f"error: no tool named {call.function.name!r}"
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return text


if __name__ == "__main__":
    if len(sys.argv) > 1:  # by hand: the question on the command line
        print(
            run(
                os.environ["OPENAI_BASE_URL"],
                os.environ.get("OPENAI_API_KEY", "x"),
                {"question": " ".join(sys.argv[1:])},
            )
        )
    else:  # as a turnrl `program.command`: the task in TURNRL_TASK, the answer as the last line
        print(
            json.dumps(
                run(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], json.loads(os.environ["TURNRL_TASK"]))
            )
        )
