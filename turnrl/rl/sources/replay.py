"""Stored Trajectories replayed as training data (offline objectives, step states), and the checks that make stored
data usable by a model: its token ids must be the model tokenizer's (:func:`check_tokenizer`), and behaviour
log-probabilities must have been taken at the learner's temperature (:func:`check_temperature`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.rl.sources.base import ExperienceSource, rollout_metrics
from turnrl.types import Trajectory


class OfflineDataError(ValueError):
    """Stored data a run cannot train on; the message says what is wrong and how to fix it."""


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of the tokenizer's vocabulary (every token string and its id, added tokens included): equal
    fingerprints mean token ids mean the same text."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: (kv[1], kv[0]))
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def check_tokenizer(trajectories: Sequence[Trajectory], tokenizer: Any, where: str = "the data") -> None:
    """Refuse data whose token ids were produced by another tokenizer than the model's.

    Episodes with a stored fingerprint (``metadata["tokenizer"]``) are compared with :func:`tokenizer_fingerprint`;
    for the others, every id must be in the vocabulary and the prompt tokens must decode to text that contains the
    episode's last prompt message.

    Raises:
        OfflineDataError: a mismatch (the message names the episode and how to fix it).
    """
    mine = tokenizer_fingerprint(tokenizer)
    size = len(tokenizer)
    for t in trajectories:
        stored = t.metadata.get("tokenizer")
        if stored is not None:
            if stored != mine:
                raise OfflineDataError(
                    f"{where} was tokenized by another tokenizer (fingerprint {stored}, sampled by "
                    f"{t.metadata.get('agent', 'an unknown agent')}) than the model's ({mine}); its token ids would "
                    "mean other text: sample the data with this model's tokenizer (turnrl rollout --agent ...) or "
                    "train the model that sampled it"
                )
            continue
        ids = t.token_ids or []
        if any(not 0 <= i < size for i in ids):
            raise OfflineDataError(
                f"{where}: episode {t.id} has token ids outside the model tokenizer's "
                f"vocabulary of {size}; it was tokenized by another tokenizer"
            )
        prompt = next((m.content.strip() for m in reversed(t.prompt) if m.content.strip()), None)
        n = t.metadata.get("prompt_length")
        if prompt and isinstance(n, int):
            text = tokenizer.decode(ids[:n], skip_special_tokens=False)
            if prompt[:200] not in text:
                raise OfflineDataError(
                    f"{where}: episode {t.id}'s prompt tokens do not decode to its prompt with the model's tokenizer "
                    f"(no tokenizer fingerprint stored, and {prompt[:60]!r} is not in {text[:120]!r}); it was "
                    "tokenized by another tokenizer: re-sample it with `turnrl rollout` and this model"
                )


def check_temperature(trajectories: Sequence[Trajectory], temperature: float, where: str = "the data") -> None:
    """Refuse behaviour log-probabilities taken at another temperature than the learner scores at.

    ``turnrl rollout`` records its sampling settings in ``metadata["dataset"]["sampling"]``; a sampler's
    log-probabilities are ``log_softmax(logits / T)`` at its temperature T (1 when greedy). Importance weights
    π_θ/μ compare them with the learner's at ``rollout.temperature``: at two temperatures they are off by the
    temperature change, not by how far the policy moved. Episodes without a record are not checked.

    Raises:
        OfflineDataError: the recorded temperature differs (the message names both and the fix).
    """
    mine = temperature if temperature > 0 else 1.0
    for t in trajectories:
        sampling = (t.metadata.get("dataset") or {}).get("sampling") or {}
        if "temperature" not in sampling:
            continue
        theirs = float(sampling["temperature"]) or 1.0  # greedy samplers record log-probabilities at T = 1
        if abs(theirs - mine) > 1e-6:
            raise OfflineDataError(
                f"{where}: episode {t.id}'s log-probabilities were taken at temperature {theirs:g}, but the learner "
                f"scores at rollout.temperature={mine:g}, so π_θ/μ would measure the temperature change; set "
                f"rollout.temperature={theirs:g} (or algorithm.importance_weights=none)"
            )


class ReplaySource(ExperienceSource):
    """Stored Trajectories (JSONL or Parquet files) replayed in batches of ``batch_size``, reshuffled every epoch.

    Whole groups stay together (a batch is filled with groups, so group statistics are intact). The shuffle is
    seeded, and the position is saved, so a resumed run sees the same batches.

    Raises:
        ValueError: no file, an unreadable file, or no trajectory with token fields.
    """

    sampled = False  # stored episodes, not the policy's samples
    reads_data = True

    def __init__(
        self, paths: str | Path | Sequence[str | Path], batch_size: int, *, seed: int = 0, shuffle: bool = True
    ) -> None:
        from turnrl.storage import load

        files = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not files:
            raise ValueError("ReplaySource needs at least one JSONL or Parquet file")
        trajs = [t for f in files for t in load(f)]
        usable = [t for t in trajs if t.token_ids is not None]
        if not usable:
            raise ValueError(
                f"no trajectory with token fields in {[str(f) for f in files]}; record them with a "
                "token-level rollout (turnrl.rollout.engine.Rollout)"
            )
        groups: dict[str, list[Trajectory]] = {}
        for t in usable:
            groups.setdefault(t.group_id if t.group_id is not None else t.id, []).append(t)
        self.groups = list(groups.values())
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.env: Any = None  # the run's environment, where known: its own figures of the stored episodes
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.groups)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups)

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The next ``batch_size`` episodes (whole groups; at least one group)."""
        out: list[Trajectory] = []
        while not out or len(out) + len(self.groups[self._order[self.position]]) <= self.batch_size:
            out += self.groups[self._order[self.position]]
            self.position += 1
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
        return out, {**rollout_metrics(out, self.env), "epoch": float(self.epoch)}

    def close(self) -> None:
        """Close the run's environment where the source was given one (a probe for its figures: a ``remote:``
        server's session ends then)."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def state_dict(self) -> dict[str, Any]:
        """Epoch and position in it."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._shuffled(self.epoch)
