"""The process reward model (PRM for code, docs/algorithms.md §8): a critic-shaped network (the backbone of a causal
LM and a linear value head, :class:`~turnrl.rl.core.critic.SeparateCritic`) trained by regression to the 0/1 line
labels of ``turnrl prm label`` (:mod:`turnrl.methods.prm.labels`).

Its value at the state after a line-end token estimates the chance that some completion from that prefix passes the
tests. Because it *is* a critic (same module, same feature normalization, same head), PPO's separate critic can
start as it (``algorithm.critic_init``); its values at line ends are the run's dense rewards (``process_reward``).

Training: mean squared error between the value after each labeled token and its label, over every labeled position
of a batch (the reply's last token carries the outcome, so the model also learns the final answer's value); AdamW,
a few epochs over the labels, a held-out share of episodes scored each epoch (MSE, and accuracy of value > 0.5).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from turnrl.rl.core.batch import collate
from turnrl.rl.core.critic import SeparateCritic
from turnrl.types import Trajectory

FILE, META = "prm.pt", "prm.json"


def line_ends(token_ids: Sequence[int], span: tuple[int, int], tokenizer: Any) -> list[int]:
    """Indices (into ``token_ids``) of the generated tokens in ``span`` that end a line (their text holds a newline),
    the span's last token excluded (it ends the reply, and carries the outcome). Lines that are only a comment are
    left out (they are neutral: the paper's guard against a policy padding its code with comments the PRM likes)."""
    start, end = span
    out, line_start = [], start
    for i in range(start, end - 1):
        if "\n" in tokenizer.decode([token_ids[i]]):
            if not tokenizer.decode(token_ids[line_start : i + 1]).strip().startswith("#"):
                out.append(i)
            line_start = i + 1
    return out


def dense_rewards(values: Sequence[float], start: float, form: str, coef: float) -> tuple[list[float], float]:
    """Dense rewards of one reply from the PRM's values at its line ends: one per line end, and one for the reply's
    last token (docs/algorithms.md §8).

    ``value``: ``coef · V(line i) / T`` at each of the ``T`` line ends, nothing at the end — the PRM's score as each
    line's reward, normalized by the line count as the paper does after its policy learned to write excessive lines
    (the sum is ``coef`` × the mean score: more lines no longer add up, lines that look right still pay).

    ``delta`` [ours]: potential-based shaping with Φ = coef · V: ``coef · (V(line i) − V(line i−1))`` at line end i, ``V(line 0)`` = ``start`` (the value
    before the reply), and ``−coef · V(last line)`` at the last token (Φ of the end is 0). A reply's dense rewards
    then sum to ``−coef · start`` whatever it writes — more lines or lines that merely look right earn nothing — and
    only move credit to the lines that raised the PRM's estimate (γ = 1: no policy's return changes rank; Ng et al.,
    1999).
    """
    if form == "value":
        return [coef * v / len(values) for v in values], 0.0
    if form != "delta":
        raise ValueError(f"form must be 'delta' or 'value', got {form!r}")
    before = [start, *values[:-1]]
    return [coef * (v - b) for v, b in zip(values, before)], -coef * (values[-1] if values else start)


def targets(traj: Trajectory) -> list[tuple[int, float]]:
    """``(token index, label)`` of an episode's labeled positions: its line ends, then its reply's last token with the
    outcome."""
    marks = [(int(i), float(y)) for i, y in traj.metadata.get("prm_labels") or []]
    spans = [t.token_span for t in traj.turns if t.token_span is not None]
    if "prm_outcome" in traj.metadata and spans:
        marks.append((spans[-1][1] - 1, float(traj.metadata["prm_outcome"])))
    return marks


def check_folder(folder: str | Path) -> Path:
    """``folder`` if it holds a process reward model (what :meth:`ProcessRewardModel.save` writes).

    Raises:
        FileNotFoundError: it does not.
    """
    path = Path(folder)
    if not (path / FILE).is_file() or not (path / META).is_file():
        raise FileNotFoundError(f"{folder} holds no process reward model ({FILE}, {META}); train one with `turnrl prm "
                                "train LABELS --out FOLDER`")
    return path


def _saved(folder: str | Path) -> dict[str, Any]:
    return torch.load(check_folder(folder) / FILE, map_location="cpu", weights_only=False)


def saved_base(folder: str | Path) -> str:
    """The base model (agent spec) of the PRM in ``folder``, read from its ``prm.json``.

    Raises:
        FileNotFoundError: no PRM there.
    """
    return str(json.loads((check_folder(folder) / META).read_text())["base"])


def load_into(critic: SeparateCritic, folder: str | Path, base: str) -> None:
    """Start ``critic`` (built on ``base``) as the PRM in ``folder`` (PPO's ``critic_init``).

    Raises:
        ValueError: the PRM was trained on another base model.
    """
    saved = _saved(folder)
    if saved["base"] != base:
        raise ValueError(f"the process reward model in {folder} was trained on {saved['base']!r}, but the critic is "
                         f"{base!r}: set algorithm.critic_model to {saved['base']!r} (or leave it out)")
    critic.load_state_dict(saved["state_dict"])


class ProcessRewardModel:
    """A PRM: ``critic`` (a :class:`SeparateCritic`) and the agent spec of its base model.

    Args:
        critic: the network.
        base: the agent spec its backbone was loaded from (PPO's critic must use the same to start from it).
        tokenizer: the policy's tokenizer (pads batches; its size is checked when loading).
    """

    def __init__(self, critic: SeparateCritic, base: str, tokenizer: Any) -> None:
        self.critic, self.base, self.tokenizer = critic, base, tokenizer
        self.metrics: dict[str, float] = {}

    @classmethod
    def new(cls, base: str) -> ProcessRewardModel:
        """A PRM whose backbone is ``base``'s (a built-in name, a path, hf:PATH, tiny:TEMPLATE) and head predicts 0."""
        from turnrl.agents import make_agent

        agent = make_agent(base, batch_size=1)
        return cls(SeparateCritic(agent.model, len(agent.tokenizer)), base, agent.tokenizer)

    @classmethod
    def load(cls, folder: str | Path) -> ProcessRewardModel:
        """The PRM :meth:`save` wrote to ``folder``.

        Raises:
            FileNotFoundError: no ``prm.pt`` there.
        """
        saved = _saved(folder)
        prm = cls.new(saved["base"])
        prm.critic.load_state_dict(saved["state_dict"])
        prm.metrics = saved.get("metrics", {})
        return prm

    def save(self, folder: str | Path) -> Path:
        """Write the PRM (weights, base spec, training figures) to ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        torch.save({"base": self.base, "state_dict": self.critic.state_dict(), "metrics": self.metrics}, out / FILE)
        (out / META).write_text(json.dumps({"base": self.base, "metrics": self.metrics}, indent=2) + "\n")
        return out / FILE

    def _batch(self, trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
        b = collate(trajs, self.tokenizer.pad_token_id or 0)
        return b.input_ids, b.attention_mask

    @torch.no_grad()
    def scores(self, trajs: Sequence[Trajectory], positions: Sequence[Sequence[int]], batch_size: int = 8
               ) -> list[list[float]]:
        """The PRM's value after each of ``positions[b]`` (token indices) of episode ``b``."""
        self.critic.eval()
        out: list[list[float]] = []
        for s in range(0, len(trajs), batch_size):
            chunk = trajs[s : s + batch_size]
            after = self.critic.after(*self._batch(chunk))
            out += [[float(after[b, i]) for i in positions[s + b]] for b in range(len(chunk))]
        return out

    def train(self, trajs: Sequence[Trajectory], *, epochs: int = 3, lr: float = 1e-5, batch_size: int = 8,
              held_out: float = 0.1, seed: int = 0, log: Any = None) -> dict[str, float]:
        """Fit the labels of ``trajs`` (see the module docstring); the held-out figures of the last epoch.

        Raises:
            ValueError: no episode carries labels.
        """
        labeled = [t for t in trajs if targets(t)]
        if not labeled:
            raise ValueError("no episode carries process labels (metadata prm_labels); make them with `turnrl prm "
                             "label`")
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
            self.metrics = {"epoch": float(epoch + 1), "train_mse": total / max(count, 1),
                            "fit_episodes": float(len(fit)), **self.evaluate(held)}
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
        lines = [(v, y) for t, m, vs in zip(trajs, marks, values) for (_, y), v in zip(m, vs[: len(
            t.metadata.get("prm_labels") or [])])]
        out = {"held_episodes": float(len(trajs)),
               "held_mse": sum((v - y) ** 2 for v, y in pairs) / len(pairs),
               "held_accuracy": sum((v > 0.5) == (y > 0.5) for v, y in pairs) / len(pairs),
               "held_positive_share": sum(y > 0.5 for _, y in pairs) / len(pairs)}
        if lines:
            out["held_line_accuracy"] = sum((v > 0.5) == (y > 0.5) for v, y in lines) / len(lines)
        return out
