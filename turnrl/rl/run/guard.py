"""The consistency guard: every training step checks that it trains what the policy sampled (docs/training.md, "The
consistency guard").

Features that each work alone can break each other where they meet: a KV cache that outlives an optimizer step, a
stop string that a window boundary hides, an episode held on purpose that a staleness bound drops. Each time the
trainer then updates on tokens no policy sampled there, and nothing crashes. The guard turns that class of bug into
a figure in every step's metrics and a warning:

* ``logp`` — on the tokens sampled by the very weights being updated (lag 0), which the learner scores before its
  first optimizer step, the rollout's log-probabilities and the learner's agree within a tolerance per backend
  (``guard_logp_gap``: the mean |gap|, ``guard_logp_gap_max``: the largest). With ``rollout.top_p`` < 1 the
  rollout's are of the renormalized nucleus, never below the learner's: only the learner's excess counts. A step
  that trains several policies (``multi_agent.policies``) is held policy by policy, on each one's own figures
  (``{policy}/logp_diff_lag0``, …): one bad policy fires the check however many good tokens the others bring.
* ``tokens`` — each episode's generated tokens are the tokens the agent returned (a CRC the rollout records as it
  appends them, ``Trajectory.metadata["sampled_crc"]``, against the tokens the learner receives).
* ``versions`` — every generated token carries the policy version that sampled it.
* ``stops`` — no turn ran on past its stop string (``Turn.info["past_stop"]``, recorded by the rollout).
* ``groups`` — no group is trained in part: the driver's staleness bound left no member out of a group that
  trains, and a source that promises whole groups (:meth:`~turnrl.rl.sources.base.ExperienceSource.group_size`)
  delivered them.
* ``stale`` — with ``rollout.max_staleness`` 0 nothing is stale: every token is the current weights', or held back
  by its source on purpose (:meth:`~turnrl.rl.sources.base.ExperienceSource.lag`); a stale episode there means a
  source holds episodes back without saying so.

Each check that fires warns once per run, naming what it saw and the likely causes; its figure is in every step's
metrics (``guard_*``, ``guard_violations``: how many checks fired this step). ``guard.strict`` stops the run at the
end of the step instead (:class:`ConsistencyError`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from turnrl.rl.config import GuardConfig, RayConfig, RolloutConfig
from turnrl.rollout.episode import token_crc
from turnrl.types import Trajectory

__all__ = [
    "CAUSES",
    "TOLERANCES",
    "ConsistencyError",
    "ConsistencyGuard",
    "GuardConfig",
    "generated",
    "rollout_backend",
]

logger = logging.getLogger(__name__)

#: (mean, max) tolerances of the lag-0 gap, in nats, per rollout backend: the HF agent shares the learner's model
#: and precision (fp32), so only batching's float rounding separates them; vLLM has kernels (and often a precision)
#: of its own, and single tokens can differ by nats, so only the mean is held.
TOLERANCES: dict[str, tuple[float, float | None]] = {"hf": (1e-3, 5e-2), "vllm": (5e-2, None)}

CAUSES = {
    "logp": "likely causes: a KV cache computed with older weights (a weight write that did not call "
    "turnrl.weights.mark_weights_changed), a chat template or tokenizer that differs between rollout and "
    "learner, sampling options the learner does not apply (temperature, top-p/top-k), or numerics (another "
    "engine or precision: raise guard.logp_tolerance)",
    "tokens": "likely causes: tokens re-tokenized from text, an episode's pieces joined in the wrong order, or a "
    "history rewrite that replaced generated tokens",
    "versions": "likely causes: an agent or rollout path that does not stamp the policy version on what it samples",
    "stops": "likely causes: a turn resumed after a window whose stop string straddled the pieces, or a backend that "
    "ignores stop strings",
    "groups": "likely causes: a staleness bound or filter that dropped some of a group's episodes, or a source that "
    "released a group before all its episodes finished",
    "stale": "likely causes: a source that holds episodes back on purpose without measuring their lag "
    "(ExperienceSource.lag), or weights that changed while an episode was in play",
}


class ConsistencyError(RuntimeError):
    """A strict guard's check failed: the step trained on tokens that are not what the policy sampled."""


