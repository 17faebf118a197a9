"""An episode in play and a rollout's running figures: the state :class:`~turnrl.rollout.engine.Rollout` keeps.

Its namesake :mod:`turnrl.episode` is the same concept a layer down: one episode at the text level, for demos and
scripted agents."""

from __future__ import annotations

import uuid
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from turnrl.agents.base import Completion, SamplingParams
from turnrl.agents.kv import kv_metrics
from turnrl.envs.core import TextEnv
from turnrl.tokens import ChatRenderer
from turnrl.types import Trajectory
from turnrl.utils import turn_seed


def token_crc(ids: Sequence[int], crc: int = 0) -> int:
    """A running CRC-32 of token ids (``crc``: of the ones before): the rollout records it of the tokens the agent
    returned (``Trajectory.metadata["sampled_crc"]``), the consistency guard recomputes it of the tokens trained."""
    return zlib.crc32(array("q", ids).tobytes(), crc)


def ended_with_eos(tokens: Sequence[int], span: tuple[int, int] | None, eos_ids: set[int]) -> bool:
    """Whether the turn whose generated tokens are ``tokens[span[0]:span[1]]`` ended with an end-of-turn token (a
    chat template's reply after it then adds none): the rollout's episodes and a game's seats both ask."""
    return span is not None and span[1] > span[0] and tokens[span[1] - 1] in eos_ids


@dataclass
class Episode:
    """One episode in play: its environment, the Trajectory so far and its token fields (only ever appended to)."""

    env: TextEnv
    traj: Trajectory
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version that sampled each token, −1 elsewhere
    renderer: ChatRenderer | None = None
    role: str = "policy"
    prompts_seen: list[list[int]] = field(default_factory=list)  # what the agent was conditioned on, per turn
    sample_seed: int | None = None  # this episode's own random stream (batch-invariant sampling), if any
    rewritten: bool = False  # this turn's completion was replaced by the rollout's ``rewrite`` hook
    done: bool = False  # finished (its Trajectory is complete and went to the sink)
    turn_start: int | None = None  # where the current turn's tokens begin while it is paused mid-turn (windows)
    segments: int = 0  # generation calls of the current turn so far (1 + the times it was paused)
    window_start: int = 0  # token index where the current window began
    window_used: int = 0  # tokens generated in the current window
    cut_by_window: bool = False  # the last generation budget was the window's (not the turn's or the context's)
    cut_by_context: bool = False  # the last generation budget was the context's room (less than the turn's)
    session: str = field(default_factory=lambda: uuid.uuid4().hex)  # names its KV cache in the agent
    prefill_tokens: int = 0  # prompt tokens the agent ran through the model (not served from its KV cache)
    cached_tokens: int = 0  # prompt tokens served from the agent's KV cache of this episode
    kv_events: dict[str, int] = field(default_factory=dict)  # what happened to its cache, per generation call
    context_starts: list[int] = field(default_factory=list)  # where each context after the first begins (segments)
    context_reasons: list[str] = field(default_factory=list)  # why each was started (the history was rewritten)
    context_first: int = 0  # the oldest of the environment's turns still in the current context
    sampled_crc: int = 0  # CRC-32 of the generated tokens as they were appended (the guard's token identity check)

    @property
    def context_start(self) -> int:
        """Where the context the model sees now begins (0 until a budget rewrote the history)."""
        return self.context_starts[-1] if self.context_starts else 0

    def stops(self, rollout_stop: tuple[str, ...]) -> tuple[str, ...]:
        """The stop strings of this episode's turns: the rollout's (``rollout_stop``) and its environment's."""
        return tuple(dict.fromkeys(rollout_stop + tuple(getattr(self.env.unwrapped, "stop", ()) or ())))

    def request(
        self, params: SamplingParams, max_context: int, window: int | None
    ) -> tuple[int, tuple[str, ...], int | None]:
        """The next generation of this episode under the rollout's ``params``: its token budget (the turn's, the
        context's — ``max_context`` — or the window's), its stop strings (the rollout's and the env's) and its seed
        (with its own stream: one per turn and piece). Sets :attr:`cut_by_context` and :attr:`cut_by_window`."""
        in_turn = len(self.tokens) - self.turn_start if self.turn_start is not None else 0
        room = max_context - (len(self.tokens) - self.context_start)
        budget = min(params.max_new_tokens - in_turn, room)
        self.cut_by_context = room < params.max_new_tokens - in_turn
        self.cut_by_window = window is not None and window - self.window_used < budget
        if window is not None and self.cut_by_window:  # (cut_by_window needs a window)
            budget = window - self.window_used
        seed = None
        if self.sample_seed is not None:
            seed = turn_seed(self.sample_seed, len(self.traj.turns), salt=self.segments * 7919)
        return budget, self.stops(params.stop), seed

    def write_trajectory(self, version: int | None, *, keep_prompts: bool = False) -> None:
        """Write what the episode played into its Trajectory when it ends: tokens, loss mask, log-probabilities,
        segments, figures (prefill, cache, the sampled tokens' checksum) and, with ``version`` (the policy's version
        at the end; None when the run has none), each token's version and ``metadata["policy_version"]``. A turn
        whose reward has no generated token to sit on makes the episode an error (see Trajectory.token_rewards)."""
        traj = self.traj
        traj.metadata.update(
            prefill_tokens=self.prefill_tokens, cached_tokens=self.cached_tokens, sampled_crc=self.sampled_crc
        )
        if self.kv_events:
            traj.metadata["kv_events"] = dict(self.kv_events)
        traj.token_ids, traj.loss_mask, traj.logprobs = self.tokens, self.mask, self.logprobs
        self.finish_segments()
        if version is not None:
            traj.token_versions = self.versions
            traj.metadata["policy_version"] = [traj.metadata.get("policy_version", [None])[0], version]
        if traj.error is None:
            for turn in traj.turns:
                if turn.reward != 0.0 and (turn.token_span is None or turn.token_span[1] <= turn.token_span[0]):
                    traj.error = f"turn {turn.index} has reward {turn.reward} but no generated tokens to carry it"
        traj.metadata["prompt_length"] = next((i for i, m in enumerate(self.mask) if m == 1), len(self.mask))
        if self.window_start:  # played in windows: where the last one began (T-PPO trains the policy on it only)
            traj.metadata["window_start"] = self.window_start
        if keep_prompts:
            traj.metadata["prompts"] = self.prompts_seen

    def snapshot(self, *, with_versions: bool) -> Trajectory:
        """A trainable copy of the episode as it stands, unfinished (:meth:`turnrl.rollout.engine.Rollout.snapshot`):
        its tokens so far, the turns completed so far, each token's version (``with_versions``: the run has policy
        versions), ``metadata["partial"] = True`` and ``metadata["window_start"]`` (where the last window began)."""
        traj = self.traj.model_copy(deep=True)
        traj.token_ids, traj.loss_mask, traj.logprobs = list(self.tokens), list(self.mask), list(self.logprobs)
        if with_versions:
            traj.token_versions = list(self.versions)
        traj.segments = [0, *self.context_starts] if self.context_starts else None
        traj.metadata.update(
            partial=True,
            window_start=self.window_start,
            sampled_crc=self.sampled_crc,
            prompt_length=next((i for i, m in enumerate(self.mask) if m == 1), len(self.mask)),
        )
        return traj

    def finish_segments(self) -> None:
        """Record the contexts in the Trajectory (``segments`` and ``metadata["segment_reasons"]``)."""
        if self.context_starts:
            self.traj.segments = [0, *self.context_starts]
            self.traj.metadata["segment_reasons"] = list(self.context_reasons)

    def append(
        self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None, version: int | Sequence[int] = -1
    ) -> None:
        """Append tokens with their loss mask, log-probabilities and the version that sampled each (one for all,
        or one per token where the weights changed inside the generation call)."""
        if not isinstance(version, int) and len(version) != len(ids):
            raise ValueError(f"{len(version)} token versions for {len(ids)} tokens")
        if mask == 1:
            self.sampled_crc = token_crc(ids, self.sampled_crc)
        self.tokens.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.versions.extend([version] * len(ids) if isinstance(version, int) else version)


