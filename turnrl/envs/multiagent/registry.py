"""Ids of multi-agent environments: ``make_multi_agent(id, **kwargs)`` builds one.

* built in: ``turnrl/TicTacToe-v0`` (competitive) and ``turnrl/SolverCritic-v0`` (cooperative);
* ``textarena:GAME`` — a TextArena game by its id, e.g. ``textarena:KuhnPoker-v0`` (extra ``games``);
* ``pettingzoo:MODULE:FACTORY`` — ``FACTORY(**kwargs)`` from ``MODULE`` (on ``sys.path`` or in the current folder,
  as ``trl:`` and ``verifiers:`` modules are found) must return a PettingZoo AEC environment (or a parallel one:
  simultaneous moves) with text observations and actions, e.g. ``pettingzoo:pettingzoo_nim:make_nim`` run from
  ``examples/``;
* yours: :func:`register_multi_agent` (``"module:Class"`` entries, imported when one is made).
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.utils import import_from, load_entry

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
        raise ValueError(
            f"{env_id!r}: ids starting with {TEXTARENA_PREFIX!r} or {PETTINGZOO_PREFIX!r} name other "
            "libraries' environments; pick another id"
        )
    if env_id in _REGISTRY and not replace and _REGISTRY[env_id] is not entry:
        raise ValueError(
            f"multi-agent environment {env_id!r} is already registered ({_REGISTRY[env_id]!r}); pick "
            "another id, or pass replace=True"
        )
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
        ValueError: an unknown id (with the closest registered one); a ``pettingzoo:`` id whose module is not found
            (on ``sys.path`` or in the current folder), names no factory, or whose factory fails or does not return
            a PettingZoo AEC or parallel environment.
        ImportError: the library a ``textarena:`` or ``pettingzoo:`` id needs is not installed.
    """
    from turnrl.envs.multiagent.external import PettingZooTextEnv, TextArenaEnv

    if env_id.startswith(TEXTARENA_PREFIX):
        return TextArenaEnv(env_id.removeprefix(TEXTARENA_PREFIX), **kwargs)
    if env_id.startswith(PETTINGZOO_PREFIX):
        factory = pettingzoo_factory(env_id)
        wrap = {k: kwargs.pop(k) for k in ("split", "max_turns", "render_mode") if k in kwargs}
        try:
            made = factory(**kwargs)
        except Exception as e:  # the user's factory: say what it raised, in one line
            raise ValueError(
                f"{env_id}: {factory.__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) "
                f"raised {type(e).__name__}: {e}"
            ) from e
        try:
            return PettingZooTextEnv(made, **wrap)
        except TypeError as e:
            raise ValueError(f"{env_id}: {e}") from None
    if env_id not in _REGISTRY:
        close = get_close_matches(env_id, list(_REGISTRY), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown multi-agent environment {env_id!r}.{hint} Registered: "
            f"{', '.join(multi_agent_ids())}; also textarena:GAME and pettingzoo:MODULE:FACTORY"
        )
    entry = _REGISTRY[env_id]
    cls = load_entry(entry) if isinstance(entry, str) else entry
    env = cls(**kwargs)
    if not isinstance(env, MultiAgentTextEnv):
        raise ValueError(f"{env_id!r} built a {type(env).__name__}, not a MultiAgentTextEnv")
    return env


def pettingzoo_factory(env_id: str, search: Sequence[str | Path] = ()) -> Any:
    """The factory a ``pettingzoo:MODULE:FACTORY`` id names, its module imported from ``sys.path``, else from the
    folders ``search`` or the current folder (which then joins ``sys.path``).

    Raises:
        ValueError: the id is not of that form, the module is not found (or fails to import), or has no such factory.
    """
    module, sep, name = env_id.removeprefix(PETTINGZOO_PREFIX).partition(":")
    if not module or not sep or not name or ":" in name:
        raise ValueError(
            f"{env_id!r} is not of the form 'pettingzoo:MODULE:FACTORY' (FACTORY(**kwargs) returns a "
            "PettingZoo environment with text observations)"
        )
    places = [*search, Path.cwd()]
    try:
        found = import_from(module, places)
    except Exception as e:  # the module exists and fails to import: say why, in one line
        raise ValueError(f"{env_id}: importing {module!r} raised {type(e).__name__}: {e}") from e
    if found is None:
        raise ValueError(
            f"{env_id}: no module named {module!r} on sys.path or in "
            f"{', '.join(str(Path(p).resolve()) for p in places)}; run from the folder that holds "
            f"{module.split('.')[0]}.py, or add that folder to PYTHONPATH"
        )
    factory = getattr(found, name, None)
    if not callable(factory):
        raise ValueError(f"{env_id}: module {module!r} has no factory {name!r}")
    return factory
