"""What ``turnrl compare`` reads: the evaluation folder an argument names (an evaluation, a training run at a step,
``OUT_DIR@best``), its ``items.jsonl`` rows and ``run.json`` settings, and the score of each row it compares.

A row's **score** is right (1) or wrong (0), or a number (below). ``correct`` is every row's own (the episode solved,
the game won) and the default; a row may hold more in ``scores`` — a game that records a score beside its outcome (the
solver–critic game: ``first_correct``, the solver's first answer, and ``final_correct``, its answer after the review)
— and ``turnrl compare --score NAME`` compares two evaluations on one of them. A score may also be a number the
environment records in each row's ``metrics`` (HotPotQA's ``f1`` and ``support_recall``): then its mean is compared,
item by item, and McNemar's test, which needs right-or-wrong outcomes, is skipped unless every value is 0 or 1. An
evaluation whose rows do not hold the score asked for is refused, naming the scores they hold.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SCORE = "correct"  # every row's own: the episode solved, the game won
_STEP = re.compile(r"^(?P<path>.+)@(?:step-)?(?P<step>\d+|best)$")


class CompareError(ValueError):
    """Why two evaluations cannot be compared (the command prints it on one line and exits 2)."""


@dataclass
class Arm:
    """One side of a pair: the argument as given, the evaluation folder it names, its ``items.jsonl`` rows and its
    ``run.json`` settings (None where the folder has none)."""

    label: str
    folder: Path
    rows: list[dict[str, Any]]
    settings: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    code: dict[str, Any] | None = None
    score: str = DEFAULT_SCORE  # which score of its rows is compared (:func:`score_of`)

    def values(self) -> list[float]:
        """Each row's :attr:`score`: 1.0 (right) or 0.0 (wrong), or the number a row's ``metrics`` records."""
        return [score_of(r, self.score) for r in self.rows]


def evaluation_folder(arg: str, step: int | None = None) -> Path:
    """The evaluation folder an argument names: the folder itself when it holds ``items.jsonl`` (``step`` is for
    training runs only); for a training run's ``OUT_DIR``, ``OUT_DIR/eval/step-N`` with N from ``OUT_DIR@N``, else
    ``step``, else the largest N.

    Raises:
        CompareError: no such folder, neither kind, or no evaluation at the step asked for.
    """
    path, at = Path(arg), None
    if not path.exists() and (m := _STEP.match(arg)):
        path = Path(m["path"])
        at = best_step(path) if m["step"] == "best" else int(m["step"])
    if (path / "items.jsonl").is_file():
        if at is not None:
            raise CompareError(f"{arg}: {path} is an evaluation folder, not a training run: it has no steps")
        return path
    at = at if at is not None else step
    steps = sorted(
        int(d.name[5:])
        for d in (path / "eval").glob("step-*")
        if d.name[5:].isdigit() and (d / "items.jsonl").is_file()
    )
    if not path.is_dir():
        raise CompareError(f"{arg}: no such folder")
    if not steps:
        raise CompareError(
            f"{arg} is neither an evaluation folder (items.jsonl, as `turnrl eval --out` writes) nor a "
            "training run with evaluations (eval/step-N/items.jsonl)"
        )
    if at is None:
        return path / "eval" / f"step-{steps[-1]}"
    if at not in steps:
        raise CompareError(f"{arg}: no evaluation at step {at}; its evaluated steps are {', '.join(map(str, steps))}")
    return path / "eval" / f"step-{at}"


def best_step(run: Path) -> int:
    """The step a training run's *validation* figure chose: the highest ``val_success`` in its metrics.jsonl
    (``validate_every``), the earliest on ties. The test split is not read to choose it (``OUT_DIR@best``).

    Raises:
        CompareError: the run recorded no validation figure, or has no test evaluation at that step (evaluate test
            wherever it validates: ``eval_every`` equal to ``validate_every``).
    """
    metrics = run / "metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    validated = [(r["val_success"], -int(r["step"])) for r in rows if "val_success" in r and "step" in r]
    if not validated:
        raise CompareError(
            f"{run}@best: the run recorded no validation figure (val_success); train it with "
            "validate_every (and eval_every at the same steps) to choose a step on validation"
        )
    step = -max(validated)[1]
    if not (run / "eval" / f"step-{step}" / "items.jsonl").is_file():
        raise CompareError(
            f"{run}@best: validation chose step {step}, which has no test evaluation; set eval_every "
            "to validate_every so that every step validation can choose is evaluated"
        )
    return step


def load_arm(arg: str, step: int | None = None, score: str = DEFAULT_SCORE) -> Arm:
    """The rows and settings of the evaluation an argument names (:func:`evaluation_folder`), to be compared on
    ``score`` (:func:`score_of`).

    Raises:
        CompareError: the folder cannot be read, holds no episodes, its rows have no ``correct`` field, some row
            does not hold ``score`` (the message names the scores every row holds), or holds it both in its
            ``scores`` and its ``metrics``.
    """
    folder = evaluation_folder(arg, step)
    rows: list[dict[str, Any]] = []
    for n, line in enumerate((folder / "items.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise CompareError(f"{folder}/items.jsonl: line {n} is not JSON") from None
    if not rows:
        raise CompareError(f"{folder}/items.jsonl holds no episodes")
    if not all("correct" in r and ("item" in r or "task_id" in r) for r in rows):
        raise CompareError(
            f"{folder}/items.jsonl: rows without `correct` and `task_id` (compare reads `turnrl eval`'s "
            "rows of single-agent environments)"
        )
    run = folder / "run.json"
    settings = code = None
    if run.is_file():
        try:
            written = json.loads(run.read_text(encoding="utf-8"))
            settings, code = written.get("settings"), written.get("code")
        except (ValueError, AttributeError):
            raise CompareError(f"{run} is not a run.json that `turnrl eval` writes") from None
    both = [n for n, r in enumerate(rows, 1) if score in (r.get("scores") or {}) and score in (r.get("metrics") or {})]
    if score != DEFAULT_SCORE and both:
        raise CompareError(
            f"{folder}/items.jsonl: row {both[0]} holds {score!r} both in its `scores` and in its `metrics`, so "
            "which one to compare is not clear"
        )
    lacking = sum(not has_score(r, score) for r in rows)
    if lacking:
        held = sorted(set.intersection(*(scores_held(r) for r in rows)))
        raise CompareError(
            f"{folder}/items.jsonl: {lacking} of {len(rows)} rows hold no score {score!r}, so the "
            f"evaluation cannot be compared on it (--score); every row holds {', '.join(held)}"
            + (
                " (a game that records more scores writes them in each row's `scores`)"
                if held == [DEFAULT_SCORE]
                else ""
            )
        )
    label = arg if folder == Path(arg) else f"{arg} ({folder.parent.name}/{folder.name})"
    return Arm(label, folder, rows, settings, code=code, score=score)


def scores_held(row: dict[str, Any]) -> set[str]:
    """The scores a row holds: ``correct`` (every row's), the names in its ``scores`` whose value is true or
    false, and the names in its ``metrics`` whose value is a number (the environment's per-episode figures)."""
    own = {k for k, v in (row.get("scores") or {}).items() if isinstance(v, bool)}
    measured = {k for k, v in (row.get("metrics") or {}).items() if _number(v)}
    return own | measured | ({DEFAULT_SCORE} if DEFAULT_SCORE in row else set())


def _number(value: Any) -> bool:
    """Whether ``value`` is a finite number (not nan: an item's mean would be nan)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def has_score(row: dict[str, Any], score: str) -> bool:
    """Whether ``row`` holds ``score`` (:func:`scores_held`)."""
    return score in scores_held(row)


def score_of(row: dict[str, Any], score: str = DEFAULT_SCORE) -> float:
    """A row's ``score``: ``correct`` is the row's own (an episode solved, a game won), 1.0 or 0.0; another name is
    read from the row's ``scores`` (what a game records beside its outcome, e.g. the solver–critic game's
    ``first_correct``: the solver's answer before the review), 1.0 or 0.0, else from its ``metrics`` (a number the
    environment records per episode, e.g. HotPotQA's ``f1``)."""
    if score == DEFAULT_SCORE:
        return float(row[score])
    own = row.get("scores") or {}
    return float(own[score] if isinstance(own.get(score), bool) else row["metrics"][score])
