"""An OpenAI Agents SDK agent whose tools come from an MCP server — nothing from turnrl — trained unchanged.

Many agents reach their tools through the Model Context Protocol instead of defining them in code. This one asks
its MCP server for the tools (the SDK's `MCPServerStreamableHttp`), lets the SDK's `Runner` drive the tool loop, and
returns the final reply. Trained by turnrl (`program.mcp_tools: true`), the MCP server it is given
(`task["mcp_url"]`) is the gateway's: it serves the tools of the episode's environment — here the inventory
service of `inventory_env.py`, itself an MCP server — and records every call on the episode.

Settings that keep it local, as in agents_sdk_agent.py (whose settings and run loop it imports): tracing off, and a
model object over our own client (the SDK never builds its default OpenAI client).

Run it by hand against any OpenAI-compatible server and any streamable-HTTP MCP server, e.g. the inventory service
(`python inventory_mcp_server.py --http 8931`):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x MCP_URL=http://127.0.0.1:8931/mcp \\
        python examples/agents_sdk_mcp_agent.py "How many desk lamps are in stock?"

or train it (from this folder): `turnrl train agents_sdk_mcp_agent.yaml`.
"""

from __future__ import annotations

import os

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel
from agents.mcp import MCPServerStreamableHttp
from agents_sdk_agent import MAX_TOKENS, main, opening, run_agent
from openai import AsyncOpenAI

# from agents_sdk_agent.py (importing it turns the SDK's tracing off): the settings and the run loop
HINT = "Use the tools to look things up. When you know the answer, reply with it."


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task with the tools of the MCP server at ``task["mcp_url"]``; returns the final answer."""
    url = task.get("mcp_url") or os.environ.get("MCP_URL")
    if not url:
        raise ValueError("no MCP server: train with program.mcp_tools: true, or set MCP_URL")
    headers = {"Authorization": f"Bearer {api_key}"}  # turnrl's tool server wants the gateway's key
    tools = MCPServerStreamableHttp(
        {"url": url, "headers": headers, "timeout": 30},
        cache_tools_list=True,
        client_session_timeout_seconds=30,
        name="tools",
    )
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client, tools:
        model = task.get("model") or (await client.models.list()).data[0].id
        system, conversation = opening(task)
        agent = Agent(
            name="tool agent",
            instructions="\n\n".join([*system, HINT]),
            mcp_servers=[tools],
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            model_settings=ModelSettings(max_tokens=MAX_TOKENS),
        )
        return await run_agent(agent, conversation)  # tracing off: agents_sdk_agent.run_agent


if __name__ == "__main__":  # as a turnrl `program.command`, the task in TURNRL_TASK holds mcp_url
    main(run)
