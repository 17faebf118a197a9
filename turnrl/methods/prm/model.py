"""The process reward model (PRM for code, docs/algorithms.md §8): a saved value model
(:class:`~turnrl.rl.core.value_model.ValueModel`, a critic-shaped network) trained by regression to the 0/1 line
labels of ``turnrl prm label`` (:mod:`turnrl.methods.prm.labels`).

Its value at the state after a line-end token estimates the chance that some completion from that prefix passes the
tests. Because it *is* a critic (same module, same feature normalization, same head), PPO's separate critic can
start as it (``algorithm.critic_init``); its values at line ends are the run's dense rewards (``process_reward``).

Training: mean squared error between the value after each labeled token and its label, over every labeled position
of a batch (the reply's last token carries the outcome, so the model also learns the final answer's value); AdamW,
a few epochs over the labels, a held-out share of episodes scored each epoch (MSE, and accuracy of value > 0.5).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from turnrl.rl.core.value_model import FILE, META, ValueModel, check_folder, line_ends, load_into, saved_base
from turnrl.rl.formulas.rewards import dense_rewards
from turnrl.types import Trajectory

__all__ = [
    "FILE",
    "META",
    "ProcessRewardModel",
    "check_folder",
    "dense_rewards",
    "line_ends",
    "load_into",
    "saved_base",
    "targets",
]


def targets(traj: Trajectory) -> list[tuple[int, float]]:
    """``(token index, label)`` of an episode's labeled positions: its line ends, then its reply's last token with the
    outcome."""
    marks = [(int(i), float(y)) for i, y in traj.metadata.get("prm_labels") or []]
    spans = [t.token_span for t in traj.turns if t.token_span is not None]
    if "prm_outcome" in traj.metadata and spans:
        marks.append((spans[-1][1] - 1, float(traj.metadata["prm_outcome"])))
    return marks


class ProcessRewardModel(ValueModel):
    """A PRM: a :class:`~turnrl.rl.core.value_model.ValueModel` that learns from process labels (:meth:`train`) and
    reports how well it predicts them (:meth:`evaluate`); :meth:`save` writes the folder a run reads."""

    def train(
        self,
        trajs: Sequence[Trajectory],
        *,
        epochs: int = 3,
        lr: float = 1e-5,
        batch_size: int = 8,
        held_out: float = 0.1,
        seed: int = 0,
        log: Any = None,
    ) -> dict[str, float]:
        """Fit the labels of ``trajs`` (see the module docstring); the held-out figures of the last epoch.

        Raises:
            ValueError: no episode carries labels.
        """
        labeled = [t for t in trajs if targets(t)]
        if not labeled:
            raise ValueError(
                "no episode carries process labels (metadata prm_labels); make them with `turnrl prm label`"
            )
        rng = random.Random(seed)
        order = labeled[:]
        rng.shuffle(order)
        n_held = int(len(order) * held_out) if len(order) >= 10 else 0
        held, fit = order[:n_held], order[n_held:]
        opt = torch.optim.AdamW([p for p in self.critic.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
        for epoch in range(epochs):
            self.critic.train()
            rng.shuffle(fit)
            total, count = 0.0, 0
            for s in range(0, len(fit), batch_size):
                chunk = fit[s : s + batch_size]
                after = self.critic.after(*self._batch(chunk))
                rows = [(b, i, y) for b, t in enumerate(chunk) for i, y in targets(t)]
                pred = after[[r[0] for r in rows], [r[1] for r in rows]]
                loss = torch.nn.functional.mse_loss(pred, torch.tensor([r[2] for r in rows]))
                opt.zero_grad()
                loss.backward()
                opt.step()
                total, count = total + float(loss.detach()) * len(rows), count + len(rows)
            self.metrics = {
                "epoch": float(epoch + 1),
                "train_mse": total / max(count, 1),
                "fit_episodes": float(len(fit)),
                **self.evaluate(held),
            }
            if log is not None:
                log(self.metrics)
        return self.metrics

    def evaluate(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Held-out MSE and accuracy (value > 0.5 ⇔ label 1) over every labeled position, and over line ends
        alone; the share of positive labels (accuracy's baseline)."""
        if not trajs:
            return {}
        marks = [targets(t) for t in trajs]
        values = self.scores(trajs, [[i for i, _ in m] for m in marks])
        pairs = [(v, y) for m, vs in zip(marks, values) for (_, y), v in zip(m, vs)]
        lines = [
            (v, y)
            for t, m, vs in zip(trajs, marks, values)
            for (_, y), v in zip(m, vs[: len(t.metadata.get("prm_labels") or [])])
        ]
        out = {
            "held_episodes": float(len(trajs)),
            "held_mse": sum((v - y) ** 2 for v, y in pairs) / len(pairs),
            "held_accuracy": sum((v > 0.5) == (y > 0.5) for v, y in pairs) / len(pairs),
            "held_positive_share": sum(y > 0.5 for _, y in pairs) / len(pairs),
        }
        if lines:
            out["held_line_accuracy"] = sum((v > 0.5) == (y > 0.5) for v, y in lines) / len(lines)
        return out
