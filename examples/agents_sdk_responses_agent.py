"""An agent written with the OpenAI Agents SDK on the SDK's *default* model — the Responses API — trained unchanged
by turnrl.

The same agent as agents_sdk_agent.py (an `Agent` with instructions and a `@function_tool` calculator, run by the
SDK's `Runner`, which owns the tool loop), without the Chat Completions pin: the model is
`OpenAIResponsesModel`, the class the SDK uses when an agent names a model and nothing else, so every model call is a
`POST /v1/responses` (`client.responses.create`) with `instructions`, `input` items (messages, `function_call`,
`function_call_output`) and `tools`. turnrl's gateway and `turnrl serve` answer it (docs/serving.md); the gateway
records each call with its exact tokens, as for Chat Completions.

Settings that keep it local, as in agents_sdk_agent.py (whose tool, settings and run loop it imports; importing it
turns tracing off): tracing is off, and the model is a model object over our own `AsyncOpenAI(base_url=...)` — never
a bare model name, which would build the SDK's default client (OPENAI_API_KEY, api.openai.com). The client is per
call of `run` (turnrl runs several episodes at once, each with its own session URL), which is why this file does not
use the process-wide `set_default_openai_client`.

A reply cut off by `max_output_tokens` comes back as an `incomplete` response, which the SDK raises as a
`ModelBehaviorError` (against OpenAI as here); `run` then answers with the last text the run produced.

Run it by hand against a server that answers `/v1/responses` (`turnrl serve`, …):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x \
        python examples/agents_sdk_responses_agent.py "What is 17 + 25?"

or train it (from this folder): `turnrl train agents_sdk_responses_agent.yaml`.
"""

from __future__ import annotations

from agents import OpenAIResponsesModel
from agents_sdk_agent import calculator_agent, main, opening, run_agent
from openai import AsyncOpenAI

# from agents_sdk_agent.py: the same agent (instructions, calculator, token limit), run loop and command line


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = task.get("model") or (await client.models.list()).data[0].id
        system, conversation = opening(task)
        # the SDK's default model class: the instructions go out as the Responses API's `instructions`, the token
        # limit as `max_output_tokens`
        agent = calculator_agent(system, OpenAIResponsesModel(model=model, openai_client=client))
        return await run_agent(agent, conversation)  # tracing off: agents_sdk_agent.run_agent


if __name__ == "__main__":
    main(run)
