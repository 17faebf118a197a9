"""The models of a run with several trainable policies (``multi_agent.policies``, docs/multi-agent.md).

Every policy starts from the run's starting model (or its own ``init_from``). Under ``learner.lora`` each gets its
own adapters on one copy of the base model: the frozen base weights of every policy are the same tensors in memory
wherever they hold the same values, so N LoRA policies cost one base model and N adapters. Without LoRA each policy
is a whole model of its own.

Its namesake :mod:`turnrl.rl.core.policies` is the same concept a layer down: the learners of these policies,
updated together.
"""

from __future__ import annotations

import copy
from typing import Any

from turnrl.agents.hf import HFAgent
from turnrl.checkpoint import load_policy
from turnrl.lora import LoraConfig, share_frozen_base
from turnrl.rl.config import PolicyConfig


def build_policies(
    specs: dict[str, PolicyConfig],
    model: Any,
    tokenizer: Any,
    *,
    device: Any,
    batch_size: int,
    lora: LoraConfig | None,
    seed: int,
    kv_cache_mb: float,
) -> dict[str, HFAgent]:
    """An agent per policy of ``specs`` (the run's ``multi_agent.policies``; see the module docstring); ``model``
    (already loaded with the run's ``init_from``) becomes the first policy's. ``lora`` (``learner.lora``) gives each
    its own adapters, drawn from the run's ``seed``; ``kv_cache_mb`` is ``rollout.kv_cache_mb``."""
    if not specs:
        raise ValueError("build_policies needs the run's multi_agent.policies (its config requires two or more)")
    names = list(specs)
    model.to(device)  # on the device before the copies, so that the shared base is one tensor there
    models = {names[0]: model, **{name: copy.deepcopy(model) for name in names[1:]}}
    for name, spec in specs.items():
        if spec.init_from:
            load_policy(models[name], spec.init_from)
    if lora is not None:
        from turnrl.lora import apply_seeded_lora

        for i, name in enumerate(names):  # each policy's adapters drawn from the run's seed: a run repeats itself
            models[name] = apply_seeded_lora(models[name], lora, seed * 1_000_003 + i)
        for name in names[1:]:
            share_frozen_base(models[names[0]], models[name])
    agents = {}
    for name, m in models.items():
        m.to(device)  # (already there: a no-op that keeps the shared tensors shared)
        agents[name] = HFAgent(m, tokenizer, batch_size=batch_size, kv_cache_mb=kv_cache_mb)
    return agents
