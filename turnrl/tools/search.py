"""Passage search over a corpus of titled paragraphs: BM25 with bm25s, indexed once per corpus and cached."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Passage:
    """One titled paragraph."""

    title: str
    text: str


class BM25Index:
    """A BM25 index over passages (title and text are both indexed).

    Build one with :func:`bm25_index`, which caches indexes by corpus content.
    """

    def __init__(self, passages: Sequence[Passage]) -> None:
        import bm25s

        self.passages = list(passages)
        self.by_title = {p.title: p for p in self.passages}
        self._bm25s = bm25s
        self.retriever = bm25s.BM25()
        tokens = bm25s.tokenize([f"{p.title}. {p.text}" for p in self.passages], show_progress=False)
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """The ``k`` best passages for ``query`` (fewer when the query shares no term with the corpus)."""
        tokens = self._bm25s.tokenize([query], show_progress=False)
        if not tokens.ids or not tokens.ids[0] or not self.passages:
            return []
        k = min(k, len(self.passages))
        ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [self.passages[int(i)] for i, s in zip(ids[0], scores[0]) if s > 0]

    def lookup(self, title: str) -> Passage | None:
        """The passage with exactly this title (case-insensitive fallback), or None."""
        found = self.by_title.get(title)
        if found is None:
            lowered = title.strip().lower()
            found = next((p for t, p in self.by_title.items() if t.lower() == lowered), None)
        return found


_CACHE: OrderedDict[str, BM25Index] = OrderedDict()
_LOCK = threading.Lock()


def bm25_index(passages: Sequence[Passage], cache_size: int = 256) -> BM25Index:
    """An index for ``passages``, reused when the same corpus is asked for again (LRU of ``cache_size``)."""
    key = hashlib.sha256("\x00".join(f"{p.title}\x01{p.text}" for p in passages).encode()).hexdigest()
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    index = BM25Index(passages)
    with _LOCK:
        _CACHE[key] = index
        while len(_CACHE) > cache_size:
            _CACHE.popitem(last=False)
    return index
