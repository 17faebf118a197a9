"""Registration of ``turnrl/<Name>-v0`` ids with Gymnasium, and ``make`` with helpful errors.

Ids registered here work with both ``turnrl.make(id, **kwargs)`` and ``gymnasium.make(id, **kwargs)`` (after
``import turnrl``). Entry points are ``"module:attr"`` strings, so importing turnrl imports no environment
module (nor its heavy dependencies) until one is made.

``turnrl.make`` returns the environment itself (so ``env.tools``, ``env.task`` … are at hand); ``gymnasium.make``
returns it inside Gymnasium's usual wrappers.
"""

from __future__ import annotations

import dataclasses
import inspect
from difflib import get_close_matches
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from turnrl.envs.core import TextEnv

BUILTIN_ENVS: dict[str, str] = {
    "turnrl/Arithmetic-v0": "turnrl.envs.arithmetic:ArithmeticEnv",
    "turnrl/GSM8K-v0": "turnrl.envs.math:GSM8KEnv",
    "turnrl/MATH500-v0": "turnrl.envs.math:MATH500Env",
    "turnrl/Arithmetic-PAG-v0": "turnrl.envs.self_verify:arithmetic_pag",
    "turnrl/GSM8K-PAG-v0": "turnrl.envs.self_verify:gsm8k_pag",
    "turnrl/MATH500-PAG-v0": "turnrl.envs.self_verify:math500_pag",
    "turnrl/HumanEval-v0": "turnrl.envs.code:HumanEvalEnv",
    "turnrl/HotPotQA-v0": "turnrl.envs.hotpotqa:HotPotQAEnv",
}

_REGISTERED: dict[str, str] = {}


class UnknownEnvironmentError(gym.error.UnregisteredEnv):
    """No environment is registered under the requested id; the message suggests the closest ones."""


class InvalidEnvKwargs(TypeError):
    """``make`` was given keyword arguments that the environment does not accept."""


def register(env_id: str, entry_point: str | Any, **kwargs: Any) -> None:
    """Register an environment id with Gymnasium (and in turnrl's list).

    Args:
        env_id: ``"namespace/Name-vN"``, e.g. ``"myproject/Units-v0"``.
        entry_point: a ``"module:attr"`` string (preferred: imported lazily) or a callable returning the env.
        **kwargs: default keyword arguments for the entry point.
    """
    if env_id in gym.registry:
        if _REGISTERED.get(env_id) == str(entry_point):
            return
        del gym.registry[env_id]
    gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs)
    _REGISTERED[env_id] = str(entry_point)


def registered() -> list[str]:
    """The ids registered through turnrl, sorted."""
    return sorted(_REGISTERED)


def _suggest(env_id: str) -> str:
    ids = registered()
    lowered = {i.lower(): i for i in ids}
    close = get_close_matches(env_id.lower(), list(lowered), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(lowered[c]) for c in close)}?" if close else ""
    return f"unknown environment {env_id!r}.{hint} Registered: {', '.join(ids)}."


def _accepted_kwargs(creator: Any) -> tuple[set[str], bool]:
    """Keyword names a constructor accepts, following ``**options`` forwarding up the class hierarchy."""
    names: set[str] = set()
    targets = [c.__init__ for c in inspect.getmro(creator) if "__init__" in vars(c)] if inspect.isclass(creator) else [creator]
    for fn in targets:
        params = inspect.signature(fn).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names, True
    return names, False


def _check_kwargs(env_id: str, creator: Any, kwargs: dict[str, Any]) -> None:
    names, complete = _accepted_kwargs(creator)
    if not complete:
        return
    for key in kwargs:
        if key not in names:
            close = get_close_matches(key, sorted(names), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidEnvKwargs(
                f"{env_id} does not accept the keyword argument {key!r}.{hint} Accepted: {', '.join(sorted(names))}."
            )


def make(env_id: str, **kwargs: Any) -> TextEnv:
    """Create a registered environment (unwrapped) with ``kwargs`` overriding its registered defaults.

    Raises:
        UnknownEnvironmentError: no such id (the message suggests close ids).
        InvalidEnvKwargs: a keyword argument the environment does not accept (with a suggestion).
    """
    if not isinstance(env_id, str) or env_id not in gym.registry:
        raise UnknownEnvironmentError(_suggest(str(env_id)))
    spec = gym.spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    merged = {**spec.kwargs, **kwargs}
    _check_kwargs(env_id, creator, merged)
    env = creator(**merged)
    env.unwrapped.spec = dataclasses.replace(spec, kwargs=merged)
    return env


for _id, _entry in BUILTIN_ENVS.items():
    register(_id, _entry)
