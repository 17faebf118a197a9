"""The algorithm registry: one place where names map to objectives (DESIGN.md §Trainers).

``get_algorithm(config)`` builds the registered :class:`Algorithm` for a validated config;
``parse_algorithm_config(data)`` validates a config dict against the options of the algorithm it names, so an
option of another algorithm is an error that says which algorithms have it. Entries are ``"module:Class"`` strings,
imported on first use; :func:`register_algorithm` adds one (SWiRL, DQO, PAG, DPO and SFT come in as entries).
"""

from __future__ import annotations

import importlib
from difflib import get_close_matches
from typing import Any

from turnrl.rl.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    Experience,
    Forward,
    PolicyGradient,
    PolicyGradientConfig,
)

_REGISTRY: dict[str, str | type[Algorithm]] = {
    "grpo": "turnrl.rl.algorithms.grpo:GRPO",
    "dapo": "turnrl.rl.algorithms.grpo:DAPO",
    "ppo": "turnrl.rl.algorithms.ppo:PPO",
    "vapo": "turnrl.rl.algorithms.ppo:VAPO",
    "dqo": "turnrl.rl.algorithms.dqo:DQO",
    "dpo": "turnrl.rl.algorithms.offline:DPO",
    "rft": "turnrl.rl.algorithms.offline:RFT",
    "pag": "turnrl.rl.algorithms.pag:PAG",
    "pag-grpo": "turnrl.rl.algorithms.pag:PAGGRPO",
    "swirl": "turnrl.rl.algorithms.swirl:SWiRL",
    "sft": "turnrl.rl.algorithms.swirl:SFT",
}


def register_algorithm(name: str, entry: str | type[Algorithm]) -> None:
    """Register an algorithm class (or a lazy ``"module:Class"`` string) under ``name``."""
    _REGISTRY[name] = entry


def algorithm_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered under ``name``.

    Raises:
        ValueError: no such algorithm (the message lists the registered ones and suggests the closest).
    """
    if name not in _REGISTRY:
        close = get_close_matches(name, list(_REGISTRY), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Registered: {', '.join(algorithm_names())}.")
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = entry
    return entry


def parse_algorithm_config(data: Any) -> AlgorithmConfig:
    """Validate ``data`` (a dict with ``name``, or a config object) against the named algorithm's options.

    Raises:
        ValueError: unknown algorithm, or options that the algorithm does not have (naming the algorithms that do).
    """
    if isinstance(data, AlgorithmConfig):
        return data
    if data is None:
        data = {}
    if isinstance(data, str):  # `algorithm: dapo` — the name alone, every option at its default
        data = {"name": data}
    if not isinstance(data, dict):
        raise ValueError(f"algorithm must be a mapping with a name, got {data!r}")
    name = data.get("name", "grpo")
    cls = algorithm_class(name)
    unknown = sorted(set(data) - set(cls.Config.model_fields))
    if unknown:
        parts = []
        for key in unknown:
            owners = [n for n in algorithm_names() if key in algorithm_class(n).Config.model_fields]
            where = f"an option of {', '.join(owners)}" if owners else "not an option of any algorithm"
            parts.append(f"{key!r} ({where})")
        raise ValueError(f"algorithm {name!r} has no option {', '.join(parts)}; its options: "
                         f"{', '.join(k for k in cls.Config.model_fields if k != 'name')}")
    return cls.Config.model_validate({**data, "name": name})


def get_algorithm(config: AlgorithmConfig | dict[str, Any]) -> Algorithm:
    """Build the algorithm a config names."""
    cfg = parse_algorithm_config(config)
    return algorithm_class(cfg.name)(cfg)


__all__ = ["Algorithm", "AlgorithmConfig", "Experience", "Forward", "PolicyGradient", "PolicyGradientConfig",
           "algorithm_class", "algorithm_names", "get_algorithm", "parse_algorithm_config", "register_algorithm"]
