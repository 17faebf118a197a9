"""The Hugging Face agent's decoding loop (:class:`turnrl.agents.hf.HFAgent` derives from :class:`Decoding`): the
rows of a call in lanes of similar context length, admitted into a running batch as others finish, prefilled (from
their session's cached keys and values where they extend it), stepped token by token with each row's own sampling,
their sessions' caches kept, and their completions assembled. :mod:`turnrl.agents.hf` holds the agent's public side:
construction, ``generate``, ``agenerate_one``, sessions and capabilities.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import torch

from turnrl.agents.base import Completion
from turnrl.agents.batching import (
    Batch,
    Row,
    growing_cache,
    sample,
    weights_fingerprint,
)
from turnrl.lanes import lanes_of, merge_pays

if TYPE_CHECKING:
    from turnrl.agents.kv import SessionCache


class Decoding:
    """The decoding half of :class:`~turnrl.agents.hf.HFAgent`; it reads the agent's ``model``, ``tokenizer``,
    ``batch_size``, ``sessions`` (a :class:`~turnrl.agents.kv.SessionCache` or None), ``decode_lanes``, ``eos_ids``
    and the lane costs ``LANE_CALL`` and ``LANE_ROW``, all set by the agent."""

    # what the agent sets (declared for the type checker)
    model: Any
    tokenizer: Any
    batch_size: int
    sessions: SessionCache
    decode_lanes: bool
    eos_ids: list[int]
    pad_id: int
    full_attention: bool
    LANE_CALL: int
    LANE_ROW: int

    if TYPE_CHECKING:
        @property
        def device(self) -> torch.device: ...

    def _lanes(self, rows: list[Row]) -> list[list[Row]]:
        """The rows of one call in lanes of similar context length, shortest first (each row in its call's order
        within its lane; one lane with ``decode_lanes`` off). A batch is left-padded to its longest context, so rows
        with long histories (T-PPO's carried answers) make every short row beside them as slow as they are: 32 rows
        of 150 tokens and 7 of 900 decoded 1.18–1.63× slower in one batch (SmolLM2, CPU, ``bench/decode_lanes.py``).
        A lane costs ``LANE_CALL`` + rows × (``LANE_ROW`` + its longest context) per step, in tokens of context;
        lanes are cut where that costs least (:func:`turnrl.lanes.lanes_of`). Rows with their own random streams
        (``seeds``) sample the same tokens either way."""
        if not self.decode_lanes or len(rows) < 2:
            return [rows]
        spans = [len(r.prompt) + self.LANE_ROW for r in rows]
        return [[rows[i] for i in sorted(lane)] for lane in lanes_of(spans, self.LANE_CALL)]

    def _decode(self, lanes: list[list[Row]]) -> None:
        """Decode the lanes in turn; the next joins the running batch once one call per step costs less than two
        (:func:`turnrl.lanes.merge_pays`): when most of the running lane's rows have finished (a T-PPO window's fresh
        answers mostly end early), its few rows are cheap to pad, and the next lane need not wait for its slowest."""
        pending = deque(lane for lane in lanes if lane)  # no prompts: nothing to decode
        waiting: deque[Row] = deque()
        batch: Batch | None = None
        while pending or waiting or batch is not None:
            if pending and not waiting and (batch is None or (self.full_attention and merge_pays(
                    len(batch.rows), int(batch.attention.shape[1]), len(pending[0]),
                    max(len(row.prompt) for row in pending[0]), self.LANE_CALL))):
                waiting.extend(pending.popleft())
            admitted = self._admit(batch, waiting)
            assert admitted is not None  # rows are waiting, and an empty batch has room (batch_size >= 1)
            batch, _ = self._step(admitted)

    def _admit(self, batch: Batch | None, waiting: deque[Row]) -> Batch | None:
        """Fill the batch's free slots from ``waiting`` (prefilled together, then joined to the running rows)."""
        room = self._room(len(batch.rows) if batch is not None else 0)
        if waiting and room > 0:
            joining = self._prefill([waiting.popleft() for _ in range(min(room, len(waiting)))])
            batch = joining if batch is None else batch.merge(joining)
        return batch

    def _room(self, running: int) -> int:
        """How many waiting rows may join ``running`` decoding ones (``batch_size`` in all)."""
        if running and not self.full_attention:  # sliding-window layers cannot be left-padded and merged
            return 0
        return self.batch_size - running

    def _join_lanes(self, lanes: list[Batch], waiting: deque[Row]) -> list[Batch]:
        """The running lanes with the waiting requests that fit (:meth:`_room`), prefilled in lanes of their own
        (:meth:`_lanes`). A failed prefill fails only the requests it held."""
        room = self._room(sum(len(b.rows) for b in lanes))
        if not waiting or room <= 0:
            return lanes
        joining = [waiting.popleft() for _ in range(min(room, len(waiting)))]
        for lane in self._lanes(joining):
            try:
                lanes.append(self._prefill(lane))
            except Exception as e:  # these requests learn why; the others decode on
                for row in lane:
                    if not row.future.done():
                        row.future.set_exception(e)
        return lanes

    def _step(self, batch: Batch) -> tuple[Batch | None, list[Row]]:
        """Sample every row's next token; finished rows leave (their sessions stored), the rest are fed theirs.
        Returns the batch (None once empty) and the rows that finished."""
        nxt = sample(batch)
        done = torch.isin(nxt, torch.tensor(self.eos_ids, dtype=torch.long))
        for a, row in enumerate(batch.rows):
            row.tokens.append(int(nxt[a]))
            if row.on_token is not None:
                row.on_token(row.tokens[-1], row.logprobs[-1], row.tops[-1] if row.params.top_logprobs else None)
            stop = row.params.stop
            if bool(done[a]) or (stop and self._hits_stop(row.tokens[-(max(map(len, stop)) + 2):], stop)):
                row.finish, done[a] = "stop", True
            elif len(row.tokens) >= row.params.max_new_tokens:
                done[a] = True
        if not bool(done.any()):
            batch.feed(self.model, nxt)
            return batch, []
        ended = done.nonzero().squeeze(-1).tolist()
        for a in ended:
            self._keep_session(batch, a)
        finished = [batch.rows[a] for a in ended]
        if bool(done.all()):
            return None, finished
        batch.select((~done).nonzero().squeeze(-1))
        batch.feed(self.model, nxt[~done])
        return batch, finished

    def _prefill(self, rows: list[Row]) -> Batch:
        """Run the rows' prompts through the model — only the part their session caches do not cover — as one
        batch: ``[pad][cached keys/values][pad][new tokens]`` per row, the pads masked out."""
        device = self.device
        if any(row.session is not None for row in rows):  # keys/values computed with other weights are stale
            self.sessions.check_weights(weights_fingerprint(self.model))
        reuse = []
        for row in rows:
            if row.session is not None:
                r = self.sessions.lookup(row.session, row.prompt)
                row.cached, row.event = r.length, r.event
                reuse.append((r.keys, r.values))
            else:
                reuse.append((None, None))
        # identical prompts without a cache (a GRPO group, n > 1) are prefilled once and their keys/values repeated
        slot: dict[tuple[int, ...], int] = {}
        first: list[int] = []
        which: list[int] = []
        for b, row in enumerate(rows):
            key = (-b - 1,) if row.cached else tuple(row.prompt)
            if key not in slot:
                slot[key] = len(first)
                first.append(b)
            which.append(slot[key])
        uniq = [rows[b] for b in first]
        P = max(r.cached for r in uniq)
        S = max(len(r.prompt) - r.cached for r in uniq)
        U = len(uniq)
        ids = torch.full((U, S), self.pad_id, dtype=torch.long)
        attention = torch.zeros((U, P + S), dtype=torch.long)
        positions = torch.zeros((U, S), dtype=torch.long)
        for u, row in enumerate(uniq):
            new = row.prompt[row.cached:]
            ids[u, S - len(new):] = torch.tensor(new)
            attention[u, P - row.cached : P] = 1
            attention[u, P + S - len(new):] = 1
            positions[u, S - len(new):] = torch.arange(row.cached, len(row.prompt))
        past = None
        if P > 0:
            layers = []
            for n in range(len(next(k for k, _ in reuse if k is not None))):
                kv = []
                for part in (0, 1):
                    held = [r[part] for r in reuse]  # None where the row has no cache
                    ref = next(h[n] for h in held if h is not None)
                    t = ref.new_zeros((U, ref.shape[1], P, ref.shape[3]))
                    for u, b in enumerate(first):
                        h = held[b]
                        if rows[b].cached:
                            assert h is not None, "a row with cached tokens has their keys and values"
                            t[u, :, P - rows[b].cached :] = h[n][0]
                    kv.append(t)
                layers.append((kv[0], kv[1]))
            past = growing_cache(layers)
        elif self.full_attention:
            past = growing_cache()
        out = self.model(input_ids=ids.to(device), attention_mask=attention.to(device),
                         position_ids=positions.to(device), past_key_values=past, use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        if len(rows) > U:
            index = torch.tensor(which, device=device)
            cache.batch_select_indices(index)
            logits, attention = logits[index], attention[torch.tensor(which)]
        next_pos = torch.tensor([len(r.prompt) for r in rows], dtype=torch.long, device=device)
        return Batch(rows, cache, attention.to(device), next_pos, logits)

    def _keep_session(self, batch: Batch, a: int) -> None:
        """Store row ``a``'s keys/values (everything fed so far: its prompt and all its tokens but the last)."""
        row = batch.rows[a]
        if row.session is None:
            return
        real = batch.attention[a].nonzero().squeeze(-1)
        tokens = row.prompt + row.tokens[:-1]
        if len(real) != len(tokens):  # pragma: no cover — an invariant of the batch layout
            raise RuntimeError(f"session cache holds {len(real)} positions for {len(tokens)} tokens")
        keys = [layer.keys[a : a + 1, :, real] for layer in batch.cache.layers]
        values = [layer.values[a : a + 1, :, real] for layer in batch.cache.layers]
        self.sessions.store(row.session, tokens, keys, values)

    def _completion(self, row: Row) -> Completion:
        meta: dict[str, Any] = {}
        if row.session is not None:
            meta = {"prompt_tokens": len(row.prompt), "cached_tokens": row.cached, "kv": row.event}
        return Completion(text=self.tokenizer.decode(row.tokens, skip_special_tokens=True), token_ids=row.tokens,
                          logprobs=row.logprobs, finish_reason=row.finish,
                          prompt_index=row.prompt_index, metadata=meta,
                          top_logprobs=row.tops if row.params.top_logprobs else None)

    def _hits_stop(self, tail: list[int], stop: tuple[str, ...]) -> bool:
        """Whether a row's recent tokens contain a stop string."""
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        return any(s in text for s in stop)
