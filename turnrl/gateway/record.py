"""What the gateway records of a session, and the episode (a token-exact :class:`~turnrl.types.Trajectory`) built
from it.

Every answered call is kept as it happened: the exact prompt token ids, each completion's sampled token ids and
log-probabilities, the policy version that sampled them, and (chat calls) the messages and tools it was sent and the
assistant messages it returned. At the end the calls become one episode:

* a call whose prompt starts with all the tokens of an earlier segment (its prompt, the completion that was kept,
  and whatever was added since) continues that segment: the new prompt tokens are appended with loss mask 0 (they
  are the last turn's observation: tool results, the user's next message), then the sampled tokens with mask 1;
* any other call (the program rewrote its history, or talks in a second conversation) opens a new segment — its own
  token-exact sequence, whose prompt the model saw as it is (``Trajectory.segments`` holds where each begins, and
  ``metadata["segment_reasons"]`` why). Segments are ordered by their last call, so the one that holds the last
  call answered comes last (returns and advantages run backwards along the tokens from the episode's reward).

A call with ``n`` > 1 keeps the completion that a later call continued (else the first); the others are counted in
``metadata["gateway"]["unused_choices"]``. Every call is one turn, in token order (a segment's turns together); the
episode's reward sits on the turn of the last call answered, with ``info["correct"]`` where it is known.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from turnrl.agents.base import Completion
from turnrl.gateway.history import Match
from turnrl.types import Message, ToolCall, Trajectory, Turn


@dataclass
class Call:
    """One answered request of a session (see the module docstring)."""

    index: int
    prompt: list[int]
    outs: list[Completion]
    version: int
    endpoint: str = "chat"
    messages: list[dict[str, Any]] | None = None
    returned: list[dict[str, Any]] | None = None
    match: Match | None = None
    at: float = field(default_factory=time.time)


@dataclass
class _Segment:
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turns: list[tuple[Call, int, tuple[int, int], tuple[int, int] | None]] = field(default_factory=list)
    reason: str | None = None

    def add(self, ids: list[int], mask: int, logprobs: list[float] | None = None, version: int = -1) -> tuple[int, int]:
        start = len(self.tokens)
        self.tokens += ids
        self.mask += [mask] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.versions += [version if mask else -1] * len(ids)
        return start, len(self.tokens)


def chosen(calls: list[Call]) -> dict[int, int]:
    """Per call, the completion its episode keeps: the first that a later call's prompt continues, else 0."""
    out = {}
    for k, call in enumerate(calls):
        out[call.index] = 0
        if len(call.outs) > 1:
            for i, c in enumerate(call.outs):
                seq = call.prompt + c.token_ids
                if any(later.prompt[: len(seq)] == seq for later in calls[k + 1 :]):
                    out[call.index] = i
                    break
    return out


def segment_reason(call: Call) -> str:
    """Why a call opened a new segment, in words."""
    m = call.match
    if m is None:
        return "a prompt that does not continue the earlier tokens"
    if m.how == "repeat":
        return "the same prompt as an earlier call (a retry or a second branch)"
    if m.how == "extended":
        return "continues an earlier point of the conversation (a second branch)"
    if m.kept == 0:
        return f"a new conversation ({m.messages} messages)"
    return f"history rewritten: {m.kept} earlier messages kept, {m.messages - m.kept} new or changed"


