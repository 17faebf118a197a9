"""Context management for long episodes: keep what the model sees under a token budget by rewriting the history.

A long tool-use episode outgrows the context: every turn appends the action and the environment's reply. With a
:class:`ContextBudget`, when appending the next reply would leave fewer than ``max_new_tokens`` of room in the
current context (``budget`` tokens), the rollout rewrites the history instead and the episode goes on in a new
*segment* (``Trajectory.segments``; each segment is token-exact, and the learner runs each as its own sequence):

* ``drop`` — the oldest turns (actions and their tool results) are left out: the new context holds the opening
  messages, a note saying how many turns were removed, the most recent turns that fit and the new reply;
* ``summarize`` — the policy first writes a summary of its progress (a turn of its own, trained like any other,
  marked ``info["summary"]``), asked for after the new reply; the new context holds the opening messages and that
  summary.

Each rewrite is recorded in ``metadata["segment_reasons"]`` and on the turn it followed (``info["context"]``). An
episode whose latest turn alone does not fit ends ``truncated`` by context, as without a budget.

The rollout (:mod:`turnrl.rollout.engine`, its sibling) hands every reply of the environment to
:func:`append_observation`, which appends it, rewrites the history, or ends the episode truncated by context when
there is no room left to generate (with or without a budget).

An environment may rewrite the history itself (one that manages its own context, such as a ``verifiers``
environment that trims its conversation): its step's ``info["history"]`` is then true and its observation is the whole
conversation the next turn sees. :func:`from_environment` starts the new segment with it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from turnrl.agents.base import Capabilities, SamplingParams
from turnrl.rollout.episode import ended_with_eos
from turnrl.rollout.generation import generate_one
from turnrl.types import Message, Turn
from turnrl.utils import turn_seed

if TYPE_CHECKING:
    from turnrl.rollout.episode import Episode, RolloutStats


class RolloutAPI(Protocol):
    """What a rewrite needs of the rollout that plays the episode (:class:`turnrl.rollout.engine.Rollout` is
    one; its docstring says what each member is): the agent and the run's sampling, the context limits, the
    rollout's figures, and the engine's public turn API."""

    agent: Any
    params: SamplingParams
    context: ContextBudget | None
    max_context: int
    keep_prompts: bool
    policy_version: Any
    stats: RolloutStats
    capabilities: Capabilities
    eos_ids: set[int]
    uses_sessions: bool
    passes_seeds: bool

    def current_version(self) -> int: ...

    def finish(self, ep: Episode) -> None: ...


SUMMARY_REQUEST = (
    "This conversation is getting too long to continue. Summarize what you have done and found so far "
    "in this task — the facts and intermediate results you still need — so that you can go on from "
    "your summary alone. Do not give the final answer yet."
)
SUMMARY_NOTE = "Your summary of the work so far (the earlier conversation was removed to fit the context):"
DROPPED_NOTE = "[{n} earlier turn(s) of this conversation were removed to fit the context]"


@dataclass(frozen=True)
class ContextBudget:
    """Keep each context under ``budget`` tokens (see the module docstring); ``summary_tokens`` caps a summary."""

    budget: int
    mode: Literal["drop", "summarize"] = "drop"
    summary_tokens: int = 128

    def __post_init__(self) -> None:
        if self.mode not in ("drop", "summarize"):
            raise ValueError(f"context mode must be 'drop' or 'summarize', got {self.mode!r}")
        if self.budget < 16 or self.summary_tokens < 1:
            raise ValueError(f"a context budget needs budget >= 16 and summary_tokens >= 1, got {self}")

    def overflows(self, context_length: int, added: int, max_new: int) -> bool:
        """Whether ``added`` more tokens would leave less than ``max_new`` of room in a context of this length."""
        return context_length + added + max_new > self.budget


def _with_note(prompt: Sequence[Message], note: str) -> list[Message]:
    """The opening messages with ``note`` added: to the last of them if it is the user's (templates that need
    alternating roles refuse two user messages in a row), else as a user message of its own."""
    out = list(prompt)
    if out and out[-1].role == "user":
        out[-1] = out[-1].model_copy(update={"content": f"{out[-1].content}\n\n{note}"})
        return out
    return [*out, Message(role="user", content=note)]


def _history(turns: Sequence[Turn], last_observation: Sequence[Message]) -> list[list[Message]]:
    """Each turn's messages (its action and what the environment answered), the last with ``last_observation``."""
    out = [[t.action, *t.observation] for t in turns]
    if out:
        out[-1] = [turns[-1].action, *last_observation]
    return out


