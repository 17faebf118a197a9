"""How the HF agent lays out the sequences it decodes together (continuous batching, docs/concepts.md §4).

A :class:`Batch` holds one KV cache for all its rows, left-padded to a common length; ``attention`` marks each row's
real positions, so rows of different lengths — and rows whose cached history and new tokens are separated by
padding — decode side by side. Rows leave (:meth:`Batch.select`) as they finish and new ones join
(:meth:`Batch.merge`) at any step; :func:`sample` draws each row's next token by its own sampling parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from turnrl.agents.base import FinishReason, SamplingParams
from turnrl.agents.kv import KVEvent
from turnrl.lanes import merge_pays
from turnrl.weights import weights_epoch


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


@dataclass(eq=False)  # compared by identity: a row is one request
class Row:
    """One sequence being generated: its prompt and sampling parameters, its session, its random stream (``gen``,
    its own; else ``shared``, its call's) and what it has produced."""

    prompt_index: int
    prompt: list[int]
    params: SamplingParams
    session: str | None = None
    gen: torch.Generator | None = None
    shared: torch.Generator | None = None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason = "length"
    cached: int = 0  # prompt tokens whose keys/values came from the session cache
    event: KVEvent = "off"
    future: Any = None  # an asyncio future its completion goes to (streamed requests)
    on_token: Any = None  # called (token_id, logprob, alternatives or None) right after each token is sampled
    tops: list[list[tuple[int, float]]] = field(default_factory=list)  # params.top_logprobs alternatives per token


@dataclass
class Batch:
    """The sequences decoding together: one KV cache, left-padded to a common length (``attention`` marks the real
    positions of each row), each row's next position id, and the logits of each row's next token."""

    rows: list[Row]
    cache: Any
    attention: torch.Tensor  # (A, L)
    positions: torch.Tensor  # (A,)
    logits: torch.Tensor  # (A, V)

    def feed(self, model: Any, nxt: torch.Tensor) -> None:
        """Run each row's sampled token through the model; the logits of the following one become pending."""
        device = self.attention.device
        self.attention = torch.cat([self.attention, self.attention.new_ones((len(self.rows), 1))], 1)
        out = model(
            input_ids=nxt.to(device)[:, None],
            attention_mask=self.attention,
            position_ids=self.positions[:, None],
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
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
        # (sliding-window layers keep only their last positions and count their own length: left as they are)
        if lead > 0 and all(isinstance(layer, GrowingLayer) for layer in self.cache.layers):
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]
            self.attention = self.attention[:, lead:]

    def merge(self, other: Batch) -> Batch:
        """This batch and ``other`` (just prefilled, or another running batch) as one: both left-padded to the longer
        cache."""
        length = max(self.attention.shape[1], other.attention.shape[1])

        def pad(t: torch.Tensor, dim: int) -> torch.Tensor:
            missing = length - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim)

        layers = [
            (torch.cat([pad(a.keys, 2), pad(b.keys, 2)]), torch.cat([pad(a.values, 2), pad(b.values, 2)]))
            for a, b in zip(self.cache.layers, other.cache.layers)
        ]
        return Batch(
            self.rows + other.rows,
            growing_cache(layers),
            torch.cat([pad(self.attention, 1), pad(other.attention, 1)]),
            torch.cat([self.positions, other.positions]),
            torch.cat([self.logits, other.logits]),
        )


def merge_lanes(lanes: list[Batch], overhead: int) -> list[Batch]:
    """Batches decoding side by side (lanes), narrowest first, each merged into the one before it where one call
    per step costs less than two (:func:`turnrl.lanes.merge_pays`, ``overhead``: a call's cost in tokens of
    context): rows that finished leave a lane few and cheap to pad. Full-attention caches only."""
    out: list[Batch] = []
    for batch in sorted(lanes, key=lambda b: b.attention.shape[1]):
        if out and merge_pays(
            len(out[-1].rows), int(out[-1].attention.shape[1]), len(batch.rows), int(batch.attention.shape[1]), overhead
        ):
            out[-1] = out[-1].merge(batch)
        else:
            out.append(batch)
    return out


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer whose keys/values live in a buffer with room to grow: appending a decoded token
    writes in place, where ``DynamicLayer`` copies the whole cache (``torch.cat``) at every step — 40 % of a decode
    step at 2,000 tokens of context (measured with the profiler on SmolLM2-135M, batch 4). ``keys``/``values`` are views of the buffer; when something else replaced them
    (a batch selection, a trim) the next update copies them into a new buffer once."""

    keys: torch.Tensor | None  # (DynamicLayer's, declared here as mypy reads transformers as Any)
    values: torch.Tensor | None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = self.keys
        assert keys is not None  # set by lazy_initialization
        n, length = key_states.shape[-2], (keys.shape[-2] if keys.numel() else 0)
        buf = getattr(self, "_buffer", None)
        if (
            buf is None
            or length + n > buf[0].shape[-2]
            or buf[0].shape[:2] != key_states.shape[:2]
            or (length and buf[0].data_ptr() != keys.data_ptr())
        ):
            capacity = length + n + max(64, (length + n) // 4)  # a quarter more: few copies, little spare memory
            buf = tuple(t.new_empty((*t.shape[:2], capacity, t.shape[-1])) for t in (key_states, value_states))
            if length:
                buf[0][:, :, :length], buf[1][:, :, :length] = self.keys, self.values
            self._buffer = buf
        buf[0][:, :, length : length + n], buf[1][:, :, length : length + n] = key_states, value_states
        self.keys, self.values = buf[0][:, :, : length + n], buf[1][:, :, : length + n]
        return self.keys, self.values


def growing_cache(layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
    """A cache of :class:`GrowingLayer` s, holding ``layers``' keys/values (empty: filled by the first forward)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    for i, (k, v) in enumerate(layers or []):
        cache.update(k, v, i)
    return cache


