"""The policy's parameters as whole tensors, on any rank: the gathered (ZeRO-3) or plain parameters in buckets, and
their names, dtypes and shapes — what weight exports and the NCCL weight transfer send."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def _distinct_parameters(model: torch.nn.Module) -> list[tuple[list[str], torch.nn.Parameter]]:
    """Each distinct parameter of ``model`` with all its ``state_dict`` names (tied weights share one entry), in
    ``state_dict`` order."""
    named = dict(model.named_parameters(remove_duplicate=False))
    names_of: dict[int, list[str]] = {}
    order: list[torch.nn.Parameter] = []
    for k in model.state_dict():
        if k in named:
            p = named[k]
            if id(p) not in names_of:
                names_of[id(p)] = []
                order.append(p)
            names_of[id(p)].append(k)
    return [(names_of[id(p)], p) for p in order]


def full_parameters(model: torch.nn.Module, zero3: bool, bucket_mb: float) -> Iterator[tuple[list[str], torch.Tensor]]:
    """``(names, full tensor)`` for each distinct parameter of ``model`` in ``state_dict`` order (tied names
    together), on every rank. Under ZeRO-3 the partitions are gathered in buckets of about ``bucket_mb``: every rank
    must iterate to the end, in lockstep (each bucket is a collective). A yielded tensor is valid only until the next
    one is requested."""
    entries = _distinct_parameters(model)
    if not zero3:
        for names, p in entries:
            yield names, p.detach()
        return
    import deepspeed

    limit, bucket, size = bucket_mb * 2**20, [], 0
    for i, (names, p) in enumerate(entries):
        bucket.append((names, p))
        size += getattr(p, "ds_numel", p.numel()) * p.element_size()
        if size >= limit or i == len(entries) - 1:
            with deepspeed.zero.GatheredParameters([q for _, q in bucket], modifier_rank=None):
                for q_names, q in bucket:
                    yield q_names, q.detach()
            bucket, size = [], 0


def parameter_meta(model: torch.nn.Module) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """``(first name, dtype, full shape)`` of each distinct parameter, in :func:`full_parameters`' order, without
    gathering (ZeRO-3 keeps the full shape in ``ds_shape``)."""
    return [(names[0], p.dtype, tuple(getattr(p, "ds_shape", p.shape))) for names, p in _distinct_parameters(model)]


def to_shared(state: dict[str, torch.Tensor]) -> dict[str, tuple]:
    """A CPU state dict as numpy arrays, which Ray's object store hands to readers without a copy or unpickling
    (torch tensors are pickled: ~3 s more per transfer of SmolLM2-135M's 0.65 GB here). Each entry is
    ``(array, dtype name)`` (dtypes numpy lacks, e.g. bfloat16, travel as same-width integers) or ``("tied", name)``
    for a tensor that shares its storage with an earlier entry. :func:`from_shared` undoes it."""
    out: dict[str, tuple] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    widths = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    for name, t in state.items():
        t = t.detach().cpu()
        key = (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape))
        if key in seen:
            out[name] = ("tied", seen[key])
            continue
        seen[key] = name
        try:
            array = t.numpy()
        except TypeError:  # no numpy dtype: the raw bits as integers of the same width
            array = t.view(widths[t.element_size()]).numpy()
        out[name] = (array, str(t.dtype).removeprefix("torch."))
    return out


def from_shared(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Tensors again from :func:`to_shared`'s dict (read-only views of the arrays: load them with
    ``load_state_dict``, which copies); a plain state dict passes through unchanged."""
    import warnings

    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value[0], str):  # ("tied", the name of the entry it shares storage with)
            out[name] = out[value[1]]
        else:
            array, dtype = value
            with warnings.catch_warnings():  # the object store's arrays are read-only; load_state_dict copies
                warnings.simplefilter("ignore", UserWarning)
                out[name] = torch.from_numpy(array).view(getattr(torch, dtype))
    return out


def shared_bytes(state: dict[str, Any]) -> int:
    """The bytes of a state dict's tensors — :func:`to_shared`'s arrays (a tied entry counts once) or tensors."""
    total = 0
    for value in state.values():
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif not isinstance(value[0], str):  # ("tied", name): counted with the entry it shares storage with
            total += int(value[0].nbytes)
    return total
