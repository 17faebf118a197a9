"""Prefix-tree passes: every stretch of tokens that rows share runs forward (and backward) once.

The shared-prompt pass of :mod:`turnrl.rl.core.forward` runs a group's common prompt once. A tree of episodes
(:mod:`turnrl.rollout.tree`) shares more: its leaves share the trunk (prompt, the turns before the first branch,
their observations), and the leaves below an inner node share that node's turns too. Trained as separate rows, a
4-leaf tree branching at turns 1 and 2 computes its prompt four times and its first turn twice; here each shared
segment runs once, as a batch of one row, on the keys and values of the segment above it, and the rows below it
continue from those keys and values. Gradients flow back through them into the single pass, so the loss and the
gradients are those of the rows trained apart (docs/algorithms.md §14, "shared view"), up to float rounding.

The tree is found from the tokens themselves, not from the rollout's node ids: rows are grouped by their longest
common prefix, recursively (a trie whose edges are token runs). So it also shares a group's prompt (as
``share_prompts`` does) and a system prompt common to different tasks. A shared run that would save fewer than
``min_shared`` tokens ((rows − 1) × its length: two answers that both begin with "The") does not get a pass of its
own: its tokens are computed again by each row below it, which costs less than the forward calls it would add (its
own, and one for the rows below it, which can no longer run with their cousins).

Each row's positions are covered by exactly one pass: the shared passes of the nodes above it and one *tail* pass
(its own tokens after its last shared node), run with every other tail of the same node as one batch, the node's
keys and values repeated for each. Needs a model whose cache layers are all full-attention
(:func:`turnrl.agents.batching.full_attention_only`); :func:`turnrl.rl.core.forward.forward_tokens` falls back to
the shared-prompt pass otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

KV = list[tuple[torch.Tensor, torch.Tensor]]  # one (keys, values) per layer, batch 1: the prefix [0, c)
Score = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Piece:
    """One pass's results for rows ``rows`` at positions ``[start, end)``: ``logp``/``entropy`` for the tokens
    ``[scored, end)`` (``(1 or n, end − scored)``, None when nothing there is scored) and ``hidden`` for
    ``[start, end)`` (``(1 or n, end − start, H)``, None without hidden states). A shared pass has one row of
    results for all of ``rows``."""

    rows: list[int]
    start: int
    end: int
    scored: int
    logp: torch.Tensor | None
    entropy: torch.Tensor | None
    hidden: torch.Tensor | None


def common_end(seqs: list[list[int]], start: int) -> int:
    """The end of the longest prefix every one of ``seqs`` shares, given that they share ``[0, start)``."""
    shortest = min(len(s) for s in seqs)
    e = start
    first = seqs[0]
    while e < shortest and all(s[e] == first[e] for s in seqs[1:]):
        e += 1
    return e


def _cache(kv: KV | None, n: int) -> DynamicCache | None:
    """A cache holding ``kv`` (batch 1) for ``n`` rows; None: no prefix. The rows' views are expanded, but the
    cache's update concatenates the new tokens' keys and values onto them, which copies the prefix for each row:
    prefix trees save compute, not the memory of the keys and values."""
    if kv is None:
        return None
    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k.expand(n, *k.shape[1:]), v.expand(n, *v.shape[1:]), i)
    return cache


def prefix_tree_pieces(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: list[int],
    first: list[int],
    temperature: float,
    hidden: bool,
    scores: bool,
    score: Score,
    min_shared: int,
    lanes: Callable[[list[int], int], list[list[int]]],
) -> list[Piece]:
    """The passes of ``rows`` (right-padded rows of ``input_ids``) as a prefix tree; see the module docstring.

    Args:
        first: each row's first scored position (its first generated token; its length: nothing scored), by row.
        score: ``(logits, targets, temperature) -> (logp, entropy)`` (:func:`turnrl.rl.core.forward._score`).
        min_shared: the fewest tokens a shared run must save to get a pass of its own.
        lanes: ``(spans, overhead) -> lanes`` cuts a node's tails into batches (positions into ``spans``).
    """
    lengths = attention_mask.sum(-1).tolist()
    seqs = {b: input_ids[b, : lengths[b]].tolist() for b in rows}
    pieces: list[Piece] = []
    device = input_ids.device

    def scored_part(
        logits: torch.Tensor, carry: torch.Tensor | None, targets: torch.Tensor, c: int, lo: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # the logits of positions lo−1 .. end−2 predict tokens lo .. end−1; the carry (position c−1) when lo == c
        parts: list[torch.Tensor] = []
        if lo == c:  # c ≥ 1 here (lo ≥ 1): the caller carries the logits at c − 1
            assert carry is not None
            parts.append(carry.expand(len(logits), 1, -1))
        return score(torch.cat([*parts, logits[:, :-1]], 1), targets, temperature)

    def shared(R: list[int], c: int, e: int, kv: KV | None, carry: torch.Tensor | None) -> tuple[KV, torch.Tensor]:
        """Run ``[c, e)`` of the rows ``R`` once; the keys/values of ``[0, e)`` and the logits at ``e − 1``."""
        lo = max(c, min(first[b] for b in R), 1)
        keep = e - max(c, lo - 1) if scores and lo < e else 1
        cache = _cache(kv, 1)
        positions = torch.arange(c, e, device=device)[None]
        out = model(
            input_ids=input_ids[R[0] : R[0] + 1, c:e],
            position_ids=positions,
            past_key_values=cache,
            attention_mask=attention_mask.new_ones((1, e)),
            use_cache=True,
            output_hidden_states=hidden,
            logits_to_keep=keep,
        )
        lp = ent = None
        if scores and lo < e:
            lp, ent = scored_part(out.logits, carry, input_ids[R[0] : R[0] + 1, lo:e], c, lo)
        h = out.hidden_states[-1] if hidden else None
        pieces.append(Piece(list(R), c, e, lo, lp, ent, h))
        kv_out = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        return kv_out, out.logits[:, -1:]

    def tails(S: list[int], c: int, kv: KV | None, carry: torch.Tensor | None) -> None:
        """Each row of ``S`` from ``c`` to its end, as batches cut by ``lanes``, on the prefix ``kv``."""
        spans = [lengths[b] - c for b in S]
        for lane in lanes(spans, c + 32):
            part = sorted(S[k] for k in lane)
            n, end = len(part), max(lengths[b] for b in part)
            lo = max(c, min(first[b] for b in part), 1)
            keep = end - max(c, lo - 1) if scores and lo < end else 1
            idx = torch.tensor(part, device=device)
            mask = torch.cat([attention_mask.new_ones((n, c)), attention_mask[idx, c:end]], 1)
            positions = torch.arange(c, end, device=device)[None].expand(n, -1)
            out = model(
                input_ids=input_ids[idx, c:end],
                attention_mask=mask,
                position_ids=positions,
                past_key_values=_cache(kv, n),
                use_cache=kv is not None,
                output_hidden_states=hidden,
                logits_to_keep=keep,
            )
            lp = ent = None
            if scores and lo < end:
                lp, ent = scored_part(out.logits, carry, input_ids[idx, lo:end], c, lo)
            h = out.hidden_states[-1] if hidden else None
            pieces.append(Piece(part, c, end, lo, lp, ent, h))

    def visit(R: list[int], c: int, s: int, kv: KV | None, carry: torch.Tensor | None) -> list[int]:
        """Rows ``R`` share ``[0, s)``; ``kv`` holds ``[0, c)`` (c ≤ s) and ``carry`` the logits at ``c − 1``.
        Returns the rows still to run from ``c`` on this ``kv`` (its caller runs them with its own such rows, as one
        batch); rows below a shared pass of this node's are run here."""
        e = common_end([seqs[b] for b in R], s)
        ran = (len(R) - 1) * (e - c) >= min_shared  # the tokens it saves pay for its call and its tails' call
        if ran:
            kv, carry = shared(R, c, e, kv, carry)
            c = e
        below: dict[int, list[int]] = {}
        alone: list[int] = []
        for b in R:
            if lengths[b] > e:
                below.setdefault(seqs[b][e], []).append(b)
            elif c < e:  # the row ends inside the run not yet computed: its own tail
                alone.append(b)
        for group in below.values():
            alone += visit(group, c, e + 1, kv, carry) if len(group) > 1 else group
        if ran and alone:
            tails(alone, c, kv, carry)
        return [] if ran else alone

    real = [b for b in rows if lengths[b] > 0]
    rest = visit(real, 0, 0, None, None) if len(real) > 1 else real
    if rest:
        tails(rest, 0, None, None)
    return pieces
