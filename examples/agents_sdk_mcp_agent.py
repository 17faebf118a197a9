"""An OpenAI Agents SDK agent whose tools come from an MCP server — nothing from turnrl — trained unchanged.

Many agents reach their tools through the Model Context Protocol instead of defining them in code. This one asks
its MCP server for the tools (the SDK's `MCPServerStreamableHttp`), lets the SDK's `Runner` drive the tool loop, and
returns the final reply. Trained by turnrl (`program.mcp_tools: true`), the MCP server it is given
(`task["mcp_url"]`) is the gateway's: it serves the tools of the episode's environment — here the inventory
service of `inventory_env.py`, itself an MCP server — and records every call on the episode.

Settings that keep it local, as in agents_sdk_agent.py: tracing off, and a model object over our own client (the
SDK never builds its default OpenAI client).

Run it by hand against any OpenAI-compatible server and any streamable-HTTP MCP server, e.g. the inventory service
(`python inventory_mcp_server.py --http 8931`):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x MCP_URL=http://127.0.0.1:8931/mcp \\
        python examples/agents_sdk_mcp_agent.py "How many desk lamps are in stock?"

or train it (from this folder): `turnrl train agents_sdk_mcp_agent.yaml`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agents import (
    Agent,
    ItemHelpers,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

set_tracing_disabled(True)  # never upload traces to OpenAI

MAX_TURNS = 4  # model calls per task
MAX_TOKENS = 96  # tokens per model call
HINT = "Use the tools to look things up. When you know the answer, reply with it."


def _last_text(error: AgentsException) -> str:
    """The last assistant text of a run that stopped early (too many turns, a call to an unknown tool)."""
    data = error.run_data
    if data is None:
        return ""
    texts = [ItemHelpers.text_message_outputs([item]) for item in data.new_items]
    return next((t for t in reversed(texts) if t), "")


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task with the tools of the MCP server at ``task["mcp_url"]``; returns the final answer."""
    url = task.get("mcp_url") or os.environ.get("MCP_URL")
    if not url:
        raise ValueError("no MCP server: train with program.mcp_tools: true, or set MCP_URL")
    headers = {"Authorization": f"Bearer {api_key}"}  # turnrl's tool server wants the gateway's key
    tools = MCPServerStreamableHttp({"url": url, "headers": headers, "timeout": 30}, cache_tools_list=True,
                                    client_session_timeout_seconds=30, name="tools")
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client, tools:
        model = task.get("model") or (await client.models.list()).data[0].id
        opening = task.get("messages") or [{"role": "user", "content": task["question"]}]
        system = [m["content"] for m in opening if m["role"] in ("system", "developer")]
        agent = Agent(
            name="tool agent",
            instructions="\n\n".join([*system, HINT]),
            mcp_servers=[tools],
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
    else:  # as a turnrl `program.command`: the task in TURNRL_TASK (with mcp_url), the answer as the last line
        print(json.dumps(asyncio.run(run(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"],
                                         json.loads(os.environ["TURNRL_TASK"])))))
