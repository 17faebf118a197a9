"""The algorithm registry: one place where names map to objectives (docs/concepts.md §8).

``get_algorithm(config)`` builds the registered :class:`Algorithm` for a validated config;
``parse_algorithm_config(data)`` validates a config dict against the options of the algorithm it names, so an
option of another algorithm is an error that says which algorithms have it. Entries are ``"module:Class"`` strings,
imported on first use; :func:`register_algorithm` adds one — a user module (loaded with ``turnrl train --import
MODULE``) — and installed packages declare theirs under the ``turnrl.algorithms`` entry point group; both fill
:data:`ALGORITHMS`, a :class:`turnrl.plugins.Registry` like every other extension point's. The methods in
:mod:`turnrl.methods` (PAG, SWiRL, DQO, the offline baselines) come in that way, declared in turnrl's own
``pyproject.toml``: this package names none of them.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from turnrl.plugins import Registry
from turnrl.rl.algorithms.base import (
    Algorithm,
    AlgorithmConfig,
    CriticSpec,
    Experience,
    Forward,
    PolicyGradient,
    PolicyGradientConfig,
)
from turnrl.rl.algorithms.run_checks import check_run_config
from turnrl.rl.config import AlgorithmHooks, TrainConfig, install_algorithm_hooks

#: The general estimators of this package; the methods' algorithms are entry points (see the module docstring).
BUILTINS: dict[str, str] = {
    "grpo": "turnrl.rl.algorithms.grpo:GRPO",
    "dapo": "turnrl.rl.algorithms.grpo:DAPO",
    "ppo": "turnrl.rl.algorithms.ppo:PPO",
    "vapo": "turnrl.rl.algorithms.ppo:VAPO",
    "tppo": "turnrl.rl.algorithms.tppo:TPPO",
    "rloo": "turnrl.rl.algorithms.rloo:RLOO",
    "reinforce++": "turnrl.rl.algorithms.reinforce:REINFORCEPlusPlus",
}
ENTRY_POINT_GROUP = "turnrl.algorithms"


class AlgorithmRegistrationError(ValueError):
    """A class that cannot be registered as an algorithm; the message names the fix."""


def check_algorithm_class(name: str, cls: Any) -> None:
    """Raise :class:`AlgorithmRegistrationError` unless ``cls`` is a complete :class:`Algorithm` for ``name``: a
    subclass with a ``Config`` (an :class:`AlgorithmConfig` whose ``name`` defaults to ``name``) that implements
    every method of :attr:`Algorithm.required`."""
    where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s}"
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise AlgorithmRegistrationError(
            f"algorithm {name!r}: {where} is not a subclass of "
            "turnrl.rl.algorithms.Algorithm; derive it from Algorithm (or PolicyGradient)"
        )
    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and issubclass(config, AlgorithmConfig)):
        raise AlgorithmRegistrationError(
            f"algorithm {name!r}: {where} has no Config; set Config to an AlgorithmConfig subclass holding its options"
        )
    default = config.model_fields["name"].default
    if default != name:
        raise AlgorithmRegistrationError(
            f"algorithm {name!r}: {where}.Config's name defaults to {default!r}; declare "
            f"`name: Literal[{name!r}] = {name!r}` in {config.__name__}"
        )
    missing = [m for m in cls.required if getattr(cls, m) is getattr(Algorithm, m)]
    if missing:
        raise AlgorithmRegistrationError(
            f"algorithm {name!r}: {where} does not implement {', '.join(missing)}; "
            f"every algorithm defines {', '.join(Algorithm.required)}"
        )


#: every algorithm by name (:class:`turnrl.plugins.Registry`): the built-ins, the entry points, a module's own
ALGORITHMS: Registry[type[Algorithm]] = Registry(
    "algorithm",
    ENTRY_POINT_GROUP,
    BUILTINS,
    check=check_algorithm_class,
    error=AlgorithmRegistrationError,
    hint="a module of yours that registers one is loaded with `turnrl train --import MODULE`.",
)


def register_algorithm(name: str, entry: str | type[Algorithm], *, replace: bool = False) -> None:
    """Register an algorithm class (checked now) or a lazy ``"module:Class"`` string (checked on first use).

    Raises:
        AlgorithmRegistrationError: ``name`` is taken (pass ``replace=True`` to override it on purpose), or the class
            is incomplete (:func:`check_algorithm_class`).
    """
    ALGORITHMS.register(name, entry, replace=replace)


def algorithm_names() -> list[str]:
    """The registered names, sorted."""
    return ALGORITHMS.names()


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered under ``name``.

    Raises:
        ValueError: no such algorithm (the message lists the registered ones and suggests the closest).
        AlgorithmRegistrationError: a lazy entry that does not import or is incomplete.
    """
    return ALGORITHMS.get(name)


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
            owners = [n for n in algorithm_names() if key in _options(n)]
            close = get_close_matches(key, [k for k in cls.Config.model_fields if k != "name"], n=1)
            where = (
                f"an option of {', '.join(owners)}"
                if owners
                else f"did you mean {close[0]!r}?"
                if close
                else "not an option of any algorithm"
            )
            parts.append(f"{key!r} ({where})")
        raise ValueError(
            f"algorithm {name!r} has no option {', '.join(parts)}; its options: "
            f"{', '.join(k for k in cls.Config.model_fields if k != 'name')}"
        )
    return cls.Config.model_validate({**data, "name": name})


def _options(name: str) -> set[str]:
    """The option names of a registered algorithm (none if its entry does not load)."""
    try:
        return set(algorithm_class(name).Config.model_fields)
    except AlgorithmRegistrationError:
        return set()


def _check_run_config(cfg: TrainConfig) -> None:
    """The configuration's check hook: ``cfg`` against the algorithm it names."""
    check_run_config(cfg, algorithm_class(cfg.algorithm.name))


install_algorithm_hooks(AlgorithmHooks(parse=parse_algorithm_config, check=_check_run_config))


def get_algorithm(config: AlgorithmConfig | dict[str, Any]) -> Algorithm:
    """Build the algorithm a config names."""
    cfg = parse_algorithm_config(config)
    return algorithm_class(cfg.name)(cfg)


__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "AlgorithmRegistrationError",
    "CriticSpec",
    "Experience",
    "Forward",
    "PolicyGradient",
    "PolicyGradientConfig",
    "algorithm_class",
    "algorithm_names",
    "check_algorithm_class",
    "get_algorithm",
    "parse_algorithm_config",
    "register_algorithm",
]
