"""What each weight push cost on each node (docs/cluster.md#weights): the learner's new weights go into Ray's object
store once per version (the full policy, or a LoRA policy's adapters alone) and every rollout worker fetches them to
its node before it plays with them; each worker reports each load — its size, the seconds to fetch it to the node
and to load it — with its next lease (:meth:`~turnrl.rl.placement.worker.RolloutWorker.run`).

:class:`PushLog` keeps every load in ``OUT_DIR/weight_pushes.jsonl`` (one line per worker and version: its node,
``bytes``, ``fetch_s``, ``load_s``) and gives each step's figures: ``weight_push_bytes`` (the size of one copy of the
weights the workers loaded), ``weight_push_s`` (the slowest worker's fetch and load: from its lease's start until it
holds them) and ``weight_push_nodes`` (the nodes that fetched them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD = "weight_pushes.jsonl"


class PushLog:
    """The weight loads rollout workers reported (see the module docstring)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / RECORD
        self.pending: list[dict[str, Any]] = []  # loads reported since the last :meth:`metrics`

    def add(self, worker: int, loads: list[dict[str, Any]]) -> None:
        """Keep the loads worker ``worker`` reported."""
        rows = [{"worker": worker, **load} for load in loads]
        self.pending += rows
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    def metrics(self) -> dict[str, float]:
        """The figures of the loads reported since the last call (0 where none were)."""
        rows, self.pending = self.pending, []
        if not rows:
            return {"weight_push_bytes": 0.0, "weight_push_s": 0.0, "weight_push_nodes": 0.0}
        return {
            "weight_push_bytes": float(max(r["bytes"] for r in rows)),
            "weight_push_s": max(r["fetch_s"] + r["load_s"] for r in rows),
            "weight_push_nodes": float(len({r.get("node_id") for r in rows})),
        }

    def reset(self) -> None:
        """A fresh run: forget an earlier run's record in the same folder."""
        self.path.unlink(missing_ok=True)
