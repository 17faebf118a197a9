"""Opponents by name, for the seats of a multi-agent game that an evaluated or trained policy does not play
(docs/multi-agent.md): ``perfect`` and ``random`` (tic-tac-toe players that need no model,
:func:`turnrl.envs.multiagent.tictactoe.text_player`), or any agent spec (``hf:PATH``, ``run:OUT_DIR``,
``openai:URL#MODEL``, …), loaded frozen."""

from __future__ import annotations

from typing import Any

from turnrl.agents.base import Agent

SCRIPTED = ("perfect", "random")


def make_opponent(name: str, tokenizer: Any, seed: int = 0) -> Agent:
    """The opponent ``name`` names: ``perfect`` or ``random`` (tic-tac-toe players), else an agent spec.

    Raises:
        ValueError: an agent spec that does not load (its message).
    """
    if name in SCRIPTED:
        from turnrl.agents.scripted import ScriptedAgent
        from turnrl.envs.multiagent.tictactoe import text_player

        return ScriptedAgent(tokenizer, text_player(name, seed))  # type: ignore[arg-type]
    from turnrl.agents import make_agent

    return make_agent(name)