async def append_observation(
    rollout: RolloutAPI, ep: Episode, turn: Turn, obs: Sequence[Message], *, rewrote_history: bool = False
) -> bool:
    """Append the environment's reply ``obs`` to ``ep`` after ``turn`` (its chat-template tokens, loss mask 0), or
    start a new segment instead: with ``rewrote_history`` (the step's ``info["history"]``: ``obs`` is the whole
    conversation, :func:`from_environment`), or when the reply would pass the rollout's budget (:func:`compact`).
    A reply that leaves no room to generate ends the episode truncated by context. Returns whether it goes on."""
    if rewrote_history:
        return from_environment(rollout, ep, turn, obs)
    t0 = time.perf_counter()
    assert ep.renderer is not None
    obs_ids = ep.renderer.observation_tokens(obs, ended_with_eos=_ended_with_eos(rollout, ep, turn))
    used = len(ep.tokens) - ep.context_start
    if rollout.context is not None and rollout.context.overflows(used, len(obs_ids), rollout.params.max_new_tokens):
        return await compact(rollout, ep, turn, obs)  # the history rewritten: a new segment
    if used + len(obs_ids) >= rollout.max_context:  # no room to append the reply and generate
        _truncate(rollout, ep)
        return False
    turn.obs_span = (len(ep.tokens), len(ep.tokens) + len(obs_ids))
    ep.append(obs_ids, 0)
    rollout.stats.bookkeeping_s += time.perf_counter() - t0
    return True


def _ended_with_eos(rollout: RolloutAPI, ep: Episode, turn: Turn) -> bool:
    """Whether ``turn``'s generated tokens end with an end-of-turn token (the template's reply then adds none)."""
    return ended_with_eos(ep.tokens, turn.token_span, rollout.eos_ids)


async def compact(rollout: RolloutAPI, ep: Episode, turn: Turn, obs: Sequence[Message]) -> bool:
    """Rewrite ``ep``'s history under the rollout's budget after ``turn`` (whose reply ``obs`` is not appended yet)
    and start its new segment. Returns whether the episode goes on (False: it was finished — truncated by context,
    or with an error when the rewrite failed, e.g. a template that refuses the rewritten history)."""
    try:
        return await _compact(rollout, ep, turn, obs)
    except Exception as e:  # only this episode ends
        ep.traj.error = f"rewriting the history failed: {type(e).__name__}: {e}"
        rollout.finish(ep)
        return False


async def _compact(rollout: RolloutAPI, ep: Episode, turn: Turn, obs: Sequence[Message]) -> bool:
    budget = rollout.context
    assert budget is not None  # histories are rewritten under a context budget only
    assert ep.renderer is not None
    max_new = rollout.params.max_new_tokens
    prompt = list(ep.traj.prompt)
    env_turns = [t for t in ep.traj.turns if not t.info.get("summary")]
    ids: list[int] | None  # the new segment's context; None: none fits
    if budget.mode == "summarize":
        summary = await _summarize(rollout, ep, turn, obs)
        if summary is None:
            return False
        messages = _with_note(prompt, f"{SUMMARY_NOTE}\n{summary}")
        ids = ep.renderer.prompt_tokens(messages)
        reason = f"history summarized by the policy ({len(env_turns) - ep.context_first} turn(s) replaced)"
        ep.context_first = len(env_turns)
        if len(ids) + max_new > budget.budget:
            ids = None
    else:
        ids, reason = None, ""
        exchanges = _history(env_turns, obs)
        for keep in range(len(exchanges) - ep.context_first - 1, 0, -1):  # drop at least one, keep the latest
            dropped = len(exchanges) - keep
            opening = _with_note(prompt, DROPPED_NOTE.format(n=dropped))
            candidate = ep.renderer.prompt_tokens([*opening, *(m for ex in exchanges[-keep:] for m in ex)])
            if len(candidate) + max_new <= budget.budget:
                ids, reason = candidate, f"history trimmed: the {dropped} oldest turn(s) dropped"
                ep.context_first = dropped
                break
    return _start_segment(rollout, ep, turn, ids, reason)


