"""Verifiers: pure functions ``(prediction, reference) -> Verdict`` (docs/concepts.md §3)."""

from turnrl.verifiers.base import Verdict

__all__ = ["Verdict"]
