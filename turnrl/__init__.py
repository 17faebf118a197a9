"""turnrl: reinforcement learning of LLM agents over multi-turn interactions.

``import turnrl`` registers the built-in environments with Gymnasium; ``turnrl.make(id, **kwargs)`` creates one.
"""

from turnrl.envs.registry import make, register, registered
from turnrl.types import Message, ToolCall, Trajectory, Turn

__version__ = "0.1.0"

__all__ = ["Message", "ToolCall", "Trajectory", "Turn", "__version__", "make", "register", "registered"]
