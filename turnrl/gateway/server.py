"""The training gateway: an OpenAI- and Anthropic-compatible server whose every call becomes training data.

A user's agent program talks to the policy being trained through any OpenAI or Anthropic client. The gateway serves
it like ``turnrl serve`` (``POST /v1/chat/completions``, ``POST /v1/completions``, OpenAI's ``POST /v1/responses``
and Anthropic's ``POST /v1/messages``; ``tools``, streaming, ``n``, logprobs —
:class:`~turnrl.serving.server.AgentServer`), with three differences:

* **Sessions.** Calls are grouped into episodes by a session id, in the URL path: the program gets
  ``base_url = http://127.0.0.1:PORT/s/SESSION/v1`` and needs nothing else (``OpenAI(base_url=base_url,
  api_key=api_key)``; the ``anthropic`` SDK adds ``/v1`` itself: ``Anthropic(base_url=base_url.removesuffix("/v1"),
  api_key=api_key)``). A client that keeps one base URL may send the header ``X-Session-Id: SESSION`` to
  ``http://127.0.0.1:PORT/v1`` instead. A call naming no session, an unknown one or one that has ended is refused
  (400, 404, 409 in the error shape of the route's API).
* **Exact tokens.** A chat call that extends an earlier one is prompted with the exact tokens sampled before, plus
  the template tokens of the new messages (:mod:`turnrl.gateway.history`); everything answered is recorded
  (:mod:`turnrl.gateway.record`). A Messages or Responses call is converted into the same chat form
  (:mod:`turnrl.serving.anthropic_requests`, :mod:`turnrl.serving.responses_requests`) and held to the same rules; a
  session keeps its responses for ``previous_response_id`` until it closes (a continuation extends the same sampled
  tokens).
  One session speaks one dialect (Chat Completions, Responses or Messages): a call in another is refused with a 409
  naming both, and what the session recorded stays.
* **Batching.** Concurrent sessions share the policy's generation calls (:mod:`turnrl.gateway.shared_engine`).
* **Several policies.** A gateway may serve several agents of one episode (the seats of a game, docs/multi-agent.md):
  ``Gateway(agent, policies={"X": agent_x, "O": agent_o})`` and ``open(session, policy="X")``; each session is
  answered by its own policy (its own engine and version) and recorded on its own, and a client never picks another
  session's policy (the session decides, whatever ``model`` a request names).

The run's sampling settings override the request's (``sampling``: e.g. the rollout temperature — the learner scores
tokens under the distribution that sampled them), ``max_tokens`` is capped by ``max_new_tokens``, and a prompt longer
than ``max_context`` allows is refused before generation (OpenAI's ``context_length_exceeded``; on ``/v1/messages``
an ``invalid_request_error``; ``max_output_tokens`` on ``/v1/responses`` is capped the same way) — all three the same
in every dialect. A session opened with a ``seed``
samples from its own stream, whatever seed a request names: call k of a session opened with ``seed`` s samples with
seed ``turn_seed(s, k)`` (``turnrl.utils``), as turn k of a native turnrl episode with sample seed s does (a program
that always sends the same seed would otherwise give every sample of a group the same tokens); other sessions honour
the request's. A key is always required (one is made when none is given).

Its namesakes are the other servers, each its room's: :mod:`turnrl.serving.server` (a policy behind the same APIs,
no training) and :mod:`turnrl.envs.remote.server` (environments, not policies).
"""

from __future__ import annotations

import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from werkzeug.routing import Rule
from werkzeug.wrappers import Request

from turnrl.agents.base import Completion, SamplingParams, end_of_turn_ids
from turnrl.gateway.history import ChatHistory, Match
from turnrl.gateway.record import Call
from turnrl.gateway.shared_engine import Engine
from turnrl.serving.openai_api import APIError, chat_messages
from turnrl.serving.responses_requests import ResponseStore
from turnrl.serving.server import AgentServer
from turnrl.utils import turn_seed

