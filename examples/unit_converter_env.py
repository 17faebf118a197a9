"""A new tool-use environment in about 30 lines: unit conversion with a `convert` tool.

Run it: `python examples/unit_converter_env.py` — it registers `examples/Units-v0`, checks it with the
conformance harness and plays one scripted episode.
"""

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.envs.testing import check_environment
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


TASKS = [
    Task(id="units/0", prompt="How many meters are 3.5 km?", answer="3500"),
    Task(id="units/1", prompt="How many cm are 2 ft?", answer="60.96"),
    Task(id="units/2", prompt="How many km are 5 miles?", answer="8.04672"),
]


class UnitsEnv(ToolEnv):
    """Convert lengths; the agent may call `convert` before answering in <answer> tags."""

    def __init__(self, **kwargs):
        super().__init__(TASKS, tools=[convert], verifier=lambda text, ref: verify(text, ref, answer_format="tag"),
                         instruction="Answer with a number in <answer></answer> tags.", max_turns=3, **kwargs)

    def format_answer(self, answer: str) -> str:
        return f"<answer>{answer}</answer>"


turnrl.register("examples/Units-v0", "__main__:UnitsEnv" if __name__ == "__main__" else f"{__name__}:UnitsEnv")

if __name__ == "__main__":
    env = turnrl.make("examples/Units-v0")
    print(check_environment(env))
    obs, info = env.reset(options={"index": 2})
    print(obs[-1].content)
    call = '<tool_call>{"name": "convert", "arguments": {"value": 5, "from_unit": "mile", "to_unit": "km"}}</tool_call>'
    obs, reward, terminated, truncated, info = env.step(call)
    print("tool said:", obs[0].content)
    obs, reward, terminated, truncated, info = env.step(f"<answer>{obs[0].content}</answer>")
    print("reward:", reward, "correct:", info["correct"])