def build_trajectory(
    calls: list[Call],
    *,
    reward: float,
    correct: bool | None,
    eos_ids: set[int],
    tokenizer: Any = None,
    error: str | None = None,
    **fields: Any,
) -> Trajectory:
    """The episode of a session's ``calls`` (see the module docstring); ``fields`` go to the Trajectory (ids, group,
    metadata, …). A session without calls gives an episode without tokens (left out of training)."""
    calls = sorted(calls, key=lambda c: c.index)
    meta = dict(fields.pop("metadata", {}) or {})
    if not calls:
        return Trajectory(error=error or "the program made no calls through the gateway", metadata=meta, **fields)
    keep = chosen(calls)
    segments: list[_Segment] = []
    for call in calls:
        c = call.outs[keep[call.index]]
        seg = max(
            (s for s in segments if call.prompt[: len(s.tokens)] == s.tokens), key=lambda s: len(s.tokens), default=None
        )
        if seg is None:
            seg = _Segment(reason=segment_reason(call) if segments else None)
            segments.append(seg)
        if seg.turns:  # the tokens added since its last turn: that turn's observation
            span = seg.add(call.prompt[len(seg.tokens) :], 0)
            last = seg.turns[-1]
            seg.turns[-1] = (last[0], last[1], last[2], span)
        else:
            seg.add(call.prompt, 0)
        seg.turns.append((call, keep[call.index], seg.add(c.token_ids, 1, c.logprobs, call.version), None))
    first = segments[0]
    segments.sort(key=lambda seg: seg.turns[-1][0].index)  # the last call's segment last (see the docstring)
    if segments[0] is not first:
        first.reason = "the first conversation, continued after another began"
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    versions: list[int] = []
    starts: list[int] = []
    turns: list[Turn] = []
    last_call = calls[-1].index
    for s, seg in enumerate(segments):
        offset = len(tokens)
        starts.append(offset)
        tokens += seg.tokens
        mask += seg.mask
        logprobs += seg.logprobs
        versions += seg.versions
        for t, (call, i, span, obs) in enumerate(seg.turns):
            next_call = seg.turns[t + 1][0] if t + 1 < len(seg.turns) else None
            info: dict[str, Any] = {
                "segment": s,
                "call": call.index,
                "finish_reason": call.outs[i].finish_reason,
                "policy_version": call.version,
            }
            action = _action(call, i, tokenizer)
            if action.tool_calls:
                info["tool_calls"] = [tc.model_dump(exclude_none=True) for tc in action.tool_calls]
            if call.index == last_call and correct is not None:
                info["correct"] = bool(correct)
            turns.append(
                Turn(
                    index=len(turns),
                    action=action,
                    observation=_observation(call, next_call),
                    reward=reward if call.index == last_call else 0.0,
                    info=info,
                    token_span=(offset + span[0], offset + span[1]),
                    obs_span=(offset + obs[0], offset + obs[1]) if obs else None,
                )
            )
    drift = [{"call": c.index, **c.match.drift} for c in calls if c.match is not None and c.match.drift]
    meta.update(
        prompt_length=next((i for i, m in enumerate(mask) if m == 1), len(mask)),
        policy_version=[calls[0].version, calls[-1].version],
        prefill_tokens=sum(len(c.prompt) - int(c.outs[0].metadata.get("cached_tokens", 0)) for c in calls),
        cached_tokens=sum(int(c.outs[0].metadata.get("cached_tokens", 0)) for c in calls),
        gateway={
            "calls": len(calls),
            "segments": len(segments),
            "template_drift": drift,
            "unused_choices": sum(len(c.outs) - 1 for c in calls),
            "reused_prompts": sum(c.match is not None and c.match.how != "fresh" for c in calls),
        },
    )
    if len(segments) > 1:
        meta["segment_reasons"] = [seg.reason for seg in segments[1:]]
    return Trajectory(
        prompt=_messages(calls[0].messages or []),
        turns=turns,
        terminated=error is None,
        error=error,
        token_ids=tokens,
        loss_mask=mask,
        logprobs=logprobs,
        token_versions=versions,
        segments=starts if len(starts) > 1 else None,
        metadata=meta,
        **fields,
    )


def _action(call: Call, i: int, tokenizer: Any) -> Message:
    if call.returned is not None:  # the assistant message as sent back to the client
        return _messages([call.returned[i]])[0]
    c = call.outs[i]
    text = c.text if tokenizer is None else tokenizer.decode(c.token_ids, skip_special_tokens=True)
    return Message(role="assistant", content=text)


def _observation(call: Call, next_call: Call | None) -> list[Message]:
    """The messages the next call of the segment added after this call's assistant message."""
    if next_call is None or call.messages is None or next_call.messages is None:
        return []
    return _messages(next_call.messages[len(call.messages) + 1 :])


def _messages(dicts: list[dict[str, Any]]) -> list[Message]:
    out = []
    for m in dicts:
        role = m.get("role") if m.get("role") in ("system", "user", "assistant", "tool") else "user"
        calls = [ToolCall.from_openai(tc) for tc in m.get("tool_calls") or []]
        out.append(
            Message(
                role=role,
                content=str(m.get("content") or ""),
                name=m.get("name"),
                tool_call_id=m.get("tool_call_id"),
                tool_calls=calls or None,
            )
        )
    return out
