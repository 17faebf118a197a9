"""A task set written for verifiers 0.4's v1 API the way its documentation shows — `vf.TaskData`, a `vf.Task` with
a `@vf.reward`, a `vf.TasksetConfig` and a `vf.Taskset` whose `load()` yields the tasks, plus a harness of its own;
nothing of turnrl in it — trained by turnrl as it is: `verifiers:vf_arithmetic_v1` (see "verifiers v1 task sets" in
docs/bring-your-environment.md).

Sums and differences of numbers from 1 to 30 (as examples/vf_arithmetic.py poses them): the reward is 1 when the last
number of the agent's final reply is the result, the problem's own expression restated passed over (an echo of
`What is 14 - 7?` ends on 7, the result). `split: test` holds problems `split: train` does not, told apart by
their canonical form (`7 + 12` is `12 + 7`), so no held-out problem is a training problem in any order.

The harness, `ChatAgent`, runs its agent as a separate program, as verifiers' harnesses do: a Python subprocess that
asks the model through the `openai` client at the endpoint verifiers gives it (its interception server, which turnrl
points at its gateway). With `turns: 2` it then asks the model to check its answer, so each episode is two calls, the
second extending the first.

`python examples/vf_arithmetic_v1.py` lists the task set's splits and checks that they are disjoint; `turnrl train
vf-arithmetic-v1.yaml` (from this folder) trains SmolLM2 on it (`pip install 'turnrl[verifiers-v1]'`).
"""

from __future__ import annotations

import json
import random
import re
import sys
from typing import Literal

import verifiers.v1 as vf
from verifiers.v1.configs.harness import HarnessConfig

SYSTEM = "Solve the problem. End your reply with the result as a number."
CHECK = "Check your answer. End your reply with the result as a number."

# The agent program the harness runs (standalone: only the `openai` client). Its arguments: the opening messages as
# JSON and the number of calls; the endpoint, its key and the model name come in the environment.
AGENT = r"""
import json, os, sys
from openai import OpenAI

client = OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key=os.environ["AGENT_SECRET"], max_retries=0,
                timeout=float(os.environ["AGENT_TIMEOUT"]))
messages, turns, check = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for turn in range(turns):
    if turn:
        messages.append({"role": "user", "content": check})
    reply = client.chat.completions.create(model=os.environ["AGENT_MODEL"], messages=messages)
    messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
print(messages[-1]["content"])
"""


class ChatAgentConfig(HarnessConfig):
    turns: int = 1
    """Model calls per episode: after the first, each asks the model to check its answer."""
    call_timeout: float = 120.0
    """Seconds one model call may take."""


class ChatAgent(vf.Harness[ChatAgentConfig]):
    """A chat agent in a subprocess of the runtime, talking to the model through the endpoint it is given."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kwargs):
        system, prompt = self.resolve_text_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt or ""})
        env = {
            "AGENT_BASE_URL": endpoint,
            "AGENT_SECRET": secret,
            "AGENT_MODEL": ctx.model,
            "AGENT_TIMEOUT": str(self.config.call_timeout),
        }
        argv = [sys.executable, "-c", AGENT, json.dumps(messages), str(self.config.turns), CHECK]
        return await runtime.run_program(argv, env)


def problems(n: int, seed: int, exclude: set[str] = frozenset()) -> list[tuple[str, int]]:
    """``n`` distinct problems ``What is a + b?`` / ``What is a - b?`` (numbers from 1 to 30, results not negative)
    and their results, none whose canonical form (:func:`same_problem`) is in ``exclude``."""
    rng, rows, seen = random.Random(seed), [], set(exclude)
    while len(rows) < n:
        a, b = rng.randint(1, 30), rng.randint(1, 30)
        if rng.random() < 0.5:
            question, answer = f"What is {a} + {b}?", a + b
        else:
            a, b = max(a, b), min(a, b)
            question, answer = f"What is {a} - {b}?", a - b
        if same_problem(question) not in seen:
            seen.add(same_problem(question))
            rows.append((question, answer))
    return rows


def same_problem(question: str) -> str:
    """What makes two questions one problem: the operands of a sum in order (``7 + 12`` is ``12 + 7``)."""
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    return f"{min(int(a), int(b))} + {max(int(a), int(b))}" if op == "+" else f"{a} - {b}"


def restated(problem: str) -> re.Pattern[str]:
    """The problem's expression (its canonical form, :func:`same_problem`) as a reply may write it: a sum's operands
    in either order, any spacing (``12+7``, ``7 + 12``)."""
    a, op, b = problem.split()
    orders = [(a, b), (b, a)] if op == "+" else [(a, b)]
    return re.compile("|".join(rf"(?<![\d-]){x}\s*{re.escape(op)}\s*{y}(?!\d)" for x, y in orders))


class ArithmeticData(vf.TaskData):
    answer: int
    problem: str
    """The canonical form: the task's key, and what the splits are kept apart by."""


class ArithmeticTask(vf.Task[ArithmeticData]):
    @property
    def key(self) -> str:
        return self.data.problem.replace(" ", "")

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        """1 when the last number of the final reply is the result. The problem's own expression, restated, is not
        an answer: its numbers are passed over (``What is 14 - 7?`` would otherwise be paid for 7)."""
        numbers = re.findall(r"-?\d+", restated(self.data.problem).sub(" ", trace.last_reply))
        return float(bool(numbers) and len(numbers[-1]) <= 12 and int(numbers[-1]) == self.data.answer)


class ArithmeticConfig(vf.TasksetConfig):
    split: Literal["train", "test"] = "train"
    num_train: int = 600
    num_eval: int = 200
    seed: int = 0


class ArithmeticTaskset(vf.Taskset[ArithmeticTask, ArithmeticConfig]):
    def load(self) -> list[ArithmeticTask]:
        """The split's problems: ``num_train`` training ones, or ``num_eval`` held-out ones that no training problem
        equals in any order of a sum's operands (of the 930 distinct problems, 800 are used by default)."""
        c = self.config
        if c.num_train + c.num_eval > 930:
            raise ValueError(
                f"num_train + num_eval = {c.num_train + c.num_eval}, but there are only 930 distinct problems"
            )
        rows = problems(c.num_train, c.seed)
        if c.split == "test":
            rows = problems(c.num_eval, c.seed + 1, exclude={same_problem(q) for q, _ in rows})
        return [
            ArithmeticTask(ArithmeticData(prompt=q, system_prompt=SYSTEM, answer=a, problem=same_problem(q)), c.task)
            for q, a in rows
        ]


__all__ = ["ArithmeticTaskset", "ChatAgent"]


if __name__ == "__main__":
    splits = {s: list(ArithmeticTaskset(ArithmeticConfig(id="vf_arithmetic_v1", split=s))) for s in ("train", "test")}
    shared = {t.key for t in splits["train"]} & {t.key for t in splits["test"]}
    for s, tasks in splits.items():
        print(f"{s}: {len(tasks)} tasks, e.g. {tasks[0].data.prompt!r} -> {tasks[0].data.answer}")
    print(f"problems in both splits (in any order): {len(shared)}")
    if shared:
        raise SystemExit(f"the splits share {len(shared)} problems, e.g. {sorted(shared)[:3]}")
