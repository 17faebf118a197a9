"""A teacher that reads the gold annotations: SWiRL data for multi-hop QA without a large model (ours).

docs/algorithms.md §1 generates its data with a large teacher. Offline, the only model here is SmolLM2-135M, whose
HotPotQA trajectories almost never end in a right answer (1 of 128), so SWiRL's filters leave little to learn from.
HotPotQA annotates each training question with its supporting articles, and those give a search path:

1. search the question itself (``<search_query>QUESTION</search_query>``: BM25 with the question's words finds one
   of the supporting articles most of the time);
2. search the title of a supporting article not retrieved yet (for a bridge question the title is the bridge
   entity, which the first article names; for a comparison question it is the other entity of the question) — at
   most ``max_searches`` searches in all;
3. answer with the gold answer, ``<answer>GOLD</answer>``.

Each step is played in the live environment, so the results are the retriever's, not the annotation's: a path whose
searches miss the evidence still answers, and SWiRL's process filter (the answer must be grounded in a result) and
outcome filter decide what is kept. Like ``turnrl swirl relabel`` and the outcome filter, it reads the gold answer:
use it on training questions only (it refuses a held-out split, as the environment names it).

:class:`GoldPathAgent` is a scripted agent (token-exact through a real tokenizer, log-probabilities 0): it finds the
question in the prompt it is given, so it serves any number of episodes in a batch, demonstrations or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnrl.agents.scripted import ScriptedAgent


class GoldPathAgent(ScriptedAgent):
    """Writes each question's gold search path (see the module docstring).

    Args:
        tokenizer: the student's tokenizer (the trajectories are stored in its tokens).
        tasks: the environment's tasks (``prompt``, ``answer`` and ``metadata["supporting_titles"]``).
        max_searches: searches before the answer (2: HotPotQA's questions need two articles).

    Raises:
        ValueError: no task has supporting titles (not a multi-hop QA environment).
    """

    def __init__(self, tokenizer: Any, tasks: Sequence[Any], *, max_searches: int = 2) -> None:
        self.tasks = {str(t.prompt): t for t in tasks if t.metadata.get("supporting_titles")}
        if not self.tasks:
            raise ValueError(
                f"none of the {len(tasks)} tasks has metadata['supporting_titles']: the gold-path "
                "teacher needs multi-hop QA tasks with their supporting articles (turnrl/HotPotQA-v0)"
            )
        if max_searches < 1:
            raise ValueError(f"max_searches must be >= 1, got {max_searches}")
        self.max_searches = max_searches
        super().__init__(tokenizer, self.step)

    def step(self, prompt: str) -> str:
        """The next step for the conversation ``prompt`` (the decoded token prompt).

        Raises:
            ValueError: no known question appears in the prompt.
        """
        found = [(at, q) for q in self.tasks if (at := prompt.find(q)) >= 0]  # first: a search's result echoes it
        if not found:
            raise ValueError(
                f"the gold-path teacher found none of its {len(self.tasks)} questions in the prompt "
                f"(…{prompt[-200:]!r}); give it the environment's tasks"
            )
        start, question = max(found, key=lambda f: (f[0], len(f[1])))  # the last question asked (after any demos)
        task, after = self.tasks[question], prompt[start:]
        searches = after.count("<search_query>")
        retrieved = {t for t in task.metadata["supporting_titles"] if f"-> {t}:" in after}
        if searches == 0:
            return f"<search_query>{question}</search_query>"
        missing = [t for t in task.metadata["supporting_titles"] if t not in retrieved]
        if missing and searches < self.max_searches:
            return f"<search_query>{missing[0]}</search_query>"
        return f"<answer>{task.answer}</answer>"