def _start_segment(rollout: RolloutAPI, ep: Episode, turn: Turn, ids: list[int] | None, reason: str) -> bool:
    """Start ``ep``'s next segment with the context ``ids`` after ``turn`` (``reason`` recorded on the turn and the
    episode); None, or a context that leaves no room to generate, ends the episode truncated by context."""
    if ids is None or len(ids) + 1 > rollout.max_context:
        _truncate(rollout, ep)
        return False
    turn.info["context"] = reason
    ep.context_starts.append(len(ep.tokens))
    ep.context_reasons.append(reason)
    ep.append(ids, 0)
    return True


def _truncate(rollout: RolloutAPI, ep: Episode) -> None:
    """End ``ep`` truncated by its context."""
    ep.traj.truncated = True
    ep.traj.metadata["truncated_by"] = "context"
    rollout.finish(ep)


def from_environment(rollout: RolloutAPI, ep: Episode, turn: Turn, history: Sequence[Message]) -> bool:
    """Start ``ep``'s next segment with ``history``, the whole conversation the environment rewrote after ``turn``
    (``info["history"]``). Returns whether the episode goes on (False: it was finished — truncated by context when
    the rewritten conversation leaves no room to generate, or with an error when the template refuses it)."""
    assert ep.renderer is not None
    if rollout.context is not None:  # a budget's rewrites rebuild from the opening and the turns: they would undo this
        ep.traj.error = (
            "the environment rewrote the conversation itself (info['history']); rollout.context cannot "
            "manage its history too: drop rollout.context for this environment"
        )
        rollout.finish(ep)
        return False
    try:
        ids = ep.renderer.prompt_tokens(list(history))
    except Exception as e:  # only this episode ends
        ep.traj.error = f"rendering the history the environment rewrote failed: {type(e).__name__}: {e}"
        rollout.finish(ep)
        return False
    start = len(ep.tokens)
    if not _start_segment(rollout, ep, turn, ids, f"history rewritten by the environment ({len(history)} message(s))"):
        return False
    turn.obs_span = (start, len(ep.tokens))  # the new segment's opening: the conversation whole
    return True


async def _summarize(rollout: RolloutAPI, ep: Episode, turn: Turn, obs: Sequence[Message]) -> str | None:
    """Ask the policy for a summary after the reply ``obs`` (a turn of its own); its text, or None if the episode
    ended (no room, or the generation failed)."""
    assert ep.renderer is not None
    request = [*obs, Message(role="user", content=SUMMARY_REQUEST)]
    ask = ep.renderer.observation_tokens(request, ended_with_eos=_ended_with_eos(rollout, ep, turn))
    room = rollout.max_context - (len(ep.tokens) - ep.context_start) - len(ask)
    if room < 1:
        _truncate(rollout, ep)
        return None
    turn.obs_span = (len(ep.tokens), len(ep.tokens) + len(ask))
    turn.observation = list(request)
    ep.append(ask, 0)
    budget = rollout.context
    assert budget is not None  # histories are rewritten under a context budget only
    params = rollout.params.model_copy(update={"max_new_tokens": min(budget.summary_tokens, room), "n": 1})
    seed = None if ep.sample_seed is None else turn_seed(ep.sample_seed, len(ep.traj.turns), salt=104_729)
    if rollout.keep_prompts:
        ep.prompts_seen.append(list(ep.tokens[ep.context_start :]))
    try:
        completion = await generate_one(rollout, ep, params, seed)
    except Exception as e:  # this episode ends; what it collected is kept
        ep.traj.error = f"generation failed (summary): {type(e).__name__}: {e}"
        rollout.finish(ep)
        return None
    version = completion.policy_version
    if version is None:
        version = rollout.current_version()
    start = len(ep.tokens)
    ep.append(completion.token_ids, 1, completion.logprobs, version)
    ep.window_used += len(completion.token_ids)
    rollout.stats.generated_tokens += len(completion.token_ids)
    ep.traj.turns.append(
        Turn(
            index=len(ep.traj.turns),
            role=ep.role,
            action=Message(role="assistant", content=completion.text),
            info={"summary": True, "finish_reason": completion.finish_reason},
            token_span=(start, len(ep.tokens)),
        )
    )
    return completion.text
