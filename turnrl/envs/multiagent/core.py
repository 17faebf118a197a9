"""Text environments with several agents, in PettingZoo's agent–environment cycle (AEC): named agents take turns,
each sees its own messages, and each has its own rewards, terminations and truncations. The same concept as
:mod:`turnrl.envs.core` (one agent, a Gymnasium ``Env``), for several agents.

:class:`MultiAgentTextEnv` *is* a PettingZoo ``AECEnv`` whose actions are an agent's text and whose observations are
the new messages that agent may see (a tuple of :class:`~turnrl.types.Message`, as a :class:`~turnrl.envs.core.TextEnv`
returns), so PettingZoo's own tools (``agent_iter``, ``last``, its API test) work on it, and the loop is PettingZoo's::

    env.reset(seed=0, options={"index": 3})
    for agent in env.agent_iter():
        observation, reward, termination, truncation, info = env.last()
        action = None if termination or truncation else policy[agent](observation)
        env.step(action)

What an agent sees: only the messages told to it (:meth:`MultiAgentTextEnv.tell`), never the whole transcript.
:meth:`~MultiAgentTextEnv.observe` returns the messages told to the agent since it last acted; its own previous replies
are not repeated (an agent keeps its own conversation, as a chat does). A game's rules decide what each seat learns of
the others' moves.

Rules for subclasses (the docstrings of the underscored methods are the specification):

* set :attr:`possible_agents` (the seats, in turn order where turns rotate) and implement :meth:`_reset` and
  :meth:`_play`; :meth:`reset` and :meth:`step` keep the bookkeeping (rewards cleared and accumulated, the dead-step
  rule, a turn limit, invalid-move counts).
* a move the game refuses is the game's business: :meth:`_play` says so with :meth:`refuse` (a penalty, a retry or a
  forfeit, by the game's rule); it is counted in ``infos[agent]["invalid_moves"]`` and never raises.
* tasks: ``options={"index": i}`` poses starting state ``i`` of the environment's ``split``; ``held_out_split``
  names the split held-out evaluation uses and ``validation_split`` the one validation reads, as for single-agent
  environments; ``item_scores`` names scores of an episode the game records in its agents' infos beside the
  outcome. A game that keeps no list of starting states (no ``__len__``: TextArena's, PettingZoo's, yours) is played
  on seeds, three disjoint ranges (:func:`split_seed`): starting state ``i`` of ``train`` is seed ``i``, of ``test``
  seed ``1_000_000 + i``, of ``validation`` seed ``2_000_000 + i``, each range :data:`SEEDS_PER_SPLIT` long.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from pettingzoo import AECEnv

from turnrl.envs.spaces import MessagesSpace, TextSpace
from turnrl.types import Message

Obs = tuple[Message, ...]

#: starting states per split of a game played on seeds (the module docstring), and where each split's seeds start
SEEDS_PER_SPLIT = 100_000
SEED_START = {"train": 0, "test": 1_000_000, "validation": 2_000_000}


def split_seed(split: str | None, index: int) -> int:
    """The seed of starting state ``index`` (modulo :data:`SEEDS_PER_SPLIT`) of ``split`` in a game played on seeds:
    ``train`` seeds 0 to 99,999, ``test`` seeds 1,000,000 to 1,099,999 and ``validation`` seeds 2,000,000 to
    2,099,999, so no held-out or validation game is a training one, and choices made on validation games (a step, a
    rate) are made off the test games.

    Raises:
        ValueError: a split other than ``train``, ``test`` and ``validation``.
    """
    if split is None or split not in SEED_START:
        raise ValueError(f"a game played on seeds has the splits {', '.join(map(repr, SEED_START))}, got {split!r}")
    return SEED_START[split] + int(index) % SEEDS_PER_SPLIT


def counts_starting_states(env: object) -> bool:
    """Whether ``env`` says how many starting states it has (``__len__``); one that does not is played on seeds."""
    try:
        len(env)  # type: ignore[arg-type]  # the probe: TypeError without __len__
    except TypeError:
        return False
    return True


class MultiAgentTextEnv(AECEnv):
    """A turn-based text environment with several agents (see the module docstring).

    Args:
        max_turns: the most moves of all agents together before every agent is truncated (None: the game's own end
            only).
        render_mode: ``"ansi"`` (``render()`` returns the transcript as text) or None.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi"],
        "name": "turnrl_multi_agent_text",
        "is_parallelizable": False,
    }
    #: the seats, in turn order where turns rotate (subclasses set it)
    possible_agents: list[str] = []  # noqa: RUF012 — a subclass replaces it
    #: the split ``options={"index": i}`` draws from, the one held-out evaluation uses, and the one a run's
    #: validation reads (``validate_every``; None: the game has none)
    split: str | None = None
    held_out_split: str | None = None
    validation_split: str | None = None
    #: the game's scores of an episode beside its outcome, by name: true or false in every agent's infos when the
    #: game ends (the solver–critic game: ``first_correct``, ``final_correct``). Held-out evaluation writes them in
    #: each row's ``scores``, where ``turnrl compare --score NAME`` pairs two evaluations on one of them
    item_scores: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, max_turns: int | None = None, render_mode: str | None = None) -> None:
        super().__init__()
        if not self.possible_agents:
            raise ValueError(f"{type(self).__name__} names no agents: set possible_agents")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be 'ansi' or None, got {render_mode!r}")
        self.max_turns, self.render_mode = max_turns, render_mode
        self.possible_agents = list(self.possible_agents)
        self.observation_spaces = {a: MessagesSpace() for a in self.possible_agents}
        self.action_spaces = {a: TextSpace() for a in self.possible_agents}
        self.agents: list[str] = []
        self.np_random = np.random.default_rng()
        self.moves = 0
        self.transcript: list[tuple[str, str]] = []  # (who, text): every move and every message told, for render()
        self._pending: dict[str, list[Message]] = {}
        self._reset_needed = True

    # ---- what a subclass implements ----

    def _reset(self, options: dict[str, Any]) -> None:
        """Set up a new game (``self.np_random`` is seeded; ``options`` may hold ``index``): tell each agent its
        opening messages and set :attr:`agent_selection` to the agent that moves first."""
        raise NotImplementedError

    def _play(self, agent: str, action: str) -> None:
        """Apply ``agent``'s move ``action``: tell the agents what they may see of it, give rewards
        (:meth:`reward`), end the game (:meth:`end`) or pick who moves next (``self.agent_selection``), or refuse the
        move (:meth:`refuse`)."""
        raise NotImplementedError

    # ---- helpers for subclasses ----

    def tell(self, agents: str | Sequence[str], content: str, role: str = "user", name: str | None = None) -> None:
        """Show ``agents`` (one, or several) a message; each sees it in its next observation."""
        for agent in [agents] if isinstance(agents, str) else agents:
            if agent not in self._pending:
                raise KeyError(
                    f"{type(self).__name__} told {agent!r}, which is not an agent of this game "
                    f"({', '.join(self.possible_agents)})"
                )
            self._pending[agent].append(Message(role=role, content=content, name=name))
            self.transcript.append((f"to {agent}", content))

    def reward(self, rewards: dict[str, float]) -> None:
        """Give this step's rewards (added to what the agents collect; PettingZoo's ``rewards`` and
        ``_cumulative_rewards``)."""
        for agent, value in rewards.items():
            self.rewards[agent] = self.rewards.get(agent, 0.0) + float(value)

    def end(self, outcome: dict[str, str] | None = None) -> None:
        """The game is over for every agent; ``outcome`` (``"win"``, ``"loss"`` or ``"draw"`` per agent) goes into
        their infos."""
        for agent in self.agents:
            self.terminations[agent] = True
            if outcome is not None and agent in outcome:
                self.infos[agent]["outcome"] = outcome[agent]

    def refuse(self, agent: str, why: str) -> None:
        """Count an invalid move of ``agent`` (``infos[agent]["invalid_moves"]``) and tell it why; what follows —
        a retry, a penalty or a forfeit — is the game's rule, applied by the caller."""
        self.infos[agent]["invalid_moves"] = self.infos[agent].get("invalid_moves", 0) + 1
        self.tell(agent, why)

    # ---- PettingZoo's API ----

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start a new game; ``seed`` seeds the environment's random stream, ``options`` go to :meth:`_reset`."""
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {"invalid_moves": 0} for a in self.agents}
        self._pending = {a: [] for a in self.agents}
        self._skip_agent_selection = None
        self.moves, self.transcript = 0, []
        self.agent_selection = self.agents[0]
        self._reset(dict(options or {}))
        if self.agent_selection not in self.agents:
            raise ValueError(
                f"{type(self).__name__}._reset chose {self.agent_selection!r} to move first, which is not "
                f"an agent ({', '.join(self.agents)})"
            )
        self._reset_needed = False

    def observe(self, agent: str) -> Obs:
        """The messages told to ``agent`` since it last acted (empty if none); observing changes nothing."""
        return tuple(self._pending.get(agent, ()))

    def step(self, action: str | None) -> None:
        """The selected agent acts: its text (a move), or None once it is terminated or truncated (PettingZoo's
        dead step, which removes it)."""
        if self._reset_needed or not self.agents:
            raise RuntimeError(
                f"{type(self).__name__}: call reset() before step() (a new game after the last one ended)"
            )
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if not isinstance(action, str):
            raise TypeError(f"{agent}'s action must be its text (a str), got {type(action).__name__}")
        self._clear_rewards()
        self._cumulative_rewards[agent] = 0.0  # what it collected is reported once, by last() before it acted
        self._pending[agent] = []
        self.transcript.append((agent, action))
        self.moves += 1
        self._play(agent, action)
        if self.max_turns is not None and self.moves >= self.max_turns and not all(self.terminations.values()):
            for a in self.agents:
                if not self.terminations[a]:
                    self.truncations[a] = True
        self._accumulate_rewards()
        if any(self.terminations[a] or self.truncations[a] for a in self.agents):
            self._deads_step_first()  # a finished agent takes its dead step (action None) next, as PettingZoo asks

    def observation_space(self, agent: str) -> MessagesSpace:
        """Tuples of messages, for every agent."""
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> TextSpace:
        """Text, for every agent."""
        return self.action_spaces[agent]

    def render(self) -> str | None:
        """The transcript (every move and every message told), with ``render_mode="ansi"``."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{who}] {text}" for who, text in self.transcript)

    def close(self) -> None:
        """Nothing to release."""
