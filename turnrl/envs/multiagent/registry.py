"""Ids of multi-agent environments: ``make_multi_agent(id, **kwargs)`` builds one.

Two ways an id names one, the same two as for environments with one agent (:mod:`turnrl.envs.registry`):

* **a registered id**, in :data:`MULTI_AGENT_ENVS` (a :class:`turnrl.plugins.Registry`): built in,
  ``turnrl/TicTacToe-v0`` (competitive) and ``turnrl/SolverCritic-v0`` (cooperative); a package's, declared under
  the ``turnrl.multi_agent_envs`` entry-point group (``"myproject/Game-v0" = "my_pkg.game:Game"``); a module's,
  with :func:`register_multi_agent` (``"module:Class"`` entries are imported when one is made);
* **an adapter's prefix**, in :data:`turnrl.envs.registry.ENV_ADAPTERS`, whose adapter says ``multi_agent``:
  ``textarena:GAME`` and ``pettingzoo:MODULE:FACTORY`` (:mod:`turnrl.envs.multiagent.adapters`), or a package's own.
"""

from __future__ import annotations

from typing import Any

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.envs.registry import ENV_ADAPTERS, UnknownEnvironmentError, adapter_of
from turnrl.plugins import Registry


def _not_an_adapters_id(env_id: str, entry: Any) -> None:
    """A registered id may not start with an adapter's prefix (``textarena:…`` is the adapter's to make), whether it
    comes from :func:`register_multi_agent` or from a package's entry point."""
    prefix, sep, _ = env_id.partition(":")
    if sep and prefix in ENV_ADAPTERS:
        raise ValueError(
            f"{env_id!r}: ids starting with {prefix + ':'!r} name environments its adapter makes "
            f"({', '.join(p + ':' for p in ENV_ADAPTERS.names())} are taken); pick another id"
        )


#: Registered multi-agent environment ids → their class or factory (or a lazy ``"module:Class"``).
MULTI_AGENT_ENVS: Registry[Any] = Registry(
    "multi-agent environment",
    "turnrl.multi_agent_envs",
    {
        "turnrl/TicTacToe-v0": "turnrl.envs.multiagent.tictactoe:TicTacToe",
        "turnrl/SolverCritic-v0": "turnrl.envs.multiagent.solver_critic:SolverCritic",
    },
    check=_not_an_adapters_id,
    hint="also textarena:GAME and pettingzoo:MODULE:FACTORY; register yours with register_multi_agent(id, entry)",
)


def register_multi_agent(env_id: str, entry: str | Any, *, replace: bool = False) -> None:
    """Register a multi-agent environment: a class (or factory) or a lazy ``"module:Class"`` string.

    Raises:
        ValueError: ``env_id`` is taken (``replace=True`` overrides it), or starts with an adapter's prefix.
    """
    _not_an_adapters_id(env_id, entry)  # a lazy entry is checked when it loads; the id is refused now
    MULTI_AGENT_ENVS.register(env_id, entry, replace=replace)


def multi_agent_ids() -> list[str]:
    """The registered ids (an adapter's ``textarena:…`` and ``pettingzoo:…`` forms are not listed)."""
    return MULTI_AGENT_ENVS.names()


def is_multi_agent(env_id: Any) -> bool:
    """Whether ``env_id`` names a multi-agent environment: a registered id, or an adapter's that says so."""
    if not isinstance(env_id, str):
        return False
    if env_id in MULTI_AGENT_ENVS:
        return True
    try:
        adapter = adapter_of(env_id)
    except Exception:  # an adapter that does not load: not known to be a game; making the id says why, in one line
        return False
    return adapter is not None and adapter.multi_agent


def make_multi_agent(env_id: str, **kwargs: Any) -> MultiAgentTextEnv:
    """The multi-agent environment ``env_id`` names, built with ``kwargs``.

    Raises:
        ValueError: an unknown id (with the closest registered one); an entry that does not build a
            :class:`MultiAgentTextEnv`; an adapter's refusal (a malformed id; a ``pettingzoo:`` id whose module is not
            found on ``sys.path`` or in the current folder, names no factory, or whose factory fails or does not
            return a PettingZoo AEC or parallel environment).
        ImportError: the library a ``textarena:`` or ``pettingzoo:`` id needs is not installed; a registered
            entry's module does not import.
    """
    adapter = adapter_of(env_id)
    if adapter is not None and adapter.multi_agent:
        try:
            adapter.check(env_id, ())
        except UnknownEnvironmentError as e:  # a malformed id, as adapters say it: the callers' ValueError
            raise ValueError(str(e)) from e
        env = adapter.make(env_id, **kwargs)
    else:
        try:
            cls = MULTI_AGENT_ENVS.get(env_id)  # unknown: ValueError with the closest id and the list
        except ValueError as e:
            if isinstance(e.__cause__, ImportError):  # its module is missing: an ImportError, as a worker reports it
                raise ImportError(str(e)) from e.__cause__
            raise
        env = cls(**kwargs)
    if not isinstance(env, MultiAgentTextEnv):
        raise ValueError(f"{env_id!r} built a {type(env).__name__}, not a MultiAgentTextEnv")
    return env
