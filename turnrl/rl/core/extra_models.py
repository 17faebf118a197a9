"""The models an algorithm asks for besides the policy — a frozen reference and a critic — built by the run, not by
the learner: :func:`build_models` reads :attr:`~turnrl.rl.algorithms.base.Algorithm.needs_reference` and
:meth:`~turnrl.rl.algorithms.base.Algorithm.critic`."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from turnrl.rl.core.critic import SeparateCritic, ValueHead


@dataclass
class Models:
    """The learner's models besides the policy.

    Attributes:
        reference: a frozen copy of the starting policy (of a LoRA policy: the policy with its adapters off), or
            None.
        value_head: a linear critic on the policy's features, or None.
        critic: a critic with its own transformer, or None (at most one of ``value_head`` and ``critic``).
        critic_lr: the critic's learning rate (None: 2 × ``optim.lr``).
    """

    reference: Any = None
    value_head: ValueHead | None = None
    critic: SeparateCritic | None = None
    critic_lr: float | None = None


def load_critic_backbone(spec: str) -> torch.nn.Module:
    """The causal LM of an agent spec (e.g. ``tiny:chatml``, a path, a built-in name) for a separate critic."""
    from turnrl.agents import make_agent

    return make_agent(spec, batch_size=1).model


def build_models(
    algorithm: Any, policy: Any, tokenizer: Any, load: Callable[[str], torch.nn.Module] = load_critic_backbone
) -> Models:
    """Build what ``algorithm`` needs beside ``policy``, on the policy's device.

    Args:
        algorithm: the registered algorithm (its ``needs_reference`` and ``critic()``).
        policy, tokenizer: the policy (a Hugging Face causal LM) and its tokenizer.
        load: loads a separate critic's backbone from its spec.
    """
    out = Models()
    if algorithm.needs_reference:
        from turnrl.lora import AdapterOff, is_lora

        out.reference = AdapterOff(policy) if is_lora(policy) else copy.deepcopy(policy).eval().requires_grad_(False)
    spec = algorithm.critic()
    if spec is not None:
        device = next(policy.parameters()).device
        if spec.model:
            out.critic = SeparateCritic(load(spec.model), len(tokenizer))
            if spec.init is not None:
                from turnrl.rl.core.value_model import load_into

                load_into(out.critic, spec.init, spec.model)
            out.critic = out.critic.to(device)
        else:
            out.value_head = ValueHead(policy.config.hidden_size).to(device)
        out.critic_lr = spec.lr
    return out
