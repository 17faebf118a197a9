"""The agent protocol: token prompts in, completions with per-token logprobs out (DESIGN.md §The flow, point 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
        fire_temperature: FIRE sampling (ALGORITHMS.md §8): the first token at this (high) temperature, the rest at
            ``temperature``. None = off.
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

    @model_validator(mode="after")
    def _check(self) -> SamplingParams:
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        return self

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (temperature 0, no FIRE)."""
        return self.temperature == 0.0 and self.fire_temperature is None


FinishReason = Literal["stop", "length"]


@dataclass
class Completion:
    """One generated continuation of a token prompt.

    Attributes:
        text: the decoded generated tokens (special tokens skipped).
        token_ids: the generated tokens exactly as sampled (an end-of-sequence token included when produced).
        logprobs: one log-probability per generated token, under the distribution it was sampled from before
            top-k/top-p truncation: ``log_softmax(logits / T)`` with T the temperature of that step (1 when greedy).
        finish_reason: ``"stop"`` (end-of-sequence token or stop string) or ``"length"`` (hit max_new_tokens).
        prompt_index: which prompt of the batch this continues.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_index: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Agent(Protocol):
    """Anything that continues token prompts: ``generate(prompts, params) -> completions``.

    ``tokenizer`` (a Hugging Face tokenizer with a chat template) renders conversations into the token prompts
    the rollout sends; agents that only speak text (scripted ones) may have none.
    """

    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Return ``len(prompts) * params.n`` completions, grouped by prompt."""
        ...
