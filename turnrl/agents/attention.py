"""Grouped-query attention on a CPU without copying the KV cache (the HF agent's decoding).

transformers' ``sdpa`` attention repeats every key/value head once per query head of its group whenever an attention
mask is given (``repeat_kv``), because on a GPU masked grouped-query attention would fall back to SDPA's slow math
kernel. On a CPU, PyTorch's SDPA kernel groups the heads itself, mask or not, so the repeat is pure cost: a copy of
the whole cache, per layer and decode step. Continuous batching always passes a mask (its rows are left-padded to a
common length), so every decode step paid it, and a batch whose rows are padded to one long row paid it in full. With
SmolLM2-135M (9 query heads over 3 key/value heads), 32 rows of 110 tokens decoding beside 4 rows of 1,500 took
4.1 s per step, 80 % of it in that copy (``python bench/padded_decode.py``).

:func:`use_cpu_gqa` switches a model from ``sdpa`` to :func:`cpu_gqa_sdpa`, which passes ``enable_gqa`` to SDPA on a
CPU without gradients and otherwise is transformers' ``sdpa``. Its outputs are the same (the test compares them);
with gradients (the learner's update) it leaves transformers' path alone, so training is untouched.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "turnrl_cpu_gqa_sdpa"


def cpu_gqa_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that on a CPU without gradients a masked grouped-query attention
    lets SDPA group the heads (``enable_gqa``) instead of repeating the keys and values. Arguments as
    ``transformers.integrations.sdpa_attention.sdpa_attention_forward``."""
    plain = (query.device.type != "cpu" or attention_mask is None or torch.is_grad_enabled()
             or getattr(module, "num_key_value_groups", 1) == 1 or key.shape[-1] != value.shape[-1]
             or any(kwargs.get(k) is not None for k in ("position_bias", "cache"))
             or kwargs.get("output_attentions", False))
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # with a mask, transformers' sdpa never asks for a causal kernel (is_causal = ... and attention_mask is None)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_cpu_gqa(model: Any) -> bool:
    """Switch ``model``'s attention from transformers' ``sdpa`` to :func:`cpu_gqa_sdpa` (the same results, no cache
    copies on a CPU). A model on another implementation (``eager``, ``flash_attention_2``, ...) is left as it is.
    Returns whether it switched. The choice is not saved with the model's config."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    AttentionInterface.register(NAME, cpu_gqa_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # an unknown name would get no mask at all: padding unmasked
    model.set_attn_implementation(NAME)
    return True
