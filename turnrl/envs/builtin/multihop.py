"""``turnrl/MultiHop-v0``: 2- and 3-hop questions about fictional entities, answered by searching their documents.

The knowledge base (:mod:`turnrl.envs.builtin.multihop_kb`) is generated from ``kb_seed``: ``worlds`` small worlds of
people, organizations, cities and regions, one short document each. No model knows the answers, and every question
needs its path of documents: a bridge question names one entity ("Where was the founder of Zorvek Labs born?") and
the next entity is found only in that entity's document; a comparison question asks which of two was born or
founded earlier. The tools, the SWiRL format (``tool_style="swirl"``, with demonstrations in this knowledge base's
style) and the grading are HotPotQA's (:class:`turnrl.envs.builtin.search_qa.SearchQAEnv`); the reward is exact match by
default, since every answer is one name (token F1 would pay a share for a namesake or an organization's kind).

**The same problem**: two questions are the same problem when they ask the same relation path from the same entity
(a comparison: about the same two, in either order) in the knowledge base of the same seed —
``Task.metadata["canonical"]``, e.g. ``multihop:0:founder>birthplace:Zorvek Labs``.

**Splits by world**: the first ``test_worlds`` worlds are ``test``, the next ``validation_worlds`` are
``validation``, the others ``train``. Worlds share no entity and no document names an entity of another world, so
no entity on a test question's path (nor any entity of its world) appears in a training question, a training
document or a training search result: test questions are about entities never seen in training. With
``corpus="world"`` (default) a search reads the question's world (about ``world_size`` documents, the same in every
split); with ``corpus="split"``, every document of the split's worlds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from turnrl.envs.builtin.multihop_kb import KnowledgeBase, build
from turnrl.envs.builtin.search_qa import SearchQAEnv
from turnrl.envs.core import Task
from turnrl.tools.search import BM25Index, Passage, bm25_index
from turnrl.types import Trajectory

SPLITS = ("train", "validation", "test")
KINDS = ("bridge", "comparison")
SYSTEM_PROMPT = (
    "Answer the question by searching the articles. Each question needs two or three articles: search for the "
    "name the question gives, read which person, organization or place its article points to, and search for that "
    "one next. The answer is one name."
)
DEMOS = """Question: In which region was the founder of Ostervale Press born?
assistant: <search_query>Ostervale Press founder</search_query>
tool: Ostervale Press founder -> Ostervale Press: Ostervale Press is a publishing house founded in 1902 by Ilsa Marrow. It is based in Quenby.
assistant: <search_query>Ilsa Marrow</search_query>
tool: Ilsa Marrow -> Ilsa Marrow: Ilsa Marrow was born in Dunharrow in 1871 and works for Pellin Mills.
assistant: <search_query>Dunharrow</search_query>
tool: Dunharrow -> Dunharrow: Dunharrow is a city in the region of Brinmoor.
assistant: <answer>Brinmoor</answer>

