"""Per-token log-probabilities, entropies and hidden states of a causal LM on padded, right-aligned sequences.

Two savings over one plain forward pass over the batch, both exact up to float rounding:

* **Generated positions only.** Given the loss mask, the LM head (hidden → vocabulary, a fifth of a small model's
  compute) and the log-softmax run only from each row's first generated token on; prompt positions get 0.
* **Shared prompts** (``share_prefix``). Rows whose prompts — the tokens before their first generated token — are
  identical (the samples of one GRPO group) run that prompt once: its keys and values are repeated for the rows'
  continuations, and gradients flow back through them into the single prompt pass. With group size G and prompt
  length P this removes (G − 1)·P tokens from the forward and the backward pass.

The padding past each cluster's longest row is also cut. Rows with nothing generated still get hidden states.

**Lanes** (``lanes``). Rows are padded to the longest row of their pass, so one answer that ran to the token limit
makes every short row beside it cost as much as it does. With ``lanes`` the rows of each pass (a shared-prompt
cluster, or the rows without one) are sorted by length and cut into lanes of similar length, each its own forward
call (:func:`turnrl.lanes.lanes_of` picks the cut that minimizes padded tokens plus a per-call overhead). Each row's
numbers are the same, up to float rounding; only the padding computed changes.

**Context segments** (``segment_ids``, :attr:`turnrl.types.Trajectory.segments`): a row whose episode's history was
rewritten holds several sequences end to end. When any row has more than one, every row's segments become rows of
their own (:class:`Segments`: a padded ``(S, T_max)`` batch, each segment's positions from 0), the pass above runs
once on them (one forward call per micro-batch without ``share_prefix``; segments of any rows that share a prompt
share its pass), and the results go back to the rows' positions. Without segments nothing of this runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from turnrl.agents.batching import full_attention_only
from turnrl.lanes import lanes_of
from turnrl.rl.core.prefix_tree import prefix_tree_pieces


class Segments:
    """The context segments of a padded batch as rows of their own, and the way back.

    Built by :meth:`of`, which returns None when no row has more than one segment. ``unpack`` takes a ``(B, T, …)``
    tensor to ``(S, T_max, …)`` (segment ``k`` of row ``b`` at positions ``0..len``); ``pack`` puts an
    ``(S, T_max, …)`` result back at its rows' positions (zeros at padding), keeping gradients.
    """

    def __init__(self, B: int, T: int, pieces: list[tuple[int, int, int]], device: torch.device) -> None:
        self.B, self.T = B, T
        self.pieces = pieces  # (row, start, end) of each segment, row by row
        starts = torch.tensor([b * T + s for b, s, _ in pieces], dtype=torch.long, device=device)
        lens = torch.tensor([e - s for _, s, e in pieces], dtype=torch.long, device=device)
        steps = torch.arange(int(lens.max()), device=device)
        self.valid = steps[None] < lens[:, None]  # (S, T_max)
        self.attention_mask = self.valid.long()
        self.src = torch.where(
            self.valid, starts[:, None] + steps[None], torch.zeros_like(self.valid, dtype=torch.long)
        )

    @classmethod
    def of(cls, attention_mask: torch.Tensor, segment_ids: torch.Tensor | None) -> Segments | None:
        """The segments of right-padded rows (a new segment wherever ``segment_ids`` changes inside a row's real
        tokens); None when there is at most one per row (the plain pass applies)."""
        if segment_ids is None:
            return None
        real = attention_mask > 0
        change = torch.zeros_like(real)
        change[:, 1:] = (segment_ids[:, 1:] != segment_ids[:, :-1]) & real[:, 1:]
        if not bool(change.any()):
            return None
        B, T = segment_ids.shape
        lengths = real.sum(-1).tolist()
        cuts: list[list[int]] = [[] for _ in range(B)]
        for b, t in torch.nonzero(change).tolist():
            cuts[b].append(t)
        pieces = []
        for b in range(B):
            if lengths[b] == 0:
                continue
            bounds = [0, *sorted(cuts[b]), lengths[b]]
            pieces += [(b, s, e) for s, e in zip(bounds, bounds[1:])]
        return cls(B, T, pieces, segment_ids.device)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, …)`` → ``(S, T_max, …)``; padding positions hold arbitrary values of ``x`` (mask them)."""
        return x.reshape(self.B * self.T, *x.shape[2:])[self.src]

    def pack(self, y: torch.Tensor) -> torch.Tensor:
        """``(S, T_max, …)`` → ``(B, T, …)``, zeros where no segment token is; differentiable in ``y``."""
        out = y.new_zeros((self.B * self.T, *y.shape[2:]))
        out = out.index_put((self.src[self.valid],), y[self.valid])
        return out.reshape(self.B, self.T, *y.shape[2:])


