"""An agent written with the `anthropic` SDK's tool-use loop — nothing from turnrl — trained unchanged by turnrl.

The same task as openai_agent.py (a calculator tool, then the answer), written the way the Anthropic documentation
writes a tool-using agent: `client.messages.create(model=..., system=..., messages=..., tools=[...],
max_tokens=...)`; while the reply stops for `tool_use`, run each `tool_use` block and answer it with a
`tool_result` block in the next user message; the first reply that stops otherwise (`end_turn`, or `max_tokens`) is
the answer — or the last text after `MAX_TURNS` model calls. The history is appended to, never rewritten: the
assistant's content blocks go back exactly as they came.

turnrl's training gateway and `turnrl serve` answer Anthropic's Messages API (`POST /v1/messages`,
docs/serving.md): the agent is pointed at them by base URL, nothing else. The SDK adds `/v1` to its base URL itself,
so it is given the server's root: `run` takes the session URL turnrl gives every program (`…/v1`) and drops that
suffix; as a `program.command` it gets `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`, which the SDK reads.

Run it by hand against a server that answers `/v1/messages` (`turnrl serve --agent smollm2-135m-instruct`, …):

    ANTHROPIC_BASE_URL=http://127.0.0.1:8000 ANTHROPIC_API_KEY=x ANTHROPIC_MODEL=smollm2-135m-instruct \\
        python examples/anthropic_agent.py "What is 17 + 25?"

or train it (from this folder): `turnrl train anthropic_agent.yaml` — each episode is one call of `run` below, with
a `base_url` that points at the policy being trained.
"""

from __future__ import annotations

import json
import os
import sys

import anthropic
from calculator_tool import DESCRIPTION, HINT, calculator

# calculator_tool.py: the tool itself (arithmetic, in plain Python), the hint and the tool's description
MAX_TURNS = 4  # model calls per task
MAX_TOKENS = 96  # tokens per model call
TOOLS = [
    {
        "name": "calculator",
        "description": DESCRIPTION,
        "input_schema": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    }
]


def use_tool(block: anthropic.types.ToolUseBlock) -> dict:
    """The `tool_result` block that answers one `tool_use` block."""
    args = block.input if isinstance(block.input, dict) else {}
    if block.name == "calculator":
        result = calculator(args.get("expression", ""))
    else:
        result = f"error: no tool named {block.name!r}"
    return {"type": "tool_result", "tool_use_id": block.id, "content": result}


def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    model = task.get("model") or os.environ.get("ANTHROPIC_MODEL")
    if not model:
        raise ValueError("no model to ask for: set ANTHROPIC_MODEL to the served model's name")
    opening = task.get("messages") or [{"role": "user", "content": task["question"]}]
    system = "\n\n".join([*(m["content"] for m in opening if m["role"] == "system"), HINT])
    messages = [{"role": m["role"], "content": m["content"]} for m in opening if m["role"] != "system"]
    text = ""
    with anthropic.Anthropic(
        base_url=base_url.removesuffix("/v1"), api_key=api_key, max_retries=0, timeout=300.0
    ) as client:
        for _ in range(MAX_TURNS):
            reply = client.messages.create(
                model=model, system=system, messages=messages, tools=TOOLS, max_tokens=MAX_TOKENS
            )
            text = "".join(block.text for block in reply.content if block.type == "text")
            if reply.stop_reason != "tool_use":  # end_turn (or max_tokens): the answer
                return text
            messages.append({"role": "assistant", "content": reply.content})  # the blocks as they came
            messages.append(
                {"role": "user", "content": [use_tool(block) for block in reply.content if block.type == "tool_use"]}
            )
    return text


if __name__ == "__main__":  # by hand: the question on the command line; as a turnrl `program.command`: the task in
    by_hand = len(sys.argv) > 1  # TURNRL_TASK, the answer (JSON) as the last line printed
    task = {"question": " ".join(sys.argv[1:])} if by_hand else json.loads(os.environ["TURNRL_TASK"])
    answer = run(os.environ["ANTHROPIC_BASE_URL"], os.environ.get("ANTHROPIC_API_KEY", "x"), task)
    print(answer if by_hand else json.dumps(answer))
