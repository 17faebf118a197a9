"""Session KV caches: each live episode's keys and values kept between its turns, within a memory budget.

A multi-turn episode's next prompt is its previous prompt, the tokens it generated and the environment's reply.
:class:`SessionCache` keeps, per session (one episode), the tokens already run through the model and their keys and
values, so that the next turn feeds only what is new. :meth:`SessionCache.lookup` reuses the longest common prefix
of the cached tokens and the new prompt: a history the caller rewrote (not an extension of the cache) reuses the part
before the change and re-prefills the rest, and says so.

When the stored keys and values would pass ``budget_bytes``, the oldest sessions' entries (the sessions first seen
earliest) are evicted first; an evicted session is re-prefilled on its next turn (reported as ``"evicted"``). A
fixed order, not recency: a rollout visits its episodes in rounds, and least-recently-used eviction would then
always evict the entry needed next (no reuse at all), where oldest-first keeps the same sessions cached round
after round. Every entry is dropped when the weights change
(:meth:`SessionCache.check_weights`): keys and values computed with old weights are not those of the new policy.
What says the weights changed is the model's *weights epoch* (:func:`turnrl.weights.mark_weights_changed`), a counter that every
path that writes weights bumps — the learner's optimizer step (fused AdamW writes parameters in place without
bumping their version counters), a checkpoint or adapter load, a learner group's export into the driver's copy, a
rollout worker's load — not the parameters' storage: a counter cannot miss a kernel that writes in place, where a
fingerprint of storage pointers and version counters can.

:func:`kv_metrics` turns what a rollout counted into step figures: prompt tokens prefilled vs served from caches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from turnrl.types import Trajectory
from turnrl.weights import mark_weights_changed, weights_epoch

__all__ = ["SessionCache", "kv_metrics", "mark_weights_changed", "trajectory_kv_metrics", "weights_epoch"]

# what happened to a prompt's session cache, per generation: the first turn of a session, a full reuse, a reuse up
# to where the history was rewritten, or a full re-prefill because the entry had been dropped (and why)
KVEvent = Literal["new", "hit", "rewritten", "evicted", "invalidated", "oversize", "off"]


@dataclass
class Entry:
    """One session's cache: ``tokens`` (already run through the model) and per layer keys/values ``(1, H, n, D)``."""

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


