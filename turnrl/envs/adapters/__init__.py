"""Environment adapters: an id prefix (``PREFIX:REST``) that names an environment written elsewhere — a server, a
class written for another library — and the adapter that checks such an id and makes the environment.

Adapters are registered in :data:`turnrl.envs.registry.ENV_ADAPTERS` (a :class:`turnrl.plugins.Registry`): turnrl's
own (``remote:``, ``trl:``, ``verifiers:``, and for games with several agents ``textarena:`` and ``pettingzoo:``) by
name, a package's under the ``turnrl.env_adapters`` entry-point group
(``myprefix = "my_pkg.adapter:ADAPTER"``), a module's with ``ENV_ADAPTERS.register("myprefix", EnvAdapter(...))``.
``turnrl.make("myprefix:REST", **kwargs)`` then checks the id (before anything loads: a config is refused at once)
and makes the environment; an adapter of multi-agent environments (``multi_agent=True``) is made by
:func:`turnrl.envs.multiagent.make_multi_agent` instead, and every command and config takes its ids the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EnvAdapter:
    """One id prefix's adapter.

    Attributes:
        make: ``make(env_id, **kwargs) -> env``, the whole id (prefix included) and the environment's arguments.
        check: ``check(env_id, search)``: raise ``UnknownEnvironmentError`` for a malformed id and ``EnvImportError``
            for a module that does not import (from ``sys.path`` or the folders ``search``, e.g. a config's folder);
            the default accepts every id.
        sets_spec: give the made environment a Gymnasium ``EnvSpec`` with the id and the arguments (an adapter whose
            environment sets its own, e.g. one that learns its spec from a server, says False).
        entry: what the spec names as its entry point (``"module:function"``).
        multi_agent: the environments it makes have several agents (a
            :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`): ``turnrl.make`` refuses its ids and
            ``make_multi_agent`` makes them.
        usage: the id's form and what it names, one line (``turnrl envs list``), e.g. ``"trl:MODULE:CLASS — …"``.
        modules: ``modules(env_id)``: the modules outside turnrl the id needs imported (a ``trl:`` class's module),
            which each Ray worker imports before its first step so that a node missing one is named at once; the
            default names none.
    """

    make: Callable[..., Any]
    check: Callable[[str, Sequence[str | Path]], None] = lambda env_id, search: None
    sets_spec: bool = True
    entry: str = ""
    multi_agent: bool = False
    usage: str = ""
    modules: Callable[[str], list[str]] = lambda env_id: []
