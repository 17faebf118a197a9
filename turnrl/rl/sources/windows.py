"""One window of T-PPO's successive batching (docs/algorithms.md §6), played where the episodes live: in this
process (:class:`LocalWindows`) or, on Ray, in a rollout worker (``RolloutWorker.play_window``) — both call
:func:`play_window`. The source that decides what to play is :mod:`turnrl.rl.sources.windowed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turnrl.agents.base import SamplingParams
from turnrl.envs.core import close_all
from turnrl.rl.sources.base import Job
from turnrl.rollout.engine import Episode, Rollout
from turnrl.rollout.play import batch_seed, start_jobs
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.config import EnvConfig, RolloutConfig


@dataclass
class Window:
    """What one window of play gave: the episodes that finished, snapshots of the unfinished ones (when asked for),
    the jobs still in play, the jobs whose episodes were lost (to play again from the start) and figures."""

    finished: list[Trajectory] = field(default_factory=list)
    snapshots: list[Trajectory] = field(default_factory=list)
    in_play: list[Job] = field(default_factory=list)
    lost: list[Job] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)


def play_window(
    env: EnvConfig,
    r: RolloutConfig,
    seed: int,
    agent: Any,
    version: Callable[[], int] | None,
    carry: Sequence[tuple[Job, Episode]],
    jobs: Sequence[Job],
    step: int,
    window: int,
    *,
    per_episode_seeds: bool,
    snapshots: bool,
) -> tuple[Window, list[tuple[Job, Episode]]]:
    """Continue the ``carry`` episodes and start ``jobs``, each for at most ``window`` generated tokens; the
    :class:`Window` and the (job, episode) pairs still in play. ``env`` and ``r`` are the run's ``env`` and
    ``rollout`` sections, ``seed`` its seed."""
    params = SamplingParams(
        temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens, seed=batch_seed(seed, step, 0)
    )
    rollout = Rollout(
        agent,
        params,
        max_context=r.max_context,
        env_timeout=r.env_timeout,
        policy_version=version,
        continuous=r.continuous_batching,
    )
    fresh = start_jobs(rollout, env.id, env.kwargs, jobs, seed=seed, per_episode_seeds=per_episode_seeds)
    playing = list(carry) + list(zip(jobs, fresh))
    rollout.play([ep for _, ep in playing], window)
    still = [(j, ep) for j, ep in playing if not ep.done]
    close_all([ep.env for _, ep in playing if ep.done])  # finished: their environments are done with
    out = Window(
        finished=[ep.traj for _, ep in playing if ep.done],
        snapshots=[rollout.snapshot(ep) for _, ep in still] if snapshots else [],
        in_play=[j for j, _ in still],
        stats={"generated_tokens": float(rollout.stats.generated_tokens), "generate_s": rollout.stats.generate_s},
    )
    return out, still


class LocalWindows:
    """Plays windows in the process it lives in (the driver's with ``placement: local``, a Ray rollout worker's);
    the unfinished episodes, their environments alive, stay with it. It reads the run's ``env`` and ``rollout``
    sections and its seed; ``per_episode_seeds`` None: the rollout section's rule (``seed_per_episode`` or
    ``continuous_batching``)."""

    def __init__(
        self,
        env: EnvConfig,
        rollout: RolloutConfig,
        seed: int,
        agent: Any,
        version: Callable[[], int],
        per_episode_seeds: bool | None = None,
    ) -> None:
        self.env, self.rollout, self.seed = env, rollout, seed
        self.agent, self.version = agent, version
        r = rollout
        self.per_episode_seeds = (
            (r.seed_per_episode or r.continuous_batching) if per_episode_seeds is None else per_episode_seeds
        )
        self.in_play: dict[str, tuple[Job, Episode]] = {}

    def play(self, step: int, carried: Sequence[Job], jobs: Sequence[Job], window: int, snapshots: bool) -> Window:
        """One window of the ``carried`` jobs' episodes and of new ``jobs``. A carried job whose episode is not held
        here is in ``lost``; an episode held but not carried on (let go by the driver) is closed."""
        keys = {j.key for j in carried}
        for key in [k for k in self.in_play if k not in keys]:
            try:
                self.in_play.pop(key)[1].env.close()
            except Exception:  # an environment that fails to close is let go all the same
                pass
        lost = [j for j in carried if j.key not in self.in_play]
        carry = [self.in_play[j.key] for j in carried if j.key in self.in_play]
        out, still = play_window(
            self.env,
            self.rollout,
            self.seed,
            self.agent,
            self.version,
            carry,
            jobs,
            step,
            window,
            per_episode_seeds=self.per_episode_seeds,
            snapshots=snapshots,
        )
        self.in_play = {j.key: (j, ep) for j, ep in still}
        out.lost = lost
        return out

    def close(self) -> None:
        """Close the environments of the episodes still held (a run that ends with episodes in play)."""
        close_all([ep.env for _, ep in self.in_play.values()])
        self.in_play.clear()
