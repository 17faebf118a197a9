"""A policy's *weights epoch*: a counter on the model object that every path writing its weights bumps, so that
whatever was computed with the weights before — the HF agent's session KV caches (:mod:`turnrl.agents.kv`) — knows it
is stale.

Why a counter and not the parameters' storage: the learner's fused AdamW kernel writes parameters in place without
bumping their version counters, so a fingerprint of storage pointers and version counters missed optimizer steps
(issue 66). The paths that bump it: the learner's optimizer step and checkpoint loads, LoRA adapter loads, a learner
group's export into the driver's copy, a rollout worker's adoption of new weights, ``init_from``. Code of your own
that writes a policy's weights while an agent holds sessions calls :func:`mark_weights_changed` too.
"""

from __future__ import annotations

from typing import Any

WEIGHTS_EPOCH = "_turnrl_weights_epoch"  # the attribute of a model that holds its weights epoch


def mark_weights_changed(model: Any) -> None:
    """Say that ``model``'s weights changed (an optimizer step, a load): everything computed with the weights before
    is stale from now on. It costs nothing."""
    object.__setattr__(model, WEIGHTS_EPOCH, weights_epoch(model) + 1)


def weights_epoch(model: Any) -> int:
    """How many times :func:`mark_weights_changed` was called on ``model`` (0: never)."""
    return int(model.__dict__.get(WEIGHTS_EPOCH, 0)) if hasattr(model, "__dict__") else 0
