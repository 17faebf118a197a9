"""The on-policy source of an environment with several agents (docs/multi-agent.md): every job is one game, played
by :class:`~turnrl.rollout.multi.MultiAgentRollout` with the trained policy in some seats and the step's opponent
(:class:`~turnrl.rl.sources.league.Opponents`) in the others.

What trains: the views of the seats the current policy played that ``multi_agent.train_seats`` names, each a
token-exact Trajectory of its own (what that seat saw and sampled). Groups are formed per seat and per starting
state — ``group_id`` ``"{step}-{round}-{task}/{seat}"`` — so GRPO, RLOO and DAPO compare a seat's games with the same
seat's games from the same opening (role-conditioned baselines, as SPIRAL's RAE and PAG's per-role normalization).
Against a frozen opponent the policy plays one of ``train_seats`` per group, in turn by task and step, so every
group is of one seat.

Seeding: as :mod:`turnrl.rollout.play` (the game of task ``i`` reset with ``seed + i`` and ``options={"index": i}``;
each game's moves drawn from its job's own stream), so a resumed run plays what an uninterrupted one would. A game
that does not say how many starting states it has (no ``__len__``) is played on seeds: task ``i`` is the game reset
with training seed ``i`` (:func:`~turnrl.envs.multiagent.core.split_seed`; the held-out evaluation plays the
``test`` seeds, a range apart), among :data:`~turnrl.envs.multiagent.core.SEEDS_PER_SPLIT` tasks.

Its namesake :mod:`turnrl.rollout.multi` is the same concept a layer down: the multi-agent rollout this source
plays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from turnrl.agents.base import SamplingParams
from turnrl.envs.core import close_all
from turnrl.envs.multiagent import make_multi_agent
from turnrl.envs.multiagent.core import SEEDS_PER_SPLIT, counts_starting_states, split_seed
from turnrl.rl.algorithms.base import Algorithm
from turnrl.rl.config import EnvConfig, MultiAgentConfig, TrainConfig
from turnrl.rl.sources.base import RunParts, rollout_metrics
from turnrl.rl.sources.league import Opponents
from turnrl.rl.sources.onpolicy import OnPolicySource
from turnrl.rl.sources.tasks import TaskPool, make_sampler
from turnrl.rollout.job import Job
from turnrl.rollout.multi import MultiAgentRollout
from turnrl.rollout.opponents import check_opponent
from turnrl.rollout.play import env_seed, sample_seed
from turnrl.types import Trajectory


def seats_of(game: EnvConfig, multi_agent: MultiAgentConfig | None, env: Any = None) -> tuple[list[str], list[str]]:
    """The seats of the run's game (its ``env`` section) and the seats that train (its ``multi_agent`` section);
    ``env``: the game, if one is built already. An unknown seat named in ``multi_agent`` fails here, before a model
    loads.

    Raises:
        ValueError: ``train_seats`` or ``eval_seat`` names a seat the environment does not have.
    """
    ma = multi_agent or MultiAgentConfig()
    probe = env if env is not None else make_multi_agent(game.id, **game.kwargs)
    seats = list(probe.possible_agents)
    if env is None:
        probe.close()
    train = list(ma.train_seats) if ma.train_seats is not None else seats
    owner = ma.policy_of_seat()
    for name, wanted in (
        ("multi_agent.train_seats", train),
        ("multi_agent.eval_seat", [ma.eval_seat] * bool(ma.eval_seat)),
        ("multi_agent.policies", list(owner)),
    ):
        unknown = [s for s in wanted if s not in seats]
        if unknown:
            raise ValueError(
                f"{name} names {', '.join(map(repr, unknown))}, which {game.id} does not have; its "
                f"seats: {', '.join(seats)}"
            )
    if not train:
        raise ValueError("multi_agent.train_seats is empty: name at least one seat whose games train the policy")
    orphans = [s for s in seats if owner and s not in owner]
    if orphans:
        raise ValueError(
            f"seat {', '.join(map(repr, orphans))} of {game.id} is mapped to no policy: add it to the "
            f"seats of one of multi_agent.policies ({', '.join(ma.policies or {})})"
        )
    return seats, train


class MultiAgentRunner:
    """Plays a multi-agent run's jobs in this process: one game per job (see the module docstring).

    Args:
        cfg: the run (``env``, ``rollout``, ``multi_agent``, ``seed``).
        agent: the trained policy (sharing the learner's model).
        version: the learner's current version.
        policies: a run with several trainable policies: each one's agent by name (every seat played by its own,
            ``multi_agent.policies``); ``agent`` is then unused.
        drawn_by_driver: a Ray rollout worker's runner: the league's pick of each step arrives with the lease
            (:attr:`given`: ``(version, snapshot)`` or None for the policy itself) instead of being made here.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        agent: Any,
        version: Callable[[], int],
        policies: Mapping[str, Any] | None = None,
        drawn_by_driver: bool = False,
    ) -> None:
        self.cfg, self.agent, self.version = cfg, agent, version
        self.ma = cfg.multi_agent or MultiAgentConfig()
        self.policies = dict(policies or {})
        self.drawn_by_driver = drawn_by_driver
        self.given: tuple[int, dict[str, Any]] | None = None
        probe = make_multi_agent(cfg.env.id, **cfg.env.kwargs)
        try:
            self.seats, self.train_seats = seats_of(cfg.env, cfg.multi_agent, probe)
            self.seeded = not counts_starting_states(probe)  # played on seeds (the module docstring)
        finally:
            probe.close()
        self.opponents = Opponents(self.ma, agent, cfg.seed)
        self.last: dict[str, float] = {}  # the last run's opponent figures

    def learner_seat(self, job: Job) -> str:
        """The seat the policy plays in ``job``'s game against a frozen opponent (the same for a whole group)."""
        return self.train_seats[(job.task + job.step) % len(self.train_seats)]

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job's game; the trained seats' Trajectories (job order, seats in the game's order)."""
        if not jobs:
            return [], {}
        step = jobs[0].step
        if self.policies:  # every seat its own policy's
            opponent, label, league_version = None, "self", -1
            policies, owner = dict(self.policies), self.ma.policy_of_seat()
            maps = [owner] * len(jobs)
            trained = set(policies)  # every one of them, whatever its name
        else:
            if self.drawn_by_driver:
                opponent, label, league_version = self.opponents.play(self.given)
            else:
                self.opponents.before(step, self.version())
                opponent, label, league_version = self.opponents.at(step)
            policies = {"policy": self.agent}
            if opponent is not None:
                policies["opponent"] = opponent
            maps = [
                {s: "policy" if opponent is None or s == self.learner_seat(j) else "opponent" for s in self.seats}
                for j in jobs
            ]
            trained = {"policy"}  # the rollout's own names here: the frozen opponent never trains
        r = self.cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
        rollout = MultiAgentRollout(
            policies, params, max_context=r.max_context, versions=dict.fromkeys(trained, self.version)
        )
        envs = [make_multi_agent(self.cfg.env.id, **self.cfg.env.kwargs) for _ in jobs]
        t0 = time.perf_counter()
        try:
            seeds = [split_seed("train", j.task) if self.seeded else env_seed(self.cfg.seed, j) for j in jobs]
            trajs = rollout.run(
                envs,
                seeds=seeds,
                options=[{"index": j.task} for j in jobs],
                group_ids=[j.group_id for j in jobs],
                sample_seeds=[sample_seed(self.cfg.seed, j) for j in jobs],
                seat_maps=maps,
            )
        finally:
            close_all(envs)
        out = []
        per_game = len(self.seats)
        for k, traj in enumerate(trajs):
            job = jobs[k // per_game]
            seat = traj.metadata["seat"]
            if traj.metadata["policy"] not in trained or seat not in self.train_seats:
                continue
            traj.env_id, traj.task_id = self.cfg.env.id, str(job.task)
            traj.metadata.update(job=job.key, opponent=label, opponent_version=league_version)
            out.append(traj)
        generated = sum(sum(t.loss_mask or []) for t in out)
        self.last = self.opponents.figures(league_version)
        return out, {"generated_tokens": float(generated), "generate_s": time.perf_counter() - t0}

    def prefetch(self, jobs: Sequence[Job], start: bool = True) -> None:
        """Nothing: games are played in this process, after the update."""

    def state_dict(self) -> dict[str, Any]:
        """The league's pool, where the run has one."""
        return self.opponents.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.opponents.load_state_dict(state)

    def reset(self) -> None:
        """Nothing kept on disk."""

    def close(self) -> None:
        """Nothing to release."""

    def windows(self) -> None:
        """None: T-PPO's windows are not played in multi-agent games."""
        return None


def seat_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per seat, over a step's trained games: win, draw and loss rates (a cooperative game's ``solved`` too),
    the game's reward, invalid moves and generated tokens per game; ``win_rate`` and ``invalid_moves`` over all."""
    out: dict[str, float] = {}
    by_seat: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_seat.setdefault(str(t.metadata.get("seat")), []).append(t)
    for seat, ts in sorted(by_seat.items()):
        n = len(ts)
        outcomes = [t.metadata.get("outcome") for t in ts]
        for word in sorted({"win", "draw", "loss", *(o for o in outcomes if o)}):
            out[f"seat_{seat}_{word}"] = sum(o == word for o in outcomes) / n
        out[f"seat_{seat}_reward"] = float(np.mean([t.metadata.get("seat_reward", 0.0) for t in ts]))
        out[f"seat_{seat}_invalid_moves"] = float(np.mean([t.metadata.get("invalid_moves", 0) for t in ts]))
        out[f"seat_{seat}_tokens"] = float(np.mean([sum(t.loss_mask or []) for t in ts]))
    n = max(len(trajectories), 1)
    out["win_rate"] = sum(t.metadata.get("outcome") in ("win", "solved") for t in trajectories) / n
    out["invalid_moves"] = sum(int(t.metadata.get("invalid_moves", 0)) for t in trajectories) / n
    return out


class MultiAgentSource(OnPolicySource):
    """Fresh games of the current policy against the step's opponents (see the module docstring): the on-policy
    source's tasks, rounds and filters, with games for episodes. The trainer opens it in place of the on-policy
    source when ``env.id`` names an environment with several agents."""

    def __init__(self, cfg: TrainConfig, algorithm: Algorithm, runner: Any = None) -> None:
        self.cfg, self.algorithm, self._runner = cfg, algorithm, runner
        self._make_runner = None
        self.env = make_multi_agent(cfg.env.id, **cfg.env.kwargs)  # a probe: seats, the number of starting states
        # unknown seats and opponents that cannot play fail before a model loads
        seats_of(cfg.env, cfg.multi_agent, self.env)
        ma = cfg.multi_agent or MultiAgentConfig()
        for name in {ma.opponent, ma.held_out_opponent(cfg.env.id)}:
            if not name.is_policy:
                check_opponent(name, cfg.env.id)
        if type(algorithm).rollout_hook is not Algorithm.rollout_hook:
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} rewrites its episodes while they are played, which "
                "games with several agents do not support: use grpo, rloo, dapo, ppo or reinforce++"
            )
        self.n_tasks = len(self.env) if counts_starting_states(self.env) else SEEDS_PER_SPLIT  # else: seeds
        pool = TaskPool([cfg.env.id], np.ones(1), np.zeros(self.n_tasks, dtype=np.int64))
        self.sampler = make_sampler(cfg.tasks, pool, cfg.seed)
        self.reward, self.process = None, None
        self._prepared = None
        self.opponents: Opponents | None = None  # on Ray: the league, kept with the driver's weights
        self._drawn: dict[str, float] = {}

    def attach(self, parts: RunParts) -> None:
        """The games are played in this process with the policy being trained (placement local), or on the
        placement's rollout workers (placement ray: each worker plays its leases' games with this module's
        :class:`MultiAgentRunner`)."""
        if self.cfg.placement == "local":
            self._make_runner = lambda: MultiAgentRunner(self.cfg, parts.agent, parts.version, parts.policies)
        else:  # the league lives here, with the learner's weights; each step's draw goes to the workers
            self._make_runner = parts.runner
            ma = self.cfg.multi_agent or MultiAgentConfig()
            if ma.opponent.kind == "league":
                self.opponents = Opponents(ma, parts.agent, self.cfg.seed)
            self._version = parts.version

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """This step's games (on Ray workers: with the league's draw of the step sent along with every lease)."""
        if self.opponents is not None:
            import ray

            self.opponents.before(step, self._version())
            drawn = self.opponents.drawn(step)
            self.runner.opponent = (  # type: ignore[attr-defined]  # Ray's runner
                None if drawn is None else {"version": drawn[0], "weights": [ray.put(drawn[1])]}
            )
            self._drawn = self.opponents.figures(-1 if drawn is None else drawn[0])
        return super().collect(step)

    def step_metrics(self, seen: Sequence[Trajectory]) -> dict[str, float]:
        """The rollout figures of every trained game, each seat's, and the opponent's."""
        runner = self.runner
        last = runner.last if isinstance(runner, MultiAgentRunner) else self._drawn
        return {**rollout_metrics(seen), **seat_metrics(seen), **last}

    def state_dict(self) -> dict[str, Any]:
        """The on-policy source's state and, on Ray, the league kept here."""
        state = super().state_dict()
        if self.opponents is not None:
            state["opponents"] = self.opponents.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the task sampler and the league."""
        super().load_state_dict(state)
        runner = self.runner
        if isinstance(runner, MultiAgentRunner):
            runner.load_state_dict(state.get("runner") or {})
        if self.opponents is not None:
            self.opponents.load_state_dict(state.get("opponents") or {})
