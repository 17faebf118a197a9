"""Gymnasium text environments (docs/concepts.md §1).

Importing this package registers the built-in ``turnrl/<Name>-v0`` ids; environment modules themselves load
only when an environment is made.

The room: the contract (:mod:`.core`, :mod:`.spaces`, :mod:`.tool_env`), the registry (:mod:`.registry`,
:mod:`.adapters`), data and splits (:mod:`.data`, :mod:`.splits`), forking (:mod:`.fork`); and sub-rooms for what is
built on them — :mod:`.builtin` (turnrl's own environments), :mod:`.formats` (PAG's and SWiRL's episode shapes),
:mod:`.conformance` (the harness), :mod:`.adapters` (TRL's and verifiers' environments), :mod:`.multiagent` and
:mod:`.remote`.
"""

from turnrl.envs.core import ResetNeeded, Task, TaskSource, TextEnv
from turnrl.envs.data import DataFormatError, DataNotFoundError
from turnrl.envs.registry import InvalidEnvKwargs, UnknownEnvironmentError, make, register, registered
from turnrl.envs.spaces import MessagesSpace, TextSpace
from turnrl.envs.tool_env import ToolEnv

__all__ = [
    "DataFormatError",
    "DataNotFoundError",
    "InvalidEnvKwargs",
    "MessagesSpace",
    "ResetNeeded",
    "Task",
    "TaskSource",
    "TextEnv",
    "TextSpace",
    "ToolEnv",
    "UnknownEnvironmentError",
    "make",
    "register",
    "registered",
]
