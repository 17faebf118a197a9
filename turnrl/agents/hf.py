"""The Hugging Face transformers backend: continuous batching, per-session KV caches, exact per-token logprobs.

The CPU default. It shares the model object with the trainer (no weight copies): after an optimizer step the
next ``generate`` call samples from the updated weights (and the session caches computed with the old ones are
dropped).

Over 450 lines: one class, :class:`HFAgent` — its public side (construction, ``generate``, ``agenerate_one``,
sessions, capabilities) first, then its decoding loop (the rows of a call in lanes of similar context length,
admitted into a running batch as others finish, prefilled from their session's cached keys and values where they
extend it, stepped token by token with each row's own sampling, their sessions' caches kept, their completions
assembled). The two halves read the same state at every step (the model, the sessions, the batch limits); split in
two classes, each read the other's attributes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import torch

from turnrl.agents.attention import use_cpu_gqa
from turnrl.agents.base import Capabilities, Completion, SamplingParams
from turnrl.agents.batching import (
    Batch,
    Row,
    filter_logits,
    full_attention_only,
    growing_cache,
    merge_lanes,
    sample,
    weights_fingerprint,
)
from turnrl.agents.kv import SessionCache
from turnrl.lanes import lanes_of, merge_pays
from turnrl.utils import row_seed

__all__ = ["HFAgent", "filter_logits"]


class HFAgent:
    """Generate with a ``transformers`` causal LM, with continuous batching and per-session KV caches.

    Continuous batching: at most ``batch_size`` sequences decode at once; a sequence that finishes leaves the batch
    and a waiting one is prefilled and joins it at the next step, so a call with more prompts than ``batch_size``
    never waits for a chunk's slowest row. :meth:`agenerate_one` extends it across calls: requests from many
    coroutines (a rollout's episodes, each as soon as its environment answered) join the running batch.

    Sessions (multi-turn reuse): ``generate(..., sessions=[...])`` names the episode each prompt belongs to. The
    keys and values of everything a session's prompt and completion ran through the model are kept after the call
    (:class:`~turnrl.agents.kv.SessionCache`), so that its next prompt — the same tokens, the completion and the
    environment's reply — feeds only the new tokens. A prompt that does not extend its session's cache (a history
    that was rewritten) reuses the common prefix; past ``kv_cache_mb`` the oldest sessions' entries are evicted
    and re-prefilled when needed; all are dropped when the weights change (an optimizer step, a
    load). :meth:`release` frees a session when its episode ends.

    Creating one makes transformers' ``sdpa`` attention :func:`turnrl.agents.attention.cpu_gqa_sdpa` in this process
    (the same results; on a CPU, grouped-query attention no longer copies the KV cache at every decode step).

    Args:
        model: a causal LM (``AutoModelForCausalLM``); used in eval mode under ``torch.no_grad`` while generating.
        tokenizer: its tokenizer (with a chat template for multi-turn rollouts).
        batch_size: the most sequences decoded at once.
        kv_cache_mb: the memory the session caches may hold between calls (0 turns sessions off).
        decode_lanes: decode the rows of a call whose contexts differ widely in separate batches (see
            :meth:`_lanes`); rows with their own random streams sample the same tokens either way.
    """

    LANE_CALL = 6000  # one decode call's fixed cost, in rows × tokens of context (SmolLM2, CPU: 42 ms / 7 µs)
    LANE_ROW = 80  # one more row's cost beyond its context, in tokens of context (0.56 ms / 7 µs)

    def __init__(
        self, model: Any, tokenizer: Any, *, batch_size: int = 32, kv_cache_mb: float = 2048, decode_lanes: bool = True
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if kv_cache_mb < 0:
            raise ValueError(f"kv_cache_mb cannot be negative, got {kv_cache_mb}")
        self.model = model
        use_cpu_gqa()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.decode_lanes = decode_lanes
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        self.sessions = SessionCache(int(kv_cache_mb * 2**20))
        self.full_attention = full_attention_only(model)  # else: no sessions, and rows join only an empty batch
        self.supports_sessions = kv_cache_mb > 0 and self.full_attention
        self._stream_loop: Any = None  # agenerate_one's event loop, queue and driver task
        self._queue: deque[Row] = deque()
        self._live: set[Row] = set()  # streamed requests not answered yet (wherever they are: queue, batch, joining)
        self._driver: Any = None
        self._stream_gen: torch.Generator | None = None

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, *, batch_size: int = 32, kv_cache_mb: float = 2048, **kwargs: Any
    ) -> HFAgent:
        """Load a model by path, hub name or built-in name (see :func:`turnrl.agents.models.load_model`)."""
        from turnrl.agents.models import load_model

        model, tokenizer = load_model(name_or_path, **kwargs)
        return cls(model, tokenizer, batch_size=batch_size, kv_cache_mb=kv_cache_mb)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self.model.parameters()).device

    async def agenerate_one(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        seed: int | None = None,
        session: str | None = None,
        choice: int = 0,
        on_token: Any = None,
    ) -> Completion:
        """One completion of ``prompt``, decoded in the batch that is already running (continuous batching across
        calls): the request joins it at the next step, and its result returns as soon as it finishes, whatever the
        other rows do. Call it from many coroutines of one event loop (a rollout's episodes, each as soon as its
        environment answered); the loop runs one decode step at a time between their other work.

        ``seed`` gives the request its own random stream (else one shared by the loop's requests) — the stream of
        completion ``choice`` of ``generate(..., seeds=[seed])`` with ``n`` > ``choice``; ``session`` as in
        :meth:`generate`. ``params.n`` must be 1. ``on_token(choice, token_id, logprob, top)`` is called for each
        token as it is sampled (it must not raise: it runs inside the shared decode loop).
        """
        if not prompt:
            raise ValueError("every prompt needs at least one token")
        if params.n != 1:
            raise ValueError("agenerate_one samples one completion (params.n == 1)")
        loop = asyncio.get_running_loop()
        if self._stream_loop is not loop:  # a new event loop: a new queue, driver and shared stream
            self._stream_loop, self._queue, self._driver, self._live = loop, deque(), None, set()
            self._stream_gen = torch.Generator(device="cpu")
            self._stream_gen.seed()
        row = Row(0, list(prompt), params, session if self.supports_sessions else None, shared=self._stream_gen)
        if seed is not None:
            row.gen = torch.Generator(device="cpu").manual_seed(row_seed(seed, choice))
        if on_token is not None:
            row.on_token = lambda t, lp, top: on_token(choice, t, lp, top)
        row.future = loop.create_future()
        self._live.add(row)
        row.future.add_done_callback(lambda _f, r=row: self._live.discard(r))
        self._queue.append(row)
        if self._driver is None or self._driver.done():
            self._driver = loop.create_task(self._drive())
        return await row.future

    async def _drive(self) -> None:
        """Decode the queued requests until none is left, one step of every lane at a time, yielding to the loop
        after each. Requests join in lanes of similar context (:meth:`_join_lanes`): a stream cannot wait for a
        lane to empty, as :meth:`generate` does, so its lanes step side by side and merge once that is cheaper
        (:func:`merge_lanes`)."""
        lanes: list[Batch] = []
        was_training = self.model.training
        self.model.eval()
        try:
            while self._queue or lanes:
                with torch.no_grad():
                    lanes = self._join_lanes(lanes, self._queue)
                    if self.full_attention:  # rows that finished or joined may have made two lanes cheaper as one
                        lanes = merge_lanes(lanes, self.LANE_CALL)
                    stepped = [self._step(batch) for batch in lanes]
                lanes = [left for left, _ in stepped if left is not None]
                finished = [row for _, done in stepped for row in done]
                for row in finished:
                    if not row.future.done():
                        row.future.set_result(self._completion(row))
                await asyncio.sleep(0)  # let episodes step their environments and queue their next turns
        except BaseException as e:  # every waiting request learns why, none waits forever
            for row in list(self._live):  # queued, decoding, joining or just finished: none is left waiting
                if not row.future.done():
                    row.future.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            self._queue.clear()
            if not isinstance(e, Exception):
                raise
        finally:
            self.model.train(was_training)

    def invalidate_sessions(self) -> None:
        """Drop every session cache (call after loading weights by a path the fingerprint may miss)."""
        self.sessions.invalidate()

    def release(self, sessions: list[str]) -> None:
        """Free the cached keys/values of sessions whose episodes ended."""
        for s in sessions:
            self.sessions.release(s)

    def fork_session(self, source: str, session: str) -> None:
        """Start ``session`` from ``source``'s KV cache (a tree rollout's child episode: its shared history is not
        prefilled again; :meth:`turnrl.agents.kv.SessionCache.fork`)."""
        self.sessions.fork(source, session)

    @property
    def capabilities(self) -> Capabilities:
        """Per-prompt seeds, KV sessions (when its cache budget is above 0 and every layer attends fully), tokens
        reported as sampled, joining the running batch (:meth:`agenerate_one`), its end-of-turn ids, and its model
        in this process."""
        return Capabilities(
            seeds=True,
            sessions=self.supports_sessions,
            on_token=True,
            join_batch=True,
            join_batch_on_token=True,
            eos_ids=frozenset(self.eos_ids),
            local_model=True,
        )

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        seeds: list[int] | None = None,
        sessions: list[str | None] | None = None,
        on_token: Any = None,
    ) -> list[Completion]:
        """Sample ``params.n`` completions for each token prompt (see :class:`~turnrl.agents.base.Agent`).

        ``seeds`` (one per prompt) gives every row its own random stream, so what a row samples does not depend on
        which other prompts share its batch (``params.seed`` is then unused). ``sessions`` (one per prompt, None for
        none; ``params.n`` must be 1) reuses and keeps each session's KV cache; each completion's ``metadata`` then
        says how many prompt tokens came from the cache (``cached_tokens``) and what happened to it (``kv``: new,
        hit, rewritten, evicted, invalidated, oversize). ``on_token(index, token_id, logprob, top)`` is called for
        every token right after it is sampled (``index`` into the returned list; ``top``: its alternatives when
        ``params.top_logprobs`` asks for them, else None); an exception it raises aborts the call.
        """
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds must have one entry per prompt ({len(prompts)}), got {len(seeds)}")
        if sessions is not None:
            if len(sessions) != len(prompts):
                raise ValueError(f"sessions must have one entry per prompt ({len(prompts)}), got {len(sessions)}")
            if params.n != 1 and any(s is not None for s in sessions):
                raise ValueError("a session continues one sequence: use params.n == 1 with sessions")
            named = [s for s in sessions if s is not None]
            if len(set(named)) != len(named):
                raise ValueError("each session may appear once per generate call")
            if not self.supports_sessions:
                sessions = None
        generator = torch.Generator(device="cpu")
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        rows = [
            Row(i, p, params, sessions[i] if sessions is not None else None, shared=generator)
            for i, p in enumerate(prompts)
            for _ in range(params.n)
        ]
        if seeds is not None:  # row j of prompt i: its own stream
            for k, row in enumerate(rows):
                j = k % params.n
                row.gen = torch.Generator(device="cpu").manual_seed(row_seed(seeds[row.prompt_index], j))
        if on_token is not None:
            for k, row in enumerate(rows):
                row.on_token = lambda t, lp, top, k=k: on_token(k, t, lp, top)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                self._decode(self._lanes(rows))
        finally:
            self.model.train(was_training)
        return [self._completion(row) for row in rows]

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
            if (
                pending
                and not waiting
                and (
                    batch is None
                    or (
                        self.full_attention
                        and merge_pays(
                            len(batch.rows),
                            int(batch.attention.shape[1]),
                            len(pending[0]),
                            max(len(row.prompt) for row in pending[0]),
                            self.LANE_CALL,
                        )
                    )
                )
            ):
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
            if bool(done[a]) or (stop and self._hits_stop(row.tokens[-(max(map(len, stop)) + 2) :], stop)):
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
            new = row.prompt[row.cached :]
            ids[u, S - len(new) :] = torch.tensor(new)
            attention[u, P - row.cached : P] = 1
            attention[u, P + S - len(new) :] = 1
            positions[u, S - len(new) :] = torch.arange(row.cached, len(row.prompt))
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
        out = self.model(
            input_ids=ids.to(device),
            attention_mask=attention.to(device),
            position_ids=positions.to(device),
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )
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
        return Completion(
            text=self.tokenizer.decode(row.tokens, skip_special_tokens=True),
            token_ids=row.tokens,
            logprobs=row.logprobs,
            finish_reason=row.finish,
            prompt_index=row.prompt_index,
            metadata=meta,
            top_logprobs=row.tops if row.params.top_logprobs else None,
        )

    def _hits_stop(self, tail: list[int], stop: tuple[str, ...]) -> bool:
        """Whether a row's recent tokens contain a stop string."""
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        return any(s in text for s in stop)
