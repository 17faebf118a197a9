"""Question answering with search tools over a corpus of titled paragraphs: the base of ``turnrl/HotPotQA-v0`` and
``turnrl/MultiHop-v0``.

Tools: ``search(query)`` (BM25 or dense, top-k passages) and ``lookup(title)``. Two call styles: Hermes
``<tool_call>`` JSON, and SWiRL's tags (``<search_query>…</search_query>``, results shown as ``QUERY -> RESULT``).
The answer goes in ``<answer>…</answer>``; the reward is token F1 or exact match with the official normalization
(:mod:`turnrl.verifiers.qa`, which refuses hedges, padding and repeating the question); ``info["metrics"]`` carries
``em``, ``f1``, ``support_recall`` (share of ``task.metadata["supporting_titles"]`` the agent retrieved) and
``searches``. A subclass gives the tasks and :meth:`SearchQAEnv._corpus_index` (the passages searched).

**Episode state** is plain attributes — ``task``, ``_index`` (the corpus index: read-only, shared by forks),
``_queries`` (the queries spent, in order) and ``_retrieved`` (the titles shown), besides
:class:`~turnrl.envs.core.TextEnv`'s turn counters — and the tools and the verifier are bound methods, not closures,
so that a fork (:mod:`turnrl.envs.fork`, a deep copy) carries its own episode and its tools act on the fork.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from turnrl.envs.core import Task, TaskSource
from turnrl.envs.formats.swirl_format import SEARCH_DEMOS, SEARCH_INSTRUCTIONS, SEARCH_STOP, place_demos
from turnrl.envs.tool_env import ToolEnv
from turnrl.tools.base import Tool, ToolError
from turnrl.tools.parsers import TagParser
from turnrl.tools.search import BM25Index
from turnrl.verifiers.base import Verdict
from turnrl.verifiers.qa import verify as qa_verify

INSTRUCTION = "Give your final answer within <answer></answer> tags."
LOOKUP_INSTRUCTION = "To read an article whose exact title you have seen, write only <lookup>TITLE</lookup>."
MAX_QUERY_CHARS = 300


class SearchQAEnv(ToolEnv):
    """Question answering with ``search`` and ``lookup`` (see the module docstring).

    Args:
        tasks: the questions; ``metadata["supporting_titles"]`` names the articles that answer each (the oracle looks
            them up in that order; ``support_recall`` counts them).
        top_k: passages per search; default 3, or 1 with ``tool_style="swirl"`` (the paper returns the nearest
            article, and SWiRL trajectories of several searches must fit a small model's context).
        max_searches: tool calls allowed per episode; later calls are refused with a message.
        tool_style: ``"hermes"`` or ``"swirl"`` (SWiRL's tags, :mod:`turnrl.envs.formats.swirl_format`:
            ``<search_query>``, plus ``<lookup>TITLE</lookup>``, then ``<answer>``; a turn ends at a closing tag
            (``stop``), few-shot ``demos`` (see ``demos_in``), at most 5 steps by default).
        max_turns: default ``max_searches + 1`` (swirl: at most 5).
        reward: ``"f1"`` or ``"em"``.
        retriever: ``"bm25"`` or ``"dense"``.
        system_prompt: the system message (the format's instructions are added with ``tool_style="swirl"``).
        demos: with ``tool_style="swirl"``: ``"default"`` (:attr:`default_demos`), ``"none"``, a file path or the
            demonstrations' text.
        demos_in: ``"turns"`` (default: as earlier chat turns before the question) or ``"system"``.
    """

    #: The demonstrations ``demos="default"`` gives with ``tool_style="swirl"``.
    default_demos: str = SEARCH_DEMOS

    def __init__(
        self,
        tasks: TaskSource | Sequence[Task],
        *,
        top_k: int | None = None,
        max_searches: int = 5,
        tool_style: Literal["hermes", "swirl"] = "hermes",
        max_turns: int | None = None,
        reward: Literal["f1", "em"] = "f1",
        retriever: Literal["bm25", "dense"] = "bm25",
        system_prompt: str | None = None,
        demos: str | None = "default",
        demos_in: Literal["turns", "system"] = "turns",
        render_mode: str | None = None,
    ) -> None:
        if tool_style not in ("hermes", "swirl"):
            raise ValueError(f"tool_style must be 'hermes' or 'swirl', got {tool_style!r}")
        top_k = top_k if top_k is not None else (1 if tool_style == "swirl" else 3)
        if top_k < 1 or max_searches < 0:
            raise ValueError(f"need top_k >= 1 and max_searches >= 0, got {top_k}, {max_searches}")
        if retriever not in ("bm25", "dense"):
            raise ValueError(f"retriever must be 'bm25' or 'dense', got {retriever!r}")
        if reward not in ("f1", "em"):
            raise ValueError(f"reward must be 'f1' or 'em', got {reward!r}")
        self.top_k, self.max_searches, self.style = top_k, max_searches, tool_style
        self.retriever, self.reward = retriever, reward
        self._index: BM25Index | None = None
        self._queries: list[str] = []
        self._retrieved: set[str] = set()
        parser = TagParser({"search_query": "search", "lookup": "lookup"}) if tool_style == "swirl" else "hermes"
        if tool_style == "swirl":  # the instructions name the tags; the demos show them
            system_prompt, self.prompt_demos = place_demos(
                system_prompt,
                f"{SEARCH_INSTRUCTIONS} {LOOKUP_INSTRUCTION}",
                demos,
                self.default_demos,
                demos_in,
                "search",
                INSTRUCTION,
            )
            self.stop = (*SEARCH_STOP, "</lookup>")
            max_turns = min(5, max_searches + 1) if max_turns is None else max_turns
        super().__init__(
            tasks,
            tools=[Tool(self.search), Tool(self.lookup)],
            verifier=self._verify,
            tool_style=parser,
            describe_tools=tool_style != "swirl",
            system_prompt=system_prompt,
            instruction=INSTRUCTION,
            max_turns=max_turns if max_turns is not None else max_searches + 1,
            render_mode=render_mode,
        )

    # ---- tools (bound methods: they act on this environment's episode) ----

    def search(self, query: str) -> str:
        """Search the articles; returns the best-matching paragraphs with their titles.

        Args:
            query: what to look for, e.g. a name and a relation.
        """
        q = self._spend(query)
        hits = self._index.search(q, self.top_k) if self._index else []
        self._retrieved.update(p.title for p in hits)
        repeat = " (you already searched this)" if self._queries.count(q) > 1 else ""
        if not hits:
            return f"{q} -> no results{repeat}" if self.style == "swirl" else f"No results for {q!r}.{repeat}"
        if self.style == "swirl":
            return "\n".join(f"{q} -> {p.title}: {p.text}" for p in hits) + repeat
        return "\n".join(f"{i}. {p.title}: {p.text}" for i, p in enumerate(hits, 1)) + repeat

    def lookup(self, title: str) -> str:
        """Read the article with this exact title.

        Args:
            title: the article's title, as shown in search results.
        """
        t = self._spend(title)
        found = self._index.lookup(t) if self._index else None
        if found is None:
            raise ToolError(f"no article titled {t!r}; use search to find titles")
        self._retrieved.add(found.title)
        return f"{t} -> {found.text}" if self.style == "swirl" else f"{found.title}: {found.text}"

    def _spend(self, text: str) -> str:
        q = " ".join(text.split())
        if not q:
            raise ToolError("the query is empty")
        if len(q) > MAX_QUERY_CHARS:
            raise ToolError(f"the query is too long ({len(q)} characters, limit {MAX_QUERY_CHARS})")
        if len(self._queries) >= self.max_searches:
            raise ToolError(f"the search budget ({self.max_searches}) is used up; give your answer now")
        self._queries.append(q)
        return q

    # ---- episode ----

    def _corpus_index(self) -> BM25Index:
        """The index the current task's searches read (override)."""
        raise NotImplementedError

    def _reset(self, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        obs, info = super()._reset(options)
        self._index = self._corpus_index()
        self._queries, self._retrieved = [], set()
        return obs, info

    def _verify(self, text: str, reference: str) -> Verdict:
        return qa_verify(text, reference, reward=self.reward, question=self.task.prompt if self.task else None)

    def score(self, response: str) -> Verdict:
        """QA verdict plus retrieval metrics (support recall, searches)."""
        verdict = super().score(response)
        assert self.task is not None  # scored inside an episode
        support = self.task.metadata.get("supporting_titles") or []
        recall = len(self._retrieved & set(support)) / len(support) if support else 0.0
        details = {**verdict.details, "support_recall": recall, "searches": float(len(self._queries))}
        return verdict.model_copy(update={"details": details})

    def format_answer(self, answer: str) -> str:
        """A response giving ``answer``."""
        return f"<answer>{answer}</answer>"

    def oracle_action(self) -> str | None:
        """Look up each supporting title not yet retrieved, then answer with the gold answer."""
        if self.task is None:
            return None
        for title in self.task.metadata.get("supporting_titles", []):
            if title not in self._retrieved and len(self._queries) < self.max_searches:
                if self.style == "swirl":
                    return f"<lookup>{title}</lookup>"
                return "<tool_call>" + json.dumps({"name": "lookup", "arguments": {"title": title}}) + "</tool_call>"
        return self.format_answer(self.task.answer)

    def wrong_action(self) -> str:
        """An answer that shares no token with any real answer."""
        return "<answer>xyzzy plugh</answer>"
