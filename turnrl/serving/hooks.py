"""The seam between :class:`turnrl.serving.server.AgentServer` and its endpoint families (OpenAI's completions and
chat, :mod:`turnrl.serving.endpoints`; Anthropic's Messages, :mod:`turnrl.serving.messages`; OpenAI's Responses,
:mod:`turnrl.serving.responses`): :class:`ServerHooks`, everything an endpoint may use of the server it is part of.

An endpoint family derives from :class:`Endpoints` and reaches the server only through ``self.hooks`` (a function
it hands the server to takes a :class:`ServerHooks`), so the type checker holds every use to this list: the agent
and the served model name, how streams end, and the hooks a subclass — the training gateway,
:mod:`turnrl.gateway.server` — overrides to put its sessions in (``chat_prompt``, ``generate``, ``answered``,
``response_store``, ``run_chat``, ``run_completions``). The server's HTTP side (routes, keys, bodies,
starting and stopping) stays in :mod:`turnrl.serving.server`, which no endpoint reads.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from turnrl.agents.base import Completion, SamplingParams
    from turnrl.serving.openai_api import ChatCall, CompletionCall
    from turnrl.serving.responses_requests import ResponseStore


class ServerHooks(Protocol):
    """What an endpoint family may use of its server.

    Attributes:
        agent: the served agent (its ``tokenizer``; its ``model`` where top log-probabilities are scored here).
        model: the served model name (answers name it).
        generation_lock: held while the agent generates or scores (one generation at a time).
        cancel_streams: a streamed generation stops at its next token once its client is gone.
        stream_timeout: the longest wait for the next token of a stream, in seconds.
    """

    agent: Any
    model: str
    generation_lock: threading.Lock
    cancel_streams: bool
    stream_timeout: float

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, ctx: Any = None
    ) -> list[int]:
        """The token prompt of a chat request."""
        ...

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: Any = None, on_token: Any = None
    ) -> list[Completion]:
        """``params.n`` completions of one token prompt."""
        ...

    def answered(self, ctx: Any, prompt: list[int], outs: list[Completion], request: dict[str, Any]) -> None:
        """Called with every answered generation request before the response is sent."""
        ...

    def response_store(self, ctx: Any = None) -> ResponseStore:
        """Where a request's responses are kept for ``previous_response_id``."""
        ...

    def run_chat(
        self, call: ChatCall, ctx: Any = None, on_token: Any = None
    ) -> tuple[dict[str, Any], list[Completion]]:
        """Generate a checked chat call: its envelope in OpenAI's shape and the completions."""
        ...

    def run_completions(
        self, call: CompletionCall, ctx: Any = None, on_token: Any = None
    ) -> tuple[dict[str, Any], list[Completion]]:
        """Generate a checked completions call: its envelope and the completions."""
        ...


class Endpoints:
    """The base of an endpoint family: ``self.hooks`` is the server it is part of, as :class:`ServerHooks` (the
    family declares no attribute of the server's own)."""

    @property
    def hooks(self) -> ServerHooks:
        """This server, as its endpoints may use it."""
        return cast(ServerHooks, self)
