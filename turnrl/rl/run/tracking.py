"""Where a training run's per-step metrics go besides ``metrics.jsonl``: TensorBoard (when installed) and, when
configured, Weights & Biases (extra ``wandb``; ``mode: offline`` needs no account or network)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from turnrl.rl.config import WandbConfig

logger = logging.getLogger(__name__)


class Tracker:
    """Writes scalars to TensorBoard (``OUT/tb``) and W&B (files under ``OUT/wandb``).

    Raises:
        ImportError: W&B is configured but not installed (the message says how to install it).
    """

    def __init__(self, out: Path, wandb: WandbConfig | None = None, config: dict[str, Any] | None = None) -> None:
        self.tensorboard = _tensorboard(out)
        self.wandb = None
        if wandb is not None:
            try:
                import wandb as wb
            except ImportError as e:
                raise ImportError(
                    "wandb logging is configured but wandb is not installed: "
                    "pip install 'turnrl[wandb]' (or remove the wandb section)"
                ) from e
            id_file = out / "wandb_id.txt"
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.write_text(run_id)
            self.wandb = wb.init(
                project=wandb.project,
                entity=wandb.entity,
                name=wandb.name or out.name,
                mode=wandb.mode,
                tags=wandb.tags,
                config=config,
                dir=str(out),
                id=run_id,
                resume="allow",
                reinit="create_new",
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record one step's scalars."""
        if self.tensorboard is not None:
            for k, v in metrics.items():
                self.tensorboard.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def close(self) -> None:
        """Flush and close every sink."""
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()


def _tensorboard(out: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        logger.info("tensorboard is not installed; metrics go to metrics.jsonl only")
        return None
    return SummaryWriter(str(out / "tb"))
