"""The ``algorithm:`` section of a training config, as the run configuration sees it: the base of every
algorithm's options (:class:`AlgorithmConfig`) and the two hooks by which the algorithm registry resolves a section
to the named algorithm's own options and checks a whole run against that algorithm
(:func:`install_algorithm_hooks`). Not to be confused with the methods' ``algorithm`` modules
(``turnrl.methods.dqo.algorithm``, ``turnrl.methods.pag.algorithm``, ``turnrl.methods.swirl.algorithm``): those are
algorithms this section names and configures.

The configuration sits below the algorithms (docs/ARCHITECTURE.md), so it never imports them: the registry,
:mod:`turnrl.rl.algorithms`, installs the hooks when it is imported, and the package :mod:`turnrl.rl` imports the
registry, so every import of a ``turnrl.rl`` module has them in place before a config validates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict


class AlgorithmConfig(BaseModel):
    """Options every algorithm has. Subclasses add their own; options of another algorithm are errors."""

    model_config = ConfigDict(extra="forbid")
    name: str


class AlgorithmHooks(NamedTuple):
    """How the registry takes part in validating a run config.

    Attributes:
        parse: the ``algorithm:`` section (a mapping with ``name``, a name alone, None or a config object) to the
            named algorithm's validated options; raises ValueError for an unknown name or option.
        check: the whole validated run config (a :class:`~turnrl.rl.config.train.TrainConfig`) checked against its
            algorithm and experience source; raises ValueError for a combination that cannot run.
    """

    parse: Callable[[Any], AlgorithmConfig]
    check: Callable[[Any], None]


_hooks: list[AlgorithmHooks] = []


def install_algorithm_hooks(hooks: AlgorithmHooks) -> None:
    """Install the registry's hooks (the registry calls this once, on import; a second call replaces the first)."""
    _hooks[:] = [hooks]


def algorithm_hooks() -> AlgorithmHooks:
    """The installed hooks.

    Raises:
        RuntimeError: none installed (only possible when this module was loaded without the package
            :mod:`turnrl.rl`, e.g. by file path).
    """
    if not _hooks:
        raise RuntimeError(
            "no algorithm registry is loaded, so the algorithm section cannot be resolved: import "
            "turnrl.rl (its package loads the registry, turnrl.rl.algorithms) before validating a "
            "training config"
        )
    return _hooks[0]
