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

    agent = make_agent(name)
    if getattr(agent, "tokenizer", None) is None and tokenizer is not None:  # an endpoint: prompts in the run's
        agent.tokenizer = tokenizer  # template (the seat's view is rendered and read with this tokenizer)
    return agent


def check_opponent(name: str, timeout: float = 5.0) -> None:
    """Fail now, before any model loads, where an opponent cannot play: an ``openai:URL#MODEL`` endpoint that does
    not answer ``GET URL/models``, or a ``run:OUT_DIR`` that is no run folder. Scripted players and other specs are
    checked when they load.

    Raises:
        ValueError: the opponent cannot play, and why (with its address or path).
    """
    kind, sep, rest = name.partition(":")
    if not sep or name in SCRIPTED:
        return
    if kind == "openai":
        import httpx

        url = rest.partition("#")[0].rstrip("/")
        try:
            httpx.get(f"{url}/models", timeout=timeout)
        except httpx.HTTPError as e:
            raise ValueError(f"opponent {name}: the endpoint {url} does not answer ({type(e).__name__}: {e}); start "
                             "it, or name another opponent") from None
    elif kind == "run":
        from pathlib import Path

        if not (Path(rest) / "config.yaml").is_file():
            raise ValueError(f"opponent {name}: {rest} is not a run folder (no config.yaml); give the OUT_DIR of a "
                             "turnrl train run")
