"""A value model saved in a folder: a separate critic (the backbone of a causal LM and a linear value head,
:class:`~turnrl.rl.core.critic.SeparateCritic`) with the agent spec of its base model, in ``prm.pt`` (weights) and
``prm.json`` (base, training figures) — the format is named for its first use, the process reward model of PRM for
code (docs/algorithms.md §8), which :mod:`turnrl.methods.prm.model` trains and saves as one.

A run reads such a folder two ways: PPO's separate critic can start as it (``algorithm.critic_init``,
:func:`load_into`), and ``process_reward:`` scores every reply at its line ends (:func:`line_ends`,
:meth:`ValueModel.scores`) for dense rewards (:func:`turnrl.rl.formulas.rewards.dense_rewards`). Because the model
*is* a critic (same module, same feature normalization, same head), both are exact.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

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


def check_folder(folder: str | Path) -> Path:
    """``folder`` if it holds a saved value model (what :meth:`ValueModel.save` writes; a process reward model is one).

    Raises:
        FileNotFoundError: it does not.
    """
    path = Path(folder)
    if not (path / FILE).is_file() or not (path / META).is_file():
        raise FileNotFoundError(
            f"{folder} holds no process reward model ({FILE}, {META}); train one with `turnrl prm "
            "train LABELS --out FOLDER`"
        )
    return path


def _saved(folder: str | Path) -> dict[str, Any]:
    return torch.load(check_folder(folder) / FILE, map_location="cpu", weights_only=False)


def saved_base(folder: str | Path) -> str:
    """The base model (agent spec) of the value model in ``folder``, read from its ``prm.json``.

    Raises:
        FileNotFoundError: none there.
    """
    return str(json.loads((check_folder(folder) / META).read_text())["base"])


def load_into(critic: SeparateCritic, folder: str | Path, base: str) -> None:
    """Start ``critic`` (built on ``base``) as the value model in ``folder`` (PPO's ``critic_init``).

    Raises:
        ValueError: the PRM was trained on another base model.
    """
    saved = _saved(folder)
    if saved["base"] != base:
        raise ValueError(
            f"the value model in {folder} was trained on {saved['base']!r}, but the critic is "
            f"{base!r}: set algorithm.critic_model to {saved['base']!r} (or leave it out)"
        )
    critic.load_state_dict(saved["state_dict"])


class ValueModel:
    """A value model saved in a folder: ``critic`` (a :class:`SeparateCritic`) and the agent spec of its base model.

    Args:
        critic: the network.
        base: the agent spec its backbone was loaded from (PPO's critic must use the same to start from it).
        tokenizer: the policy's tokenizer (pads batches; its size is checked when loading).
    """

    def __init__(self, critic: SeparateCritic, base: str, tokenizer: Any) -> None:
        self.critic, self.base, self.tokenizer = critic, base, tokenizer
        self.metrics: dict[str, float] = {}

    @classmethod
    def new(cls, base: str) -> Self:
        """A value model whose backbone is ``base``'s (a built-in name, a path, hf:PATH, tiny:TEMPLATE) and head predicts 0."""
        from turnrl.agents import make_agent

        agent = make_agent(base, batch_size=1)
        return cls(SeparateCritic(agent.model, len(agent.tokenizer)), base, agent.tokenizer)

    @classmethod
    def load(cls, folder: str | Path) -> ValueModel:
        """The value model :meth:`save` wrote to ``folder``.

        Raises:
            FileNotFoundError: no ``prm.pt`` there.
        """
        saved = _saved(folder)
        prm = cls.new(saved["base"])
        prm.critic.load_state_dict(saved["state_dict"])
        prm.metrics = saved.get("metrics", {})
        return prm

    def save(self, folder: str | Path) -> Path:
        """Write the value model (weights, base spec, training figures) to ``folder``."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        torch.save({"base": self.base, "state_dict": self.critic.state_dict(), "metrics": self.metrics}, out / FILE)
        (out / META).write_text(json.dumps({"base": self.base, "metrics": self.metrics}, indent=2) + "\n")
        return out / FILE

    def _batch(self, trajs: Sequence[Trajectory]) -> tuple[torch.Tensor, torch.Tensor]:
        b = collate(trajs, self.tokenizer.pad_token_id or 0)
        return b.input_ids, b.attention_mask

    @torch.no_grad()
    def scores(
        self, trajs: Sequence[Trajectory], positions: Sequence[Sequence[int]], batch_size: int = 8
    ) -> list[list[float]]:
        """The value after each of ``positions[b]`` (token indices) of episode ``b``."""
        self.critic.eval()
        out: list[list[float]] = []
        for s in range(0, len(trajs), batch_size):
            chunk = trajs[s : s + batch_size]
            after = self.critic.after(*self._batch(chunk))
            out += [[float(after[b, i]) for i in positions[s + b]] for b in range(len(chunk))]
        return out
