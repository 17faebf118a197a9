"""Offline training data (DESIGN.md §Trainers, experience sources): a stored dataset replayed for DQO, DPO and RFT.

:class:`OfflineSource` is a :class:`~turnrl.rl.sources.ReplaySource` whose units are the offline algorithm's (whole
task groups for dqo and rft, (correct, incorrect) pairs for dpo), after the checks that make a dataset usable:

* the token ids must be the model's: the tokenizer fingerprint that ``turnrl rollout`` stores in each episode's
  ``metadata["tokenizer"]`` must equal the model tokenizer's, and data without one must decode to its own prompt
  text with the model's tokenizer (:func:`check_tokenizer`);
* the algorithm's own checks (:meth:`~turnrl.rl.algorithms.offline.OfflineAlgorithm.check_data`: DQO's behaviour
  log-probabilities), and, where it uses them, that they were taken at the learner's temperature
  (:func:`check_temperature`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.rl.algorithms.offline import OfflineAlgorithm, OfflineDataError
from turnrl.rl.sources import ReplaySource
from turnrl.types import Trajectory


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
                    "train the model that sampled it")
            continue
        ids = t.token_ids or []
        if any(not 0 <= i < size for i in ids):
            raise OfflineDataError(f"{where}: episode {t.id} has token ids outside the model tokenizer's "
                                   f"vocabulary of {size}; it was tokenized by another tokenizer")
        prompt = next((m.content.strip() for m in reversed(t.prompt) if m.content.strip()), None)
        n = t.metadata.get("prompt_length")
        if prompt and isinstance(n, int):
            text = tokenizer.decode(ids[:n], skip_special_tokens=False)
            if prompt[:200] not in text:
                raise OfflineDataError(
                    f"{where}: episode {t.id}'s prompt tokens do not decode to its prompt with the model's tokenizer "
                    f"(no tokenizer fingerprint stored, and {prompt[:60]!r} is not in {text[:120]!r}); it was "
                    "tokenized by another tokenizer: re-sample it with `turnrl rollout` and this model")


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
                f"rollout.temperature={theirs:g} (or algorithm.importance_weights=none)")


class OfflineSource(ReplaySource):
    """Epochs over stored Trajectories for an :class:`OfflineAlgorithm`, in batches of whole units (no rollouts).

    Args:
        paths: JSONL or Parquet files (``turnrl rollout`` writes them).
        algorithm: the offline objective (its units, data checks and training view).
        batch_size: episodes per training step (whole units; at least one unit).
        seed, shuffle: the seeded per-epoch shuffle of :class:`ReplaySource`.
        temperature: the learner's scoring temperature; data the algorithm takes behaviour log-probabilities from
            must have been sampled at it (:func:`check_temperature`).

    Call :meth:`check_tokenizer` once the model's tokenizer is loaded.

    Raises:
        OfflineDataError: a missing or unusable file, or data the algorithm cannot train on.
    """

    def __init__(self, paths: str | Path | Sequence[str | Path], algorithm: OfflineAlgorithm, batch_size: int, *,
                 seed: int = 0, shuffle: bool = True, temperature: float | None = None) -> None:
        files = [paths] if isinstance(paths, (str, Path)) else list(paths)
        for f in files:
            if not Path(f).is_file():
                raise OfflineDataError(f"data.path {f} does not exist; write it with `turnrl rollout --env ENV "
                                       f"--agent MODEL --out {f}`")
        try:
            super().__init__(files, batch_size, seed=seed, shuffle=shuffle)
        except ValueError as e:
            raise OfflineDataError(str(e)) from e
        self.where = ", ".join(str(f) for f in files)
        self.algorithm = algorithm
        episodes = [t for g in self.groups for t in g]
        try:
            algorithm.check_data(episodes)
            if temperature is not None and algorithm.uses_behaviour_logprobs:
                check_temperature(episodes, temperature)
            self.groups, self.data_metrics = algorithm.units(self.groups)
        except OfflineDataError as e:
            raise OfflineDataError(f"{self.where}: {e}") from e
        self.episodes = episodes
        self._order = self._shuffled(self.epoch)

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Refuse the data if it was tokenized by another tokenizer (:func:`check_tokenizer`)."""
        check_tokenizer(self.episodes, tokenizer, self.where)

    def steps_for(self, epochs: float) -> int:
        """Training steps that consume ``epochs`` passes over the units (at least 1), counted by replaying the
        batches themselves (a batch that ends one epoch is topped up from the next, as :meth:`collect` does)."""
        state, target, steps = self.state_dict(), epochs * len(self.groups), 0
        self.load_state_dict({"epoch": 0, "position": 0})
        try:
            while self.epoch * len(self.groups) + self.position < target:
                ReplaySource.collect(self, steps)
                steps += 1
        finally:
            self.load_state_dict(state)
        return max(1, steps)

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The next batch of whole units, in the algorithm's training view, with the data's metrics."""
        out, info = super().collect(step)
        return [self.algorithm.training_view(t) for t in out], {**info, **self.data_metrics,
                                                                "generated_tokens": 0.0}