@dataclass
class Reuse:
    """What :meth:`SessionCache.lookup` found for a prompt: ``length`` cached tokens to reuse (their keys/values in
    ``keys``/``values``, already cut to that length) and the event to report."""

    length: int
    keys: list[torch.Tensor] | None
    values: list[torch.Tensor] | None
    event: KVEvent


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class SessionCache:
    """Per-session keys and values with a byte budget (the oldest sessions' entries evicted first).

    Args:
        budget_bytes: the most bytes the stored entries may hold together; an entry larger than the whole budget
            is not stored (its session re-prefills next turn, reported as ``"oversize"``).
    """

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError(f"a KV cache budget cannot be negative (got {budget_bytes} bytes)")
        self.budget_bytes = budget_bytes
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.born: dict[str, int] = {}  # when each live session was first seen (eviction order)
        self._clock = 0
        self.dropped: dict[str, KVEvent] = {}  # sessions whose entry was dropped, until they are released
        self.nbytes = 0
        self.fingerprint: Any = None
        self.counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def check_weights(self, fingerprint: Any) -> None:
        """Drop every entry when the weights' ``fingerprint`` (:func:`turnrl.agents.batching.weights_fingerprint`)
        differs from the one the entries were computed with."""
        if self.fingerprint is not None and fingerprint != self.fingerprint:
            self.invalidate()
        self.fingerprint = fingerprint

    def invalidate(self) -> None:
        """Drop every entry, reported as ``"invalidated"`` (new weights were loaded)."""
        for session in list(self.entries):
            self._drop(session, "invalidated")

    def lookup(self, session: str, prompt: list[int]) -> Reuse:
        """What of ``prompt`` the session's entry already covers. At least one prompt token is always left to feed
        (the next token's logits come from it). The entry leaves the store: the caller stores the longer one back."""
        if session not in self.born:
            self.born[session], self._clock = self._clock, self._clock + 1
        entry = self.entries.pop(session, None)
        if entry is None:
            return Reuse(0, None, None, self.dropped.get(session, "new"))
        self.nbytes -= entry.nbytes
        n = common_prefix(entry.tokens, prompt)
        event: KVEvent = "hit" if n == len(entry.tokens) else "rewritten"
        n = min(n, len(prompt) - 1)
        if n <= 0:
            return Reuse(0, None, None, event)
        return Reuse(n, [k[:, :, :n] for k in entry.keys], [v[:, :, :n] for v in entry.values], event)

    def store(self, session: str, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Keep ``session``'s keys/values for ``tokens``, evicting older sessions' entries to fit (or not keeping
        this one, where it is the oldest)."""
        entry = Entry(tokens, keys, values)
        self.release_entry(session)
        if entry.nbytes > self.budget_bytes:
            self._drop(session, "oversize")
            return
        if session not in self.born:
            self.born[session], self._clock = self._clock, self._clock + 1
        while self.nbytes + entry.nbytes > self.budget_bytes:
            oldest = min(self.entries, key=self.born.__getitem__)
            if self.born[oldest] > self.born[session]:  # this session is the oldest: it is the one not kept
                self._drop(session, "evicted")
                return
            self._drop(oldest, "evicted")
        self.dropped.pop(session, None)
        self.entries[session] = entry
        self.nbytes += entry.nbytes

    def fork(self, source: str, session: str) -> None:
        """Start ``session`` from ``source``'s entry (a tree's child from its parent: the shared history prefilled
        once). The two entries share their tensors — entries are never written in place (a lookup copies the reused
        keys into the new batch; a store keeps new ones) — while the byte budget counts each, so sharing evicts no
        later than copying would. Nothing happens when ``source`` has no entry."""
        entry = self.entries.get(source)
        if entry is not None:
            self.store(session, list(entry.tokens), list(entry.keys), list(entry.values))

    def release_entry(self, session: str) -> None:
        """Drop a session's entry without recording an event (it is about to be replaced)."""
        entry = self.entries.pop(session, None)
        if entry is not None:
            self.nbytes -= entry.nbytes

    def release(self, session: str) -> None:
        """Forget a session (its episode ended)."""
        self.release_entry(session)
        self.dropped.pop(session, None)
        self.born.pop(session, None)

    def clear(self) -> None:
        """Drop everything (no event is recorded)."""
        self.entries.clear()
        self.dropped.clear()
        self.born.clear()
        self.nbytes = 0

    def _drop(self, session: str, reason: KVEvent) -> None:
        self.release_entry(session)
        self.dropped[session] = reason
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def stats(self) -> dict[str, Any]:
        """Entries, bytes held and how many were dropped, by reason."""
        return {
            "sessions": len(self.entries),
            "bytes": self.nbytes,
            **{f"dropped_{k}": v for k, v in self.counts.items()},
        }


def kv_metrics(prefill: int, cached: int, events: dict[str, int]) -> dict[str, float]:
    """``prefill_tokens`` (prompt tokens the agent computed), ``cached_tokens`` (served from a session's KV cache),
    ``cache_hit_share`` (cached ÷ all prompt tokens) and ``kv_<event>`` counts for the events that are not the normal
    course (a rewritten history, an evicted, invalidated or oversize cache)."""
    total = prefill + cached
    out = {
        "prefill_tokens": float(prefill),
        "cached_tokens": float(cached),
        "cache_hit_share": cached / total if total else 0.0,
    }
    for event in ("rewritten", "evicted", "invalidated", "oversize"):
        out[f"kv_{event}"] = float(events.get(event, 0))
    return out


def trajectory_kv_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """:func:`kv_metrics` summed over finished trajectories (their ``metadata``, written by the rollout)."""
    events: dict[str, int] = {}
    for t in trajs:
        for k, v in (t.metadata.get("kv_events") or {}).items():
            events[k] = events.get(k, 0) + int(v)
    return kv_metrics(
        sum(int(t.metadata.get("prefill_tokens", 0)) for t in trajs),
        sum(int(t.metadata.get("cached_tokens", 0)) for t in trajs),
        events,
    )
