"""Verifiers: pure functions ``(prediction, reference) -> Verdict`` (DESIGN.md §The flow, point 3)."""

from turnrl.verifiers.base import Verdict

__all__ = ["Verdict"]
