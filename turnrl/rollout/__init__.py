"""The rollout engine: agents play environments into token-exact Trajectories (docs/concepts.md §5). Training
(:mod:`turnrl.rl.sources`), held-out evaluation, dataset collection, the gateway and the methods all play episodes
through this room; it sits above the agents and environments and below everything that trains
(docs/ARCHITECTURE.md).

* :mod:`~turnrl.rollout.engine` — :class:`Rollout`: batched multi-turn rollouts, continuous batching, windows;
* :mod:`~turnrl.rollout.episode` — an episode in play and the rollout's figures (:class:`RolloutStats`);
* :mod:`~turnrl.rollout.generation` — the calls that ask the agent for tokens, by what it can do;
* :mod:`~turnrl.rollout.play` — :func:`play`, the one function that plays jobs, under one seeding rule;
* :mod:`~turnrl.rollout.job` — :class:`Job`, one episode to play;
* :mod:`~turnrl.rollout.context` — histories rewritten under a token budget (:class:`ContextBudget`);
* :mod:`~turnrl.rollout.rewrite` — rollout hooks that replace sampled turns (:data:`Rewrite`);
* :mod:`~turnrl.rollout.stops` — stop strings across the pieces of a paused turn;
* :mod:`~turnrl.rollout.multi` — episodes of environments with several agents, a trajectory per seat.
"""

from turnrl.rollout.context import ContextBudget
from turnrl.rollout.engine import Rollout
from turnrl.rollout.episode import Episode, RolloutStats, token_crc
from turnrl.rollout.job import Job
from turnrl.rollout.play import Playing, batch_seed, env_seed, play, sample_seed, start_jobs
from turnrl.rollout.rewrite import Rewrite

__all__ = [
    "ContextBudget",
    "Episode",
    "Job",
    "Playing",
    "Rewrite",
    "Rollout",
    "RolloutStats",
    "batch_seed",
    "env_seed",
    "play",
    "sample_seed",
    "start_jobs",
    "token_crc",
]
