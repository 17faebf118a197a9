"""An environment whose episodes last exactly ``max_turns`` turns, each answered by a tool result of about 50
tokens (for ``bench/kv_reuse.py``): what the policy writes does not change how long an episode is, so every backend
plays the same number of turns over the same growing context."""

from __future__ import annotations

from typing import Any

from turnrl.envs.core import TextEnv
from turnrl.types import Message

FACTS = [
    "The Eiffel Tower is 330 metres tall and was completed in 1889 for the World's Fair in Paris.",
    "Mount Kilimanjaro rises 5,895 metres above sea level and is the highest mountain in Africa.",
    "The Danube flows through ten countries, more than any other river in the world.",
    "Honey found in ancient Egyptian tombs was still edible after more than three thousand years.",
    "The speed of sound in dry air at 20 degrees Celsius is about 343 metres per second.",
    "Saturn's rings are mostly water ice, with particles from micrometres to metres across.",
    "The first transatlantic telegraph cable was completed in 1858 and failed after three weeks.",
    "Octopuses have three hearts and blue blood that carries oxygen with copper-based haemocyanin.",
]


class SearchSession(TextEnv):
    """A research session: each turn the agent writes a query, the environment returns a search result."""

    def __init__(self, max_turns: int = 8) -> None:
        super().__init__(max_turns=max_turns)

    def _reset(self, options: dict[str, Any]) -> tuple[tuple[Message, ...], dict[str, Any]]:
        self.topic = int(options.get("index", 0))
        return (
            Message(role="system", content="You are a research assistant. Search, then summarize."),
            Message(role="user", content=f"Find facts about topic {self.topic} and report them one by one."),
        ), {}

    def _step(self, action: str) -> Any:
        fact = FACTS[(self.topic + self.turn) % len(FACTS)]
        result = Message(role="user", content=f"Search result {self.turn + 1}: {fact} Continue with the next query.")
        return (result,), 0.0, False, False, {}