PASS_OVERHEAD = 32  # what one more forward call costs, in tokens of a pass (its launch, a few small kernels)


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    loss_mask: torch.Tensor | None = None,
    share_prefix: bool = False,
    segment_ids: torch.Tensor | None = None,
    lanes: bool = False,
    prefix_tree: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``, both ``(B, T)``, aligned to token positions (see :func:`forward_tokens`)."""
    logp, entropy, _ = forward_tokens(
        model,
        input_ids,
        attention_mask,
        temperature,
        loss_mask=loss_mask,
        share_prefix=share_prefix,
        segment_ids=segment_ids,
        lanes=lanes,
        prefix_tree=prefix_tree,
    )
    return logp, entropy


def sequence_logprobs(
    model: torch.nn.Module, sequences: list[list[int]], temperature: float = 1.0
) -> list[list[float]]:
    """Each token's log-probability given the tokens before it (position 0: 0.0), for unpadded token lists; the
    probe that compares the weights two processes hold (a learner rank and a rollout worker)."""
    device = next(model.parameters()).device
    n = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), n), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s, device=device)
        mask[i, : len(s)] = 1
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, mask, temperature)
    return [logp[i, : len(s)].tolist() for i, s in enumerate(sequences)]


def forward_tokens(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    hidden: bool = False,
    *,
    loss_mask: torch.Tensor | None = None,
    share_prefix: bool = False,
    segment_ids: torch.Tensor | None = None,
    scores: bool = True,
    lanes: bool = False,
    prefix_tree: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(logp, entropy, last_hidden)`` of right-padded sequences.

    Args:
        input_ids, attention_mask: ``(B, T)``, right-padded (real tokens first).
        temperature: logits are divided by it (the sampling temperature of the rollout), unless 0 or 1.
        hidden: also return the last layer's hidden states ``(B, T, H)`` (detached: they feed the value head).
        loss_mask: ``(B, T)``, nonzero on generated tokens. Without it every position is scored.
        share_prefix: run identical prompts once (needs ``loss_mask``).
        segment_ids: ``(B, T)``, each token's context segment; each segment is scored as a sequence of its own.
        scores: False: hidden states only (what a value head reads); the LM head and the log-softmax do not run over
            the sequence, and ``logp`` and ``entropy`` are zeros.
        lanes: run rows of very different lengths in separate calls (see the module docstring); the same results.
        prefix_tree: run every prefix rows share once, not only whole prompts (:mod:`turnrl.rl.core.prefix_tree`:
            a tree's trunk and inner nodes); needs ``loss_mask`` and a full-attention model, else ``share_prefix``
            applies. The same results.

    Returns:
        ``logp[b, t]`` = log p(token t | tokens < t of its segment) and ``entropy[b, t]`` (no gradient) of that
        distribution, 0 at position 0, at padding and (with ``loss_mask``) before the row's first generated token —
        with segments: 0 at each segment's first token and before its first generated token. Hidden states are
        each token's within its segment (0 at padding).
    """
    segments = Segments.of(attention_mask, segment_ids)
    if segments is not None:
        logp, entropy, last_hidden = forward_tokens(
            model,
            segments.unpack(input_ids),
            segments.attention_mask,
            temperature,
            hidden,
            loss_mask=None if loss_mask is None else segments.unpack(loss_mask) * segments.valid,
            share_prefix=share_prefix,
            scores=scores,
            lanes=lanes,
            prefix_tree=prefix_tree,
        )
        return (
            segments.pack(logp),
            segments.pack(entropy),
            None if last_hidden is None else segments.pack(last_hidden),
        )
    B, T = input_ids.shape
    device = input_ids.device
    lengths = attention_mask.sum(-1)
    if loss_mask is None:
        first = torch.ones(B, dtype=torch.long, device=device)
    else:
        generated = loss_mask > 0
        first = torch.where(generated.any(-1), generated.float().argmax(-1), lengths).clamp(min=1)
    logp = torch.zeros((B, T), device=device)
    entropy = torch.zeros((B, T), device=device)
    last_hidden = None

    def cut(spans: list[int], overhead: int) -> list[list[int]]:  # positions into ``spans``, lane by lane
        if lanes:
            return lanes_of(spans, overhead)
        return [list(range(len(spans)))] if spans else []

    if prefix_tree and loss_mask is not None and full_attention_only(model):
        for piece in prefix_tree_pieces(
            model,
            input_ids,
            attention_mask,
            list(range(B)),
            first.tolist(),
            temperature,
            hidden,
            scores,
            _score,
            2 * PASS_OVERHEAD,
            cut,
        ):
            idx = torch.tensor(piece.rows, device=device)
            if piece.logp is not None:
                assert piece.entropy is not None  # scored together
                logp[idx, piece.scored : piece.end] = piece.logp
                entropy[idx, piece.scored : piece.end] = piece.entropy
            if piece.hidden is not None:
                last_hidden = _place(last_hidden, piece.hidden, idx, B, T, piece.start)
        scored = (attention_mask > 0) & (torch.arange(T, device=device)[None] >= first[:, None])
        return logp * scored, entropy * scored, last_hidden
    clusters: dict[tuple[int, ...], list[int]] = defaultdict(list)
    rest: list[int] = []
    for b in range(B):
        if share_prefix and loss_mask is not None and first[b] < lengths[b]:
            clusters[tuple(input_ids[b, : first[b]].tolist())].append(b)
        else:
            rest.append(b)

    for rows in list(clusters.values()):
        if len(rows) == 1:
            rest += rows
            continue
        F = int(first[rows[0]])
        spans = [int(lengths[b]) - F for b in rows]
        for lane in cut(spans, F + PASS_OVERHEAD):
            part = [rows[k] for k in lane]
            end = int(lengths[part].max())
            lp, ent, h = _shared_prompt_pass(
                model, input_ids, attention_mask, part, F, end, temperature, hidden, scores
            )
            idx = torch.tensor(part, device=device)
            if scores:
                logp[idx, F:end] = lp
                entropy[idx, F:end] = ent
            if h is not None:
                last_hidden = _place(last_hidden, h, idx, B, T)
    rest.sort()
    for lane in cut([int(lengths[b]) for b in rest], PASS_OVERHEAD):
        idx = torch.tensor(sorted(rest[k] for k in lane), device=device)
        F, end = int(first[idx].min()), int(lengths[idx].max())
        out = model(
            input_ids=input_ids[idx, :end],
            attention_mask=attention_mask[idx, :end],
            output_hidden_states=hidden,
            logits_to_keep=max(end - F + 1, 1) if scores else 1,
        )
        if end > F and scores:
            lp, ent = _score(out.logits[:, -(end - F + 1) : -1], input_ids[idx, F:end], temperature)
            logp[idx, F:end] = lp
            entropy[idx, F:end] = ent
        if hidden:
            last_hidden = _place(last_hidden, out.hidden_states[-1], idx, B, T)
    scored = (attention_mask > 0) & (torch.arange(T, device=device)[None] >= first[:, None])
    return logp * scored, entropy * scored, last_hidden