#: the API each generation route belongs to: a session keeps to one
DIALECTS = {"chat": "openai", "completions": "openai", "messages": "anthropic", "responses": "responses"}
DIALECT_NAMES = {
    "openai": "OpenAI's Chat Completions API (/v1/chat/completions, /v1/completions)",
    "anthropic": "Anthropic's Messages API (/v1/messages)",
    "responses": "OpenAI's Responses API (/v1/responses)",
}


@dataclass
class Session:
    """One episode's calls (see :mod:`turnrl.gateway.record`)."""

    id: str
    history: ChatHistory
    policy: str | None = None  # which of the gateway's policies answers it (None: the gateway's agent)
    dialect: str | None = None  # the API its first generation call used (``DIALECTS``)
    seed: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    responses: ResponseStore = field(default_factory=lambda: ResponseStore(None))  # for previous_response_id
    started: int = 0  # generation requests begun (the default seed stream)
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    busy: int = 0  # calls generating now
    idle: threading.Condition = field(default_factory=threading.Condition)

    def claim(self, dialect: str | None) -> None:
        """Keep the session to one dialect: the first generation call sets it, a call in another is refused (409)."""
        if dialect is None:
            return
        with self.lock:
            if self.dialect is None:
                self.dialect = dialect
                return
            mine = self.dialect
        if mine != dialect:
            raise APIError(
                409,
                f"session {self.id!r} speaks {DIALECT_NAMES[mine]}; this call uses "
                f"{DIALECT_NAMES[dialect]}. One session may not mix dialects (its episode is one "
                "conversation in one API): keep to one, or open another session; nothing recorded so far "
                "is lost",
                code="dialect_mixed",
            )

    def next_seed(self) -> int | None:
        """The seed of the session's next call that gives none (None: the session has no stream)."""
        with self.lock:
            k, self.started = self.started, self.started + 1
        return None if self.seed is None else turn_seed(self.seed, k)


@dataclass
class _Request:
    session: Session
    match: Match | None = None
    version: int = -1
    dialect: str | None = None


