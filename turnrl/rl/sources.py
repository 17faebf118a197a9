"""Experience sources (DESIGN.md §Trainers): "give me this step's Trajectories".

* :class:`OnPolicySource` — fresh rollouts of the current policy, with the algorithm's filter (DAPO's dynamic
  sampling: groups without reward variance are dropped and more are sampled). *Where* the episodes run is a
  :class:`Runner`: in this process (:class:`LocalRunner`) or on Ray rollout workers
  (:class:`turnrl.rl.placement.ray.RayRunner`).
* :class:`ReplaySource` — stored Trajectories from JSONL or Parquet (offline data: DQO, DPO, RFT; SWiRL's states).

Every source returns ``(trajectories, metrics)`` and saves/restores its position with ``state_dict``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from turnrl.agents.base import SamplingParams
from turnrl.envs.registry import make
from turnrl.rl.algorithms import Algorithm
from turnrl.rl.config import TrainConfig
from turnrl.rl.pag_explore import verdict_explorer
from turnrl.rl.pag_metrics import pag_episode, pag_summary
from turnrl.rl.rollout import Rollout
from turnrl.types import Trajectory


class ExperienceSource(Protocol):
    """Where a training step's Trajectories come from."""

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The Trajectories to train on at ``step`` (0-based) and metrics about them."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The source's position (a resumed run continues from it)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


@dataclass(frozen=True)
class Job:
    """One episode to play: ``sample`` of task ``task`` at training ``step``, generation round ``round``."""

    step: int
    round: int
    task: int
    sample: int

    @property
    def key(self) -> str:
        """A stable name (ledger key, group and file names)."""
        return f"{self.step}-{self.round}-{self.task}-{self.sample}"

    @property
    def group_id(self) -> str:
        """Samples of one task in one round form a group."""
        return f"{self.step}-{self.round}-{self.task}"


def episode_settings(cfg: TrainConfig, job: Job) -> dict[str, Any]:
    """How ``job`` is played: env reset seed and options, group id and its own sampling seed."""
    return {"seed": cfg.seed + job.task, "options": {"index": job.task}, "group_id": job.group_id,
            "sample_seed": (cfg.seed * 1_000_003 + job.step * 7919 + job.round * 104_729 + job.task * 1_009
                            + job.sample) % 2**61}


def step_params(cfg: TrainConfig, step: int, round_: int) -> SamplingParams:
    """The sampling parameters of one generation round (its batch seed as in the first trainer)."""
    r = cfg.rollout
    return SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                          seed=cfg.seed * 1_000_003 + step * 101 + round_)


class Runner(Protocol):
    """Plays jobs with the current policy; returns the Trajectories (one per job, any order) and metrics."""

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job once."""
        ...


def play(cfg: TrainConfig, agent: Any, jobs: Sequence[Job], version: Callable[[], int], *,
         per_episode_seeds: bool, sink: Callable[[Trajectory], Any] | None = None
         ) -> tuple[list[Trajectory], Rollout]:
    """Play ``jobs`` with ``agent`` in one batched :class:`Rollout` (each Trajectory carries its job key and the
    policy version at its start and end); returns the Trajectories in job order and the rollout (its stats)."""
    r = cfg.rollout
    envs = [make(cfg.env.id, **cfg.env.kwargs) for _ in jobs]
    params = step_params(cfg, jobs[0].step, jobs[0].round)
    rollout = Rollout(agent, params, max_context=r.max_context, env_timeout=r.env_timeout, policy_version=version,
                      sink=sink, rewrite=verdict_explorer(cfg, agent, seed=params.seed or 0))
    settings = [episode_settings(cfg, j) for j in jobs]
    trajs = rollout.run(envs, seeds=[s["seed"] for s in settings], options=[s["options"] for s in settings],
                        group_ids=[s["group_id"] for s in settings],
                        sample_seeds=[s["sample_seed"] for s in settings] if per_episode_seeds else None,
                        metadata=[{"job": j.key} for j in jobs])
    return trajs, rollout


class LocalRunner:
    """Plays jobs in this process with an agent that shares the learner's model (no weight copies)."""

    def __init__(self, cfg: TrainConfig, agent: Any, version: Callable[[], int]) -> None:
        self.cfg, self.agent, self.version = cfg, agent, version

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """One batched :class:`Rollout` over all jobs."""
        trajs, rollout = play(self.cfg, self.agent, jobs, self.version,
                              per_episode_seeds=self.cfg.rollout.seed_per_episode)
        return trajs, {"generated_tokens": float(rollout.stats.generated_tokens), "generate_s": rollout.stats.generate_s}


