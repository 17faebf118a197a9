"""Reward shaping: pure functions (docs/algorithms.md §4; the dense process rewards of §8).

Its namesake :mod:`turnrl.rl.config.rewards` is the same concept a layer up: the ``reward`` section that configures
these functions."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def overlong_penalty(length: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward (docs/algorithms.md §4).

    0 if |y| ≤ L_max − L_cache; ((L_max − L_cache) − |y|) / L_cache inside the buffer; −1 beyond L_max.

    Args:
        length: response lengths, any shape.
        max_len: L_max, the generation limit.
        cache_len: L_cache, the buffer before it.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    length = length.to(torch.get_default_dtype())
    soft = (max_len - cache_len - length) / cache_len
    out = torch.where(length <= max_len - cache_len, torch.zeros_like(length), soft)
    return torch.where(length > max_len, -torch.ones_like(length), out)


def longest_turn(turn_ids: torch.Tensor) -> torch.Tensor:
    """The length of each sequence's longest generated turn ``(B,)`` — the |y| of the overlong punishment in a
    multi-turn episode, where L_max limits each turn (docs/algorithms.md §4).

    Args:
        turn_ids: ``(B, T)`` the turn of each generated token, −1 elsewhere.
    """
    top = int(turn_ids.max()) if turn_ids.numel() else -1
    if top < 0:
        return torch.zeros(turn_ids.shape[0], dtype=torch.long, device=turn_ids.device)
    return torch.stack([(turn_ids == k).sum(-1) for k in range(top + 1)], -1).max(-1).values


def on_last_token(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)``: each sequence's ``values[b]`` on its last generated token (``mask`` 1), 0 everywhere else — where
    a sequence-level reward term goes for per-token credit (GAE). A row without a generated token gets nothing."""
    T = mask.shape[-1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, -1).max(-1).values  # (B,) −1: none
    out = torch.zeros(mask.shape, dtype=values.dtype, device=mask.device)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    out[rows, last[rows]] = values[rows]
    return out


def dense_rewards(values: Sequence[float], start: float, form: str, coef: float) -> tuple[list[float], float]:
    """Dense rewards of one reply from a process reward model's values at its line ends: one per line end, and one for the reply's
    last token (docs/algorithms.md §8).

    ``value``: ``coef · V(line i) / T`` at each of the ``T`` line ends, nothing at the end — the PRM's score as each
    line's reward, normalized by the line count as the paper does after its policy learned to write excessive lines
    (the sum is ``coef`` × the mean score: more lines no longer add up, lines that look right still pay).

    ``delta`` [ours]: potential-based shaping with Φ = coef · V: ``coef · (V(line i) − V(line i−1))`` at line end i, ``V(line 0)`` = ``start`` (the value
    before the reply), and ``−coef · V(last line)`` at the last token (Φ of the end is 0). A reply's dense rewards
    then sum to ``−coef · start`` whatever it writes — more lines or lines that merely look right earn nothing — and
    only move credit to the lines that raised the PRM's estimate (γ = 1: no policy's return changes rank; Ng et al.,
    1999).
    """
    if form == "value":
        return [coef * v / len(values) for v in values], 0.0
    if form != "delta":
        raise ValueError(f"form must be 'delta' or 'value', got {form!r}")
    before = [start, *values[:-1]]
    return [coef * (v - b) for v, b in zip(values, before)], -coef * (values[-1] if values else start)
