"""verifiers environments written the way verifiers' documentation shows (``load_environment`` returning one of its
classic environments), for tests/envs/test_verifiers_env.py: ``turnrl.make("verifiers:vf_envs", kind=...)``.

* ``sum``: a SingleTurnEnv of additions with a held-out eval dataset, graded by a Rubric over an XMLParser.
* ``tools``: a ToolEnv whose ``add`` tool the model calls before it answers (``trim``: it keeps only the opening and
  the latest exchange in what it sends the model, a history it rewrites).
* ``guess``: a MultiTurnEnv number-guessing game (feedback after each guess; ``trim`` keeps only the latest
  exchange in what it sends the model: a history it rewrites).
* ``broken``: ``sum`` with a reward function that raises; ``grouped``: a rubric with a group-level reward function;
  ``slow``: ``guess`` whose feedback takes ``delay`` seconds.
"""

from __future__ import annotations

import asyncio

import verifiers as vf
from datasets import Dataset

SYSTEM = "Answer inside <answer>...</answer>."


def _sums(n: int, offset: int = 0) -> Dataset:
    rows = [{"question": f"What is {a} + {a + 1}?", "answer": str(2 * a + 1)} for a in range(offset, offset + n)]
    return Dataset.from_list(rows)


def correct_answer(completion, answer, parser, **kwargs) -> float:
    """1 when the parsed answer is the reference."""
    return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0


def format_reward(completion, parser, **kwargs) -> float:
    """Whether the answer is in the asked format (a metric, weight 0)."""
    return 1.0 if parser.parse_answer(completion) is not None else 0.0


def asked(question, **kwargs) -> float:
    """A metric (weight 0) that reads a column of the row other than the prompt and the answer."""
    return 1.0 if question.startswith("What is") else 0.0


def broken_reward(completion, **kwargs) -> float:
    """A reward function that raises."""
    raise KeyError("score")


def group_reward(completions, **kwargs) -> list[float]:
    """A group-level reward function (it takes the group's completions)."""
    return [0.0 for _ in completions]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


class GuessEnv(vf.MultiTurnEnv):
    """Guess the secret number (the answer column): after each guess, "higher" or "lower"."""

    def __init__(self, trim: bool = False, delay: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.trim, self.delay = trim, delay

    async def env_response(self, messages, state, **kwargs):
        """Feedback on the last guess."""
        if self.delay:
            await asyncio.sleep(self.delay)  # a slow service (its rollouts share verifiers' event loop)
        guess = self.parser.parse_answer(messages) or ""
        secret = int(state["answer"])
        try:
            value = int(guess.strip())
        except ValueError:
            return [vf.UserMessage(content="Give one integer inside <answer>...</answer>.")]
        if value == secret:  # the game ends here (verifiers' final_env_response)
            state["solved"] = True
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        return [vf.UserMessage(content="higher" if value < secret else "lower")]

    async def get_prompt_messages(self, state):
        """The whole conversation, or (``trim``) the opening and the latest exchange only."""
        messages = await super().get_prompt_messages(state)
        if not self.trim or len(messages) <= 4:
            return messages
        opening = list(state["prompt"])
        return [*opening, *messages[-2:]]


class TrimmedToolEnv(vf.ToolEnv):
    """A ToolEnv that sends the model the opening and the latest exchange only (a history it rewrites)."""

    async def get_prompt_messages(self, state):
        """The opening and, past the first exchange, the last assistant message and what answered it."""
        messages = await super().get_prompt_messages(state)
        if len(messages) <= 4:
            return messages
        return [*state["prompt"], *messages[-2:]]


def solved(state, **kwargs) -> float:
    """1 when the secret was guessed."""
    return 1.0 if state.get("solved") else 0.0


def load_environment(
    kind: str = "sum", n: int = 8, trim: bool = False, delay: float = 0.0, max_turns: int = 4, **kwargs
) -> vf.Environment:
    """One of the environments above (see the module docstring)."""
    parser = vf.XMLParser(fields=["answer"], answer_field="answer")
    if kind in ("sum", "broken", "grouped"):
        funcs, weights = [correct_answer, format_reward, asked], [1.0, 0.0, 0.0]
        if kind == "broken":
            funcs, weights = [broken_reward, correct_answer], [1.0, 1.0]
        if kind == "grouped":
            funcs, weights = [correct_answer, group_reward], [1.0, 1.0]
        rubric = vf.Rubric(funcs=funcs, weights=weights, parser=parser)
        return vf.SingleTurnEnv(
            dataset=_sums(n),
            eval_dataset=_sums(4, offset=100),
            system_prompt=SYSTEM,
            parser=parser,
            rubric=rubric,
            **kwargs,
        )
    if kind == "tools":
        rubric = vf.Rubric(funcs=[correct_answer], parser=parser)
        return (TrimmedToolEnv if trim else vf.ToolEnv)(
            dataset=_sums(n),
            system_prompt=SYSTEM,
            parser=parser,
            rubric=rubric,
            tools=[add],
            max_turns=max_turns,
            **kwargs,
        )
    if kind in ("guess", "slow"):
        rows = [{"question": "Guess my number between 1 and 9.", "answer": str(s)} for s in (3, 7, 5, 2, 8, 4, 6, 1)]
        rubric = vf.Rubric(funcs=[solved], parser=parser)
        return GuessEnv(
            trim=trim,
            delay=delay if kind == "slow" else 0.0,
            dataset=Dataset.from_list(rows[:n]),
            system_prompt=SYSTEM,
            parser=parser,
            rubric=rubric,
            max_turns=max_turns,
            **kwargs,
        )
    raise ValueError(f"unknown kind {kind!r}")
