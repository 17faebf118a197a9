"""The one function that plays (task, sample) jobs: the on-policy source's runners, held-out evaluation and dataset
collection all call :func:`play`, under one seeding rule.

Seeding rule, for run seed ``seed`` and a :class:`~turnrl.rollout.job.Job` (step, round, task, sample):

* the environment of task ``i`` is reset with seed ``seed + i`` (and ``options={"index": i}``), so every sample of a
  task poses the same task;
* a generation batch (one call of :func:`play`) draws from ``seed·1000003 + step·101 + round + chunk·1000033``
  (:func:`batch_seed`; ``chunk`` numbers the calls that split one step's jobs, 0 in training);
* with ``per_episode_seeds`` each episode draws from its own stream (:func:`sample_seed`), so what it samples does
  not depend on how episodes are batched, chunked or spread over workers.

Evaluation and collection play step 0, round 0, so a sampled evaluation and a collected dataset draw the same
episode for task ``i``, sample ``s``; their chunks are numbered by their first task (a resumed collection draws the
same batch seeds).

Its namesake :mod:`turnrl.cli.play` is another concept, named after its command as every module of ``cli/`` is: a
person playing an environment from a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turnrl.agents.base import SamplingParams, capabilities_of
from turnrl.envs.core import TextEnv, close_all
from turnrl.envs.registry import make
from turnrl.rollout.context import ContextBudget
from turnrl.rollout.engine import Episode, Rewrite, Rollout
from turnrl.rollout.job import Job
from turnrl.rollout.tree import TreeSpec, play_tree
from turnrl.types import Trajectory
from turnrl.utils import run_with_daemon_threads


def batch_seed(seed: int, step: int, round_: int, chunk: int = 0) -> int:
    """The sampling seed of one generation batch (see the module docstring)."""
    return seed * 1_000_003 + step * 101 + round_ + chunk * 1_000_033


def sample_seed(seed: int, job: Job) -> int:
    """The sampling seed of one episode's own random stream (see the module docstring)."""
    return (seed * 1_000_003 + job.step * 7919 + job.round * 104_729 + job.task * 1_009 + job.sample) % 2**61


def env_seed(seed: int, job: Job) -> int:
    """The reset seed of the job's environment: one per task."""
    return seed + job.task


def supports_episode_seeds(agent: Any) -> bool:
    """Whether ``agent.generate`` takes one seed per prompt (``seeds=``; :class:`~turnrl.agents.base.Capabilities`)."""
    return capabilities_of(agent).seeds


@dataclass(frozen=True)
class Playing:
    """How the episodes of a :func:`play` call are played: what every call of one run, evaluation or collection
    shares (a per-call hook — the policy version, a sink, a rollout rewrite, the chunk, group ids, metadata — is an
    argument of :func:`play` instead).

    Attributes:
        params: sampling parameters (their ``seed`` is replaced by each batch's, :func:`batch_seed`).
        max_context: the longest context an episode may reach, in tokens (it is truncated there).
        env_timeout: seconds an environment's step may take (``None``: no limit).
        per_episode_seeds: each episode from its own stream; ``"auto"``: where the agent supports it.
        continuous: continuous batching across turns (see :class:`Rollout`); episodes then sample from their own
            streams where the agent supports them (as with ``"auto"``), so what they sample does not depend on when
            their turns joined the batch.
        context: keep each context under a token budget by rewriting the history (see :class:`Rollout`).
        tree: play each job as the root of a tree (:mod:`turnrl.rollout.tree`): its episode forks at the spec's
            turns, and the job yields every leaf (``metadata["job"]`` the job's key, ``metadata["tree"]`` the leaf's
            place; the tree's id is the job's key).
    """

    params: SamplingParams
    max_context: int
    env_timeout: float | None = None
    per_episode_seeds: bool | Literal["auto"] = "auto"
    continuous: bool = False
    context: ContextBudget | None = None
    tree: TreeSpec | None = None


