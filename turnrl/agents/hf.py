"""The Hugging Face transformers backend: continuous batching, per-session KV caches, exact per-token logprobs.

The CPU default. It shares the model object with the trainer (no weight copies): after an optimizer step the
next ``generate`` call samples from the updated weights (and the session caches computed with the old ones are
dropped).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from turnrl.agents.base import Completion, SamplingParams
from turnrl.agents.kv import KVEvent, SessionCache


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) everything outside the top-k tokens and outside the top-p probability mass.

    Args:
        logits: ``(B, V)`` temperature-scaled logits.
    """
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


class HFAgent:
    """Generate with a ``transformers`` causal LM, with continuous batching and per-session KV caches.

    Continuous batching: at most ``batch_size`` sequences decode at once; a sequence that finishes leaves the batch
    and a waiting one is prefilled and joins it at the next step, so a call with more prompts than ``batch_size``
    never waits for a chunk's slowest row.

    Sessions (multi-turn reuse): ``generate(..., sessions=[...])`` names the episode each prompt belongs to. The
    keys and values of everything a session's prompt and completion ran through the model are kept after the call
    (:class:`~turnrl.agents.kv.SessionCache`), so that its next prompt — the same tokens, the completion and the
    environment's reply — feeds only the new tokens. A prompt that does not extend its session's cache (a history
    that was rewritten) reuses the common prefix; entries are evicted least recently used first past
    ``kv_cache_mb`` and re-prefilled when needed; all are dropped when the weights change (an optimizer step, a
    load). :meth:`release` frees a session when its episode ends.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); used in eval mode under ``torch.no_grad`` while generating.
        tokenizer: its tokenizer (with a chat template for multi-turn rollouts).
        batch_size: the most sequences decoded at once.
        kv_cache_mb: the memory the session caches may hold between calls (0 turns sessions off).
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32, kv_cache_mb: float = 2048) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if kv_cache_mb < 0:
            raise ValueError(f"kv_cache_mb cannot be negative, got {kv_cache_mb}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        self.sessions = SessionCache(int(kv_cache_mb * 2**20))
        self.supports_sessions = kv_cache_mb > 0 and full_attention_only(model)

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, batch_size: int = 32, kv_cache_mb: float = 2048,
                        **kwargs: Any) -> HFAgent:
        """Load a model by path, hub name or built-in name (see :func:`turnrl.agents.models.load_model`)."""
        from turnrl.agents.models import load_model

        model, tokenizer = load_model(name_or_path, **kwargs)
        return cls(model, tokenizer, batch_size=batch_size, kv_cache_mb=kv_cache_mb)

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self.model.parameters()).device

    def release(self, sessions: list[str]) -> None:
        """Free the cached keys/values of sessions whose episodes ended."""
        for s in sessions:
            self.sessions.release(s)

    def generate(self, prompts: list[list[int]], params: SamplingParams, *, seeds: list[int] | None = None,
                 sessions: list[str | None] | None = None) -> list[Completion]:
        """Sample ``params.n`` completions for each token prompt (see :class:`~turnrl.agents.base.Agent`).

        ``seeds`` (one per prompt) gives every row its own random stream, so what a row samples does not depend on
        which other prompts share its batch (``params.seed`` is then unused). ``sessions`` (one per prompt, None for
        none; ``params.n`` must be 1) reuses and keeps each session's KV cache; each completion's ``metadata`` then
        says how many prompt tokens came from the cache (``cached_tokens``) and what happened to it (``kv``: new,
        hit, rewritten, evicted, invalidated, oversize).
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
            else:
                self.sessions.check_weights(weights_fingerprint(self.model))
        generator = torch.Generator(device="cpu")
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        rows = [_Row(i, p, sessions[i] if sessions is not None else None) for i, p in enumerate(prompts)
                for _ in range(params.n)]
        if seeds is not None:  # row j of prompt i: its own stream
            for k, row in enumerate(rows):
                j = k % params.n
                row.gen = torch.Generator(device="cpu").manual_seed((seeds[row.prompt_index] * 1_000_003 + j) % 2**63)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                self._decode(rows, params, generator)
        finally:
            self.model.train(was_training)
        return [self._completion(row) for row in rows]

    # ---- continuous batching ----

    def _decode(self, rows: list[_Row], params: SamplingParams, generator: torch.Generator) -> None:
        """Decode every row: up to ``batch_size`` at once, a finished row's slot refilled from the waiting ones."""
        waiting, batch = deque(rows), None
        eos = torch.tensor(self.eos_ids, dtype=torch.long)
        window = max((len(s) for s in params.stop), default=0) + 2
        while waiting or batch is not None:
            room = self.batch_size - (len(batch.rows) if batch is not None else 0)
            if waiting and room > 0:
                joining = self._prefill([waiting.popleft() for _ in range(min(room, len(waiting)))])
                batch = joining if batch is None else batch.merge(joining)
            assert batch is not None
            nxt = self._sample(batch, params, generator)
            done = torch.isin(nxt, eos)
            for a, row in enumerate(batch.rows):
                row.tokens.append(int(nxt[a]))
                if bool(done[a]) or (params.stop and self._hits_stop(row.tokens[-window:], params.stop)):
                    row.finish, done[a] = "stop", True
                elif len(row.tokens) >= params.max_new_tokens:
                    done[a] = True
            if bool(done.any()):
                for a in done.nonzero().squeeze(-1).tolist():
                    self._keep_session(batch, a)
                if bool(done.all()):
                    batch = None
                    continue
                batch.select((~done).nonzero().squeeze(-1))
                nxt = nxt[~done]
            batch.feed(self.model, nxt)

    def _prefill(self, rows: list[_Row]) -> _Batch:
        """Run the rows' prompts through the model — only the part their session caches do not cover — as one
        batch: ``[pad][cached keys/values][pad][new tokens]`` per row, the pads masked out."""
        device = self.device
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
        first, which = [], []
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
                    ref = next(r[part][n] for r in reuse if r[part] is not None)
                    t = ref.new_zeros((U, ref.shape[1], P, ref.shape[3]))
                    for u, b in enumerate(first):
                        if rows[b].cached:
                            t[u, :, P - rows[b].cached :] = reuse[b][part][n][0]
                    kv.append(t)
                layers.append((kv[0], kv[1]))
            past = DynamicCache(ddp_cache_data=layers)
        out = self.model(input_ids=ids.to(device), attention_mask=attention.to(device),
                         position_ids=positions.to(device), past_key_values=past, use_cache=True, logits_to_keep=1)
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        if U < len(rows):
            index = torch.tensor(which, device=device)
            cache.batch_select_indices(index)
            logits, attention = logits[index], attention[torch.tensor(which)]
        next_pos = torch.tensor([len(r.prompt) for r in rows], dtype=torch.long, device=device)
        return _Batch(rows, cache, attention.to(device), next_pos, logits)

    def _sample(self, batch: _Batch, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
        """One token per row from the pending logits (recorded with its log-probability); returns them."""
        logits = batch.logits.float()  # (A, V)
        first = params.fire_temperature
        temps = [first if (first and not row.tokens) else params.temperature for row in batch.rows]
        t = torch.tensor(temps, dtype=logits.dtype, device=logits.device)[:, None]
        scaled = torch.where(t > 0, logits / t.clamp(min=1e-9), logits)
        logp_all = torch.log_softmax(scaled, dim=-1)
        nxt = scaled.argmax(-1)
        sampled = [a for a, temp in enumerate(temps) if temp > 0]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            probs = filter_logits(scaled[index], params.top_k, params.top_p).softmax(-1).cpu()
            if all(batch.rows[a].gen is None for a in sampled):
                draws = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:  # one stream per row: batch-invariant sampling
                draws = torch.cat([torch.multinomial(probs[i : i + 1], 1, generator=batch.rows[a].gen or generator)[0]
                                   for i, a in enumerate(sampled)])
            nxt[index] = draws.to(nxt.device)
        logps = logp_all.gather(-1, nxt[:, None]).squeeze(-1).cpu()
        for a, row in enumerate(batch.rows):
            row.logprobs.append(float(logps[a]))
        return nxt.cpu()

    def _keep_session(self, batch: _Batch, a: int) -> None:
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

    def _completion(self, row: _Row) -> Completion:
        meta: dict[str, Any] = {}
        if row.session is not None:
            meta = {"prompt_tokens": len(row.prompt), "cached_tokens": row.cached, "kv": row.event}
        return Completion(text=self.tokenizer.decode(row.tokens, skip_special_tokens=True), token_ids=row.tokens,
                          logprobs=row.logprobs, finish_reason=row.finish,  # type: ignore[arg-type]
                          prompt_index=row.prompt_index, metadata=meta)

    def _hits_stop(self, tail: list[int], stop: tuple[str, ...]) -> bool:
        """Whether a row's recent tokens contain a stop string."""
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        return any(s in text for s in stop)


@dataclass
class _Row:
    """One sequence being generated: its prompt, session, random stream and what it has produced."""

    prompt_index: int
    prompt: list[int]
    session: str | None = None
    gen: torch.Generator | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "length"
    cached: int = 0  # prompt tokens whose keys/values came from the session cache
    event: KVEvent = "off"


@dataclass
class _Batch:
    """The sequences decoding together: one KV cache, left-padded to a common length (``attention`` marks the real
    positions of each row), each row's next position id, and the logits of each row's next token."""

    rows: list[_Row]
    cache: Any
    attention: torch.Tensor  # (A, L)
    positions: torch.Tensor  # (A,)
    logits: torch.Tensor  # (A, V)

    def feed(self, model: Any, nxt: torch.Tensor) -> None:
        """Run each row's sampled token through the model; the logits of the following one become pending."""
        device = self.attention.device
        self.attention = torch.cat([self.attention, self.attention.new_ones((len(self.rows), 1))], 1)
        out = model(input_ids=nxt.to(device)[:, None], attention_mask=self.attention,
                    position_ids=self.positions[:, None], past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        self.cache, self.logits = out.past_key_values, out.logits[:, -1, :]
        self.positions = self.positions + 1

    def select(self, keep: torch.Tensor) -> None:
        """Keep only rows ``keep`` (the others finished) and cut the padding no remaining row needs."""
        device = self.attention.device
        self.rows = [self.rows[int(a)] for a in keep]
        keep = keep.to(device)
        self.cache.batch_select_indices(keep)
        self.attention, self.positions, self.logits = self.attention[keep], self.positions[keep], self.logits[keep]
        lead = int(self.attention.any(0).int().argmax())  # columns every remaining row has masked out
        if lead > 0:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]
            self.attention = self.attention[:, lead:]

    def merge(self, other: _Batch) -> _Batch:
        """This batch and ``other`` (just prefilled) as one: both left-padded to the longer cache."""
        length = max(self.attention.shape[1], other.attention.shape[1])

        def pad(t: torch.Tensor, dim: int) -> torch.Tensor:
            missing = length - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim)

        layers = [(torch.cat([pad(a.keys, 2), pad(b.keys, 2)]), torch.cat([pad(a.values, 2), pad(b.values, 2)]))
                  for a, b in zip(self.cache.layers, other.cache.layers)]
        return _Batch(self.rows + other.rows, DynamicCache(ddp_cache_data=layers),
                      torch.cat([pad(self.attention, 1), pad(other.attention, 1)]),
                      torch.cat([self.positions, other.positions]), torch.cat([self.logits, other.logits]))


def weights_fingerprint(model: Any) -> int:
    """Changes whenever a parameter is updated in place (an optimizer step bumps its version counter) or replaced
    (a load that swaps the storage): session caches computed before are then stale."""
    return hash(tuple((p.data_ptr(), p._version) for p in model.parameters()))


def full_attention_only(model: Any) -> bool:
    """Whether every layer of the model's cache is a plain full-attention one (sliding-window and recurrent layers
    keep only part of the history, so a session cache cannot be cut at any prefix)."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    try:
        layers = DynamicCache(config=config).layers
    except Exception:  # noqa: BLE001 — a config transformers cannot map: stay on full prefills
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)