@dataclass
class RolloutStats:
    """Where the time of the last :meth:`Rollout.run` went."""

    generate_s: float = 0.0
    env_s: float = 0.0
    bookkeeping_s: float = 0.0
    generated_tokens: int = 0
    turns: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    kv_events: dict[str, int] = field(default_factory=dict)

    def count_prefill(self, ep: Episode, prompt_length: int, completion: Completion) -> None:
        """Count a generation's prompt tokens run through the model vs served from ``ep``'s KV cache, and what
        happened to the cache, in ``ep`` and here."""
        cached = int(completion.metadata.get("cached_tokens", 0))
        ep.prefill_tokens += prompt_length - cached
        ep.cached_tokens += cached
        self.prefill_tokens += prompt_length - cached
        self.cached_tokens += cached
        event = completion.metadata.get("kv")
        if event is not None:
            ep.kv_events[event] = ep.kv_events.get(event, 0) + 1
            self.kv_events[event] = self.kv_events.get(event, 0) + 1

    def kv_metrics(self) -> dict[str, float]:
        """Prompt tokens run through the model vs served from KV caches, and the cache events (see
        :func:`kv_metrics`)."""
        return kv_metrics(self.prefill_tokens, self.cached_tokens, self.kv_events)


def record_unanswered(ep: Episode) -> None:
    """Where the rollout ended ``ep`` before its environment did (its context full, its turn limit first), record on
    the last turn the environment's figures of no answer (:meth:`~turnrl.envs.core.TextEnv.unanswered_metrics`:
    F1 0 and the articles found so far, for the search environments), so that the episode counts in the report's
    ``mean_*`` figures and in ``turnrl compare --score``. Nothing where the environment ended the episode, gave its
    figures already, the episode failed (an environment that failed is not asked again) or has no turn."""
    last = ep.traj.turns[-1] if ep.traj.turns else None
    if last is None or ep.traj.error is not None or last.terminated or last.truncated or "metrics" in last.info:
        return
    figures = getattr(getattr(ep.env, "unwrapped", ep.env), "unanswered_metrics", None)  # any environment object
    try:
        metrics = figures() if callable(figures) else {}
    except Exception:  # figures only: an environment that cannot give them must not end the rollout
        metrics = {}
    if metrics:
        last.info["metrics"] = dict(metrics)
