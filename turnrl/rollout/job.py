"""A job: one episode to play, named by training step, generation round, task and sample. Its key names the episode
everywhere (ledgers, groups, files); :mod:`turnrl.rollout.play` derives every seed from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    """One episode to play: ``sample`` of task ``task`` at training ``step``, generation round ``round``."""

    step: int
    round: int
    task: int
    sample: int

    @classmethod
    def parse(cls, key: str) -> Job:
        """The job of a :attr:`key` (its step may be negative: −1 for work before the first step)."""
        step, round_, task, sample = str(key).rsplit("-", 3)
        return cls(int(step), int(round_), int(task), int(sample))

    @property
    def key(self) -> str:
        """A stable name (ledger key, group and file names)."""
        return f"{self.step}-{self.round}-{self.task}-{self.sample}"

    @property
    def group_id(self) -> str:
        """Samples of one task in one round form a group."""
        return f"{self.step}-{self.round}-{self.task}"
