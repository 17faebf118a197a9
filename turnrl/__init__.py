"""turnrl: reinforcement learning of LLM agents over multi-turn interactions.

``import turnrl`` registers the built-in environments with Gymnasium and stays light (no torch, no trainer). What a
user reaches for first is here, the trainer's part loaded on first use:

* ``make(id, **kwargs)``, ``register``, ``registered`` — environments (Gymnasium's registry);
* ``Message``, ``ToolCall``, ``Turn``, ``Trajectory`` — the interchange types, and ``SamplingParams``, how an agent
  samples;
* ``TrainConfig``, ``load_config(path, overrides)`` — a run's configuration, from Python or a YAML file;
* ``Trainer(config).train()`` — a training run;
* ``make_agent(spec)`` — a policy by name or path (``"smollm2-135m-instruct"``, ``"tiny"``, a hub id, a folder);
* ``evaluate(agent, env_id, …)`` — held-out evaluation of an agent (what ``turnrl eval`` runs).
"""

from __future__ import annotations

import importlib
from typing import Any

from turnrl.envs.registry import make, register, registered
from turnrl.types import Message, SamplingParams, ToolCall, Trajectory, Turn

__version__ = "0.1.0"

#: the names loaded on first use (they import torch and the trainer), and the module each comes from
_LAZY = {
    "TrainConfig": "turnrl.rl.config",
    "load_config": "turnrl.rl.config",
    "Trainer": "turnrl.rl.run.trainer",
    "evaluate": "turnrl.rl.run.evaluate",
    "make_agent": "turnrl.agents",
}

__all__ = [
    "Message",
    "SamplingParams",
    "ToolCall",
    "TrainConfig",
    "Trainer",
    "Trajectory",
    "Turn",
    "__version__",
    "evaluate",
    "load_config",
    "make",
    "make_agent",
    "register",
    "registered",
]


def __getattr__(name: str) -> Any:
    """``turnrl.Trainer`` and the other names loaded on first use, imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'turnrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__")})
