"""The interchange format: Message, ToolCall, Turn, Trajectory (docs/concepts.md §6).

Everything downstream of an environment — rollouts, algorithms, evaluation, SWiRL decomposition, DQO's
offline data — consumes :class:`Trajectory`. It round-trips through JSONL and Parquet without loss
(see :mod:`turnrl.storage`).

Token fields are optional: a Trajectory built from text alone (a scripted episode, a transcript) has none;
the rollout fills them. When present they obey these invariants, checked on construction:

* ``token_ids``, ``loss_mask`` and ``logprobs`` have the same length ``L``;
* ``loss_mask[i]`` is 1 on tokens the policy generated and 0 on prompt/template/environment tokens;
* each turn's ``token_span = (start, end)`` indexes the generated tokens of that turn in ``token_ids``,
  spans are ordered and do not overlap, and ``loss_mask`` is 1 inside them;
* ``token_versions``, where recorded, has length ``L`` too: the policy version that sampled each generated token,
  −1 on the tokens the policy did not generate (the staleness of a token is the learner's version minus it);
* ``segments``, where given, are the offsets at which the episode's *context segments* begin: an episode whose
  history was rewritten (messages dropped, trimmed, summarized) is several token sequences, concatenated in
  ``token_ids``, each opening with its own prompt tokens and seen by the model as a sequence of its own (no token
  attends to another segment's; positions restart at 0). The offsets start at 0, strictly increase, each lies
  inside ``token_ids`` with ``loss_mask`` 0 there, and no turn's ``token_span`` or ``obs_span`` crosses one. None
  (or ``[0]``) is one segment. The episode stays one episode for the algorithms (one reward, one group member).
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["system", "user", "assistant", "tool"]


def decode_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: a dict as it is, a JSON object string decoded; anything else kept as
    ``{"_raw": text}`` (not JSON) or ``{"_value": value}`` (JSON of another type)."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return {"_raw": str(raw)}
    return value if isinstance(value, dict) else {"_value": value}


def message_key(m: dict[str, Any]) -> str:
    """An OpenAI-form chat message's identity for matching a conversation against an earlier one (does a request
    continue it?): role, text, name, tool call id and the calls' names and arguments (not their ids, which clients
    may re-create). The gateway's sessions and the verifiers adapter match with it."""
    calls = [
        ((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
        for c in m.get("tool_calls") or []
    ]
    return json.dumps(
        [m.get("role"), m.get("content") or "", m.get("name"), m.get("tool_call_id"), calls],
        sort_keys=True,
        default=str,
    )


class ToolCall(BaseModel):
    """One tool invocation parsed from an assistant message.

    ``arguments`` holds JSON-style keyword arguments (Hermes/OpenAI style). Tag-style calls such as
    ``<calculator>2+2</calculator>`` carry their text in ``raw`` and leave ``arguments`` empty; the tool maps
    ``raw`` onto its single string parameter.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw: str | None = None
    id: str | None = None

    @classmethod
    def from_openai(cls, call: dict[str, Any]) -> ToolCall:
        """A call in OpenAI's chat-completions form (``{"id", "function": {"name", "arguments"}}``, the arguments a
        JSON string or an object). Arguments that are not a JSON object are kept, as ``{"_raw": text}`` (not JSON)
        or ``{"_value": value}`` (JSON of another type)."""
        function = call.get("function") or {}
        return cls(
            name=str(function.get("name")),
            arguments=decode_arguments(function.get("arguments")),
            id=call.get("id") if isinstance(call.get("id"), str) else None,
        )

    def to_openai(self) -> dict[str, Any]:
        """Return the OpenAI chat-completions form ``{"type": "function", "function": {...}}``."""
        out: dict[str, Any] = {
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments if not self.raw else {"input": self.raw}},
        }
        if self.id is not None:
            out["id"] = self.id
        return out


class Message(BaseModel):
    """One chat message. ``name`` is the tool's name on ``role="tool"`` messages."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def to_chat(self) -> dict[str, Any]:
        """Return the plain dict that chat templates (``tokenizer.apply_chat_template``) expect."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class Turn(BaseModel):
    """One agent turn: the assistant's action and what the environment answered.

    Attributes:
        index: 0-based position of the turn in the episode.
        role: who acted in this turn — ``"policy"`` or ``"verifier"`` (PAG, docs/algorithms.md §7) or another
            env-defined role. Role-aware algorithms normalize advantages per role.
        action: the assistant message the agent produced.
        observation: the new messages the environment returned after the action (may be empty on the last turn).
        reward: the reward of this step; the rollout places it on the turn's last generated token.
        terminated / truncated: the step's Gymnasium flags.
        info: the step's ``info`` dict (JSON-serializable).
        token_span: ``(start, end)`` of this turn's generated tokens in ``Trajectory.token_ids``, if known.
        obs_span: ``(start, end)`` of the observation's template tokens that follow, if known.
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    role: str = "policy"
    action: Message
    observation: list[Message] = Field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    token_span: tuple[int, int] | None = None
    obs_span: tuple[int, int] | None = None


class Trajectory(BaseModel):
    """One episode, token-exact when the rollout produced it (see the module docstring for invariants)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    env_id: str | None = None
    task_id: str | None = None
    seed: int | None = None
    group_id: str | None = None
    prompt: list[Message] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None
    logprobs: list[float] | None = None
    token_versions: list[int] | None = None
    segments: list[int] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_tokens(self) -> Trajectory:
        fields = {"token_ids": self.token_ids, "loss_mask": self.loss_mask, "logprobs": self.logprobs}
        present = {k: v for k, v in fields.items() if v is not None}
        if present and len(present) != 3:
            missing = sorted(set(fields) - set(present))
            raise ValueError(f"token fields must be given together; missing {missing}")
        if not present:
            for name in ("token_versions", "segments"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs the token fields (token_ids, loss_mask, logprobs)")
            return self
        token_ids, loss_mask, logprobs = self.token_ids, self.loss_mask, self.logprobs
        assert token_ids is not None and loss_mask is not None and logprobs is not None  # all three present
        n = len(token_ids)
        if len(loss_mask) != n or len(logprobs) != n:
            raise ValueError(
                f"token_ids ({n}), loss_mask ({len(loss_mask)}) and logprobs ({len(logprobs)}) "
                "must have the same length"
            )
        if any(m not in (0, 1) for m in loss_mask):
            raise ValueError("loss_mask must contain only 0 and 1")
        if self.token_versions is not None and len(self.token_versions) != n:
            raise ValueError(f"token_versions ({len(self.token_versions)}) must have one entry per token ({n})")
        if self.segments is not None:
            self._check_segments(n)
        prev_end = 0
        for turn in self.turns:
            if turn.token_span is None:
                continue
            start, end = turn.token_span
            if not prev_end <= start <= end <= n:
                raise ValueError(
                    f"turn {turn.index}: token_span {turn.token_span} out of order or out of range (L={n})"
                )
            if any(loss_mask[i] != 1 for i in range(start, end)):
                raise ValueError(f"turn {turn.index}: loss_mask must be 1 inside token_span {turn.token_span}")
            prev_end = end
        return self

    def _check_segments(self, n: int) -> None:
        segs = self.segments
        assert segs is not None and self.loss_mask is not None
        if not segs or segs[0] != 0:
            raise ValueError(f"segments must start with offset 0 (got {segs})")
        if any(b <= a for a, b in zip(segs, segs[1:])):
            raise ValueError(f"segments must strictly increase (got {segs})")
        if segs[-1] >= n:
            raise ValueError(f"segment offset {segs[-1]} is past the last token (L={n})")
        for turn in self.turns:
            for name in ("token_span", "obs_span"):
                span = getattr(turn, name)
                if span is not None and any(span[0] < s < span[1] for s in segs):
                    raise ValueError(f"turn {turn.index}: {name} {span} crosses a segment boundary (segments {segs})")
        for s in segs:
            if self.loss_mask[s] != 0:
                raise ValueError(f"segment at {s} must open with prompt tokens (loss_mask 0), not a generated one")

    # ---- derived views (properties, never stored) ----

    @property
    def messages(self) -> list[Message]:
        """The whole conversation in order: prompt, then each action followed by its observation."""
        out = list(self.prompt)
        for turn in self.turns:
            out.append(turn.action)
            out.extend(turn.observation)
        return out

    @property
    def total_reward(self) -> float:
        """Sum of the per-turn rewards."""
        return math.fsum(t.reward for t in self.turns)

    @property
    def num_turns(self) -> int:
        """Number of agent turns."""
        return len(self.turns)

    @property
    def correct(self) -> bool | None:
        """The last turn's ``info["correct"]`` if it reported one."""
        for turn in reversed(self.turns):
            if "correct" in turn.info and turn.info["correct"] is not None:
                return bool(turn.info["correct"])
        return None

    def segment_bounds(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each context segment in ``token_ids`` (one, the whole sequence, without ``segments``).

        Raises:
            ValueError: the trajectory has no tokens.
        """
        if self.token_ids is None:
            raise ValueError("this trajectory has no token fields; it was not produced by a token-level rollout")
        starts = self.segments or [0]
        return list(zip(starts, [*starts[1:], len(self.token_ids)]))

    def token_rewards(self) -> list[float]:
        """Per-token rewards: each turn's reward on the last token of its ``token_span``, plus the dense rewards of
        ``metadata["dense_rewards"]`` (``[[token_index, reward], …]`` on generated tokens, e.g. a process reward
        model's at line ends); 0 elsewhere. ``total_reward`` counts the turns' rewards only.

        Raises:
            ValueError: the trajectory has no tokens, a rewarded turn has no (or an empty) span, or a dense reward
                sits on a token that was not generated.
        """
        if self.token_ids is None:
            raise ValueError("this trajectory has no token fields; it was not produced by a token-level rollout")
        mask = self.loss_mask
        assert mask is not None  # the token fields come together
        out = [0.0] * len(self.token_ids)
        for turn in self.turns:
            if turn.token_span is None or turn.token_span[1] <= turn.token_span[0]:
                if turn.reward != 0.0:
                    raise ValueError(f"turn {turn.index} has reward {turn.reward} but no generated tokens to carry it")
                continue
            out[turn.token_span[1] - 1] += turn.reward
        for index, reward in self.metadata.get("dense_rewards") or []:
            if not 0 <= index < len(out) or mask[index] != 1:
                raise ValueError(f"a dense reward sits on token {index}, which is not a generated token")
            out[index] += float(reward)
        return out


class SamplingParams(BaseModel):
    """How to sample.

    Attributes:
        temperature: 0 for greedy decoding.
        top_p: nucleus sampling mass (1.0 = off).
        top_k: keep the k most likely tokens (0 = off).
        max_new_tokens: the most tokens to generate per completion.
        stop: strings that end a completion (the completion keeps the stop string; tokens are never cut).
        seed: makes sampling reproducible (per call); None draws fresh randomness.
        n: completions per prompt; results are grouped by prompt (``[p0s0, p0s1, …, p1s0, …]``).
        fire_temperature: FIRE sampling (docs/algorithms.md §8): the first token at this (high) temperature, the rest at
            ``temperature``. None = off.
        top_logprobs: also record, per generated token, the ``top_logprobs`` most likely tokens with their
            log-probabilities under the same distribution as ``Completion.logprobs`` (agents that can; 0 = off).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    max_new_tokens: int = Field(256, ge=1)
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = Field(1, ge=1)
    fire_temperature: float | None = Field(None, gt=0.0)
    top_logprobs: int = Field(0, ge=0, le=20)

    @model_validator(mode="after")
    def _check(self) -> SamplingParams:
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        return self

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (temperature 0, no FIRE)."""
        return self.temperature == 0.0 and self.fire_temperature is None
