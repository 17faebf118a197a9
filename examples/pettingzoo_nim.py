"""Nim as a PettingZoo text game, written as PettingZoo's docs write an AEC environment (it needs PettingZoo and
Gymnasium only, not turnrl): two players take 1 to 3 stones in turn from one pile; whoever takes the last stone wins.

PettingZoo's own classic games observe arrays, so this is the PettingZoo text game the docs name. From this folder::

    turnrl envs check pettingzoo:pettingzoo_nim:make_nim
    turnrl play pettingzoo:pettingzoo_nim:make_nim --seat player_0 --opponent script:pettingzoo_nim:perfect_player
    turnrl train pettingzoo-nim.yaml

``random_player`` and ``perfect_player`` are opponents that need no model (``script:pettingzoo_nim:random_player``):
functions of the text a seat was told.

What a player observes is what is new to it since its last move, once: the rules and the pile at its first turn,
then the other player's move and what is left. A reply without a legal number forfeits the game. The starting pile is
drawn from ``reset``'s seed (turnrl resets training games with seeds 0 to 99,999 and held-out ones with 1,000,000
and up). With ``max_moves``, a game whose pile is not empty after that many moves ends 0–0: a draw.
"""

from __future__ import annotations

import re
import string
import zlib

import numpy as np
from gymnasium.spaces import Text
from pettingzoo import AECEnv

RULES = (
    "We play Nim. There is one pile of stones; you and your opponent take turns taking 1, 2 or 3 stones from it. "
    "Whoever takes the last stone wins. Answer with the number of stones you take, e.g. 2."
)


class NimEnv(AECEnv):
    """Nim for two players, with text observations and actions (see the module docstring).

    Args:
        smallest, largest: the starting pile is drawn from this range (inclusive) by ``reset``'s seed.
        max_moves: the game ends 0–0 (a draw) after this many moves with stones left (None: never).
    """

    metadata = {"name": "text_nim_v0", "render_modes": []}

    def __init__(self, smallest: int = 7, largest: int = 15, max_moves: int | None = None) -> None:
        super().__init__()
        self.smallest, self.largest, self.max_moves = smallest, largest, max_moves
        self.possible_agents = ["player_0", "player_1"]
        space = Text(max_length=2048, charset=string.printable)
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)
        self.action_spaces = dict.fromkeys(self.possible_agents, space)

    def observation_space(self, agent: str) -> Text:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> Text:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.pile = int(np.random.default_rng(seed).integers(self.smallest, self.largest + 1))
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]
        self.moves = 0
        first = f"{RULES} The pile has {self.pile} stones."
        self.news = {"player_0": [f"{first} You move first."], "player_1": [f"{first} Your opponent moves first."]}

    def observe(self, agent: str) -> str:
        """What is new to ``agent`` since its last move."""
        return "\n".join(self.news[agent])

    def step(self, action: str | None) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        other = self.agents[1 - self.agents.index(agent)]
        self._cumulative_rewards[agent] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self.news[agent] = []
        self.moves += 1
        numbers = re.findall(r"\d+", action or "")
        take = int(numbers[-1]) if numbers else 0
        if not 1 <= take <= min(3, self.pile):
            self.news[other].append(
                f"Your opponent answered {action!r}, not a number of stones from 1 to "
                f"{min(3, self.pile)}: it forfeits, you win."
            )
            self._end({agent: -1.0, other: 1.0}, invalid=agent)
        else:
            self.pile -= take
            if self.pile == 0:
                self.news[other].append(f"Your opponent took {take}, the last stone: you lose.")
                self._end({agent: 1.0, other: -1.0})
            elif self.max_moves is not None and self.moves >= self.max_moves:
                self.news[other].append(f"Your opponent took {take}; {self.pile} left, and the moves are up: a draw.")
                self._end({agent: 0.0, other: 0.0})
            else:
                self.news[other].append(f"Your opponent took {take}; {self.pile} left. Your move.")
        self.agent_selection = other
        self._accumulate_rewards()

    def _end(self, rewards: dict[str, float], invalid: str | None = None) -> None:
        self.rewards = rewards
        self.terminations = dict.fromkeys(self.agents, True)
        if invalid is not None:
            self.infos[invalid]["invalid_move"] = True


def make_nim(smallest: int = 7, largest: int = 15, max_moves: int | None = None) -> NimEnv:
    """The factory ``pettingzoo:pettingzoo_nim:make_nim`` names."""
    return NimEnv(smallest, largest, max_moves)


def pile_in(text: str) -> int | None:
    """The pile the last message of ``text`` left (None: none shown)."""
    found = re.findall(r"(\d+) left|pile has (\d+) stones", text)
    return int(next(n for n in found[-1] if n)) if found else None


def random_player(text: str) -> str:
    """A player that takes a random legal number of stones, drawn from a stream of the text (it keeps no state)."""
    pile = pile_in(text) or 1
    return str(1 + zlib.crc32(text.encode()) % min(3, pile))


def perfect_player(text: str) -> str:
    """A player that leaves a multiple of four stones where it can (the winning strategy), else takes one."""
    pile = pile_in(text) or 1
    return str(pile % 4 or 1)
