"""SWiRL's data filters (docs/algorithms.md §1): none, process, outcome, process ∧ outcome.

* process — a step judge labels every step from its context alone (no gold answer); a trajectory is kept only if
  every step is GOOD (an unparseable or failed judgement, ``good=None``, is never GOOD);
* outcome — the final answer against the gold one: the environment's verifier grade (``Trajectory.correct``); a
  trajectory without a grade has no gold label and is not kept (counted as ``ungraded``);
* both — process ∧ outcome;
* none — every trajectory.

Every mode leaves out trajectories that ended in an error or have no step (counted as ``errors``). The paper:
process-only is best for RL; process ∧ outcome is best for SFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from turnrl.methods.swirl.judges import StepJudge
from turnrl.types import Trajectory

FilterMode = Literal["none", "process", "outcome", "both"]
MODES: tuple[str, ...] = ("none", "process", "outcome", "both")


class EmptyFilterError(ValueError):
    """A filter kept no trajectory; the message names the filter and says what each criterion kept (the whole
    report is in ``report``)."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def filter_trajectories(
    trajectories: Sequence[Trajectory], mode: FilterMode, judge: StepJudge | None = None
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Keep the trajectories that pass ``mode``'s filter.

    Args:
        trajectories: full trajectories (``turnrl swirl generate``), not step rows.
        mode: ``"none"``, ``"process"``, ``"outcome"`` or ``"both"``.
        judge: labels every step (:meth:`StepJudge.label_trajectory`); needed by ``process`` and ``both``.

    Returns:
        ``(kept, report)``: the kept trajectories (copies; with ``process`` their step labels are in
        ``metadata["swirl_labels"]``, ``[{"good", "reason"}]``), and the report — ``trajectories`` (total),
        ``errors``, ``kept_by_process`` / ``kept_by_both`` (None when steps were not judged), ``kept_by_outcome``,
        ``ungraded``, ``steps_good`` / ``steps_bad`` / ``steps_unparseable``, ``kept`` and ``kept_steps``.

    Raises:
        ValueError: an unknown mode, process filtering without a judge, or a judge that returned the wrong number
            of labels.
        EmptyFilterError: nothing was kept.
    """
    if mode not in MODES:
        raise ValueError(f"filter mode must be one of {', '.join(MODES)}, got {mode!r}")
    process = mode in ("process", "both")
    if process and judge is None:
        raise ValueError(f"the {mode} filter needs a step judge (--judge rule, or an agent)")
    usable = [t for t in trajectories if t.error is None and t.turns]
    report: dict[str, Any] = {
        "mode": mode,
        "trajectories": len(trajectories),
        "errors": len(trajectories) - len(usable),
        "steps_good": 0,
        "steps_bad": 0,
        "steps_unparseable": 0,
    }
    labelled, passes_process, passes_outcome = [], [], []
    for t in usable:
        if process:
            assert judge is not None  # refused above
            labels = judge.label_trajectory(t)
            if len(labels) != t.num_turns:
                raise ValueError(
                    f"the step judge gave {len(labels)} labels for trajectory {t.id} of {t.num_turns} "
                    "steps; it must label every step"
                )
            report["steps_good"] += sum(lb.good is True for lb in labels)
            report["steps_bad"] += sum(lb.good is False for lb in labels)
            report["steps_unparseable"] += sum(lb.good is None for lb in labels)
            passes_process.append(all(lb.good is True for lb in labels))
            meta = {**t.metadata, "swirl_labels": [{"good": lb.good, "reason": lb.reason[:200]} for lb in labels]}
            t = t.model_copy(update={"metadata": meta})
        else:
            passes_process.append(True)
        labelled.append(t)
        passes_outcome.append(t.correct is True)
    both = [p and o for p, o in zip(passes_process, passes_outcome)]
    report["ungraded"] = sum(t.correct is None for t in usable)
    report["kept_by_process"] = sum(passes_process) if process else None
    report["kept_by_outcome"] = sum(passes_outcome)
    report["kept_by_both"] = sum(both) if process else None
    keep = {"none": [True] * len(usable), "process": passes_process, "outcome": passes_outcome, "both": both}[mode]
    kept = [t for t, k in zip(labelled, keep) if k]
    report["kept"] = len(kept)
    report["kept_steps"] = sum(t.num_turns for t in kept)
    if not kept:
        raise EmptyFilterError(_empty_message(report), report)
    return kept, report


def _empty_message(report: dict[str, Any]) -> str:
    n, mode = report["trajectories"], report["mode"]
    if n == 0:
        return f"the {mode} filter got no trajectories to filter"
    if report["errors"] == n:
        return f"the {mode} filter kept none of {n} trajectories: every one ended in an error (or has no step)"
    judged = report["kept_by_process"] is not None
    return (
        f"the {mode} filter kept none of {n} trajectories ({report['errors']} ended in an error; every step GOOD: "
        f"{report['kept_by_process'] if judged else 'not judged'}, correct answer: {report['kept_by_outcome']} "
        f"({report['ungraded']} ungraded), both: {report['kept_by_both'] if judged else 'not judged'}); try "
        "another mode, more samples per question, or a stronger agent for the data"
    )


def report_table(report: dict[str, Any]) -> str:
    """The report as a markdown table: what each criterion kept, then the step labels."""
    n = report["trajectories"]

    def cell(value: int | None) -> str:
        return "not judged" if value is None else f"{value} / {n}"

    rows = [
        ("every step GOOD (process)", cell(report["kept_by_process"])),
        ("correct answer (outcome)", f"{cell(report['kept_by_outcome'])} ({report['ungraded']} ungraded)"),
        ("both (process ∧ outcome)", cell(report["kept_by_both"])),
        (f"**kept by {report['mode']}**", f"**{report['kept']} / {n}** ({report['kept_steps']} steps)"),
    ]
    if report["errors"]:
        rows.insert(0, ("ended in an error (left out)", f"{report['errors']} / {n}"))
    if report["kept_by_process"] is not None:
        rows.append(
            (
                "steps GOOD / BAD / unparseable",
                f"{report['steps_good']} / {report['steps_bad']} / {report['steps_unparseable']}",
            )
        )
    return "\n".join(["| criterion | trajectories |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