@contextmanager
def counted_tokens(model: torch.nn.Module) -> Iterator[list[int]]:
    """``with counted_tokens(model) as n:`` — ``n[0]`` adds up the token ids (rows × length, padding included) of
    every forward call of ``model`` inside the block."""
    seen = [0]

    def count(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen[0] += int(ids.numel()) if isinstance(ids, torch.Tensor) else 0

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        yield seen
    finally:
        hook.remove()


def _shared_prompt_pass(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: list[int],
    F: int,
    end: int,
    temperature: float,
    hidden: bool,
    scores: bool = True,
):
    """One pass of the common prompt ``[0, F)``, then the rows' continuations ``[F, end)`` on its keys/values
    (``scores`` False: hidden states only; the log-probabilities and entropies returned are None)."""
    n = len(rows)
    idx = torch.tensor(rows, device=input_ids.device)
    head = model(
        input_ids=input_ids[rows[0] : rows[0] + 1, :F], use_cache=True, logits_to_keep=1, output_hidden_states=hidden
    )
    cache = head.past_key_values
    cache.batch_repeat_interleave(n)
    tail_ids = input_ids[idx, F:end]
    mask = torch.cat([attention_mask.new_ones((n, F)), attention_mask[idx, F:end]], 1)
    positions = torch.arange(F, end, device=input_ids.device)[None].expand(n, -1)
    tail = model(
        input_ids=tail_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=hidden,
        logits_to_keep=0 if scores else 1,
    )
    lp = ent = None
    if scores:
        logits = torch.cat([head.logits[:, -1:].expand(n, 1, -1), tail.logits[:, :-1]], 1)  # predict tokens F..end-1
        lp, ent = _score(logits, tail_ids, temperature)
    h = None
    if hidden:
        h = torch.cat([head.hidden_states[-1].expand(n, F, -1), tail.hidden_states[-1]], 1)
    return lp, ent, h


def _score(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of each target and (without gradient) the entropy, from the logits that predict them."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    with torch.no_grad():  # in place: one vocabulary-sized temporary, not two
        ent = -logp_all.exp().mul_(logp_all).sum(-1)
    return lp, ent


def _place(
    full: torch.Tensor | None, part: torch.Tensor, idx: torch.Tensor, B: int, T: int, start: int = 0
) -> torch.Tensor:
    """Write ``part`` (rows ``idx``, or one row for all of them; positions ``[start, start + len)``) into a detached
    ``(B, T, H)`` tensor."""
    part = part.detach()
    if full is None:
        full = part.new_zeros((B, T, part.shape[-1]))
    full[idx, start : start + part.shape[1]] = part
    return full
