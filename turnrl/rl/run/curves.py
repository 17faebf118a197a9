"""Learning curves of a training run (``turnrl plot RUN_DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

CURVES = (
    "reward_mean",
    "success",
    "eval_success",
    "entropy",
    "response_length",
    "clip_frac",
    "kl",
    "explained_variance",
    "zero_variance_groups",
)


def plot_run(run_dir: str | Path) -> Path:
    """Draw the run's per-step metrics (those of :data:`CURVES` it has) to ``RUN_DIR/curves.png``; return the path.

    Raises:
        FileNotFoundError: ``RUN_DIR/metrics.jsonl`` does not exist.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (is {run_dir} a training run folder?)")
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    keys = [k for k in CURVES if any(k in r for r in rows)]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 40 else None)
        ax.set(title=key, xlabel="step")
    fig.tight_layout()
    out = Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
