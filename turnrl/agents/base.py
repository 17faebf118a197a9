"""The agent protocol: token prompts in, completions with per-token logprobs out (docs/concepts.md §4)."""

from __future__ import annotations

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
    """

    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Return ``len(prompts) * params.n`` completions, grouped by prompt."""
        ...