def rollout_backend(placement: str, ray: RayConfig) -> str:
    """The rollout backend whose tolerances apply (the run's ``placement`` and its ``ray`` section): ``vllm`` or
    ``hf``."""
    return "vllm" if placement == "ray" and ray.rollout_backend == "vllm" else "hf"


def generated(traj: Trajectory) -> list[int]:
    """The episode's generated tokens (loss mask 1), in order."""
    return [t for t, m in zip(traj.token_ids or [], traj.loss_mask or []) if m]


def policy_figures(info: dict[str, float]) -> dict[str, dict[str, float]]:
    """The lag-0 figures to hold: each policy's own where the step trained several (``{policy}/{figure}``, as
    :func:`turnrl.rl.core.policies.merge_metrics` reports them), else the step's under the name ""."""
    policies = sorted({k[: -len("/lag0_tokens")] for k in info if k.endswith("/lag0_tokens")})
    if not policies:
        return {"": info}
    return {p: {k[len(p) + 1 :]: v for k, v in info.items() if k.startswith(p + "/")} for p in policies}


class ConsistencyGuard:
    """Checks each step (see the module docstring).

    Args:
        guard: the run's ``guard`` section (on, strict, the tolerances).
        rollout: its ``rollout`` section (``top_p``: a nucleus's expected gap; ``max_staleness``: synchronous or not).
        backend: the rollout backend whose default tolerances apply (:func:`rollout_backend`): ``hf`` or ``vllm``.
        sampled: whether the source's episodes are the policy's own samples (stored data: only the stop and group
            checks: its log-probabilities, versions and tokens are not this run's sampling).
        group_size: the size (or a multiple of it) each group a step trains has, where the source promises whole
            groups; None where it does not.
    """

    def __init__(
        self, guard: GuardConfig, rollout: RolloutConfig, *, backend: str, sampled: bool, group_size: int | None = None
    ) -> None:
        mean, most = TOLERANCES[backend]
        self.enabled, self.strict = guard.enabled, guard.strict
        self.mean_tol = guard.logp_tolerance if guard.logp_tolerance is not None else mean
        self.max_tol = guard.logp_max_tolerance if guard.logp_max_tolerance is not None else most
        self.nucleus = rollout.top_p < 1
        self.synchronous = rollout.max_staleness == 0
        self.sampled, self.group_size = sampled, group_size
        self.warned: set[str] = set()

    def check(
        self, step: int, collected: Sequence[Trajectory], trained: Sequence[Trajectory], info: dict[str, float]
    ) -> tuple[dict[str, float], list[str]]:
        """The step's ``guard_*`` figures and a message per check that failed.

        Args:
            step: the step (for messages).
            collected: every episode the source gave this step.
            trained: the ones handed to the learner (after the staleness bound).
            info: the step's metrics so far (the learner's ``lag0_*`` and ``logp_diff_lag0``, ``stale_episodes``).
        """
        if not self.enabled:
            return {}, []
        figures: dict[str, float] = {}
        failed: dict[str, str] = {}
        if self.sampled and "lag0_tokens" in info:
            self._logp(info, figures, failed)
        if self.sampled:  # stored data may have been edited on purpose (relabelled steps): this run's samples only
            bad = [
                t
                for t in trained
                if "sampled_crc" in t.metadata and token_crc(generated(t)) != t.metadata["sampled_crc"]
            ]
            figures["guard_token_mismatch"] = float(len(bad))
            if bad:
                failed["tokens"] = (
                    f"{len(bad)} episode(s) reached the learner with generated tokens that are not "
                    f"the ones the agent returned (e.g. {bad[0].metadata.get('job', bad[0].id)})"
                )
            unversioned = sum(
                int(v < 0)
                for t in trained
                if t.token_versions is not None
                for v, m in zip(t.token_versions, t.loss_mask or [])
                if m
            )
            figures["guard_unversioned_tokens"] = float(unversioned)
            if unversioned:
                failed["versions"] = f"{unversioned} generated token(s) carry no policy version"
        past = [(t, turn) for t in trained for turn in t.turns if turn.info.get("past_stop")]
        figures["guard_past_stop_turns"] = float(len(past))
        if past:
            t, turn = past[0]
            failed["stops"] = (
                f"{len(past)} turn(s) ran on past their stop string (e.g. turn {turn.index} of "
                f"{t.metadata.get('job', t.id)}: {turn.info['past_stop']} token(s) after it)"
            )
        partial = self._partial_groups(collected, trained)
        figures["guard_partial_groups"] = float(len(partial))
        if partial:
            failed["groups"] = f"{len(partial)} group(s) trained in part: " + "; ".join(partial[:3])
        stale = info.get("stale_episodes", 0.0) + info.get("stale_group_episodes", 0.0)
        if self.sampled and self.synchronous and stale:
            figures["guard_stale_synchronous"] = stale
            failed["stale"] = (
                f"{int(stale)} episode(s) dropped as stale with rollout.max_staleness 0, where every "
                "token is sampled by the weights being updated"
            )
        figures["guard_violations"] = float(len(failed))
        messages = [
            f"step {step}: consistency check '{kind}' failed: {what}; {CAUSES[kind]}" for kind, what in failed.items()
        ]
        for kind, message in zip(failed, messages):
            if kind not in self.warned and not self.strict:
                self.warned.add(kind)
                logger.warning("%s (warned once; guard_* in metrics.jsonl every step)", message)
        return figures, messages

    def _logp(self, info: dict[str, float], figures: dict[str, float], failed: dict[str, str]) -> None:
        figures.update(guard_logp_gap=info.get("logp_diff_lag0", 0.0), guard_logp_gap_max=info.get("lag0_gap_max", 0.0))
        for policy, own in policy_figures(info).items():
            fault = self._logp_fault(own)
            if fault is not None:
                failed["logp"] = (f"policy {policy!r}: " if policy else "") + fault
                return

    def _logp_fault(self, info: dict[str, float]) -> str | None:
        """What is wrong with one learner's lag-0 figures, or None."""
        n = int(info["lag0_tokens"])
        mean, most = info.get("logp_diff_lag0", 0.0), info.get("lag0_gap_max", 0.0)
        if self.nucleus:  # the rollout's are of the renormalized nucleus: only the learner's excess is a fault
            excess, limit = (
                info.get("lag0_excess_max", 0.0),
                self.max_tol if self.max_tol is not None else self.mean_tol,
            )
            if excess > limit:
                return (
                    f"the learner's log-probability exceeds the rollout's by up to {excess:.4g} nats on {n} "
                    f"token(s) sampled by the weights being updated (tolerance {limit:g}; with top_p < 1 the "
                    "rollout's is of the nucleus and never below the learner's)"
                )
            return None
        if mean > self.mean_tol or (self.max_tol is not None and most > self.max_tol):
            return (
                f"rollout and learner log-probabilities differ by {mean:.4g} nats on average, up to {most:.4g}, "
                f"on {n} token(s) sampled by the weights being updated (tolerance {self.mean_tol:g} mean"
                + (f", {self.max_tol:g} max)" if self.max_tol is not None else ")")
            )
        return None

    def _partial_groups(self, collected: Sequence[Trajectory], trained: Sequence[Trajectory]) -> list[str]:
        """The groups that train with some of their episodes left out, each described."""
        have = Counter(str(t.group_id) for t in collected if t.group_id is not None)
        got = Counter(str(t.group_id) for t in trained if t.group_id is not None)
        out = [f"{g} ({n} of {have[g]} collected)" for g, n in got.items() if n != have[g]]
        if self.group_size:
            out += [
                f"{g} ({n} episodes, groups of {self.group_size})"
                for g, n in got.items()
                if n == have[g] and n % self.group_size
            ]
        return out
