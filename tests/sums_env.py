"""A small environment and scripted agents for the tests of items and ``turnrl compare`` (issue 77): task i asks
"What is i + (i+1)?", and each agent answers right on the first operands it is told."""

from __future__ import annotations

import turnrl
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.envs import Task, ToolEnv
from turnrl.verifiers.base import Verdict

ENV = "tests/CompareSums-v0"


def exact(text: str, ref: str) -> Verdict:
    ok = text.strip() == ref
    return Verdict(correct=ok, score=float(ok))


class Sums(ToolEnv):
    """Task i asks "What is i + (i+1)?" (canonical form ``sum:i+(i+1)``); with ``twin``, one more task asks
    "What is 1 + 0?": the same problem as task 0, presented otherwise."""

    def __init__(self, n: int = 12, twin: bool = False, **kw):
        tasks = [
            Task(
                id=f"s{i}",
                prompt=f"What is {i} + {i + 1}?",
                answer=str(2 * i + 1),
                metadata={"canonical": f"sum:{i}+{i + 1}"},
            )
            for i in range(n)
        ]
        if twin:
            tasks.append(Task(id="twin", prompt="What is 1 + 0?", answer="1", metadata={"canonical": "sum:0+1"}))
        super().__init__(tasks, verifier=exact, **kw)


turnrl.register(ENV, Sums)


def agent(right):
    """A scripted agent that answers right when ``right(first operand)``, else one too many."""

    def policy(prompt: str) -> str:
        x, y = (int(v) for v in prompt.rsplit("What is ", 1)[1].split("?")[0].split(" + "))
        return str(x + y if right(x) else x + y + 1)

    return ScriptedAgent(tiny_tokenizer("chatml"), policy)


A = agent(lambda x: x % 3 == 0)  # right on 0, 3, 6, 9 of 12
B = agent(lambda x: x % 3 != 2)  # right on 0, 1, 3, 4, 6, 7, 9, 10 of 12: A's and four more
