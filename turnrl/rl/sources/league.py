"""Opponents of a multi-agent run (docs/multi-agent.md): the policy's own past versions (a league), frozen agents and
scripted players.

:class:`League` keeps snapshots of the trained weights (the adapters alone under LoRA) and draws each step's
opponent; :class:`PastSelf` is a frozen copy of the policy that plays a snapshot; :class:`Opponents` answers "who
plays the other seats at step N" for every kind of ``multi_agent.opponent``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from turnrl.agents.base import Agent, capabilities_of
from turnrl.rl.config.multi_agent import LeagueConfig, MultiAgentConfig
from turnrl.rollout.opponents import make_opponent

if TYPE_CHECKING:
    from turnrl.agents.hf import HFAgent


def trained_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the parameters that train (every one in full fine-tuning, the adapters alone under LoRA)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}


class League:
    """The policy's past versions (see :class:`~turnrl.rl.config.multi_agent.LeagueConfig` for the rules).

    ``pool`` holds ``(version, weights)`` pairs, oldest first; :meth:`enter` adds one, :meth:`draw` picks a step's
    opponent. Its state (the snapshots themselves) is saved with the run's checkpoint, so a resumed run plays the
    same opponents.
    """

    def __init__(self, cfg: LeagueConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        self.pool: list[tuple[int, dict[str, torch.Tensor]]] = []

    def enter(self, step: int, version: int, model: torch.nn.Module) -> bool:
        """Before ``step``: snapshot ``model`` (at ``version``) into the pool if this step is one where a version
        enters and that version is not there yet; the oldest leaves past ``size``. Whether one entered."""
        if step % self.cfg.every != 0 or any(v == version for v, _ in self.pool):
            return False
        self.pool.append((version, trained_weights(model)))
        del self.pool[: max(0, len(self.pool) - self.cfg.size)]
        return True

    def draw(self, step: int) -> int | None:
        """The opponent of ``step``: an index into :attr:`pool`, or None for the current policy itself (with
        probability ``latest``, and always while the pool is empty). The same for the same seed, step and pool."""
        if not self.pool or step < 0:  # work before the first step (a task sampler's scoring): the policy itself
            return None
        rng = np.random.default_rng([self.seed, step, 0x1EA6])
        if rng.random() < self.cfg.latest:
            return None
        return int(rng.integers(len(self.pool)))

    def versions(self) -> list[int]:
        """The versions in the pool, oldest first."""
        return [v for v, _ in self.pool]

    def state_dict(self) -> dict[str, Any]:
        """The pool, snapshots included."""
        return {"pool": [(v, dict(w)) for v, w in self.pool]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.pool = [(int(v), dict(w)) for v, w in state.get("pool", [])]


class PastSelf:
    """A frozen copy of the policy that plays one past version at a time (its own model: the trained one is never
    touched). ``load(version, weights)`` copies a snapshot in; the copy is made on first use."""

    def __init__(self, agent: Any) -> None:
        self.live = agent
        self.agent: HFAgent | None = None  # made on first use
        self.version: int | None = None

    def load(self, version: int, weights: dict[str, torch.Tensor]) -> Agent:
        """The frozen agent playing ``version``."""
        from turnrl.agents.hf import HFAgent

        if self.agent is None:
            model = copy.deepcopy(self.live.model).eval()
            for p in model.parameters():
                p.requires_grad_(False)
            self.agent = HFAgent(model, self.live.tokenizer, batch_size=self.live.batch_size)
        if version != self.version:
            params = dict(self.agent.model.named_parameters())
            missing = sorted(set(weights) - set(params))
            if missing:
                raise ValueError(f"a league snapshot names parameters the policy does not have: {missing[:3]}")
            with torch.no_grad():
                for name, value in weights.items():
                    params[name].copy_(value.to(params[name].device, params[name].dtype))
            self.version = version
        return self.agent


class Opponents:
    """Who plays the seats the trained policy does not, step by step (``multi_agent.opponent``).

    Args:
        cfg: the run's ``multi_agent`` section.
        agent: the trained policy as an agent (its model, tokenizer and batch size are copied for past selves).
        seed: the run's seed (league draws; the random player's moves).
    """

    def __init__(self, cfg: MultiAgentConfig, agent: Any, seed: int) -> None:
        self.cfg, self.agent, self.seed = cfg, agent, seed
        self.league = League(cfg.league, seed) if cfg.opponent.kind == "league" else None
        self._past = PastSelf(agent) if self.league is not None else None
        self._frozen: Agent | None = None
        if not cfg.opponent.is_policy:
            device = str(next(agent.model.parameters()).device) if capabilities_of(agent).local_model else "cpu"
            self._frozen = make_opponent(cfg.opponent, agent.tokenizer, seed, device)

    def before(self, step: int, version: int) -> None:
        """Before ``step``'s episodes: a version of the policy enters the league where the rules say so."""
        if self.league is not None:
            self.league.enter(step, version, self.agent.model)

    def drawn(self, step: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """The league's pick for ``step``: ``(version, snapshot)``, or None for the current policy itself (always
        None without a league)."""
        if self.league is None:
            return None
        index = self.league.draw(step)
        return None if index is None else self.league.pool[index]

    def at(self, step: int) -> tuple[Agent | None, str, int]:
        """The opponent of ``step``: (agent, label, league version); agent None means the current policy itself
        (label ``self``, version −1)."""
        return self.play(self.drawn(step))

    def play(self, drawn: tuple[int, dict[str, torch.Tensor]] | None) -> tuple[Agent | None, str, int]:
        """As :meth:`at`, for a league's pick (:meth:`drawn`, here or on the driver of a Ray worker)."""
        if drawn is not None:
            assert self._past is not None, "a league's pick, but the opponent is not the league"
            version, weights = drawn
            return self._past.load(version, weights), f"league:v{version}", version
        if self._frozen is None:
            return None, "self", -1
        return self._frozen, self.cfg.opponent, -1

    def figures(self, version: int) -> dict[str, float]:
        """A step's opponent figures: the league version played (−1: the policy itself or a frozen player) and the
        pool's size."""
        league = {"league_size": float(len(self.league.pool))} if self.league is not None else {}
        return {"opponent_version": float(version), **league}

    def state_dict(self) -> dict[str, Any]:
        """The league's pool (nothing for the other kinds)."""
        return {"league": self.league.state_dict()} if self.league is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if self.league is not None and "league" in state:
            self.league.load_state_dict(state["league"])
