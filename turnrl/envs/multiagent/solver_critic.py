"""``turnrl/SolverCritic-v0``: two roles solve an arithmetic problem together — the ``solver`` answers, the ``critic``
reviews the answer, the solver gives its final answer — and both are rewarded by that final answer alone (1 if it is
right, else 0), so neither can be paid for anything but a right answer in the end.

What each role sees: the solver, the problem and then the critic's review; the critic, the problem and the solver's
first reply. Problems are :class:`~turnrl.envs.builtin.arithmetic.ArithmeticTasks` (levels 1–5; ``train``, ``validation`` and
``test`` splits of distinct problems by canonical form, the arithmetic environment's: a problem is one item under
:meth:`SolverCritic.state_key`, ``12 + 7`` and ``7 + 12`` alike), graded by :func:`turnrl.verifiers.math.verify` on
the final answer (``answer_format``: ``auto`` by default, as the arithmetic environment: a ``\\boxed{}`` answer, else
the reply's last number; a hedge of several answers is wrong). ``infos`` carry ``first_correct``, ``final_correct``,
the critic's ``verdict`` (``correct``, ``wrong`` or None when it gave none) and ``outcome`` (``solved`` or
``failed``).

Two scores of an episode (:attr:`item_scores`): ``first_correct``, the solver's first answer, before any review —
what the solver alone would have answered under this prompt — and ``final_correct``, its answer after the review
(what both are paid by; the same as ``solved``). Held-out evaluation records both for every problem, so a pair
trained together and a solver trained alone, each playing both seats, compare on either (docs/multi-agent.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from turnrl.envs.builtin.arithmetic import ArithmeticTasks
from turnrl.envs.core import Task
from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.envs.splits import canonical_key
from turnrl.verifiers.math import verify

SOLVER_PROMPT = "Solve the problem. Give your final answer as \\boxed{number}."
CRITIC_PROMPT = (
    "You review another model's answer to an arithmetic problem. Check the calculation, say what is "
    "wrong if anything, and end with VERDICT: correct or VERDICT: wrong."
)
VERDICT = re.compile(r"VERDICT:\s*(correct|wrong)", re.IGNORECASE)


class SolverCritic(MultiAgentTextEnv):
    """A solver and a critic on one arithmetic problem (see the module docstring).

    Args:
        levels: arithmetic levels (1–5) the problems are drawn from.
        split: ``"train"``, ``"validation"`` or ``"test"`` (disjoint problems).
        answer_format: where the final answer must be (:func:`turnrl.verifiers.math.verify`).
        max_turns, render_mode: as :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`.
    """

    possible_agents = ["solver", "critic"]  # noqa: RUF012 — the roles
    held_out_split = "test"
    validation_split = "validation"
    item_scores = ("first_correct", "final_correct")

    def __init__(
        self,
        *,
        levels: Sequence[int] = (1, 2),
        split: Literal["train", "validation", "test"] = "train",
        answer_format: Literal["auto", "boxed", "hash", "tag"] = "auto",
        max_turns: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.answer_format = answer_format
        self.tasks = ArithmeticTasks(levels, split)
        self.split = split
        self.task: Task | None = None
        self.first: str | None = None
        self.phase = "answer"

    def __len__(self) -> int:
        """How many problems the split holds."""
        return len(self.tasks)

    def task_at(self, index: int) -> Task:
        """The problem ``options={"index": index}`` poses."""
        return self.tasks[index % len(self.tasks)]

    def state_key(self, index: int) -> str:
        """The item starting state ``index`` counts as in evaluation: its problem's canonical form."""
        return canonical_key(self.task_at(index))

    def _reset(self, options: dict[str, Any]) -> None:
        index = options.get("index")
        index = int(index) if index is not None else int(self.np_random.integers(len(self.tasks)))
        self.task, self.first, self.phase = self.task_at(index), None, "answer"
        self.tell("solver", SOLVER_PROMPT, role="system")
        self.tell("critic", CRITIC_PROMPT, role="system")
        self.tell("solver", self.task.prompt)
        self.agent_selection = "solver"

    def _play(self, agent: str, action: str) -> None:
        assert self.task is not None
        if self.phase == "answer":
            self.first, self.phase = action, "review"
            first = verify(action, self.task.answer, answer_format=self.answer_format)
            self.infos["solver"]["first_correct"] = first.correct
            self.tell("critic", f"Problem: {self.task.prompt}\n\nThe answer to review:\n{action}")
            self.agent_selection = "critic"
        elif self.phase == "review":
            found = VERDICT.findall(action)
            self.infos["critic"]["verdict"] = found[-1].lower() if found else None
            self.phase = "revise"
            self.tell(
                "solver",
                f"A reviewer read your answer:\n{action}\n\nGive your final answer as "
                "\\boxed{number} (repeat it if you keep it).",
            )
            self.agent_selection = "solver"
        else:
            right = verify(action, self.task.answer, answer_format=self.answer_format).correct
            first_ok = bool(self.infos["solver"].get("first_correct"))
            for role in self.agents:
                self.infos[role].update(first_correct=first_ok, final_correct=right)
            score = 1.0 if right else 0.0
            self.reward({"solver": score, "critic": score})
            self.tell(["solver", "critic"], "The final answer is right." if right else "The final answer is wrong.")
            self.end(dict.fromkeys(self.agents, "solved" if right else "failed"))
