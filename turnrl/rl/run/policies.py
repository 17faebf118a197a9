"""The models of a run with several trainable policies (``multi_agent.policies``, docs/multi-agent.md).

Every policy starts from the run's starting model (or its own ``init_from``). Under ``learner.lora`` each gets its
own adapters on one copy of the base model: the frozen base weights of every policy are the same tensors in memory
wherever they hold the same values, so N LoRA policies cost one base model and N adapters. Without LoRA each policy
is a whole model of its own.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from turnrl.agents.hf import HFAgent
from turnrl.checkpoint import load_policy
from turnrl.rl.config import TrainConfig


def share_frozen_base(first: torch.nn.Module, other: torch.nn.Module) -> int:
    """Point ``other``'s frozen parameters at ``first``'s where names and values agree (the base under LoRA); the
    number of tensors now shared."""
    mine = dict(first.named_parameters())
    shared = 0
    for name, p in other.named_parameters():
        base = mine.get(name)
        if p.requires_grad or base is None or base.requires_grad or base.shape != p.shape:
            continue
        if base.data_ptr() != p.data_ptr() and torch.equal(base, p):
            p.data = base.data
            shared += 1
    return shared


def build_policies(config: TrainConfig, model: Any, tokenizer: Any, device: Any, batch_size: int) -> dict[str, HFAgent]:
    """An agent per policy of ``config.multi_agent.policies`` (see the module docstring); ``model`` (already loaded
    with the run's ``init_from``) becomes the first policy's."""
    assert config.multi_agent is not None and config.multi_agent.policies
    specs = config.multi_agent.policies
    names = list(specs)
    model.to(device)  # on the device before the copies, so that the shared base is one tensor there
    models = {names[0]: model, **{name: copy.deepcopy(model) for name in names[1:]}}
    for name, spec in specs.items():
        if spec.init_from:
            load_policy(models[name], spec.init_from)
    if config.learner.lora is not None:
        from turnrl.lora import apply_lora

        for i, name in enumerate(names):  # each policy's adapters drawn from the run's seed: a run repeats itself
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(config.seed * 1_000_003 + i)
                models[name] = apply_lora(models[name], config.learner.lora)
        for name in names[1:]:
            share_frozen_base(models[names[0]], models[name])
    agents = {}
    for name, m in models.items():
        m.to(device)  # (already there: a no-op that keeps the shared tensors shared)
        agents[name] = HFAgent(m, tokenizer, batch_size=batch_size, kv_cache_mb=config.rollout.kv_cache_mb)
    return agents
