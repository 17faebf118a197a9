"""Successive batching (T-PPO, docs/algorithms.md §6): episodes played in windows of at most W generated tokens per
step.

Each step, the episodes still in play from the last step continue where they stopped (token-exact: their tokens,
log-probabilities and versions so far are kept, a turn paused mid-way resumes inside the same turn) and new tasks
fill the batch in whole groups (``algorithm.refill``: the places the carried ones leave, or always
``prompts_per_step`` groups); every episode then generates up to ``algorithm.window`` tokens. The step trains on
all of them: the finished Trajectories, and a snapshot of each unfinished one (``metadata["partial"]``, with
``metadata["window_start"]`` where its window began) — or, with ``algorithm.train_on: finished``, on the groups
all of whose episodes have finished, whole (a group's short answers wait for its long ones, so that no step trains
a task's quick answers without its slow ones: that would tilt every update toward whatever is not yet finished),
with ``algorithm.min_groups`` held until that many groups are ready, then trained together (not during the critic
warm-up nor for the first policy update: see :meth:`WindowedSource.groups_needed`).

Where the episodes live between steps: with ``placement: local`` in this process (:class:`LocalWindows`); with
``placement: ray`` in the rollout worker that began them (:class:`turnrl.rl.placement.ray_windows.RayWindows`: an
unfinished episode always continues on its own worker, whose environments and KV caches hold it). Both play a
window with :func:`turnrl.rl.sources.windows.play_window`.

Jobs and seeds follow the on-policy source's rule (:mod:`turnrl.rollout.play`): with a window no episode reaches,
this source plays exactly the on-policy source's episodes. An episode whose environment is gone — a resumed run
(the driver stopped), a rollout worker that died — is played again from the start (``regenerated_episodes``): a
finished episode is trained once, never twice, and nothing of a lost one is trained after it is lost.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from turnrl.envs.registry import make
from turnrl.rl.sources.base import ExperienceSource, Job, RunParts, oldest_version, rollout_metrics, task_jobs
from turnrl.rl.sources.reward import process_metrics, process_rewards, reward_metrics, run_reward
from turnrl.rl.sources.tasks import Sequential, group_success, make_sampler
from turnrl.rl.sources.windows import LocalWindows
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class WindowedSource(ExperienceSource):
    """Fresh episodes played ``window`` tokens per step; unfinished ones carry over (see the module docstring).

    The batch holds the carried episodes and new whole groups: with ``algorithm.refill: fit`` as many as fit in
    ``prompts_per_step × group_size`` places (at least one per step when none fit, so that the run always takes new
    tasks); with ``refill: prompts`` always ``prompts_per_step`` of them, the carried episodes on top.
    """

    samples_tasks = True
    scores_episodes = True

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """The on-policy checks, and no overlap of steps (the windows are T-PPO's own)."""
        super().check_config(cfg)
        if cfg.tasks.strategy == "pre-ppo":
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} plays episodes in windows and cannot score a Pre-PPO "
                "pool first: use tasks.strategy difficulty, uniform or curriculum"
            )
        if cfg.rollout.max_staleness > 0:
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} plays episodes in windows, which bound every step's "
                "generation instead of overlapping steps: set rollout.max_staleness=0"
            )

    def __init__(self, cfg: TrainConfig, algorithm: Any) -> None:
        self.cfg, self.algorithm = cfg, algorithm
        self.window: int = algorithm.cfg.window
        self.env = make(cfg.env.id, **cfg.env.kwargs)  # a probe: the task count and the env's episode figures
        self.n_tasks = len(self.env)  # type: ignore[arg-type]  # an env that poses no numbered tasks: TypeError
        self.sampler = make_sampler(cfg.tasks, self.env, cfg.seed)
        self.reward = run_reward(cfg.reward, self.env)
        self.process = process_rewards(cfg.process_reward)
        self.carry: list[Job] = []  # the jobs whose episodes are in play (held by :attr:`player`)
        self.replay: list[Job] = []  # jobs whose episodes were lost (a resumed run, a dead worker): played again
        self.waiting: dict[str, list[Trajectory]] = {}  # train_on finished: finished episodes of unfinished groups
        self.ready: list[Trajectory] = []  # train_on finished with min_groups: whole groups held for the next update
        self.parts: RunParts | None = None
        self._player: Any = None

    def attach(self, parts: RunParts) -> None:
        """Keep the run's parts: the policy as an agent (it shares the learner's model), its version, the runner;
        build the reward's judge."""
        self.parts = parts
        if self.reward is not None:
            self.reward.attach(parts.agent)
        if self.process is not None:
            self.process.attach(parts.tokenizer)

    def start(self) -> None:
        """Start the player: in this process, or (``placement: ray``) on the placement's rollout workers."""
        _ = self.player

    @property
    def player(self) -> Any:
        """Where the windows are played (see the module docstring); built on first use."""
        if self._player is None:
            if self.parts is None:
                raise RuntimeError("WindowedSource has no agent: attach() the run's parts first")
            if self.cfg.placement == "ray":  # on the workers, through the placement's runner
                self._player = self.parts.runner().windows()
            else:
                self._player = LocalWindows(
                    self.cfg.env, self.cfg.rollout, self.cfg.seed, self.parts.agent, self.parts.version
                )
        return self._player

    def new_jobs(self, step: int, room: int) -> list[Job]:
        """Jobs that fill ``room`` places in whole groups (at least one group): replayed ones first, then the next
        tasks the task sampler chooses."""
        g = self.cfg.rollout.group_size
        groups = max(room // g, 1)
        jobs: list[Job] = []
        while self.replay and len(jobs) < groups * g:
            jobs.append(self.replay.pop(0))
        new = groups - math.ceil(len(jobs) / g)  # the groups the replayed jobs leave to fill
        return jobs + (task_jobs(step, 0, self.sampler.tasks(step, 0, new), g) if new > 0 else [])

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Play this step's window (see the module docstring)."""
        r = self.cfg.rollout
        replayed = len(self.replay)
        room = r.prompts_per_step * r.group_size
        if self.algorithm.cfg.refill == "fit":
            room -= len(self.carry)
        jobs = self.new_jobs(step, room)
        replayed -= len(self.replay)
        whole = self.algorithm.cfg.train_on == "finished"
        out = self.player.play(step, self.carry, jobs, self.window, snapshots=not whole)
        self.carry = out.in_play
        self.replay += out.lost
        if self.reward is not None:  # finished episodes only: a snapshot's reward is still to come
            self.reward.apply(out.finished)
        if self.process is not None:
            self.process.apply(out.finished)
        trajs = out.finished + out.snapshots
        self.sampler.observe(step, group_success(out.finished))
        if whole:
            now = self.parts.version() if self.parts is not None else 0
            for traj in out.finished:  # set aside for its group: the staleness bound measures from here (lag())
                traj.metadata["finished_at_version"] = now
            trajs = self.complete_groups(out.finished)
        held = [
            self.parts.version() - int(t.metadata["finished_at_version"])
            for t in trajs
            if self.parts is not None and "finished_at_version" in t.metadata
        ]
        return trajs, {
            **out.stats,
            "carried_episodes": float(len(self.carry)),
            "new_episodes": float(len(jobs)),
            **({"held_versions_max": float(max(held))} if held else {}),
            "regenerated_episodes": float(replayed),
            "lost_episodes": float(len(out.lost)),
            "waiting_episodes": float(sum(map(len, self.waiting.values()))),
            "ready_episodes": float(len(self.ready)),
            **rollout_metrics(out.finished, self.env),
            **reward_metrics(out.finished),
            **process_metrics(out.finished),
        }

    def complete_groups(self, finished: list[Trajectory]) -> list[Trajectory]:
        """``train_on: finished``: add ``finished`` to the waiting groups; the groups none of whose episodes is still
        in play (or to be played again), whole — with ``algorithm.min_groups``, held until that many are ready, then
        all of them."""
        for traj in finished:
            self.waiting.setdefault(str(traj.group_id), []).append(traj)
        open_groups = {j.group_id for j in self.carry + self.replay}
        done = [g for g in self.waiting if g not in open_groups]
        self.ready += [traj for g in done for traj in self.waiting.pop(g)]
        if len({str(t.group_id) for t in self.ready}) < self.groups_needed():
            return []
        ready, self.ready = self.ready, []
        return ready

    def group_size(self) -> int | None:
        """With ``train_on: finished``, whole groups of ``rollout.group_size``; with ``train_on: window`` a group's
        episodes that finished in earlier windows are not in a later step's batch (by design)."""
        return self.cfg.rollout.group_size if self.algorithm.cfg.train_on == "finished" else None

    def lag(self, traj: Trajectory, version: int) -> int | None:
        """The lag the driver's ``rollout.max_staleness`` (0 for T-PPO) bounds: of the episode's last window, from
        the version that held the weights when the episode finished — with ``train_on: finished`` a quick answer
        waits for its group's slow ones across updates (``held_versions_max`` reports how many), on purpose, and is
        not stale for that (docs/algorithms.md §6, §11). The lag this source produces by design — the earlier
        windows of a carried episode, the wait of a held one — is what ``optim.recompute_logprobs`` with
        ``algorithm.behaviour_is_cap`` corrects (decoupled PPO)."""
        oldest = oldest_version(traj)
        if oldest is None:
            return None
        return int(traj.metadata.get("finished_at_version", version)) - oldest

    def groups_needed(self) -> int:
        """How many whole groups the next update needs: ``algorithm.min_groups``, but one during the critic warm-up
        (its updates train no policy, which is what ``min_groups`` guards, and counting only updates it would
        otherwise end steps later than an unwindowed run's) and for the first update that trains the policy (the
        warm-up trained every group that had finished, so only this step's quick groups are ready: holding them
        would start the actor a step later than an unwindowed run's, and they are not the few slow groups that
        ``min_groups`` keeps from making an update alone)."""
        if self.parts is None:
            return self.algorithm.cfg.min_groups or 1
        version = self.parts.version()
        policy_trained = version > 0 and self.algorithm.trains_policy(version - 1)  # by the update before this one
        return (self.algorithm.cfg.min_groups or 1) if policy_trained else 1

    def close(self) -> None:
        """Close the probe environment and (in this process) the episodes' still in play."""
        self.env.close()
        if isinstance(self._player, LocalWindows):
            self._player.close()

    def state_dict(self) -> dict[str, Any]:
        """The task sampler's state and the jobs still in play or waiting for their group (a resumed run plays them again from
        the start)."""
        waiting = [str(t.metadata["job"]) for group in [*self.waiting.values(), self.ready] for t in group]
        return {
            "tasks": self.sampler.state_dict(),
            "in_play": [j.key for j in self.carry] + [j.key for j in self.replay] + waiting,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the task sampler; the jobs that were in play are played again from the start."""
        if "tasks" in state:
            self.sampler.load_state_dict(state["tasks"])
        elif isinstance(self.sampler, Sequential):  # a checkpoint from before task samplers: a plain cursor
            self.sampler.cursors = [int(state["cursor"])]
        else:
            raise ValueError("this checkpoint predates task samplers: resume it with the default `tasks:` (sequential)")
        self.replay = [Job.parse(key) for key in state.get("in_play", [])]
        self.carry, self.waiting, self.ready = [], {}, []

    def reset(self) -> None:
        """A fresh run starts: nothing in play."""
        self.carry, self.replay, self.waiting, self.ready = [], [], {}, []
        self.sampler = make_sampler(self.cfg.tasks, self.env, self.cfg.seed)
