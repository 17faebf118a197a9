"""Multi-agent text environments from other libraries, as they are:

* :class:`TextArenaEnv` — a game of the ``textarena`` package (extra ``games``) by its id, e.g. ``TicTacToe-v0``,
  ``KuhnPoker-v0``, ``SimpleNegotiation-v0``: its own rules, observations, invalid-move handling and rewards.
  Players are ``player_0``, ``player_1``, …. A player is told what is new to it since its last turn, once: the game's
  own observations of that player (its rules at its first turn, then the others' moves and the game's messages),
  read from the game itself, under whatever observation wrapper the id names (TextArena's default
  ``LLMObservationWrapper`` returns a player's whole history every turn), and without the echo of its own move
  (already in its conversation); when the game ends, what each player had still to be told (how it ended). Action
  wrappers (e.g. the one that puts a move in brackets) still apply.
* :class:`PettingZooTextEnv` — any PettingZoo AEC environment whose observations and actions are text: at an
  agent's turn its observation (a string) is told to it as a message — only its new part where it extends what the
  agent was told last (an environment whose observation is the agent's history so far) — and its text goes to the
  environment as is (a move after which the environment's info for the agent says ``invalid_move: True`` is counted
  as invalid). When the game ends, each agent's outcome comes from the game's totals (the highest total wins,
  a shared highest total draws, so a 0–0 game is a draw) unless the environment's own infos give one.

Neither keeps a list of starting states: both are played on seeds (:func:`~turnrl.envs.multiagent.core.split_seed`),
``options={"index": i}`` starting the game with seed ``i`` of the ``split`` (``train``: seeds 0 to 99,999;
``test``, the held-out split: 1,000,000 to 1,099,999; ``validation``: 2,000,000 to 2,099,999), so held-out evaluation
plays deals and boards training never saw, and a run's ``validate_every`` chooses its step on games test never plays.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any, Literal

from turnrl.envs.multiagent.core import SEED_START, SEEDS_PER_SPLIT, MultiAgentTextEnv, split_seed

#: TextArena games whose every turn lists the legal moves (``Available Moves: '[0]', '[1]'`` or ``Your available
#: actions are: '[check]', '[bet]'``): a random *legal* player of them needs no knowledge of their rules, so their
#: held-out evaluations report its figure as the floor to beat (:attr:`TextArenaEnv.random_player`)
LISTS_MOVES = ("TicTacToe-v0", "KuhnPoker-v0")
#: TextArena games whose every game starts from the same state whatever its seed (an empty board): their held-out
#: games hold out the opponent only, and their evaluations say so (``TextArenaEnv.held_out_states``)
SAME_START = ("TicTacToe-v0", "ConnectFour-v0")
_LISTED = re.compile(r"[Aa]vailable (?:[Mm]oves|actions)(?: are)?:\s*((?:'\[[^\]]*\]'(?:,\s*)?)+)")


def listed_moves(text: str) -> list[str]:
    """The legal moves the last list in ``text`` names (``['[0]', '[4]']``); [] where it lists none."""
    found = _LISTED.findall(text)
    return re.findall(r"'(\[[^\]]*\])'", found[-1]) if found else []


def random_legal_player(seed: int = 0) -> Callable[[str], str]:
    """A player of uniformly random legal moves of a game that lists them (:data:`LISTS_MOVES`), as a function of
    the text a seat was told, drawing from its own stream of ``seed``; an empty move where the text lists none (the
    game counts it invalid)."""
    rng = random.Random(seed)

    def move(text: str) -> str:
        moves = listed_moves(text)
        return rng.choice(moves) if moves else ""

    return move


def _outcomes(rewards: dict[Any, float]) -> dict[Any, str]:
    best = max(rewards.values()) if rewards else 0.0
    tied = sum(v == best for v in rewards.values()) > 1
    return {pid: "draw" if v == best and tied else "win" if v == best else "loss" for pid, v in rewards.items()}


class SeededGame:
    """What :class:`TextArenaEnv` and :class:`PettingZooTextEnv` share: a ``split`` of :data:`SEEDS_PER_SPLIT`
    starting states, each a seed (see the module docstring)."""

    split: str | None = "train"  # as MultiAgentTextEnv declares them
    held_out_split: str | None = "test"
    validation_split: str | None = "validation"  # what a run's validate_every plays (its own seed range)

    def __len__(self) -> int:
        """The starting states of the split (seeds)."""
        return SEEDS_PER_SPLIT

    def seed_of(self, index: int) -> int:
        """The game seed of starting state ``index`` of this split."""
        return split_seed(self.split, index)

    def state_key(self, index: int) -> str:
        """Starting state ``index`` by name: the game and its seed (what an evaluation's items are named by)."""
        return f"{getattr(self, 'game_id', None) or type(self).__name__}#seed={self.seed_of(index)}"

    def task_at(self, index: int) -> Any:
        """Starting state ``index`` as a task (its canonical form is :meth:`state_key`), so the held-out check
        compares seeds."""
        from turnrl.envs.core import Task

        key = self.state_key(index)
        return Task.model_validate({"prompt": key, "answer": "", "metadata": {"canonical": key}})  # id: made


def _check_split(split: str) -> None:
    if split not in SEED_START:
        raise ValueError(f"split must be one of {', '.join(map(repr, SEED_START))}, got {split!r}")


class TextArenaEnv(SeededGame, MultiAgentTextEnv):
    """A TextArena game as a turnrl multi-agent environment (see the module docstring).

    Args:
        game: the TextArena id (``textarena.make``'s, e.g. ``"TicTacToe-v0"``).
        num_players: players of the game (its own limits apply).
        split: ``"train"``, ``"test"`` or ``"validation"``: the seeds ``options={"index": i}`` draws from.
        game_kwargs: passed to ``textarena.make``.

    Raises:
        ImportError: ``textarena`` is not installed (the message gives the pip line).
        ValueError: TextArena has no such game (with close ids), or an unknown split.
    """

    possible_agents: list[str] = []  # noqa: RUF012 — set per game

    def __init__(
        self,
        game: str,
        *,
        num_players: int = 2,
        split: Literal["train", "test", "validation"] = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
        **game_kwargs: Any,
    ) -> None:
        _check_split(split)
        try:
            import textarena
        except ImportError as e:
            raise ImportError(
                "TextArena games need the `textarena` package: pip install 'turnrl[games]' (or pip install textarena)"
            ) from e
        if game not in textarena.envs.registration.ENV_REGISTRY:
            known = textarena.envs.registration.ENV_REGISTRY
            close = sorted(i for i in known if i.lower().startswith(game[:4].lower()))
            raise ValueError(f"TextArena has no game {game!r}" + (f"; close: {', '.join(close[:8])}" if close else ""))
        self._textarena, self.game_id, self.num_players = textarena, game, num_players
        self.game_kwargs, self.split = game_kwargs, split
        self.possible_agents = [f"player_{i}" for i in range(num_players)]
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.game: Any = None
        self.raw: Any = None  # the game under its wrappers: its observations are each player's new ones
        # the floor of a held-out evaluation (a random legal player), for the games that list their legal moves
        self.random_player: Callable[[int], Callable[[str], str]] | None = (
            random_legal_player if game in LISTS_MOVES else None
        )
        if game in SAME_START:  # what its held-out games hold out: the opponent only (the evaluation says so)
            self.held_out_states = self._same_start

    def _same_start(self) -> Any:
        """``held_out_states()`` of a game of :data:`SAME_START` (the attribute exists on those alone: another
        TextArena game's evaluation reads its test seeds as held out, as the game declares them, and claims no more —
        Kuhn poker's six deals, say, are dealt under training seeds too)."""
        from turnrl.envs.multiagent.tictactoe import HeldOutStates

        return HeldOutStates(
            False,
            ("the empty board",),
            f"TextArena's {self.game_id} starts every game from the "
            "empty board, whatever its seed: only the opponent is held out",
        )

    def _reset(self, options: dict[str, Any]) -> None:
        index = options.get("index")
        index = int(index) if index is not None else int(self.np_random.integers(len(self)))
        self.game = self._textarena.make(self.game_id, **self.game_kwargs)
        self.raw = self.game
        while isinstance(self.raw, self._textarena.Wrapper):
            self.raw = self.raw.env
        self.game.reset(num_players=self.num_players, seed=self.seed_of(index))
        self._tell_current()

    def _tell_current(self) -> None:
        pid, observation = self.raw.get_observation()  # what is new to the player since its last turn
        self.agent_selection = f"player_{pid}"
        text = self._news(int(pid), observation)
        if text:
            self.tell(self.agent_selection, text)

    def _news(self, pid: int, observation: Any) -> str:
        """A player's new observations as one message, each line ``[GAME] …`` or ``[Player k] …`` as TextArena's
        own wrapper writes them, without the echo of the player's own move."""
        if isinstance(observation, str):
            return observation
        own_move = self._textarena.ObservationType.PLAYER_ACTION
        roles = getattr(self.raw.state, "role_mapping", {}) or {}
        lines = []
        for entry in observation or ():
            sender, message = entry[0], entry[1]
            if sender == pid and len(entry) > 2 and entry[2] == own_move:
                continue
            name = "GAME" if sender == self._textarena.GAME_ID else roles.get(sender, f"Player {sender}")
            lines.append(f"[{name}] {message}")
        return "\n".join(lines)

    def _play(self, agent: str, action: str) -> None:
        state = self.game.state  # TextArena counts the invalid moves it lets a player retry in its state
        errors = getattr(state, "error_count", 0)
        done, _ = self.game.step(action=action)
        if getattr(state, "error_count", 0) > errors:
            self.infos[agent]["invalid_moves"] += 1
        if not done:
            self._tell_current()
            return
        pending = getattr(self.raw.state, "observations", None) or {}
        for pid in sorted(pending):  # what each player had still to be told: how the game ended, and why
            text = self._news(int(pid), pending[pid])
            pending[pid] = []
            if text and f"player_{pid}" in self.agents:
                self.tell(f"player_{pid}", text)
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


class PettingZooTextEnv(SeededGame, MultiAgentTextEnv):
    """A PettingZoo environment with text observations and actions, as a turnrl multi-agent environment (see the
    module docstring: what an agent is told, outcomes, seeds).

    Simultaneous moves: a PettingZoo ``ParallelEnv`` (every agent acts at once each round) is played through
    PettingZoo's own ``parallel_to_aec``: the agents reply one after the other, each from the observation of the
    round before (no agent sees another's move of the same round), and the round is applied once all have replied.

    Args:
        env: the PettingZoo ``AECEnv`` or ``ParallelEnv`` (not yet reset).
        split: ``"train"``, ``"test"`` or ``"validation"``: the seeds ``options={"index": i}`` resets it with.
        max_turns, render_mode: as :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`.

    Raises:
        TypeError: ``env`` is neither.
        ValueError: an unknown split.
    """

    possible_agents: list[str] = []  # noqa: RUF012 — the wrapped environment's

    def __init__(
        self,
        env: Any,
        *,
        split: Literal["train", "test", "validation"] = "train",
        max_turns: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        from pettingzoo import AECEnv, ParallelEnv

        _check_split(split)
        self.simultaneous = isinstance(env, ParallelEnv)
        if self.simultaneous:
            from pettingzoo.utils.conversions import parallel_to_aec

            env = parallel_to_aec(env)
        if not isinstance(env, AECEnv):
            raise TypeError(f"PettingZooTextEnv wraps a PettingZoo AECEnv or ParallelEnv, got {type(env).__name__}")
        self.inner, self.split = env, split
        self.game_id = str((getattr(env, "metadata", None) or {}).get("name") or type(env.unwrapped).__name__)
        self.possible_agents = [str(a) for a in env.possible_agents]
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.totals: dict[str, float] = {}  # every agent's rewards over the game, for its outcome
        self.told: dict[str, str] = {}  # the last observation each agent was told, whole

    def _reset(self, options: dict[str, Any]) -> None:
        index = options.get("index")
        seed = self.seed_of(int(index)) if index is not None else int(self.np_random.integers(2**31))
        self.totals, self.told = dict.fromkeys(self.possible_agents, 0.0), {}
        self.inner.reset(seed=seed, options=options or None)
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
        if self.agents and all(self.terminations[a] for a in self.agents) and not any(self.truncations.values()):
            for agent, word in _outcomes(self.totals).items():  # the game is over: by its totals, unless it said
                if agent in self.infos and not self.infos[agent].get("outcome"):
                    self.infos[agent]["outcome"] = word
        if inner.agents:
            self.agent_selection = agent = str(inner.agent_selection)
            observation = inner.observe(inner.agent_selection)
            text = observation if isinstance(observation, str) else str(observation)
            last, self.told[agent] = self.told.get(agent, ""), text
            news = text[len(last) :].lstrip("\n") if last and text.startswith(last) else text  # a history: its tail
            if news.strip():
                self.tell(agent, news)

    def _play(self, agent: str, action: str) -> None:
        inner = self.inner
        inner.step(action)
        rewards = {str(a): float(r) for a, r in inner.rewards.items()}
        for a, r in rewards.items():
            self.totals[a] = self.totals.get(a, 0.0) + r
        self.reward(rewards)
        for a, info in inner.infos.items():
            self.infos[str(a)].update({k: v for k, v in info.items() if k != "invalid_moves"})
        if (inner.infos.get(agent) or {}).get("invalid_move"):  # the game's word for a move it refused
            self.infos[agent]["invalid_moves"] += 1
        self._advance()
