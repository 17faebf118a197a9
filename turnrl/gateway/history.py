"""Token-exact chat prompts for a session whose program sends whole message lists.

An OpenAI client sends the whole conversation on every call. Rendering it through the chat template and tokenizing
it again would not give back the tokens the model sampled on the earlier turns (a template may render an assistant
message differently from how it was generated; text → tokens is not the inverse of tokens → text). So a session
remembers, for every call, the messages it was sent with their exact tokens, and for every completion it returned
the assistant message *as sent back to the client* with the prompt's tokens followed by the sampled ones. A new call
whose messages start with such a state reuses its tokens and appends only the template tokens of the messages added
since (:meth:`turnrl.tokens.ChatRenderer.observation_tokens`, the rule a native turnrl rollout uses): the episode is
one sequence whose assistant tokens are exactly those sampled. Where the template would render the history
differently, the difference is reported (``drift``), and the exact tokens are kept.

A call whose messages extend no state (the program dropped, trimmed or summarized messages, or started a sub-agent's
conversation) is rendered from scratch: it starts a new *segment* of the episode (:mod:`turnrl.gateway.record`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from turnrl.tokens import ChatRenderer
from turnrl.types import message_key


@dataclass
class State:
    """A conversation state with known tokens: the messages of a call's prompt (``assistant`` False; the tokens end
    with the generation prompt) or those plus a returned assistant message (the tokens end with the sampled ones)."""

    keys: tuple[str, ...]
    tools: str
    ids: list[int]
    assistant: bool
    ended_with_eos: bool = False


@dataclass
class Match:
    """How a call's prompt was built: ``extended`` (an earlier state plus new messages), ``repeat`` (exactly an
    earlier prompt) or ``fresh`` (rendered from scratch); ``kept`` messages came from the best earlier state, of
    ``messages``; ``drift``: where the exact tokens differ from a fresh rendering (None: they do not)."""

    how: str
    kept: int
    messages: int
    drift: dict[str, Any] | None = None


@dataclass
class ChatHistory:
    """The states of one session's chat calls (see the module docstring)."""

    tokenizer: Any
    eos_ids: set[int] = field(default_factory=set)
    states: list[State] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[list[int], Match]:
        """The token prompt of a call with ``messages`` (normalized by :func:`turnrl.serving.openai_api.chat_messages`)
        and ``tools``, and how it was built."""
        renderer = ChatRenderer(self.tokenizer, tools, fit_tools=True)
        keys = tuple(message_key(m) for m in messages)
        tools_key = json.dumps(tools or [], sort_keys=True, default=str)
        fresh = renderer.encode(renderer.render(messages, add_generation_prompt=True))
        with self.lock:
            best = max(
                (
                    s
                    for s in self.states
                    if s.tools == tools_key
                    and keys[: len(s.keys)] == s.keys
                    and (len(s.keys) < len(keys) if s.assistant else len(s.keys) == len(keys))
                ),
                key=lambda s: len(s.keys),
                default=None,
            )
            kept = max((_common(s.keys, keys) for s in self.states), default=0)
        if best is None:
            return fresh, Match("fresh", kept, len(keys))
        if best.assistant:
            ids = best.ids + renderer.observation_tokens(messages[len(best.keys) :], ended_with_eos=best.ended_with_eos)
            match = Match("extended", len(best.keys), len(keys))
        else:
            ids, match = list(best.ids), Match("repeat", len(keys), len(keys))
        if ids != fresh:
            at = next((i for i, (a, b) in enumerate(zip(ids, fresh)) if a != b), min(len(ids), len(fresh)))
            match.drift = {"at": at, "exact_tokens": len(ids), "template_tokens": len(fresh)}
        return ids, match

    def answered(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        prompt: list[int],
        returned: list[dict[str, Any]],
        sampled: list[list[int]],
    ) -> None:
        """Remember a call's prompt state and, per completion, the state with the assistant message sent back."""
        keys = tuple(message_key(m) for m in messages)
        tools_key = json.dumps(tools or [], sort_keys=True, default=str)
        with self.lock:
            self.states.append(State(keys, tools_key, list(prompt), False))
            for message, ids in zip(returned, sampled):
                self.states.append(
                    State(
                        (*keys, message_key(message)),
                        tools_key,
                        list(prompt) + list(ids),
                        True,
                        bool(ids) and ids[-1] in self.eos_ids,
                    )
                )


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