def play(
    agent: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    jobs: Sequence[Job],
    *,
    seed: int,
    how: Playing,
    version: Callable[[], int] | None = None,
    sink: Callable[[Trajectory], Any] | None = None,
    rewrite: Rewrite | None = None,
    chunk: int = 0,
    group_id: Callable[[Job], str] | None = None,
    metadata: Callable[[Job], dict[str, Any]] | None = None,
) -> tuple[list[Trajectory], Rollout]:
    """Play ``jobs`` (all of one step and round) with ``agent`` in one batched token-exact :class:`Rollout`.

    Args:
        env_id, env_kwargs: the environment (one instance per job).
        seed: the run's seed (the module docstring's rule).
        how: how the episodes are played (:class:`Playing`: sampling, limits, seeds, batching, context, trees).
        version: the policy version, recorded at each episode's start and end.
        sink: called with each finished episode (journals, progress bars).
        rewrite: a rollout hook that may replace sampled turns (an algorithm's, e.g. PAG's verdict exploration).
        chunk: which of several calls for one step and round this is (its batch seed; see the module docstring).
        group_id: the group of a job's episode (default :attr:`Job.group_id`: samples of one task in one round).
        metadata: extra metadata per job; ``metadata["job"]`` is always the job's key.

    Returns:
        The Trajectories in job order (a tree's leaves in node order) and the rollout (its ``stats``).
    """
    if not jobs:
        return [], Rollout(agent, how.params, max_context=how.max_context, env_timeout=how.env_timeout)
    per_episode_seeds = how.per_episode_seeds
    if per_episode_seeds == "auto" or how.continuous:
        per_episode_seeds = supports_episode_seeds(agent)
    params = how.params.model_copy(update={"seed": batch_seed(seed, jobs[0].step, jobs[0].round, chunk)})
    rollout = Rollout(
        agent,
        params,
        max_context=how.max_context,
        env_timeout=how.env_timeout,
        policy_version=version,
        sink=sink,
        rewrite=rewrite,
        continuous=how.continuous,
        context=how.context,
    )
    episodes = start_jobs(
        rollout,
        env_id,
        env_kwargs,
        jobs,
        seed=seed,
        per_episode_seeds=bool(per_episode_seeds),
        group_id=group_id,
        metadata=metadata,
    )
    tree = how.tree
    if tree is not None:
        for ep in episodes:
            ep.traj.metadata["tree"] = {"root": ep.traj.metadata["job"]}
        leaves: list[Episode] = []
        try:
            leaves = run_with_daemon_threads(play_tree(rollout, episodes, tree))
        finally:  # every fork's environment too (a root's own is its first leaf's)
            close_all(list({id(ep.env): ep.env for ep in [*episodes, *leaves]}.values()))
        return [ep.traj for ep in leaves], rollout
    try:
        rollout.play(episodes)
    finally:  # the environments were made here: their sessions (a remote: server's) end here
        close_all([ep.env for ep in episodes])
    return [ep.traj for ep in episodes], rollout


def start_jobs(
    rollout: Rollout,
    env_id: str,
    env_kwargs: dict[str, Any],
    jobs: Sequence[Job],
    *,
    seed: int,
    per_episode_seeds: bool,
    group_id: Callable[[Job], str] | None = None,
    metadata: Callable[[Job], dict[str, Any]] | None = None,
) -> list[Episode]:
    """The episodes of ``jobs``, reset under the seeding rule (the module docstring) and ready for
    :meth:`Rollout.advance`: one environment per job, reset with the task's seed and index, grouped by
    ``group_id`` (default :attr:`Job.group_id`), ``metadata["job"]`` the job's key, and with ``per_episode_seeds``
    each its own sampling stream."""
    return rollout.start(
        [_make(env_id, env_kwargs) for _ in jobs],
        seeds=[env_seed(seed, j) for j in jobs],
        options=[{"index": j.task} for j in jobs],
        group_ids=[(group_id or (lambda j: j.group_id))(j) for j in jobs],
        sample_seeds=[sample_seed(seed, j) if per_episode_seeds else None for j in jobs],
        metadata=[{**(metadata(j) if metadata else {}), "job": j.key} for j in jobs],
    )


class Unbuilt(TextEnv):
    """Stands for an environment that could not be made (e.g. its server refused the session): its reset raises
    why, so that only its episode fails."""

    def __init__(self, env_id: str, error: Exception) -> None:
        super().__init__()
        self.env_id, self.error = env_id, error

    def _reset(self, options: dict[str, Any]) -> Any:
        raise RuntimeError(f"making {self.env_id} failed: {type(self.error).__name__}: {self.error}")


def _make(env_id: str, env_kwargs: dict[str, Any]) -> TextEnv:
    try:
        return make(env_id, **env_kwargs)
    except Exception as e:  # one environment that cannot be made fails its episode, not the step
        return Unbuilt(env_id, e)
