"""The on-policy source: fresh episodes of the current policy, with the algorithm's filter (DAPO's dynamic sampling:
groups without reward variance are dropped and more are sampled). *Where* the episodes run is a
:class:`~turnrl.rl.sources.base.Runner`: in this process (:class:`LocalRunner`) or on Ray rollout workers
(:class:`turnrl.rl.placement.ray.RayRunner`); both play jobs with :func:`turnrl.rollout.play.play`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turnrl.agents.base import SamplingParams
from turnrl.envs.fork import fork_refusal
from turnrl.envs.registry import make
from turnrl.rl.algorithms.base import Algorithm
from turnrl.rl.config import TrainConfig
from turnrl.rl.config.algorithm import AlgorithmConfig
from turnrl.rl.config.sections import EnvConfig, RolloutConfig
from turnrl.rl.sources.base import (
    ExperienceSource,
    Job,
    Runner,
    RunParts,
    rollout_metrics,
    task_jobs,
    whole_groups,
)
from turnrl.rl.sources.reward import process_metrics, process_rewards, reward_metrics, run_reward
from turnrl.rl.sources.tasks import Sequential, group_success, make_sampler
from turnrl.rollout.context import ContextBudget
from turnrl.rollout.engine import Rollout
from turnrl.rollout.play import Playing, batch_seed, play
from turnrl.rollout.tree import TreeSpec
from turnrl.types import Trajectory


def context_budget(rollout: RolloutConfig) -> ContextBudget | None:
    """The run's context management (``rollout.context``), or None."""
    c = rollout.context
    return None if c is None else ContextBudget(c.budget, c.mode, c.summary_tokens)


def tree_spec(rollout: RolloutConfig) -> TreeSpec | None:
    """The run's tree rollouts (``rollout.tree``), or None (chains)."""
    return None if rollout.tree is None else rollout.tree.spec()


def play_jobs(
    env: EnvConfig,
    rollout: RolloutConfig,
    algorithm: AlgorithmConfig,
    seed: int,
    agent: Any,
    jobs: Sequence[Job],
    version: Callable[[], int],
    *,
    per_episode_seeds: bool,
    sink: Callable[[Trajectory], Any] | None = None,
) -> tuple[list[Trajectory], Rollout]:
    """Play a training round's ``jobs`` as the run's sections say — the environment, the rollout's sampling and
    limits, the algorithm's rollout hook, the run's seed; the Trajectories in job order and the rollout (its
    stats)."""
    from turnrl.rl.algorithms import get_algorithm

    r = rollout
    params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
    hook = (
        get_algorithm(algorithm).rollout_hook(agent, r.temperature, batch_seed(seed, jobs[0].step, jobs[0].round))
        if jobs
        else None
    )
    how = Playing(
        params,
        r.max_context,
        env_timeout=r.env_timeout,
        per_episode_seeds=per_episode_seeds,
        continuous=r.continuous_batching,
        context=context_budget(r),
        tree=tree_spec(r),
    )
    return play(agent, env.id, env.kwargs, jobs, seed=seed, how=how, version=version, sink=sink, rewrite=hook)


class LocalRunner:
    """Plays jobs in this process with an agent that shares the learner's model (no weight copies)."""

    def __init__(
        self,
        env: EnvConfig,
        rollout: RolloutConfig,
        algorithm: AlgorithmConfig,
        seed: int,
        agent: Any,
        version: Callable[[], int],
    ) -> None:
        self.env, self.rollout, self.algorithm, self.seed = env, rollout, algorithm, seed
        self.agent, self.version = agent, version

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """One batched rollout over all jobs."""
        trajs, rollout = play_jobs(
            self.env,
            self.rollout,
            self.algorithm,
            self.seed,
            self.agent,
            jobs,
            self.version,
            per_episode_seeds=self.rollout.seed_per_episode,
        )
        return trajs, {
            "generated_tokens": float(rollout.stats.generated_tokens),
            "generate_s": rollout.stats.generate_s,
        }

    def prefetch(self, jobs: Sequence[Job], start: bool = True) -> None:
        """Nothing: one process cannot generate while it updates (max_staleness must be 0 here)."""

    def state_dict(self) -> dict[str, Any]:
        """Nothing to keep: the episodes are in the source's step."""
        return {}

    def reset(self) -> None:
        """Nothing to forget."""

    def close(self) -> None:
        """Nothing to release."""

    def windows(self) -> None:
        """None: windows are played in this process (:class:`~turnrl.rl.sources.windows.LocalWindows`)."""
        return None


