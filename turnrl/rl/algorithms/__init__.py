"""The algorithm registry: one place where names map to objectives (docs/concepts.md §8).

``get_algorithm(config)`` builds the registered :class:`Algorithm` for a validated config;
``parse_algorithm_config(data)`` validates a config dict against the options of the algorithm it names, so an
option of another algorithm is an error that says which algorithms have it. Entries are ``"module:Class"`` strings,
imported on first use; :func:`register_algorithm` adds one — a user module (loaded with ``turnrl train --import
MODULE``) — and installed packages declare theirs under the ``turnrl.algorithms`` entry point group. The methods in
:mod:`turnrl.methods` (PAG, SWiRL, DQO, the offline baselines) come in that way, declared in turnrl's own
``pyproject.toml``: this package names none of them.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

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
from turnrl.rl.config import AlgorithmHooks, install_algorithm_hooks
from turnrl.utils import entry_points_turnrl_first, load_entry

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
_REGISTRY: dict[str, str | type[Algorithm]] = dict(BUILTINS)
ENTRY_POINT_GROUP = "turnrl.algorithms"
_entry_points_loaded = False


class AlgorithmRegistrationError(ValueError):
    """A class that cannot be registered as an algorithm; the message names the fix."""


def check_algorithm_class(name: str, cls: Any) -> None:
    """Raise :class:`AlgorithmRegistrationError` unless ``cls`` is a complete :class:`Algorithm` for ``name``: a
    subclass with a ``Config`` (an :class:`AlgorithmConfig` whose ``name`` defaults to ``name``) that implements
    every method of :attr:`Algorithm.required`."""
    where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)!s}"
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise AlgorithmRegistrationError(f"algorithm {name!r}: {where} is not a subclass of "
                                         "turnrl.rl.algorithms.Algorithm; derive it from Algorithm (or PolicyGradient)")
    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and issubclass(config, AlgorithmConfig)):
        raise AlgorithmRegistrationError(f"algorithm {name!r}: {where} has no Config; set Config to an "
                                         "AlgorithmConfig subclass holding its options")
    default = config.model_fields["name"].default
    if default != name:
        raise AlgorithmRegistrationError(f"algorithm {name!r}: {where}.Config's name defaults to {default!r}; declare "
                                         f"`name: Literal[{name!r}] = {name!r}` in {config.__name__}")
    missing = [m for m in cls.required if getattr(cls, m) is getattr(Algorithm, m)]
    if missing:
        raise AlgorithmRegistrationError(f"algorithm {name!r}: {where} does not implement {', '.join(missing)}; "
                                         f"every algorithm defines {', '.join(Algorithm.required)}")


def register_algorithm(name: str, entry: str | type[Algorithm], *, replace: bool = False) -> None:
    """Register an algorithm class (checked now) or a lazy ``"module:Class"`` string (checked on first use).

    Raises:
        AlgorithmRegistrationError: ``name`` is taken (pass ``replace=True`` to override it on purpose), or the class
            is incomplete (:func:`check_algorithm_class`).
    """
    _load_entry_points()  # a name an installed package (turnrl's methods included) declares is taken
    if name in _REGISTRY and not replace and _REGISTRY[name] is not entry:
        old = _REGISTRY[name]
        where = old if isinstance(old, str) else f"{old.__module__}:{old.__qualname__}"
        new = entry if isinstance(entry, str) else f"{entry.__module__}:{entry.__qualname__}"
        raise AlgorithmRegistrationError(f"algorithm {name!r} is already registered ({where}), so {new} cannot take "
                                         "it; pick another name, or pass replace=True to override it")
    if not isinstance(entry, str):
        check_algorithm_class(name, entry)
    _REGISTRY[name] = entry


def _load_entry_points() -> None:
    """Register the algorithms that installed packages declare under the ``turnrl.algorithms`` entry point group
    (``name = "module:Class"``), once, turnrl's own first; a name already taken keeps its first registration."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for name, value in entry_points_turnrl_first(ENTRY_POINT_GROUP):
        _REGISTRY.setdefault(name, value)


def algorithm_names() -> list[str]:
    """The registered names, sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered under ``name``.

    Raises:
        ValueError: no such algorithm (the message lists the registered ones and suggests the closest).
        AlgorithmRegistrationError: a lazy entry that does not import or is incomplete.
    """
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        close = get_close_matches(name, list(_REGISTRY), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown algorithm {name!r}.{hint} Registered: {', '.join(algorithm_names())}; a module of "
                         "yours that registers one is loaded with `turnrl train --import MODULE`.")
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        try:
            loaded = load_entry(entry)
        except (ImportError, AttributeError) as e:
            raise AlgorithmRegistrationError(f"algorithm {name!r} is registered as {entry!r}, which does not load "
                                             f"({type(e).__name__}: {e}); fix the entry or the module") from e
        check_algorithm_class(name, loaded)
        entry = _REGISTRY[name] = loaded
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
            owners = [n for n in algorithm_names() if key in _options(n)]
            close = get_close_matches(key, [k for k in cls.Config.model_fields if k != "name"], n=1)
            where = (f"an option of {', '.join(owners)}" if owners else
                     f"did you mean {close[0]!r}?" if close else "not an option of any algorithm")
            parts.append(f"{key!r} ({where})")
        raise ValueError(f"algorithm {name!r} has no option {', '.join(parts)}; its options: "
                         f"{', '.join(k for k in cls.Config.model_fields if k != 'name')}")
    return cls.Config.model_validate({**data, "name": name})


def _options(name: str) -> set[str]:
    """The option names of a registered algorithm (none if its entry does not load)."""
    try:
        return set(algorithm_class(name).Config.model_fields)
    except AlgorithmRegistrationError:
        return set()


def _check_run_config(cfg: Any) -> None:
    """The configuration's check hook: ``cfg`` against the algorithm it names."""
    check_run_config(cfg, algorithm_class(cfg.algorithm.name))


install_algorithm_hooks(AlgorithmHooks(parse=parse_algorithm_config, check=_check_run_config))


def get_algorithm(config: AlgorithmConfig | dict[str, Any]) -> Algorithm:
    """Build the algorithm a config names."""
    cfg = parse_algorithm_config(config)
    return algorithm_class(cfg.name)(cfg)


__all__ = ["Algorithm", "AlgorithmConfig", "AlgorithmRegistrationError", "CriticSpec", "Experience", "Forward",
           "PolicyGradient", "PolicyGradientConfig", "algorithm_class", "algorithm_names", "check_algorithm_class",
           "get_algorithm", "parse_algorithm_config", "register_algorithm"]
