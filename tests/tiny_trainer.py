"""One way for a test to build a :class:`~turnrl.rl.run.trainer.Trainer` on the tiny model, train it and close it.

Tests used to repeat those lines (and a few left their trainer open: its rollout workers, sandboxes and servers with
it). ``train_tiny(cfg)`` is the whole run; ``with opened(tiny_trainer(cfg)) as trainer:`` when the test looks inside, or
the ``trainer_of`` fixture (tests/conftest.py): ``trainer_of(cfg)`` builds one that is closed when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.config import TrainConfig
from turnrl.rl.run.trainer import Trainer


def tiny_trainer(cfg: TrainConfig, tok: Any = None, model: Any = None, **kwargs: Any) -> Trainer:
    """A trainer of ``cfg`` on a fresh tiny model (or ``model``); ``tok`` is its tokenizer (ChatML's tiny one by
    default), the other keyword arguments go to :class:`Trainer`."""
    tok = tok if tok is not None else tiny_tokenizer("chatml")
    return Trainer(cfg, model=model if model is not None else tiny_model(tok), tokenizer=tok, **kwargs)


@contextmanager
def opened(trainer: Trainer) -> Iterator[Trainer]:
    """``trainer``, closed when the block ends, however it ends."""
    try:
        yield trainer
    finally:
        trainer.close()


def train_tiny(cfg: TrainConfig, tok: Any = None, **kwargs: Any) -> list[dict[str, float]]:
    """Train ``cfg`` to its end on a fresh tiny model and close the trainer; the run's history."""
    with opened(tiny_trainer(cfg, tok, **kwargs)) as trainer:
        return trainer.train()