class OnPolicySource(ExperienceSource):
    """Fresh episodes of the current policy: ``prompts_per_step`` tasks × ``group_size`` samples per step.

    The run's task sampler (``tasks:``, :mod:`turnrl.rl.sources.tasks`; default: the task indices in order) chooses
    each round's tasks and sees the success of every group played, and each round's choice is appended to
    ``OUT_DIR/tasks.jsonl`` (step, round, tasks, their mixture members and the pass rates the sampler assumed). With ``rollout.max_staleness`` ≥ 1 the next step's jobs
    are handed to the runner ahead (:meth:`~turnrl.rl.sources.base.Runner.prefetch`), so that Ray rollout workers
    play them while the learner updates. With an algorithm that filters (DAPO's dynamic sampling),
    kept groups accumulate over up to ``algorithm.max_rounds`` rounds until the batch is full; episodes that ended
    in an error are never counted as kept (the learner leaves them out).
    """

    samples_tasks = True
    scores_episodes = True
    plays_games = True

    def __init__(self, cfg: TrainConfig, algorithm: Algorithm, runner: Runner | None = None) -> None:
        self.cfg, self.algorithm, self._runner = cfg, algorithm, runner
        self._make_runner: Callable[[], Runner] | None = None
        self.env = make(cfg.env.id, **cfg.env.kwargs)  # a probe: the task count and the env's episode figures
        if cfg.rollout.tree is not None and (why := fork_refusal(self.env)) is not None:
            self.env.close()
            raise ValueError(f"rollout.tree forks episodes mid-way, and {why}")
        self.n_tasks = len(self.env)  # type: ignore[arg-type]  # an env that poses no numbered tasks: TypeError
        self.sampler = make_sampler(cfg.tasks, self.env, cfg.seed)
        self.reward = run_reward(cfg.reward, self.env)
        self.process = process_rewards(cfg.process_reward)
        self._prepared: dict[str, float] | None = None

    @property
    def runner(self) -> Runner:
        """Where the jobs run: given, or the placement's (built on first use, once the learner exists)."""
        if self._runner is None:
            if self._make_runner is None:
                raise RuntimeError("OnPolicySource has no runner: pass one, or attach() the run's parts first")
            self._runner = self._make_runner()
        return self._runner

    def attach(self, parts: RunParts) -> None:
        """Keep the placement's runner factory (:meth:`start` builds the runner once the learner exists); build the
        reward's judge."""
        self._make_runner = parts.runner
        if self.reward is not None:
            self.reward.attach(parts.agent)
        if self.process is not None:
            self.process.attach(parts.tokenizer)

    def start(self) -> None:
        """Start the placement's runner (Ray workers start here; a placement that cannot work fails here)."""
        _ = self.runner

    def group_size(self) -> int | None:
        """Whole groups of ``rollout.group_size``, errors included — unless the algorithm filters over several rounds
        (DAPO's dynamic sampling leaves out episodes that ended in an error), or episodes grow as trees (a tree
        whose episodes end before a branch has fewer leaves)."""
        if self.algorithm.max_rounds > 1 or self.cfg.rollout.tree is not None:
            return None
        return self.cfg.rollout.group_size

    def jobs(self, step: int, round_: int) -> list[Job]:
        """The jobs of one round: ``group_size`` samples of each of the ``prompts_per_step`` tasks the sampler
        chooses (the same jobs however often a round is asked for); with ``rollout.tree`` one job per tree, each
        yielding its leaves (``group_size / leaves`` trees a task)."""
        r = self.cfg.rollout
        per_task = r.group_size // r.tree.leaves if r.tree is not None else r.group_size
        return task_jobs(step, round_, self.sampler.tasks(step, round_, r.prompts_per_step), per_task)

    def _prepare(self) -> dict[str, float]:
        """The sampler's work before the first step (Pre-PPO scores its pool with the runner), once."""
        if self._prepared is not None:
            return {}

        def play(tasks: list[int], samples: int) -> list[tuple[int, float]]:
            jobs = [Job(-1, 0, t, s) for t in tasks for s in range(samples)]
            size = self.cfg.rollout.prompts_per_step * self.cfg.rollout.group_size
            out = []
            for start in range(0, len(jobs), size):  # a training step's worth of episodes at a time
                trajs, _ = self.runner.run(jobs[start : start + size])
                if self.reward is not None:
                    self.reward.apply(trajs)
                out += [(Job.parse(t.metadata["job"]).task, t.total_reward) for t in trajs if t.error is None]
            return out

        self._prepared = self.sampler.prepare(play)
        return self._prepared

    def _log(self, jobs: list[Job]) -> None:
        """Append a round's choice to OUT_DIR/tasks.jsonl."""
        tasks = list(dict.fromkeys(j.task for j in jobs))
        if not tasks:
            return
        members = [self.sampler.pool.names[int(self.sampler.pool.member[t])] for t in tasks]
        row = {
            "step": jobs[0].step,
            "round": jobs[0].round,
            "tasks": tasks,
            "members": members,
            "pass_estimates": self.sampler.assumed(jobs[0].step, jobs[0].round, tasks),
        }
        path = Path(self.cfg.out_dir) / "tasks.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """Roll out this step's groups (see the class docstring)."""
        r = self.cfg.rollout
        want = r.prompts_per_step * r.group_size
        kept: list[Trajectory] = []
        seen: list[Trajectory] = []
        stats: dict[str, float] = {"generated_tokens": 0.0, "generate_s": 0.0, **self._prepare()}
        rounds = self.algorithm.max_rounds
        chosen: list[int] = []
        ahead = r.max_staleness > 0  # overlap: the next step's first round plays while this one and the update run
        first = self.jobs(step, 0)
        if ahead and rounds == 1:  # its tasks are known now (no extra rounds): workers that finish this step's jobs
            self.runner.prefetch(self.jobs(step + 1, 0), start=False)  # early start on them
        for round_ in range(rounds):
            jobs = first if round_ == 0 else self.jobs(step, round_)
            self._log(jobs)
            chosen += list(dict.fromkeys(j.task for j in jobs))
            trajs, info = self.runner.run(jobs)
            if round_ == 0 and len(trajs) > len(jobs) and r.tree is None:  # a game's seats: several views a job
                want *= round(len(trajs) / len(jobs))
            order = {j.key: i for i, j in enumerate(jobs)}
            trajs = sorted(trajs, key=lambda t: order[t.metadata["job"]])  # job order, whoever finished first
            if self.reward is not None:
                self.reward.apply(trajs)
            if self.process is not None:
                self.process.apply(trajs)
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
        stats.update(self.sampler.metrics(chosen))
        self.sampler.observe(step, group_success(seen))
        if ahead:
            self.runner.prefetch(self.jobs(step + 1, 0))
        self.first_error = next((t.error for t in seen if t.error is not None), None)  # (the driver quotes it)
        return kept, {**stats, **self.step_metrics(seen)}

    def step_metrics(self, seen: Sequence[Trajectory]) -> dict[str, float]:
        """The figures of every episode played this step (rollout, the environment's own, rewards)."""
        return {**rollout_metrics(seen, self.env), **reward_metrics(seen), **process_metrics(seen)}

    def state_dict(self) -> dict[str, Any]:
        """The task sampler's state (what it chose ahead, what it learned of the tasks) and the runner's."""
        return {"tasks": self.sampler.state_dict(), "prepared": self._prepared, "runner": self.runner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the task sampler (a checkpoint from before samplers existed holds a plain data cursor)."""
        if "tasks" in state:
            self.sampler.load_state_dict(state["tasks"])
            self._prepared = state.get("prepared")
        elif isinstance(self.sampler, Sequential):
            self.sampler.cursors = [int(state["cursor"])]
        else:
            raise ValueError("this checkpoint predates task samplers: resume it with the default `tasks:` (sequential)")

    def close(self) -> None:
        """Close the probe environment."""
        self.env.close()

    def reset(self) -> None:
        """A fresh run starts: forget what the runner kept, and the task choices logged, of an earlier run in the same
        folder."""
        self.runner.reset()
        (Path(self.cfg.out_dir) / "tasks.jsonl").unlink(missing_ok=True)
