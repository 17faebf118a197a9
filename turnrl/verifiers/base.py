"""The result type every verifier returns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Verdict(BaseModel):
    """A verifier's judgement of one prediction.

    Attributes:
        correct: whether the prediction counts as right.
        score: the reward-ready score (1.0/0.0 for exact checks; a fraction for partial credit such as F1).
        extracted: the final answer the verifier read from the prediction, or None if it found none.
        details: why, in a few JSON-serializable fields (e.g. ``{"reason": "hedged", "candidates": [...]}``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    correct: bool
    score: float
    extracted: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
