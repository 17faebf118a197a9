"""Reward shaping: pure functions (docs/algorithms.md §4)."""

from __future__ import annotations

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
