"""Successive batching (T-PPO, docs/algorithms.md §6): episodes played in windows of at most W generated tokens per
step.

Each step, the episodes still in play from the last step continue where they stopped (token-exact: their tokens,
log-probabilities and versions so far are kept, a turn paused mid-way resumes inside the same turn) and new tasks
fill the batch in whole groups; every episode then generates up to ``algorithm.window`` tokens. The step trains on
all of them: the finished Trajectories, and a snapshot of each unfinished one (``metadata["partial"]``, with
``metadata["window_start"]`` where its window began). The environments of unfinished episodes stay alive in this
process between steps, so the source runs on ``placement: local``.

Jobs and seeds follow the on-policy source's rule (:mod:`turnrl.rl.sources.play`): with a window no episode reaches,
this source plays exactly the on-policy source's episodes. A resumed run cannot bring back the environments of the
episodes that were in play when it stopped: their jobs are played again from the start (``regenerated_episodes``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from turnrl.agents.base import SamplingParams
from turnrl.envs.registry import make
from turnrl.rl.sources.base import ExperienceSource, Job, RunParts, rollout_metrics
from turnrl.rl.sources.play import batch_seed, start_jobs
from turnrl.rl.sources.rollout import Episode, Rollout
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.run.config import TrainConfig


class WindowedSource(ExperienceSource):
    """Fresh episodes played ``window`` tokens per step; unfinished ones carry over (see the module docstring).

    The batch holds ``prompts_per_step × group_size`` episodes: the carried ones, then as many new whole groups as
    fit (at least one per step when none fit, so that the run always takes new tasks).
    """

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """The on-policy checks, and ``placement: local`` (unfinished episodes' environments live in this process)."""
        super().check_config(cfg)
        if cfg.placement != "local":
            raise ValueError(f"algorithm {cfg.algorithm.name!r} plays episodes in windows and keeps the unfinished "
                             "ones' environments in the driver between steps, which runs on placement: local only; "
                             "set placement=local (Ray rollout workers do not carry episodes over yet)")

    def __init__(self, cfg: TrainConfig, algorithm: Any) -> None:
        self.cfg, self.algorithm = cfg, algorithm
        self.window: int = algorithm.cfg.window
        self.env = make(cfg.env.id, **cfg.env.kwargs)  # a probe: the task count and the env's episode figures
        self.n_tasks = len(self.env)
        self.cursor = 0
        self.carry: list[tuple[Job, Episode]] = []
        self.replay: list[Job] = []  # jobs in play when a resumed run stopped: played again from the start
        self.agent: Any = None
        self.version: Any = None

    def attach(self, parts: RunParts) -> None:
        """Keep the policy as an agent (it shares the learner's model) and its version."""
        self.agent, self.version = parts.agent, parts.version

    def new_jobs(self, step: int, room: int) -> list[Job]:
        """Jobs that fill ``room`` places in whole groups (at least one group): replayed ones first, then the next
        tasks of the data cursor."""
        g = self.cfg.rollout.group_size
        groups = max(room // g, 1)
        jobs: list[Job] = []
        while self.replay and len(jobs) < groups * g:
            jobs.append(self.replay.pop(0))
        for _ in range(groups - math.ceil(len(jobs) / g)):  # the groups the replayed jobs leave to fill
            jobs += [Job(step, 0, self.cursor, s) for s in range(g)]
            self.cursor = (self.cursor + 1) % self.n_tasks
        return jobs

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Play this step's window (see the module docstring)."""
        if self.agent is None:
            raise RuntimeError("WindowedSource has no agent: attach() the run's parts first")
        r = self.cfg.rollout
        replayed = len(self.replay)
        jobs = self.new_jobs(step, r.prompts_per_step * r.group_size - len(self.carry))
        replayed -= len(self.replay)
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                                seed=batch_seed(self.cfg.seed, step, 0))
        rollout = Rollout(self.agent, params, max_context=r.max_context, env_timeout=r.env_timeout,
                          policy_version=self.version, continuous=r.continuous_batching)
        fresh = start_jobs(rollout, self.cfg.env.id, self.cfg.env.kwargs, jobs, seed=self.cfg.seed,
                           per_episode_seeds=r.seed_per_episode or r.continuous_batching)
        playing = self.carry + list(zip(jobs, fresh))
        rollout.play([ep for _, ep in playing], self.window)
        trajs = [ep.traj if ep.done else rollout.snapshot(ep) for _, ep in playing]
        self.carry = [(j, ep) for j, ep in playing if not ep.done]
        finished = [ep.traj for _, ep in playing if ep.done]
        return trajs, {"generated_tokens": float(rollout.stats.generated_tokens),
                       "generate_s": rollout.stats.generate_s, "carried_episodes": float(len(self.carry)),
                       "new_episodes": float(len(jobs)), "regenerated_episodes": float(replayed),
                       **rollout_metrics(finished, self.env)}

    def state_dict(self) -> dict[str, Any]:
        """The data cursor and the jobs still in play (a resumed run plays them again from the start)."""
        return {"cursor": self.cursor, "in_play": [j.key for j, _ in self.carry] + [j.key for j in self.replay]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the cursor; the jobs that were in play are played again from the start."""
        self.cursor = state["cursor"]
        self.replay = [Job(*map(int, key.split("-"))) for key in state.get("in_play", [])]
        self.carry = []

    def reset(self) -> None:
        """A fresh run starts: nothing in play."""
        self.carry, self.replay, self.cursor = [], [], 0
