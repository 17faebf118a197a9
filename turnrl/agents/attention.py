"""Grouped-query attention on a CPU without copying the KV cache (the HF agent's decoding).

transformers' ``sdpa`` attention repeats every key/value head once per query head of its group whenever an attention
mask is given (``repeat_kv``), because on a GPU masked grouped-query attention would fall back to SDPA's slow math
kernel. On a CPU, PyTorch's SDPA kernel groups the heads itself, mask or not, so the repeat is pure cost: a copy of
the whole cache, per layer and decode step. Continuous batching always passes a mask (its rows are left-padded to a
common length), so every decode step paid it, and a batch whose rows are padded to one long row paid it in full. With
SmolLM2-135M (9 query heads over 3 key/value heads), 32 rows of 110 tokens decoding beside 4 rows of 1,500 took
4.1 s per step, 80 % of it in that copy (``python bench/padded_decode.py``).

:func:`use_cpu_gqa` registers :func:`cpu_gqa_sdpa` as transformers' ``sdpa`` attention in this process (the
public ``AttentionInterface.register``). It passes ``enable_gqa`` to SDPA on a CPU without gradients and otherwise
calls transformers' own function, so every other case — a GPU, the learner's update, a model without key/value
groups — runs exactly as before. Its outputs are the same (the tests compare them). A model's config still says
``sdpa``, so a model sent to another process (a Ray worker, a DeepSpeed rank) runs there with or without it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward


def cpu_gqa_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that on a CPU without gradients a masked grouped-query attention
    lets SDPA group the heads (``enable_gqa``) instead of repeating the keys and values. Arguments as
    ``transformers.integrations.sdpa_attention.sdpa_attention_forward``."""
    plain = (
        query.device.type != "cpu"
        or attention_mask is None
        or torch.is_grad_enabled()
        or getattr(module, "num_key_value_groups", 1) == 1
        or key.shape[-1] != value.shape[-1]
        or any(kwargs.get(k) is not None for k in ("position_bias", "cache"))
        or kwargs.get("output_attentions", False)
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    # with a mask, transformers' sdpa never asks for a causal kernel (is_causal = ... and attention_mask is None)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def use_cpu_gqa(on: bool = True) -> None:
    """Make transformers' ``sdpa`` attention :func:`cpu_gqa_sdpa` in this process (``on=False``: transformers' own
    function again). Models on other implementations (``eager``, ``flash_attention_2``, ...) are not affected."""
    AttentionInterface.register("sdpa", cpu_gqa_sdpa if on else sdpa_attention_forward)
