"""What PAG training is for, measured (docs/algorithms.md §7): answer accuracy before and after self-revision, and how
well the policy verifies its own answers.

:func:`pag_episode` reads one self-verification episode (the ``phase``/``verdict``/``correct`` infos that
:class:`~turnrl.envs.formats.self_verify.SelfVerify` writes on its turns); :func:`pag_summary` aggregates episodes into:

* ``pag_acc_turn1`` / ``pag_acc_final`` — the first answer's accuracy and the final answer's (the revision's where
  there is one);
* ``pag_verifier_acc`` — verdicts that match the truth of the first answer, over episodes that reached the verify
  turn; ``pag_verifier_acc_on_correct`` / ``pag_verifier_acc_on_wrong`` — the same over correct and over wrong
  first answers (a verifier that always says "correct" scores 1 and 0); ``pag_verifier_balanced_acc`` — their
  mean, when both kinds of answers occur: 0.5 for a verifier whose verdicts ignore the answer (whatever the share of
  right answers), 1 for a perfect one — the figure that says whether the verifier tells right from wrong;
* ``pag_verdict_correct`` / ``pag_verdict_wrong`` / ``pag_verdict_unparseable`` — the verdict distribution;
* ``pag_revision_rate`` — episodes with a revision; ``pag_wrong_to_right`` / ``pag_right_to_wrong`` — episodes
  whose final answer is right where the first was wrong, and the reverse (shares of all PAG episodes);
* ``pag_episodes`` and ``pag_verdicts`` — how many episodes and verdicts the figures rest on;
* with verify tools on (``verify_tools``): ``pag_verify_tool_rate`` — verdicts preceded by at least one tool call;
  ``pag_verify_tool_agreement`` — verdicts that agree with their check (the first tool result equal to the first
  answer ⇔ "correct"), over verdicts with a check; ``pag_verify_check_right`` — checks that were themselves right
  (the result matched the first answer exactly when that answer was right).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turnrl.types import Trajectory


def pag_episode(traj: Trajectory) -> dict[str, Any] | None:
    """The PAG facts of one episode, or None if it is not a self-verification episode (no answer turn)."""
    by_phase = {t.info.get("phase"): t.info for t in traj.turns}
    answer = by_phase.get("answer")
    if answer is None or "correct" not in answer:
        return None
    first = bool(answer["correct"])
    verify, revise = by_phase.get("verify"), by_phase.get("revise")
    final = bool(revise["correct"]) if revise is not None and "correct" in revise else first
    return {
        "first_correct": first,
        "final_correct": final,
        "verdict": verify.get("verdict") if verify is not None else None,
        "verified": verify is not None,
        "verdict_right": bool(verify.get("verdict_correct")) if verify is not None else None,
        "revised": revise is not None,
        "verify_tool_calls": verify.get("verify_tool_calls") if verify is not None else None,
        "check_says_right": verify.get("check_says_right") if verify is not None else None,
        "tool_agreed": verify.get("tool_agreed") if verify is not None else None,
    }


def pag_summary(episodes: Iterable[dict[str, Any] | None]) -> dict[str, float]:
    """The module docstring's figures over :func:`pag_episode` records (None entries are skipped); {} if none."""
    eps = [e for e in episodes if e is not None]
    if not eps:
        return {}
    n = len(eps)
    verified = [e for e in eps if e["verified"]]
    out = {
        "pag_episodes": float(n),
        "pag_verdicts": float(len(verified)),
        "pag_acc_turn1": sum(e["first_correct"] for e in eps) / n,
        "pag_acc_final": sum(e["final_correct"] for e in eps) / n,
        "pag_revision_rate": sum(e["revised"] for e in eps) / n,
        "pag_wrong_to_right": sum(not e["first_correct"] and e["final_correct"] for e in eps) / n,
        "pag_right_to_wrong": sum(e["first_correct"] and not e["final_correct"] for e in eps) / n,
    }
    if verified:
        v = len(verified)
        out["pag_verifier_acc"] = sum(e["verdict_right"] for e in verified) / v
        out["pag_verdict_correct"] = sum(e["verdict"] == "correct" for e in verified) / v
        out["pag_verdict_wrong"] = sum(e["verdict"] == "wrong" for e in verified) / v
        out["pag_verdict_unparseable"] = sum(e["verdict"] is None for e in verified) / v
        for truth, key in ((True, "pag_verifier_acc_on_correct"), (False, "pag_verifier_acc_on_wrong")):
            part = [e for e in verified if e["first_correct"] == truth]
            if part:
                out[key] = sum(e["verdict_right"] for e in part) / len(part)
        if "pag_verifier_acc_on_correct" in out and "pag_verifier_acc_on_wrong" in out:
            out["pag_verifier_balanced_acc"] = (
                out["pag_verifier_acc_on_correct"] + out["pag_verifier_acc_on_wrong"]
            ) / 2
        out.update(_tool_figures(verified))
    return out


def _tool_figures(verified: list[dict[str, Any]]) -> dict[str, float]:
    """The verify-tools figures of the module docstring ({} where the episodes had verify tools off)."""
    tooled = [e for e in verified if e.get("verify_tool_calls") is not None]
    if not tooled:
        return {}
    out = {"pag_verify_tool_rate": sum(e["verify_tool_calls"] > 0 for e in tooled) / len(tooled)}
    agreed = [e["tool_agreed"] for e in tooled if e.get("tool_agreed") is not None]
    if agreed:
        out["pag_verify_tool_agreement"] = sum(agreed) / len(agreed)
    checks = [e["check_says_right"] == e["first_correct"] for e in tooled if e.get("check_says_right") is not None]
    if checks:
        out["pag_verify_check_right"] = sum(checks) / len(checks)
    return out


def self_verification_lines(metrics: dict[str, Any]) -> list[str]:
    """The headline of a self-verification (PAG) evaluation: the verifier's balanced accuracy first — the figure that
    says whether it tells right answers from wrong ones (0.5: verdicts that ignore the answer, whatever the share of
    right answers) — then what self-revision did; [] where the episodes were not self-verification ones."""
    if "pag_acc_turn1" not in metrics:
        return []

    def pct(key: str) -> str:
        return f"{metrics[key]:.1%}" if key in metrics else "n/a"

    balanced = metrics.get("pag_verifier_balanced_acc")
    lines = ["## Self-verification", ""]
    if balanced is None:
        lines.append(
            "**Verifier balanced accuracy: n/a** (the verdicts judged only right or only wrong first answers: "
            "there is nothing to tell apart)"
        )
    else:
        lines.append(f"**Verifier balanced accuracy: {balanced:.1%}** (50 % is a verdict that ignores the answer)")
    lines += [
        "",
        f"- verdicts right on right first answers {pct('pag_verifier_acc_on_correct')}, on wrong ones "
        f"{pct('pag_verifier_acc_on_wrong')}; said correct {pct('pag_verdict_correct')}, wrong "
        f"{pct('pag_verdict_wrong')}, unparseable {pct('pag_verdict_unparseable')}",
        f"- accuracy at the first answer {pct('pag_acc_turn1')} → final {pct('pag_acc_final')} (wrong → right "
        f"{pct('pag_wrong_to_right')}, right → wrong {pct('pag_right_to_wrong')}, revised {pct('pag_revision_rate')})",
        "",
    ]
    return lines
