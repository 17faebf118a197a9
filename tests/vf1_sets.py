"""A verifiers v1 task set written the way verifiers 0.4's documentation shows, for tests/envs/test_verifiers_v1.py: what
goes wrong, each kind on its own (``turnrl.make("verifiers:vf1_sets", kind=...)``).

* ``ok``: two sums, answered by a one-call chat agent in a subprocess;
* ``broken``: its reward function raises; ``slow``: its agent sleeps ``delay`` seconds before it asks the model;
* ``crash``: its agent exits with an error; ``endless``: an infinite task set (``num_tasks`` bounds it).
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Literal

import verifiers.v1 as vf
from verifiers.v1.configs.harness import HarnessConfig

AGENT = r"""
import json, os, sys, time
from openai import OpenAI
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "crash":
    sys.exit("the agent fell over")
client = OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key=os.environ["AGENT_SECRET"], max_retries=0, timeout=60)
reply = client.chat.completions.create(model=os.environ["AGENT_MODEL"], messages=json.loads(sys.argv[1]))
print(reply.choices[0].message.content)
"""


class OneCallConfig(HarnessConfig):
    delay: float = 0.0
    crash: bool = False


class OneCall(vf.Harness[OneCallConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kwargs):
        system, prompt = self.resolve_text_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt or ""})
        env = {"AGENT_BASE_URL": endpoint, "AGENT_SECRET": secret, "AGENT_MODEL": ctx.model}
        argv = [
            sys.executable,
            "-c",
            AGENT,
            json.dumps(messages),
            str(self.config.delay),
            "crash" if self.config.crash else "ok",
        ]
        return await runtime.run_program(argv, env)


class SumData(vf.TaskData):
    answer: int
    broken: bool = False


class SumTask(vf.Task[SumData]):
    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        if self.data.broken:
            raise KeyError("score")
        return float(trace.last_reply.strip().endswith(str(self.data.answer)))


class SetsConfig(vf.TasksetConfig):
    kind: Literal["ok", "broken", "endless"] = "ok"


class SumSets(vf.Taskset[SumTask, SetsConfig]):
    def __init__(self, config: SetsConfig) -> None:
        super().__init__(config)
        self.INFINITE = config.kind == "endless"

    def load(self):
        numbers = itertools.count() if self.INFINITE else range(2)
        for a in numbers:
            yield SumTask(
                SumData(prompt=f"What is {a} + {a + 1}?", answer=2 * a + 1, broken=self.config.kind == "broken"),
                self.config.task,
            )


__all__ = ["OneCall", "SumSets"]


async def parity(trace: vf.Trace) -> float:
    """A reward to plug into any task (``task: {rewards: {parity: {fn: "vf1_sets:parity"}}}``) that varies where a
    tiny random model never solves a task: the parity of the final reply's length."""
    return float(len(trace.last_reply) % 2)