class Gateway(AgentServer):
    """The training gateway (see the module docstring).

    Args:
        agent: the policy, as an agent (the HF agent decodes concurrent sessions in one continuous batch).
        model: the model name clients ask for.
        host, port: where to listen (port 0 picks a free one).
        api_key: the key clients must send; default a random one (:attr:`api_key`).
        version: the policy version, recorded with every call.
        sampling: fields of :class:`~turnrl.agents.base.SamplingParams` that override every request's.
        max_new_tokens: the most tokens one call may generate.
        max_context: the most tokens a prompt and its completion may hold.
        timeout: seconds one request may wait for its completions.
        engine_thread: decode in a thread of the gateway's own; False: only while a caller waits in
            ``gateway.engine.serve(futures)`` (a training run: decoding and updates in one thread, never at once).
        policies: more policies by name, for sessions opened with ``policy=NAME`` (they must share ``agent``'s
            tokenizer: one episode's views are rendered with one chat template).
        versions: each named policy's version (default: ``version``).

    Raises:
        ValueError: a policy whose tokenizer differs from ``agent``'s.
    """

    #: a streamed call decodes to its end even when its client goes away (it is recorded; other sessions share the
    #: decode loop, which a cancelled row would stop)
    cancel_streams = False
    api_key: str  # never None here: a random one unless given

    def __init__(
        self,
        agent: Any,
        model: str = "turnrl-policy",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        version: Callable[[], int] | None = None,
        sampling: dict[str, Any] | None = None,
        max_new_tokens: int | None = None,
        max_context: int | None = None,
        timeout: float = 600.0,
        engine_thread: bool = True,
        policies: Mapping[str, Any] | None = None,
        versions: Mapping[str, Callable[[], int]] | None = None,
    ) -> None:
        super().__init__(agent, model, host, port, api_key=api_key or secrets.token_urlsafe(24))
        self.version = version or (lambda: 0)
        self.sampling = dict(sampling or {})
        self.max_new_tokens, self.max_context = max_new_tokens, max_context
        self.engine = Engine(agent, timeout=timeout, own_thread=engine_thread)
        self.policies = dict(policies or {})
        if self.policies and not engine_thread:
            raise ValueError(
                "a gateway with several policies decodes each in its own engine thread: engine_thread=True"
            )
        for name, other in self.policies.items():
            if not _same_tokenizer(other.tokenizer, agent.tokenizer):
                raise ValueError(
                    f"policy {name!r} has another tokenizer than the gateway's agent; the policies of one "
                    "gateway render their sessions with one chat template"
                )
        self.engines: dict[str | None, Engine] = {
            None: self.engine,
            **{name: Engine(a, timeout=timeout, own_thread=engine_thread) for name, a in self.policies.items()},
        }
        self.versions = dict(versions or {})
        self.stream_timeout = timeout
        self.sessions: dict[str, Session] = {}
        self._ended: set[str] = set()
        self._sessions_lock = threading.Lock()
        self.eos_ids = end_of_turn_ids(agent)

    def rules(self) -> list[Rule]:
        """The plain routes (session in the ``X-Session-Id`` header) and the same under ``/s/<session>``."""
        base = super().rules()
        return base + [Rule("/s/<session>" + r.rule, endpoint=r.endpoint, methods=r.methods) for r in base]

    # ---- sessions ----

    @property
    def root(self) -> str:
        """``http://HOST:PORT`` (no path)."""
        return f"http://{self.httpd.host}:{self.httpd.server_port}"

    def base_url(self, session: str) -> str:
        """The OpenAI ``base_url`` of a session: ``http://HOST:PORT/s/SESSION/v1``."""
        return f"{self.root}/s/{session}/v1"

    def open(
        self,
        session: str | None = None,
        *,
        seed: int | None = None,
        sampling: dict[str, Any] | None = None,
        policy: str | None = None,
    ) -> str:
        """Start recording a session (default id: a random one); returns its id. ``seed`` starts its own sampling
        stream; ``sampling`` overrides the gateway's sampling settings for it (e.g. greedy for evaluation);
        ``policy`` names which of the gateway's ``policies`` answers it (default: its agent).

        Raises:
            ValueError: a malformed or taken id, or a policy the gateway does not serve.
        """
        sid = session or uuid.uuid4().hex
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", sid):
            raise ValueError(f"a session id may hold letters, digits, '-', '_' and '.', got {sid!r}")
        if policy is not None and policy not in self.policies:
            raise ValueError(
                f"the gateway serves no policy {policy!r}; it serves {', '.join(self.policies) or 'only its agent'}"
            )
        with self._sessions_lock:
            if sid in self.sessions or sid in self._ended:
                raise ValueError(f"session {sid!r} exists already")
            agent = self.policies[policy] if policy is not None else self.agent
            self.sessions[sid] = Session(
                sid,
                ChatHistory(agent.tokenizer, end_of_turn_ids(agent)),
                policy=policy,
                seed=seed,
                sampling=dict(sampling or {}),
            )
        return sid

    def close(self, session: str, *, wait: float = 30.0) -> Session:
        """Stop recording a session and return what it recorded; later calls naming it get a 409. Calls still
        generating (a client that hung up on a stream) are waited for up to ``wait`` seconds, to be recorded."""
        with self._sessions_lock:
            s = self.sessions.pop(session)
            self._ended.add(session)
        with s.idle:
            s.idle.wait_for(lambda: s.busy == 0, timeout=max(wait, 0.0))
        with s.lock:
            s.closed = True
        s.responses.clear()  # a later previous_response_id naming them is refused with the session (409)
        self.engines[s.policy].release(session)
        return s

    def stop(self) -> None:
        """Stop serving and the engine."""
        super().stop()
        for engine in self.engines.values():
            engine.close()

    # ---- the AgentServer hooks ----

    def context(self, request: Request, args: Mapping[str, Any], endpoint: str) -> _Request | None:
        sid = args.get("session") or request.headers.get("X-Session-Id")
        if sid is None:
            return None
        with self._sessions_lock:
            s = self.sessions.get(sid)
            ended = sid in self._ended
        if s is None:
            if ended:
                raise APIError(
                    409, f"session {sid!r} has ended (its episode is recorded); open a new one", code="session_ended"
                )
            raise APIError(
                404,
                f"unknown session {sid!r}: use the base_url the gateway gave your program",
                code="session_not_found",
                kind="not_found_error",
            )
        dialect = DIALECTS.get(endpoint)
        if dialect is not None and s.dialect not in (None, dialect):
            s.claim(dialect)  # refused before the request is read
        return _Request(s, dialect=dialect)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, ctx: Any = None
    ) -> list[int]:
        req = _need_session(ctx)
        try:
            ids, req.match = req.session.history.prompt(messages, tools)
        except Exception as e:  # the template refused these messages
            raise APIError(
                400,
                f"the model's chat template cannot render these messages: {type(e).__name__}: {e}",
                param="messages",
            ) from e
        return ids

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, ctx: Any = None, on_token: Any = None
    ) -> list[Completion]:
        req = _need_session(ctx)
        params = params.model_copy(update={**self.sampling, **req.session.sampling})
        budget = (
            params.max_new_tokens if self.max_new_tokens is None else min(params.max_new_tokens, self.max_new_tokens)
        )
        if self.max_context is not None:
            room = self.max_context - len(prompt_ids)
            if room < 1:
                raise APIError(
                    400,
                    f"this model's maximum context length is {self.max_context} tokens; the "
                    f"messages hold {len(prompt_ids)}: shorten the history",
                    param="messages",
                    code="context_length_exceeded",
                )
            budget = min(budget, room)
        params = params.model_copy(update={"max_new_tokens": budget})
        req.session.claim(req.dialect)  # a call in another dialect that arrived meanwhile is refused here
        seed = req.session.next_seed()  # a session opened with a seed samples from its own stream, whatever the
        if seed is None:  # request asks (a program that always sends seed=0 would make a group's samples equal)
            seed = params.seed
        policy = req.session.policy  # None: the run's one policy
        req.version = int((self.versions.get(policy, self.version) if policy is not None else self.version)())
        try:
            return self.engines[req.session.policy].generate(
                prompt_ids, params, seed=seed, session=req.session.id, on_token=on_token
            )
        except TimeoutError as e:
            raise APIError(503, f"generation timed out: {e}", kind="server_error", code="timeout") from e

    def response_store(self, ctx: Any = None) -> ResponseStore:
        """A session keeps its own responses (``previous_response_id``), until it closes."""
        return _need_session(ctx).session.responses

    def run_chat(self, call: Any, ctx: Any = None, on_token: Any = None) -> Any:
        with _busy(ctx):
            return super().run_chat(call, ctx, on_token)

    def run_completions(self, call: Any, ctx: Any = None, on_token: Any = None) -> Any:
        with _busy(ctx):
            return super().run_completions(call, ctx, on_token)

    def answered(self, ctx: Any, prompt: list[int], outs: list[Completion], request: dict[str, Any]) -> None:
        req = _need_session(ctx)
        s = req.session
        returned = None
        if request["endpoint"] in ("chat", "messages", "responses"):
            returned = chat_messages(request["returned"])
            s.history.answered(request["messages"], request["tools"], prompt, returned, [c.token_ids for c in outs])
        with s.lock:
            if s.closed:
                return  # the episode was recorded without it (its program ran past its time)
            s.calls.append(
                Call(
                    len(s.calls),
                    list(prompt),
                    outs,
                    req.version,
                    request["endpoint"],
                    request.get("messages"),
                    returned,
                    req.match,
                )
            )


@contextmanager
def _busy(ctx: Any) -> Iterator[None]:
    """Count a call as generating in its session (:meth:`Gateway.close` waits for it)."""
    s = _need_session(ctx).session
    with s.idle:
        s.busy += 1
    try:
        yield
    finally:
        with s.idle:
            s.busy -= 1
            s.idle.notify_all()


def _need_session(ctx: Any) -> _Request:
    if ctx is None:
        raise APIError(
            400,
            "no session: use the base_url the gateway gave your program (…/s/SESSION/v1) or send "
            "the header X-Session-Id",
            code="session_required",
        )
    return ctx


def _same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two tokenizers are one (the same object, or the same vocabulary and chat template)."""
    if a is b:
        return True
    try:
        return a.get_vocab() == b.get_vocab() and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)
    except AttributeError:
        return False
