"""Gymnasium text environments (docs/concepts.md §1).

Importing this package registers the built-in ``turnrl/<Name>-v0`` ids; environment modules themselves load
only when an environment is made.
"""

from turnrl.envs.core import ResetNeeded, Task, TaskSource, TextEnv
from turnrl.envs.data import DataFormatError, DataNotFoundError
from turnrl.envs.registry import InvalidEnvKwargs, UnknownEnvironmentError, make, register, registered
from turnrl.envs.self_verify import SelfVerify
from turnrl.envs.spaces import MessagesSpace, TextSpace
from turnrl.envs.tool_env import ToolEnv

__all__ = [
    "DataFormatError",
    "DataNotFoundError",
    "InvalidEnvKwargs",
    "MessagesSpace",
    "ResetNeeded",
    "SelfVerify",
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
