"""An agent written with the OpenAI Agents SDK on the SDK's *default* model — the Responses API — trained unchanged
by turnrl.

The same agent as agents_sdk_agent.py (an `Agent` with instructions and a `@function_tool` calculator, run by the
SDK's `Runner`, which owns the tool loop), without the Chat Completions pin: the model is
`OpenAIResponsesModel`, the class the SDK uses when an agent names a model and nothing else, so every model call is a
`POST /v1/responses` (`client.responses.create`) with `instructions`, `input` items (messages, `function_call`,
`function_call_output`) and `tools`. turnrl's gateway and `turnrl serve` answer it (docs/serving.md); the gateway
records each call with its exact tokens, as for Chat Completions.

Settings that keep it local, as in agents_sdk_agent.py: tracing is off, and the model is a model object over our own
`AsyncOpenAI(base_url=...)` — never a bare model name, which would build the SDK's default client (OPENAI_API_KEY,
api.openai.com). The client is per call of `run` (turnrl runs several episodes at once, each with its own session
URL), which is why this file does not use the process-wide `set_default_openai_client`.

A reply cut off by `max_output_tokens` comes back as an `incomplete` response, which the SDK raises as a
`ModelBehaviorError` (against OpenAI as here); `run` then answers with the last text the run produced.

Run it by hand against a server that answers `/v1/responses` (`turnrl serve`, …):

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=x \
        python examples/agents_sdk_responses_agent.py "What is 17 + 25?"

or train it (from this folder): `turnrl train agents_sdk_responses_agent.yaml`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from agents_sdk_agent import (  # the same tool and settings
    HINT,
    MAX_TOKENS,
    MAX_TURNS,
    _last_text,
    calculator,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # never upload traces to OpenAI


async def run(base_url: str, api_key: str, task: dict) -> str:
    """Solve one task; returns the final answer (turnrl's environment grades it)."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        model = task.get("model") or (await client.models.list()).data[0].id
        opening = task.get("messages") or [{"role": "user", "content": task["question"]}]
        system = [m["content"] for m in opening if m["role"] in ("system", "developer")]
        agent = Agent(
            name="calculator agent",
            instructions="\n\n".join([*system, HINT]),  # sent as the Responses API's `instructions`
            tools=[calculator],
            model=OpenAIResponsesModel(model=model, openai_client=client),  # the SDK's default model class
            model_settings=ModelSettings(max_tokens=MAX_TOKENS),  # sent as `max_output_tokens`
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
