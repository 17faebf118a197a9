"""Several trainable policies in one run (``multi_agent.policies``, docs/multi-agent.md): :class:`LearnerSet` holds a
:class:`~turnrl.rl.core.learner.Learner` per policy — its own weights (or LoRA adapter), optimizer, scheduler, critic
and reference — and gives the driver the one learner it expects.

One update per policy per step: each policy trains on the Trajectories whose ``metadata["policy"]`` names it, and
nothing else. A policy whose seats brought nothing trainable this step is not updated; its version still moves with
the others', so that every policy's version is the run's step and the staleness bound reads one number. The step's
metrics are every policy's under ``{policy}/…`` plus, for the driver, the guard and the monitors, the figures over
all policies (sums of counts, maxima of ``*_max``, means over tokens of the figures whose token count is reported —
the lag-0 gap the guard holds is the gap over all policies' lag-0 tokens, as one learner would report it — and means
of the rest). The guard also holds each policy's own figures: a policy whose gap a mean over all would hide fires it.

Its namesake :mod:`turnrl.rl.run.policies` is the same concept a layer up: the run building these policies' models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from turnrl.types import Trajectory

#: figures that are counts: added up over the policies
SUMMED = (
    "dropped_episodes",
    "train_tokens",
    "pass_tokens",
    "skipped",
    "untrainable_episodes",
    "error_episodes",
    "lag0_tokens",
)
#: figures that are means over tokens, by the count of those tokens: averaged weighted by it
WEIGHTED = {"logp_diff_lag0": "lag0_tokens"}


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """The mean of ``values`` weighted by ``weights`` (the plain mean where the weights add up to 0)."""
    total = sum(weights)
    if total <= 0:
        return sum(values) / len(values)
    return sum(v * w for v, w in zip(values, weights)) / total


def merge_metrics(per_policy: Mapping[str, dict[str, float]]) -> dict[str, float]:
    """Every policy's figures under ``{policy}/{name}``, and each figure over all policies: counts
    (:data:`SUMMED`) added, ``*_max`` the largest, means over tokens (:data:`WEIGHTED`) weighted by their token
    counts, the rest averaged over the policies that report it."""
    out: dict[str, float] = {}
    names: dict[str, list[float]] = {}
    for policy, metrics in per_policy.items():
        for k, v in metrics.items():
            out[f"{policy}/{k}"] = float(v)
            names.setdefault(k, []).append(float(v))
    for k, values in names.items():
        if k in SUMMED:
            out[k] = sum(values)
        elif k.endswith("_max"):
            out[k] = max(values)
        elif k in WEIGHTED:
            weights = [float(m.get(WEIGHTED[k], 0.0)) for m in per_policy.values() if k in m]
            out[k] = weighted_mean(values, weights)
        else:
            out[k] = sum(values) / len(values)
    return out


SEP = "::"  # between a policy's name and a parameter's in the weights sent to rollout workers


def split_policies(state: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """:meth:`LearnerSet.export_for_workers`'s flat state dict → each policy's state by name."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in state.items():
        name, _, param = key.partition(SEP)
        out.setdefault(name, {})[param] = value
    return out


class LearnerSet:
    """A learner per policy, behind the driver's learner protocol (see the module docstring).

    Args:
        learners: the policies' learners by name, in a fixed order (the first is the run's main policy: its
            learning rate is the one reported as ``lr``).
    """

    def __init__(self, learners: Mapping[str, Any]) -> None:
        if not learners:
            raise ValueError("LearnerSet needs at least one learner")
        self.learners = dict(learners)
        first = next(iter(self.learners.values()))
        self.tokenizer = first.tokenizer

    @property
    def version(self) -> int:
        """The run's policy version (every policy's, kept equal)."""
        return max(learner.version for learner in self.learners.values())

    @property
    def updates(self) -> int:
        """Optimizer steps taken (the most of any policy's)."""
        return max(learner.updates for learner in self.learners.values())

    def versions(self) -> dict[str, int]:
        """Each policy's version."""
        return {name: learner.version for name, learner in self.learners.items()}

    def update(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One update per policy on its own Trajectories (see the module docstring).

        Raises:
            ValueError: a Trajectory names no policy of this run (it would train nothing, silently).
        """
        by_policy: dict[str, list[Trajectory]] = {name: [] for name in self.learners}
        for t in trajectories:
            name = t.metadata.get("policy")
            if name not in by_policy:
                raise ValueError(f"an episode of policy {name!r} reached the learners of {', '.join(by_policy)}")
            by_policy[name].append(t)
        target = self.version + 1
        metrics: dict[str, dict[str, float]] = {}
        for name, learner in self.learners.items():
            mine = by_policy[name]
            metrics[name] = learner.update(mine) if mine else {"skipped": 1.0}
            if "skipped" in metrics[name]:  # its learning-rate schedule moves with the run's steps all the same
                learner.scheduler.step()
            learner.version = target  # a policy with nothing to train keeps its weights under the run's version
        out = merge_metrics(metrics)
        out["policy_version"] = float(target)
        return out

    @property
    def lr(self) -> float:
        """The first policy's learning rate."""
        return next(iter(self.learners.values())).lr

    @property
    def model(self) -> Any:
        """The first policy's model."""
        return next(iter(self.learners.values())).model

    def __getattr__(self, name: str) -> Any:
        """Single-learner attributes a caller may read (``value_head``, ``critic``, ``optimizer``, ``scheduler``):
        the first policy's."""
        if name in ("value_head", "critic", "optimizer", "scheduler"):
            return getattr(next(iter(self.__dict__["learners"].values())), name)
        raise AttributeError(name)

    def worker_models(self) -> dict[str, Any]:
        """Every policy's model by name (what a rollout worker builds its agents from, once)."""
        return {name: learner.model for name, learner in self.learners.items()}

    def export_for_workers(self, put: Any) -> tuple[int, Any]:
        """``(version, put(weights))`` for rollout workers: every policy's (of a LoRA policy its adapters only), in one
        flat state dict whose names are ``POLICY::PARAMETER`` (:func:`split_policies` takes it apart)."""
        states: dict[str, Any] = {}
        for name, learner in self.learners.items():
            _, state = learner.export_for_workers(lambda s: s)
            states.update({f"{name}{SEP}{key}": value for key, value in state.items()})
        return self.version, put(states)

    def connect_rollout(self, workers: list[Any]) -> None:
        """Nothing: the workers fetch :meth:`export_for_workers` (no direct channel for several policies)."""

    def sync_driver(self) -> None:
        """Nothing: the driver holds every policy itself."""

    def state_dict(self) -> dict[str, Any]:
        """Every policy's learner state (weights, optimizer, scheduler, version) by name."""
        return {"policies": {name: learner.state_dict() for name, learner in self.learners.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: the checkpoint holds other policies than this run's.
        """
        saved = state.get("policies")
        if saved is None or set(saved) != set(self.learners):
            raise ValueError(
                f"the checkpoint holds policies {sorted(saved or [])}, this run has "
                f"{sorted(self.learners)}: resume with the same multi_agent.policies"
            )
        for name, learner in self.learners.items():
            learner.load_state_dict(saved[name])

    def close(self) -> None:
        """Close every learner."""
        for learner in self.learners.values():
            learner.close()
