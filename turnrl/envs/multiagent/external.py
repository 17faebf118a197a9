"""Multi-agent text environments from other libraries, as they are:

* :class:`TextArenaEnv` — a game of the ``textarena`` package (extra ``games``) by its id, e.g. ``TicTacToe-v0``,
  ``KuhnPoker-v0``, ``SimpleNegotiation-v0``: its own rules, observations, invalid-move handling and rewards.
  Players are ``player_0``, ``player_1``, …; what TextArena shows a player (everything since its last turn) is that
  player's next observation. ``options={"index": i}`` seeds the game with the ``i``-th seed of the ``split``: the
  seeds are split by a hash (one in ten is ``test``), so held-out evaluation plays deals and boards training never
  saw.
* :class:`PettingZooTextEnv` — any PettingZoo AEC environment whose observations and actions are text: at an
  agent's turn its observation (a string) is told to it as a message, and its text goes to the environment as is.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from turnrl.envs.multiagent.core import MultiAgentTextEnv


def _split_of(seed: int) -> str:
    return "test" if hashlib.sha256(str(seed).encode()).digest()[0] % 10 == 0 else "train"


_SPLIT_SEEDS: dict[str, list[int]] = {"train": [], "test": []}  # each split's seeds in order, found once


def split_seeds(split: str, count: int) -> list[int]:
    """The first ``count`` seeds (from 0 up) that hash to ``split`` (extended as needed, shared by every game)."""
    known, other = _SPLIT_SEEDS[split], _SPLIT_SEEDS["test" if split == "train" else "train"]
    seed = len(known) + len(other)  # every seed below it is in one of the two lists
    while len(known) < count:
        (known if _split_of(seed) == split else other).append(seed)
        seed += 1
    return known[:count]


def _outcomes(rewards: dict[int, float]) -> dict[int, str]:
    best = max(rewards.values()) if rewards else 0.0
    tied = sum(v == best for v in rewards.values()) > 1
    return {pid: "draw" if v == best and tied else "win" if v == best else "loss" for pid, v in rewards.items()}


class TextArenaEnv(MultiAgentTextEnv):
    """A TextArena game as a turnrl multi-agent environment (see the module docstring).

    Args:
        game: the TextArena id (``textarena.make``'s, e.g. ``"TicTacToe-v0"``).
        num_players: players of the game (its own limits apply).
        split: ``"train"`` or ``"test"``: the seeds ``options={"index": i}`` draws from.
        game_kwargs: passed to ``textarena.make``.

    Raises:
        ImportError: ``textarena`` is not installed (the message gives the pip line).
        ValueError: TextArena has no such game (with close ids), or an unknown split.
    """

    possible_agents: list[str] = []  # noqa: RUF012 — set per game
    held_out_split = "test"
    SEEDS = 100_000  # starting states per split

    def __init__(self, game: str, *, num_players: int = 2, split: Literal["train", "test"] = "train",
                 max_turns: int | None = None, render_mode: str | None = None, **game_kwargs: Any) -> None:
        if split not in _SPLIT_SEEDS:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        try:
            import textarena
        except ImportError as e:
            raise ImportError("TextArena games need the `textarena` package: pip install 'turnrl[games]' "
                              "(or pip install textarena)") from e
        if game not in textarena.envs.registration.ENV_REGISTRY:
            known = textarena.envs.registration.ENV_REGISTRY
            close = sorted(i for i in known if i.lower().startswith(game[:4].lower()))
            raise ValueError(f"TextArena has no game {game!r}" + (f"; close: {', '.join(close[:8])}" if close else ""))
        self._textarena, self.game_id, self.num_players = textarena, game, num_players
        self.game_kwargs, self.split = game_kwargs, split
        self.possible_agents = [f"player_{i}" for i in range(num_players)]
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.game: Any = None

    def seed_of(self, index: int) -> int:
        """The game seed of starting state ``index`` of this split."""
        index = int(index) % self.SEEDS
        return split_seeds(self.split, index + 1)[index]

    def _reset(self, options: dict[str, Any]) -> None:
        index = options.get("index")
        index = int(index) if index is not None else int(self.np_random.integers(self.SEEDS))
        self.game = self._textarena.make(self.game_id, **self.game_kwargs)
        self.game.reset(num_players=self.num_players, seed=self.seed_of(index))
        self._tell_current()

    def _tell_current(self) -> None:
        pid, observation = self.game.get_observation()
        self.agent_selection = f"player_{pid}"
        self.tell(self.agent_selection, observation if isinstance(observation, str) else str(observation))

    def _play(self, agent: str, action: str) -> None:
        state = self.game.state  # TextArena counts the invalid moves it lets a player retry in its state
        errors = getattr(state, "error_count", 0)
        done, _ = self.game.step(action=action)
        if getattr(state, "error_count", 0) > errors:
            self.infos[agent]["invalid_moves"] += 1
        if not done:
            self._tell_current()
            return
        result = self.game.close()
        rewards, game_info = result if isinstance(result, tuple) else (result, {})
        rewards = {int(pid): float(v) for pid, v in (rewards or {}).items()}
        self.reward({f"player_{pid}": v for pid, v in rewards.items()})
        for pid in rewards:  # the invalid move that ended the game (a forfeit)
            if (game_info or {}).get(pid, {}).get("invalid_move"):
                self.infos[f"player_{pid}"]["invalid_moves"] += 1
        reasons = {f"player_{pid}": (game_info or {}).get(pid, {}).get("reason") for pid in rewards}
        for seat, reason in reasons.items():
            if reason:
                self.infos[seat]["reason"] = reason
        self.end({f"player_{pid}": o for pid, o in _outcomes(rewards).items()})


class PettingZooTextEnv(MultiAgentTextEnv):
    """A PettingZoo environment with text observations and actions, as a turnrl multi-agent environment.

    Simultaneous moves: a PettingZoo ``ParallelEnv`` (every agent acts at once each round) is played through
    PettingZoo's own ``parallel_to_aec``: the agents reply one after the other, each from the observation of the
    round before (no agent sees another's move of the same round), and the round is applied once all have replied.

    Args:
        env: the PettingZoo ``AECEnv`` or ``ParallelEnv`` (not yet reset).
        max_turns, render_mode: as :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`.

    Raises:
        TypeError: ``env`` is neither.
    """

    possible_agents: list[str] = []  # noqa: RUF012 — the wrapped environment's

    def __init__(self, env: Any, *, max_turns: int | None = None, render_mode: str | None = None) -> None:
        from pettingzoo import AECEnv, ParallelEnv

        self.simultaneous = isinstance(env, ParallelEnv)
        if self.simultaneous:
            from pettingzoo.utils.conversions import parallel_to_aec

            env = parallel_to_aec(env)
        if not isinstance(env, AECEnv):
            raise TypeError(f"PettingZooTextEnv wraps a PettingZoo AECEnv or ParallelEnv, got {type(env).__name__}")
        self.inner = env
        self.possible_agents = [str(a) for a in env.possible_agents]
        super().__init__(max_turns=max_turns, render_mode=render_mode)

    def _reset(self, options: dict[str, Any]) -> None:
        self.inner.reset(seed=int(self.np_random.integers(2**31)), options=options or None)
        self._advance()

    def _advance(self) -> None:
        """Take the inner environment's dead steps, mirror its state, and tell the next live agent its observation."""
        inner = self.inner
        while inner.agents and (inner.terminations[inner.agent_selection] or inner.truncations[inner.agent_selection]):
            inner.step(None)
        for agent in self.agents:
            gone = agent not in inner.agents
            self.terminations[agent] = self.terminations[agent] or bool(inner.terminations.get(agent, gone))
            self.truncations[agent] = self.truncations[agent] or bool(inner.truncations.get(agent, False))
        if inner.agents:
            self.agent_selection = str(inner.agent_selection)
            observation = inner.observe(inner.agent_selection)
            self.tell(self.agent_selection, observation if isinstance(observation, str) else str(observation))

    def _play(self, agent: str, action: str) -> None:
        inner = self.inner
        inner.step(action)
        self.reward({str(a): float(r) for a, r in inner.rewards.items()})
        for a, info in inner.infos.items():
            self.infos[str(a)].update({k: v for k, v in info.items() if k != "invalid_moves"})
        self._advance()
