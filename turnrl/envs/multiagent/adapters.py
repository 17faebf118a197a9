"""The id prefixes of other libraries' games with several agents, as environment adapters
(:class:`turnrl.envs.registry.EnvAdapter` with ``multi_agent=True``, registered in
:data:`turnrl.envs.registry.ENV_ADAPTERS` beside ``remote:``, ``trl:`` and ``verifiers:``):

* ``textarena:GAME`` — a TextArena game by its id, e.g. ``textarena:KuhnPoker-v0`` (extra ``games``);
* ``pettingzoo:MODULE:FACTORY`` — ``FACTORY(**kwargs)`` from ``MODULE`` (on ``sys.path``, in a config's folder or in
  the current folder, as ``trl:`` and ``verifiers:`` modules are found) must return a PettingZoo AEC environment (or
  a parallel one: simultaneous moves) with text observations and actions, e.g. ``pettingzoo:pettingzoo_nim:make_nim``
  run from ``examples/``.

:func:`turnrl.envs.multiagent.make_multi_agent` makes them; a package adds its own prefix the same way
(``ENV_ADAPTERS.register("myprefix", EnvAdapter(make=..., multi_agent=True))``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.envs.registry import EnvAdapter
from turnrl.utils import import_from

TEXTARENA_PREFIX, PETTINGZOO_PREFIX = "textarena:", "pettingzoo:"


def make_textarena(env_id: str, **kwargs: Any) -> MultiAgentTextEnv:
    """The TextArena game ``textarena:GAME`` names (:class:`~turnrl.envs.multiagent.external.TextArenaEnv`)."""
    from turnrl.envs.multiagent.external import TextArenaEnv

    return TextArenaEnv(env_id.removeprefix(TEXTARENA_PREFIX), **kwargs)


def make_pettingzoo(env_id: str, **kwargs: Any) -> MultiAgentTextEnv:
    """The PettingZoo environment ``pettingzoo:MODULE:FACTORY`` builds, with text seats
    (:class:`~turnrl.envs.multiagent.external.PettingZooTextEnv`); ``split``, ``max_turns`` and ``render_mode`` are
    the wrapper's, the other ``kwargs`` the factory's.

    Raises:
        ValueError: as :func:`pettingzoo_factory`; the factory raised, or did not return a PettingZoo environment.
    """
    from turnrl.envs.multiagent.external import PettingZooTextEnv

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


def _check_pettingzoo(env_id: str, search: Sequence[str | Path]) -> None:
    pettingzoo_factory(env_id, search)


TEXTARENA = EnvAdapter(
    make=make_textarena,
    entry="turnrl.envs.multiagent.adapters:make_textarena",
    multi_agent=True,
    usage="textarena:GAME — a TextArena game, e.g. textarena:KuhnPoker-v0 (extra games)",
    modules=lambda env_id: ["textarena"],
)
PETTINGZOO = EnvAdapter(
    make=make_pettingzoo,
    check=_check_pettingzoo,
    entry="turnrl.envs.multiagent.adapters:make_pettingzoo",
    multi_agent=True,
    usage="pettingzoo:MODULE:FACTORY — a PettingZoo environment with text seats that FACTORY(**kwargs) returns",
    modules=lambda env_id: [env_id.removeprefix(PETTINGZOO_PREFIX).partition(":")[0]],
)
