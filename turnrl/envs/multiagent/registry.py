"""Ids of multi-agent environments: ``make_multi_agent(id, **kwargs)`` builds one.

* built in: ``turnrl/TicTacToe-v0`` (competitive) and ``turnrl/SolverCritic-v0`` (cooperative);
* ``textarena:GAME`` — a TextArena game by its id, e.g. ``textarena:KuhnPoker-v0`` (extra ``games``);
* ``pettingzoo:MODULE:FACTORY`` — ``FACTORY(**kwargs)`` from ``MODULE`` must return a PettingZoo AEC environment
  (or a parallel one: simultaneous moves) with text observations and actions;
* yours: :func:`register_multi_agent` (``"module:Class"`` entries, imported when one is made).
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.utils import load_entry

TEXTARENA_PREFIX, PETTINGZOO_PREFIX = "textarena:", "pettingzoo:"
_REGISTRY: dict[str, str | Any] = {
    "turnrl/TicTacToe-v0": "turnrl.envs.multiagent.tictactoe:TicTacToe",
    "turnrl/SolverCritic-v0": "turnrl.envs.multiagent.solver_critic:SolverCritic",
}


def register_multi_agent(env_id: str, entry: str | Any, *, replace: bool = False) -> None:
    """Register a multi-agent environment: a class (or factory) or a lazy ``"module:Class"`` string.

    Raises:
        ValueError: ``env_id`` is taken (``replace=True`` overrides it), or uses a reserved prefix.
    """
    if env_id.startswith((TEXTARENA_PREFIX, PETTINGZOO_PREFIX)):
        raise ValueError(f"{env_id!r}: ids starting with {TEXTARENA_PREFIX!r} or {PETTINGZOO_PREFIX!r} name other "
                         "libraries' environments; pick another id")
    if env_id in _REGISTRY and not replace and _REGISTRY[env_id] is not entry:
        raise ValueError(f"multi-agent environment {env_id!r} is already registered ({_REGISTRY[env_id]!r}); pick "
                         "another id, or pass replace=True")
    _REGISTRY[env_id] = entry


def multi_agent_ids() -> list[str]:
    """The registered ids (the ``textarena:`` and ``pettingzoo:`` forms are not listed)."""
    return sorted(_REGISTRY)


def is_multi_agent(env_id: Any) -> bool:
    """Whether ``env_id`` names a multi-agent environment."""
    return isinstance(env_id, str) and (env_id in _REGISTRY or env_id.startswith((TEXTARENA_PREFIX, PETTINGZOO_PREFIX)))


def make_multi_agent(env_id: str, **kwargs: Any) -> MultiAgentTextEnv:
    """The multi-agent environment ``env_id`` names, built with ``kwargs``.

    Raises:
        ValueError: an unknown id (with the closest registered one), or a ``pettingzoo:`` factory that does not
            return a PettingZoo AEC or parallel environment.
        ImportError: the library a ``textarena:`` or ``pettingzoo:`` id needs is not installed.
    """
    from turnrl.envs.multiagent.external import PettingZooTextEnv, TextArenaEnv

    if env_id.startswith(TEXTARENA_PREFIX):
        return TextArenaEnv(env_id.removeprefix(TEXTARENA_PREFIX), **kwargs)
    if env_id.startswith(PETTINGZOO_PREFIX):
        factory = load_entry(env_id.removeprefix(PETTINGZOO_PREFIX))
        wrap = {k: kwargs.pop(k) for k in ("max_turns", "render_mode") if k in kwargs}
        return PettingZooTextEnv(factory(**kwargs), **wrap)
    if env_id not in _REGISTRY:
        close = get_close_matches(env_id, list(_REGISTRY), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown multi-agent environment {env_id!r}.{hint} Registered: "
                         f"{', '.join(multi_agent_ids())}; also textarena:GAME and pettingzoo:MODULE:FACTORY")
    entry = _REGISTRY[env_id]
    cls = load_entry(entry) if isinstance(entry, str) else entry
    env = cls(**kwargs)
    if not isinstance(env, MultiAgentTextEnv):
        raise ValueError(f"{env_id!r} built a {type(env).__name__}, not a MultiAgentTextEnv")
    return env
