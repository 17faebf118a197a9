"""What :func:`turnrl.envs.conformance.contract.check_environment` reports: failures, warnings, notes and a log of each scripted
episode (the harness and its tool and verifier checks, :mod:`turnrl.envs.conformance.tool_checks`, both write into it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EpisodeLog:
    """What one scripted episode did."""

    agent: str
    steps: int = 0
    rewards: list[float] = field(default_factory=list)
    correct: list[bool | None] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    tool_calls: int = 0
    tool_errors: list[str] = field(default_factory=list)

    @property
    def total_reward(self) -> float:
        """Sum of the step rewards."""
        return math.fsum(self.rewards)


@dataclass
class CheckReport:
    """The result of :func:`check_environment`: failures (empty when the env conforms), warnings, notes and episode
    logs."""

    env_name: str
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    episodes: list[EpisodeLog] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return not self.failures

    def __str__(self) -> str:
        head = f"{self.env_name}: {'OK' if self.ok else f'{len(self.failures)} failure(s)'}"
        head += f", {len(self.warnings)} warning(s)" if self.warnings else ""
        first: dict[str, int] = {}  # the same error met at several steps is shown once, with a count
        shown: list[list[Any]] = []
        for f in self.failures:
            cause = f.split(": ", 1)[-1]
            if cause in first:
                shown[first[cause]][1] += 1
            else:
                first[cause] = len(shown)
                shown.append([f, 0])
        lines = [head] + [f"  FAIL {f}" + (f" (and {n} more time(s) elsewhere)" if n else "") for f, n in shown]
        lines += [f"  WARN {w}" for w in self.warnings]
        lines += [f"  note {n}" for n in self.notes]
        for ep in self.episodes:
            lines.append(
                f"  {ep.agent:>6} agent: {ep.steps} step(s), total reward {ep.total_reward:g}, "
                f"correct {ep.correct}, tool calls {ep.tool_calls}, terminated={ep.terminated} "
                f"truncated={ep.truncated}"
            )
        return "\n".join(lines)