Question: Who was born earlier, Tam Orsley or Wendel Crake?
assistant: <search_query>Tam Orsley</search_query>
tool: Tam Orsley -> Tam Orsley: Tam Orsley was born in Quenby in 1890 and works for Ostervale Press.
assistant: <search_query>Wendel Crake</search_query>
tool: Wendel Crake -> Wendel Crake: Wendel Crake was born in Lusk in 1874 and works for Hask Trust.
assistant: <answer>Wendel Crake</answer>"""
_SPLIT_CODE = {"train": 0, "test": 1, "validation": 2}


def split_worlds(split: str, worlds: int, test_worlds: int, validation_worlds: int) -> range:
    """The worlds of ``split``: test first, then validation, then train."""
    if split not in _SPLIT_CODE:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if test_worlds < 1 or validation_worlds < 0 or worlds - test_worlds - validation_worlds < 1:
        raise ValueError(
            f"need test_worlds >= 1, validation_worlds >= 0 and a training world left, got worlds={worlds}, "
            f"test_worlds={test_worlds}, validation_worlds={validation_worlds}"
        )
    cut = test_worlds + validation_worlds
    return {"test": range(test_worlds), "validation": range(test_worlds, cut), "train": range(cut, worlds)}[split]


def multihop_tasks(
    kb: KnowledgeBase, split: str, worlds: range, hops: Sequence[int] = (2, 3), kinds: Sequence[str] = KINDS
) -> list[Task]:
    """The questions of ``worlds`` with the given hops and kinds, as tasks in a shuffle fixed by the seed and split.
    ``metadata``: ``canonical``, ``supporting_titles`` (the path's documents, in reading order), ``kind``, ``hops``,
    ``named`` (the entities the question names), ``relations`` and ``world``."""
    chosen = [q for w in worlds for q in kb.questions[w] if q.hops in hops and q.kind in kinds]
    order = np.random.default_rng([kb.seed, _SPLIT_CODE[split], 7]).permutation(len(chosen))
    return [
        Task(
            id=f"multihop/{split}/{q.kind}{q.hops}/{i}",
            prompt=q.text,
            answer=q.answer,
            metadata={
                "canonical": q.key,
                "supporting_titles": list(q.path),
                "kind": q.kind,
                "hops": q.hops,
                "named": list(q.named),
                "relations": list(q.relations),
                "world": q.world,
            },
        )
        for i, q in enumerate(chosen[int(j)] for j in order)
    ]


class MultiHopEnv(SearchQAEnv):
    """``turnrl/MultiHop-v0``: multi-hop questions over a generated knowledge base of fictional entities, with search.

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"`` (disjoint worlds; see the module docstring).
        kb_seed: the seed the knowledge base is generated from.
        worlds: how many worlds (default 12, about 50 entities each: 600 entities).
        world_size: entities per world (regions, cities, organizations, people: 8, 20, 24 and 48 %).
        test_worlds, validation_worlds: how many worlds are held out for test and for validation.
        hops: keep questions of these path lengths (2, 3).
        kinds: keep ``"bridge"`` and/or ``"comparison"`` questions.
        limit: keep the first ``limit`` tasks of the split.
        corpus: ``"world"`` (the question's own world) or ``"split"`` (every world of the split).
        **options: :class:`~turnrl.envs.builtin.search_qa.SearchQAEnv`'s — ``top_k``, ``max_searches`` (default 4),
            ``tool_style`` (``"hermes"`` or ``"swirl"``), ``max_turns``, ``reward`` (default ``"em"``),
            ``retriever``, ``system_prompt``, ``demos``, ``demos_in``, ``render_mode``.
    """

    default_demos = DEMOS

    def __init__(
        self,
        split: Literal["train", "validation", "test"] = "train",
        kb_seed: int = 0,
        *,
        worlds: int = 12,
        world_size: int = 50,
        test_worlds: int = 2,
        validation_worlds: int = 1,
        hops: Sequence[int] = (2, 3),
        kinds: Sequence[str] = KINDS,
        limit: int | None = None,
        corpus: Literal["world", "split"] = "world",
        max_searches: int = 4,
        reward: Literal["f1", "em"] = "em",
        system_prompt: str | None = SYSTEM_PROMPT,
        **options: Any,
    ) -> None:
        hops, kinds = tuple(hops), tuple(kinds)
        if not hops or any(h not in (2, 3) for h in hops) or not kinds or any(k not in KINDS for k in kinds):
            raise ValueError(
                f"hops must be drawn from [2, 3] and kinds from {list(KINDS)}, got {list(hops)}, {list(kinds)}"
            )
        if corpus not in ("world", "split"):
            raise ValueError(f"corpus must be 'world' or 'split', got {corpus!r}")
        in_split = split_worlds(split, worlds, test_worlds, validation_worlds)
        self.kb = build(kb_seed, worlds, world_size)  # shared and never changed (cached per seed and sizes)
        self.worlds, self.corpus = in_split, corpus
        tasks = multihop_tasks(self.kb, split, in_split, hops, kinds)
        tasks = tasks[:limit] if limit is not None else tasks
        if not tasks:
            raise ValueError(f"no {'/'.join(kinds)} questions of {'/'.join(map(str, hops))} hops in split {split!r}")
        super().__init__(tasks, max_searches=max_searches, reward=reward, system_prompt=system_prompt, **options)
        self.split, self.held_out_split, self.validation_split, self.train_split = split, "test", "validation", "train"
        if validation_worlds == 0:
            self.validation_split = None

    def _corpus_index(self) -> BM25Index:
        world = self.task.metadata.get("world") if self.task is not None else None
        if world not in self.worlds:  # a task posed via options={"task": ...}
            if self.corpus == "world":
                raise ValueError(
                    f"a MultiHop task needs metadata['world'], one of the split's worlds "
                    f"{list(self.worlds)}; got {world!r}"
                )
        chosen = [cast(int, world)] if self.corpus == "world" else self.worlds  # one of them: checked above
        return bm25_index([Passage(t, x) for t, x in self.kb.documents(chosen)], kind=self.retriever)

    def summarize_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Exact match by kind of question (``em_bridge2``, ``em_bridge3``, ``em_comparison2``,
        ``em_comparison3``; a comparison is right by chance half the time), read from the task id and the last
        turn's metrics (an episode without them counts 0)."""
        found: dict[str, list[float]] = defaultdict(list)
        for t in trajectories:
            parts = (t.task_id or "").split("/")
            if len(parts) != 4 or parts[0] != "multihop":
                continue
            metrics = (t.turns[-1].info.get("metrics") or {}) if t.turns else {}
            found[f"em_{parts[2]}"].append(float(metrics.get("em", 0.0)))
        return {k: sum(v) / len(v) for k, v in sorted(found.items())}

    def report_lines(self, metrics: dict[str, Any]) -> list[str]:
        """Exact match by kind of question, comparisons with their chance level."""
        shown = [
            f"{k.removeprefix('em_')} {float(metrics[k]):.3f}"
            for k in ("em_bridge2", "em_bridge3", "em_comparison2", "em_comparison3")
            if k in metrics
        ]
        return (
            [f"Exact match by question kind: {', '.join(shown)} (a comparison is right by chance half the time)."]
            if shown
            else []
        )
