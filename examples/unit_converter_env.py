"""Your own tool-use environment: unit conversion with a `convert` tool (the environment is the first 60 lines or so).

From this folder, every command sees it as `unit_converter_env:examples/Units-v0` (see "Your own environment" in
docs/environments.md). `python examples/unit_converter_env.py` checks it with the conformance harness and plays one
episode.
"""

import functools
import random

import turnrl
from turnrl import ToolCall
from turnrl.envs import Task, ToolEnv
from turnrl.tools import ToolError, tool
from turnrl.verifiers.math import verify

FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mile": 1609.344, "ft": 0.3048}


@tool
def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length between units (m, km, cm, mile, ft).

    Args:
        value: the quantity to convert.
        from_unit: the unit of `value`.
        to_unit: the unit wanted.
    """
    if from_unit not in FACTORS or to_unit not in FACTORS:
        raise ToolError(f"unknown unit; use one of {', '.join(FACTORS)}")
    return round(value * FACTORS[from_unit] / FACTORS[to_unit], 6)


def make_tasks(split: str, n: int = 50) -> list[Task]:
    """`n` conversions; train values are 1-99, test values 100-999, so the splits never share a task."""
    rng, low, high = random.Random(split), *((1, 99) if split == "train" else (100, 999))
    tasks = []
    for i in range(n):
        from_unit, to_unit = rng.sample(list(FACTORS), 2)
        args = {"value": rng.randint(low, high), "from_unit": from_unit, "to_unit": to_unit}
        question = f"How many {args['to_unit']} are {args['value']} {args['from_unit']}?"
        tasks.append(Task(id=f"units/{split}/{i}", prompt=question, answer=str(convert(**args)), metadata=args))
    return tasks


class UnitsEnv(ToolEnv):
    """Convert lengths; the agent may call `convert` before answering in <answer> tags."""

    def __init__(self, split: str = "train", **options):
        # "auto" also grades "The answer is N." and a last number: small models rarely use the tags at first
        super().__init__(
            make_tasks(split),
            tools=[convert],
            verifier=functools.partial(verify, answer_format="auto"),
            instruction="Answer with a number in <answer></answer> tags.",
            **options,
        )
        self.split, self.held_out_split = split, "test"  # `turnrl eval` and training's held-out evaluation use test

    def oracle_calls(self, task):  # what solves a task: the harness checks that the tools work in an episode
        return [ToolCall(name="convert", arguments=task.metadata)]

    def format_answer(self, answer):
        return f"<answer>{answer}</answer>"


turnrl.register("examples/Units-v0", f"{__name__}:UnitsEnv")

if __name__ == "__main__":
    from turnrl.envs.conformance.contract import check_environment

    env = turnrl.make("examples/Units-v0")
    print(check_environment(env))
    obs, info = env.reset(options={"index": 2})
    print(obs[-1].content)
    obs, reward, terminated, truncated, info = env.step(env.oracle_action())  # the convert call
    print("tool said:", obs[0].content)
    obs, reward, terminated, truncated, info = env.step(f"<answer>{obs[0].content}</answer>")
    print("reward:", reward, "correct:", info["correct"])
