"""The agent protocol: token prompts in, completions with per-token logprobs out (docs/concepts.md §4)."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from turnrl.types import SamplingParams  # the interchange type; agents, verifiers' judges and rollouts share it

FinishReason = Literal["stop", "length"]


@dataclass
class Completion:
    """One generated continuation of a token prompt.

    Attributes:
        text: the decoded generated tokens (special tokens skipped).
        token_ids: the generated tokens exactly as sampled (an end-of-sequence token included when produced).
        logprobs: one log-probability per generated token, under the distribution it was sampled from:
            ``log_softmax(logits / T)`` with T the temperature of that step (1 when greedy), restricted to the tokens
            top-k/top-p kept and renormalized where those are set (docs/algorithms.md §11: μ).
        finish_reason: ``"stop"`` (end-of-sequence token or stop string) or ``"length"`` (hit max_new_tokens).
        prompt_index: which prompt of the batch this continues.
        policy_version: the version of the weights that sampled it, where the agent knows (a rollout worker whose
            weights may change between generation calls); None: the rollout's own count applies.
        top_logprobs: with ``SamplingParams.top_logprobs`` = k, per generated token the k most likely
            ``(token_id, logprob)`` pairs from the same log-probabilities as ``logprobs`` (so the chosen token's
            entry equals its logprob exactly); None where not asked or the agent cannot.
        token_versions: per generated token, the version of the weights that sampled it, where the weights changed
            inside this generation call (an agent that takes new weights in flight); None: ``policy_version`` holds
            for every token.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_index: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    policy_version: int | None = None
    top_logprobs: list[list[tuple[int, float]]] | None = None
    token_versions: list[int] | None = None


@runtime_checkable
class Agent(Protocol):
    """Anything that continues token prompts: ``generate(prompts, params) -> completions``.

    An agent that can report tokens as they are sampled accepts ``on_token=callback`` in ``generate``: it calls
    ``callback(completion_index, token_id, logprob, top)`` for every token right after sampling it (the index into
    the returned list; ``top`` the token's alternatives with ``params.top_logprobs``, else None); ``turnrl serve``
    streams through it. An exception raised by the callback aborts the call.

    ``tokenizer`` (a Hugging Face tokenizer with a chat template) renders conversations into the token prompts
    the rollout sends; agents that only speak text (scripted ones) may have none.

    Everything else an agent can do is optional and declared in one place, its ``capabilities`` (a
    :class:`Capabilities`; every built-in agent has one): per-prompt seeds, per-episode KV sessions, joining a running
    batch, a non-blocking batch call, reporting tokens as sampled, new weights in flight, extra end-of-turn tokens.
    The rollout, the gateway and the server read them through :func:`capabilities_of`, never by looking at the
    agent's attributes or signatures.
    """

    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Return ``len(prompts) * params.n`` completions, grouped by prompt."""
        ...


@dataclass(frozen=True)
class Capabilities:
    """What an agent can do beyond :meth:`Agent.generate` ``(prompts, params)``. Each default is what an agent that
    declares nothing offers; an agent declares its own as a ``capabilities`` attribute (or property).

    Attributes:
        seeds: ``generate(..., seeds=[one int per prompt])`` samples each prompt from its own random stream, so an
            episode's tokens do not depend on how episodes are batched (``rollout.seed_per_episode``).
        sessions: ``generate(..., sessions=[name or None per prompt])`` keeps each named episode's KV cache between
            its turns, and ``release(names)`` frees them.
        on_token: ``generate(..., on_token=callback)`` reports every token as it is sampled (``turnrl serve``
            streams through it; :class:`Agent` documents the callback).
        join_batch: ``await agenerate_one(prompt, params, *, seed=None, session=None)`` decodes one request inside
            the batch running in the caller's event loop (continuous batching; the gateway's streaming engine).
        join_batch_on_token: ``agenerate_one`` also takes ``on_token=callback``.
        async_batch: ``await agenerate(prompts, params)`` generates a batch without blocking the event loop (HTTP
            backends).
        inflight_updates: new weights may land while a generation call runs; the agent labels each token with the
            version that sampled it (``Completion.token_versions``).
        eos_ids: token ids that end a turn, besides the tokenizer's ``eos_token_id``.
        local_model: ``agent.model`` is the policy as a torch module in this process, for what scores with the
            policy's own logits (PAG's verdict exploration, SWiRL's stored steps, the server's top log-probabilities).
    """

    seeds: bool = False
    sessions: bool = False
    on_token: bool = False
    join_batch: bool = False
    join_batch_on_token: bool = False
    async_batch: bool = False
    inflight_updates: bool = False
    eos_ids: frozenset[int] = frozenset()
    local_model: bool = False


class AsyncBatchAgent(Agent, Protocol):
    """An agent whose capabilities say ``async_batch``."""

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]: ...


class JoinBatchAgent(Agent, Protocol):
    """An agent whose capabilities say ``join_batch``; one with ``sessions`` also releases them."""

    async def agenerate_one(
        self, prompt: list[int], params: SamplingParams, *, seed: int | None = None, session: str | None = None
    ) -> Completion: ...


class SessionAgent(Agent, Protocol):
    """An agent whose capabilities say ``sessions``: it frees an ended episode's cached keys and values."""

    def release(self, sessions: list[str]) -> None: ...


def capabilities_of(agent: Any) -> Capabilities:
    """An agent's :class:`Capabilities`: those it declares, less any its methods do not take (a subclass that
    narrowed ``generate`` declares its parent's), or, for an agent written to the two-member protocol alone (a
    user's, from before capabilities were declared), those its methods show — the one place in turnrl that reads an
    agent's signatures."""
    declared = getattr(agent, "capabilities", None)
    shown = inferred_capabilities(agent)
    if not isinstance(declared, Capabilities):
        return shown
    # a declaration its methods do not back (a subclass that narrowed ``generate``, a wrapper that hides
    # ``agenerate_one``) is off: the methods are what gets called
    return dataclasses.replace(
        declared,
        seeds=declared.seeds and shown.seeds,
        on_token=declared.on_token and shown.on_token,
        join_batch=declared.join_batch and shown.join_batch,
        join_batch_on_token=declared.join_batch_on_token and shown.join_batch_on_token,
        async_batch=declared.async_batch and shown.async_batch,
    )


def end_of_turn_ids(agent: Any) -> set[int]:
    """The token ids that end one of ``agent``'s turns: its declared ``eos_ids`` and its tokenizer's
    ``eos_token_id``."""
    eos = getattr(agent.tokenizer, "eos_token_id", None)
    return set(capabilities_of(agent).eos_ids) | ({eos} if eos is not None else set())


def inferred_capabilities(agent: Any) -> Capabilities:
    """The capabilities an undeclared agent's methods show (:func:`capabilities_of`); built-in agents are tested to
    declare exactly these."""

    def takes(method: Any, name: str) -> bool:
        return method is not None and name in inspect.signature(method).parameters

    generate, model = getattr(agent, "generate", None), getattr(agent, "model", None)
    one = getattr(agent, "agenerate_one", None)
    return Capabilities(
        seeds=takes(generate, "seeds"),
        sessions=bool(getattr(agent, "supports_sessions", False)),
        on_token=takes(generate, "on_token"),
        join_batch=one is not None,
        join_batch_on_token=takes(one, "on_token"),
        async_batch=getattr(agent, "agenerate", None) is not None,
        inflight_updates=bool(getattr(agent, "inflight_updates", False)),
        eos_ids=frozenset(getattr(agent, "eos_ids", None) or ()),
        local_model=hasattr(model, "forward"),
    )