def rollout_metrics(seen: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, success, turns, tool calls and errors over every episode sampled this step (and, for
    self-verification episodes, the PAG figures of :mod:`turnrl.rl.pag_metrics`)."""
    n = max(len(seen), 1)
    rewards = torch.tensor([t.total_reward for t in seen] or [0.0])
    return {"rollout_episodes": float(len(seen)), "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std(correction=0)), "success": sum(bool(t.correct) for t in seen) / n,
            "rewarded_incorrect": sum(t.total_reward > 0 and t.correct is False for t in seen) / n,
            "turns": sum(t.num_turns for t in seen) / n,
            "tool_calls": sum(len(turn.info.get("tool_calls") or []) for t in seen for turn in t.turns) / n,
            "error_episodes": float(sum(t.error is not None for t in seen)),
            "tampering_episodes": sum(any((turn.info.get("metrics") or {}).get("tampering", 0) > 0 for turn in t.turns)
                                      for t in seen) / n,
            **pag_summary(pag_episode(t) for t in seen)}


def whole_groups(trajectories: Sequence[Trajectory], want: int) -> list[Trajectory]:
    """The first groups (in order) whose episodes add up to at most ``want`` (at least one group): a batch is never
    filled by cutting a group in half (its group statistics would be of the part), so it may hold fewer than
    ``want`` when episodes that ended in an error left groups short."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id if t.group_id is not None else t.id, []).append(t)
    out: list[Trajectory] = []
    for members in groups.values():
        if out and len(out) + len(members) > want:
            break
        out += members
    return out


class OnPolicySource:
    """Fresh episodes of the current policy: ``prompts_per_step`` tasks × ``group_size`` samples per step.

    A data cursor walks the training env's task indices. With an algorithm that filters (DAPO's dynamic sampling),
    kept groups accumulate over up to ``algorithm.max_rounds`` rounds until the batch is full; episodes that ended
    in an error are never counted as kept (the learner leaves them out).
    """

    def __init__(self, cfg: TrainConfig, algorithm: Algorithm, runner: Runner) -> None:
        self.cfg, self.algorithm, self.runner = cfg, algorithm, runner
        self.cursor = 0
        self.n_tasks = len(make(cfg.env.id, **cfg.env.kwargs))

    def jobs(self, step: int, round_: int, first_task: int) -> list[Job]:
        """The jobs of one round: ``group_size`` samples of ``prompts_per_step`` consecutive tasks."""
        r = self.cfg.rollout
        tasks = [(first_task + k) % self.n_tasks for k in range(r.prompts_per_step)]
        return [Job(step, round_, t, s) for t in tasks for s in range(r.group_size)]

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Roll out this step's groups (see the class docstring)."""
        r = self.cfg.rollout
        want = r.prompts_per_step * r.group_size
        kept: list[Trajectory] = []
        seen: list[Trajectory] = []
        stats: dict[str, float] = {"generated_tokens": 0.0, "generate_s": 0.0}
        rounds = self.algorithm.max_rounds
        for round_ in range(rounds):
            jobs = self.jobs(step, round_, self.cursor)
            trajs, info = self.runner.run(jobs)
            order = {j.key: i for i, j in enumerate(jobs)}
            trajs = sorted(trajs, key=lambda t: order[t.metadata["job"]])  # job order, whoever finished first
            self.cursor = (self.cursor + r.prompts_per_step) % self.n_tasks
            for k, v in info.items():  # the runner's figures, added up over the rounds
                stats[k] = stats.get(k, 0.0) + v
            seen += trajs
            if rounds == 1:
                kept = trajs
                break
            ok = [t for t in trajs if t.error is None]
            kept += [t for t, keep in zip(ok, self.algorithm.keep(ok, r.max_new_tokens)) if keep]
            if len(kept) >= want:
                kept = whole_groups(kept, want)
                break
        return kept, {**stats, **rollout_metrics(seen)}

    def state_dict(self) -> dict[str, Any]:
        """The data cursor (and the runner's state, if it keeps one)."""
        runner = getattr(self.runner, "state_dict", None)
        return {"cursor": self.cursor, **({"runner": runner()} if runner is not None else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the data cursor."""
        self.cursor = state["cursor"]

    def reset(self) -> None:
        """A fresh run starts: forget what a runner kept of an earlier run in the same folder."""
        reset = getattr(self.runner, "reset", None)
        if reset is not None:
            reset()


class ReplaySource:
    """Stored Trajectories (JSONL or Parquet files) replayed in batches of ``batch_size``, reshuffled every epoch.

    Whole groups stay together (a batch is filled with groups, so group statistics are intact). The shuffle is
    seeded, and the position is saved, so a resumed run sees the same batches.

    Raises:
        ValueError: no file, an unreadable file, or no trajectory with token fields.
    """

    def __init__(self, paths: str | Path | Sequence[str | Path], batch_size: int, *, seed: int = 0,
                 shuffle: bool = True) -> None:
        from turnrl.storage import load

        files = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not files:
            raise ValueError("ReplaySource needs at least one JSONL or Parquet file")
        trajs = [t for f in files for t in load(f)]
        usable = [t for t in trajs if t.token_ids is not None]
        if not usable:
            raise ValueError(f"no trajectory with token fields in {[str(f) for f in files]}; record them with a "
                             "token-level rollout (turnrl.rl.rollout.Rollout)")
        groups: dict[str, list[Trajectory]] = {}
        for t in usable:
            groups.setdefault(t.group_id if t.group_id is not None else t.id, []).append(t)
        self.groups = list(groups.values())
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.groups)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups)

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The next ``batch_size`` episodes (whole groups; at least one group)."""
        out: list[Trajectory] = []
        while not out or len(out) + len(self.groups[self._order[self.position]]) <= self.batch_size:
            out += self.groups[self._order[self.position]]
            self.position += 1
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
        return out, {**rollout_metrics(out), "epoch": float(self.epoch)}

    def state_dict(self) -> dict[str, Any]:
        """Epoch and position in it."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._shuffled(self.epoch)