def weights_fingerprint(model: Any) -> tuple[int, int]:
    """What session caches are keyed on: the model's weights epoch (:func:`turnrl.agents.kv.mark_weights_changed`,
    bumped by every path of turnrl that writes weights), and as a second line for writes made outside turnrl, each
    parameter's storage and version counter (a plain ``p.add_`` or ``load_state_dict`` bumps those; a fused optimizer
    kernel does not, which is why the epoch comes first)."""
    return weights_epoch(model), hash(tuple((p.data_ptr(), p._version) for p in model.parameters()))


def full_attention_only(model: Any) -> bool:
    """Whether every layer of the model's cache is a plain full-attention one (sliding-window and recurrent layers
    keep only part of the history, so a session cache cannot be cut at any prefix)."""
    config = getattr(model, "config", None)
    if config is None:
        return False
    try:
        layers = DynamicCache(config=config).layers
    except Exception:  # a config transformers cannot map: stay on full prefills
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index per row of ``probs`` (rows summing to 1, on any device) by inverse transform sampling: one uniform
    per row from ``generator`` (a CPU generator, so a seed means the same draws on every device), the first index
    whose cumulative probability exceeds it. ``torch.multinomial`` on the CPU draws one exponential per vocabulary
    entry: 76 ms per decode step for 64 rows × 49 k on 2 cores (≈ 20 % of SmolLM2's rollout time there), and 92 of
    a 143 ms step on an H200's host, where the probabilities also had to be copied to the host; this draws one
    number per row (3.4 ms on the same 2 cores)."""
    u = torch.rand(len(probs), generator=generator, dtype=torch.float64).to(probs.device)
    cdf = probs.double().cumsum(-1)
    picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
    return picked.clamp_(max=probs.shape[-1] - 1)


def sample(batch: Batch) -> torch.Tensor:
    """One token per row from the batch's pending logits, each row by its own sampling parameters (its first token
    at ``fire_temperature`` where set); each token's log-probability is appended to its row: under the distribution
    the token was drawn from — temperature-scaled and, with ``top_k``/``top_p``, filtered and renormalized
    (docs/algorithms.md §11: μ, what importance weights divide by; vLLM's ``processed_logprobs`` are the same). Rows that share a
    generator and filter draw in one call (so one call's rows sample as they always did); a row with its own stream
    draws alone (batch-invariant)."""
    logits = batch.logits.float()  # (A, V)
    temps = [
        row.params.fire_temperature if (row.params.fire_temperature and not row.tokens) else row.params.temperature
        for row in batch.rows
    ]
    t = torch.tensor(temps, dtype=logits.dtype, device=logits.device)[:, None]
    scaled = torch.where(t > 0, logits / t.clamp(min=1e-9), logits)
    logp_all = torch.log_softmax(scaled, dim=-1)
    nxt = scaled.argmax(-1)
    groups: dict[tuple[int, float, int], list[int]] = {}
    for a, (row, temp) in enumerate(zip(batch.rows, temps)):
        if temp > 0:
            stream = id(row.shared) if row.gen is None else -1 - a
            groups.setdefault((row.params.top_k, row.params.top_p, stream), []).append(a)
    for (top_k, top_p, _stream), members in groups.items():
        index = torch.tensor(members, device=logits.device)
        kept = filter_logits(scaled[index], top_k, top_p)
        probs = kept.softmax(-1)
        row = batch.rows[members[0]]
        nxt[index] = draw(probs, row.gen or row.shared)
        if top_k > 0 or top_p < 1.0:  # the distribution sampled is the filtered one, renormalized (§11: μ)
            logp_all[index] = torch.log_softmax(kept, dim=-1)
    logps = logp_all.gather(-1, nxt[:, None]).squeeze(-1).cpu()
    for a, row in enumerate(batch.rows):
        row.logprobs.append(float(logps[a]))
    want = [a for a, row in enumerate(batch.rows) if row.params.top_logprobs]
    if want:  # alternatives from the same log-probabilities as the chosen token's
        k = min(max(batch.rows[a].params.top_logprobs for a in want), logp_all.shape[-1])
        values, ids = logp_all[torch.tensor(want, device=logp_all.device)].topk(k, dim=-1)
        values = values.clamp(min=-9999.0)  # tokens top-k/top-p left out: -9999 (as OpenAI's API), not -inf
        for j, a in enumerate(want):
            kk = batch.rows[a].params.top_logprobs
            batch.rows[a].tops.append(list(zip(ids[j, :kk].tolist(), values[j, :kk].tolist())))
    return nxt.cpu()
