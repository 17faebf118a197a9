"""Environments with several agents (docs/multi-agent.md): PettingZoo's agent–environment cycle with text actions and
each agent's own messages as observations (:class:`MultiAgentTextEnv`), two built-in games, TextArena's games and
PettingZoo's text environments by id (:func:`make_multi_agent`), and their conformance checks.
"""

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.envs.multiagent.registry import is_multi_agent, make_multi_agent, multi_agent_ids, register_multi_agent

__all__ = ["MultiAgentTextEnv", "is_multi_agent", "make_multi_agent", "multi_agent_ids", "register_multi_agent"]
