"""What an experience source is (docs/concepts.md §8): "give me this step's Trajectories", and the pieces every
source shares — the rollout metrics of a step, whole groups.

An algorithm names its source class (:attr:`turnrl.rl.algorithms.base.Algorithm.source`); the trainer calls, in
order: :meth:`ExperienceSource.check_config` (while the run config validates), :meth:`~ExperienceSource.open` (before
the model loads: read and check data), :meth:`~ExperienceSource.configure` (derived settings, e.g. ``steps`` from
``data.epochs``), :meth:`~ExperienceSource.attach` (the policy is loaded), :meth:`~ExperienceSource.start` (the
learner exists), then per step
:meth:`~ExperienceSource.collect`, and ``state_dict``/``load_state_dict`` at checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from turnrl.agents.kv import trajectory_kv_metrics
from turnrl.rollout.job import Job
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class Runner(Protocol):
    """Plays jobs with the current policy (in this process, or on Ray rollout workers); returns the Trajectories (one
    per job, any order) and metrics. Its state (a journal of finished episodes) is saved with the source's."""

    def run(self, jobs: Sequence[Job]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job once."""
        ...

    def prefetch(self, jobs: Sequence[Job], start: bool = True) -> None:
        """Queue a later step's jobs (``rollout.max_staleness`` ≥ 1): with ``start`` idle workers begin them now,
        while the learner updates; otherwise once the next :meth:`run` leaves a worker without jobs of its own step.
        A runner that cannot overlap rollouts with updates does nothing (they run with :meth:`run`)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs of the runner ({} when nothing)."""
        ...

    def reset(self) -> None:
        """A fresh run starts: forget what was kept of an earlier run in the same folder."""
        ...

    def close(self) -> None:
        """Release workers and other resources."""
        ...

    def windows(self) -> Any:
        """A player of T-PPO's windows on this runner's workers, where episodes live on workers (placement ray:
        :class:`~turnrl.rl.placement.ray_windows.RayWindows`); None where they are played in this process."""
        ...


@dataclass
class RunParts:
    """What a source may use once the policy is loaded.

    Attributes:
        agent: the policy being trained, as an agent (in this process it shares the learner's model).
        tokenizer: the policy's tokenizer.
        version: the learner's current policy version.
        runner: the placement's :class:`Runner` (built on first call; only on-policy sources ask for one).
        policies: a run with several trainable policies (``multi_agent.policies``): each one's agent by name
            (``agent`` is the first); empty with one policy.
    """

    agent: Any
    tokenizer: Any
    version: Callable[[], int]
    runner: Callable[[], Runner]
    policies: Mapping[str, Any] = field(default_factory=dict)


def data_readers() -> list[str]:
    """The registered algorithms whose experience source reads ``data:`` (for error messages)."""
    from turnrl.rl.algorithms import AlgorithmRegistrationError, algorithm_class, algorithm_names

    out = []
    for name in algorithm_names():
        try:
            if algorithm_class(name).source_class().reads_data:
                out.append(name)
        except AlgorithmRegistrationError:
            continue
    return out


class ExperienceSource:
    """Where a training step's Trajectories come from (see the module docstring for the call order).

    Subclasses implement :meth:`collect`, :meth:`state_dict` and :meth:`load_state_dict`, and override the rest
    where they need to.
    """

    #: Whether the episodes are the policy's own samples (monitors check sampling health only then).
    sampled: ClassVar[bool] = True
    #: Whether the source reads ``data:`` (stored episodes or states); ``check_config`` enforces it both ways.
    reads_data: ClassVar[bool] = False
    #: Whether the source's tasks come from the run's task sampler (``tasks:``); others refuse a ``tasks`` section.
    samples_tasks: ClassVar[bool] = False
    #: Whether the source scores its episodes with the run's ``reward:`` spec; others refuse one.
    scores_episodes: ClassVar[bool] = False
    #: Whether the source plays environments with several agents (the on-policy one does, with games for episodes).
    plays_games: ClassVar[bool] = False
    #: The first error among the episodes the last ``collect`` played (None: none failed, or not recorded); the
    #: driver quotes it when a step's episodes failed, also those a source played but did not return (DAPO's
    #: dynamic sampling drops failed episodes).
    first_error: str | None = None

    def close(self) -> None:
        """Release what the source holds for the run (e.g. the environment it reads task counts from: a ``remote:``
        server's session ends then); the trainer calls it once, at the end. Nothing by default."""

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """Raise ValueError if the run's settings cannot work with this source (called while the config validates).

        Default: ``data`` is set exactly when the source reads it.
        """
        name = cfg.algorithm.name
        if cfg.multi_agent is not None and not cls.plays_games:
            raise ValueError(
                f"{cfg.env.id} has several agents, which train with an on-policy algorithm that plays "
                f"whole games (grpo, rloo, dapo, ppo, reinforce++); algorithm {name!r} does not"
            )
        if cls.reads_data and cfg.data is None:
            raise ValueError(
                f"algorithm {name!r} trains from stored data: set data.path (e.g. data: {{path: "
                "runs/arith-data.parquet}})"
            )
        if not cls.reads_data and cfg.data is not None:
            raise ValueError(
                f"algorithm {name!r} samples its own episodes (on-policy) and cannot train from `data`; "
                f"drop `data`, or pick an algorithm that trains from it ({', '.join(data_readers())})"
            )
        if not cls.samples_tasks and cfg.tasks.strategy != "sequential":
            raise ValueError(
                f"algorithm {name!r} does not choose its tasks with a task sampler: drop `tasks` "
                f"(strategy {cfg.tasks.strategy!r}), or pick an on-policy algorithm such as grpo or ppo"
            )
        if not cls.scores_episodes and (cfg.reward is not None or cfg.process_reward is not None):
            raise ValueError(
                f"algorithm {name!r} does not score fresh episodes, which is what `reward` (a rule or a "
                "judge per task) and `process_reward` are for: drop them, or pick an on-policy algorithm "
                "such as grpo or ppo"
            )
        if cfg.data is not None and cfg.data.epochs is not None and "steps" in cfg.model_fields_set:
            raise ValueError("set either `steps` or data.epochs (which sets the steps), not both")

    @classmethod
    def open(cls, cfg: TrainConfig, algorithm: Any) -> ExperienceSource:
        """The source of a run, before the model loads (read and check data here, so bad data fails fast)."""
        return cls(cfg, algorithm)  # type: ignore[call-arg]  # each source takes (cfg, algorithm)

    def configure(self, cfg: TrainConfig) -> TrainConfig:
        """The run config with the settings this source derives resolved (default: unchanged)."""
        return cfg

    def attach(self, parts: RunParts) -> None:
        """The policy is loaded (no learner yet): keep what :meth:`collect` needs of ``parts``; check stored data
        against the tokenizer here, so that it fails before a learner group starts."""

    def start(self) -> None:
        """The learner exists: start what the source runs on (the on-policy source's runner); nothing by default."""

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The Trajectories to train on at ``step`` (0-based) and metrics about them."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The source's position (a resumed run continues from it)."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        raise NotImplementedError

    def reset(self) -> None:
        """A fresh run starts (nothing to forget by default)."""

    def group_size(self) -> int | None:
        """The size (or a multiple of it: a task chosen twice in a round) of every group of a step's episodes, where
        this source promises whole groups — the consistency guard checks it (``guard_partial_groups``); None where
        it does not (default)."""
        return None

    def lag(self, traj: Trajectory, version: int) -> int | None:
        """The lag that ``rollout.max_staleness`` bounds for ``traj`` when the weights of ``version`` are about to
        be updated (docs/algorithms.md §11): how many versions older than the weights that *should* have sampled
        its trained tokens the oldest of them is. None: no versions recorded (kept).

        Default: ``version`` minus the oldest version of the episode's last window (:func:`oldest_version`) — every
        token of an on-policy episode should be the current weights'. A source that holds episodes back on purpose
        measures from the moment it set them aside, so that the driver's bound never drops what the source keeps
        by design (T-PPO's ``train_on: finished``, :meth:`turnrl.rl.sources.windowed.WindowedSource.lag`)."""
        oldest = oldest_version(traj)
        return None if oldest is None else version - oldest


def task_jobs(step: int, round_: int, tasks: Sequence[int], group_size: int) -> list[Job]:
    """``group_size`` jobs per task; a task chosen twice in one round (a pool smaller than the round) gets the next
    sample numbers, so every job key is distinct and its episodes join one larger group."""
    seen: dict[int, int] = {}
    jobs = []
    for t in tasks:
        first = seen.get(t, 0)
        seen[t] = first + group_size
        jobs += [Job(step, round_, t, first + s) for s in range(group_size)]
    return jobs


def rollout_metrics(seen: Sequence[Trajectory], env: Any = None) -> dict[str, float]:
    """Reward, success, turns, tool calls and errors over every episode sampled this step, prompt tokens prefilled
    vs served from KV caches (:func:`~turnrl.agents.kv.kv_metrics`, for episodes a rollout played), and the
    figures the environment ``env`` reports of its own episodes (:meth:`turnrl.envs.core.TextEnv.summarize_episodes`)."""
    n = max(len(seen), 1)
    played = [t for t in seen if "prefill_tokens" in t.metadata]
    rewards = torch.tensor([t.total_reward for t in seen] or [0.0])
    return {
        "rollout_episodes": float(len(seen)),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(correction=0)),
        "success": sum(bool(t.correct) for t in seen) / n,
        "rewarded_incorrect": sum(t.total_reward > 0 and t.correct is False for t in seen) / n,
        "turns": sum(t.num_turns for t in seen) / n,
        "tool_calls": sum(len(turn.info.get("tool_calls") or []) for t in seen for turn in t.turns) / n,
        "error_episodes": float(sum(t.error is not None for t in seen)),
        "tampering_episodes": sum(
            any((turn.info.get("metrics") or {}).get("tampering", 0) > 0 for turn in t.turns) for t in seen
        )
        / n,
        **(trajectory_kv_metrics(played) if played else {}),
        **(env.unwrapped.summarize_episodes(seen) if env is not None else {}),
    }


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


def oldest_version(traj: Trajectory) -> int | None:
    """The oldest policy version that sampled one of the generated tokens of the episode's last window (all of them,
    unless it was played in windows); None: not recorded. The bound covers the lag an update adds; the earlier
    windows of an episode T-PPO trains whole (``train_on: finished``) are older by design (docs/algorithms.md §6)."""
    start = int(traj.metadata.get("window_start", 0))
    versions = [v for v, m in zip((traj.token_versions or [])[start:], (traj.loss_mask or [])[start:]) if m and v >= 0]
    return min(versions) if versions else None


def within_staleness(
    trajectories: Sequence[Trajectory],
    version: int,
    max_staleness: int,
    lag: Callable[[Trajectory, int], int | None] | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The episodes an update of ``version`` may train under the bound ``max_staleness`` (docs/algorithms.md §11:
    an update uses no token with lag > k), in whole groups, and what was left out: ``stale_episodes`` (over the
    bound) and ``stale_group_episodes`` (within it, left out with a stale member of their group, which would
    otherwise train in part). ``lag(traj, version)`` is the source's measure (:meth:`ExperienceSource.lag`; default
    the on-policy one); episodes without recorded versions are kept."""

    def on_policy(traj: Trajectory, v: int) -> int | None:
        oldest = oldest_version(traj)
        return None if oldest is None else v - oldest

    measure = lag or on_policy
    stale = [t for t in trajectories if (d := measure(t, version)) is not None and d > max_staleness]
    groups = {_group(t) for t in stale}
    kept = [t for t in trajectories if _group(t) not in groups]
    return kept, {
        "stale_episodes": float(len(stale)),
        "stale_group_episodes": float(len(trajectories) - len(kept) - len(stale)),
    }


def _group(traj: Trajectory) -> str:
    return str(traj.group_id) if traj.group_id is not None else f"episode:{traj.id}"
