"""PAG's training-health check (docs/algorithms.md §7): verdict collapse — the self-verifier almost always says
"correct" or almost always "wrong", the two failure modes of PAG's ablations (final-only reward; no turn independence).
Run after every step by :func:`turnrl.rl.run.monitors.check_health` (declared under the ``turnrl.monitors`` entry
point group in pyproject.toml); it reads the figures the self-verification environments report
(:mod:`turnrl.envs.formats.self_verify_metrics`).

Its namesake :mod:`turnrl.rl.run.monitors` is the same concept a layer down: the registry these monitors plug into,
and the run's own."""

from __future__ import annotations

from collections.abc import Sequence

Metrics = dict[str, float]


def verdict_collapse(
    history: Sequence[Metrics], info: Metrics, share: float = 0.95, window: int = 3, min_verdicts: int = 16
) -> str | None:
    """Over the last ``window`` steps (at least ``min_verdicts`` verdicts), at least ``share`` of the PAG verdicts
    say the same thing: the verifier has stopped checking (docs/algorithms.md §7's collapse modes)."""
    records = [h for h in [*history, info][-window:] if "pag_verdict_correct" in h]
    counts = [h.get("pag_verdicts", 0.0) for h in records]
    if not records or "pag_verdict_correct" not in info or sum(counts) < min_verdicts:
        return None
    total = sum(counts)
    for key, word, why in (
        ("pag_verdict_correct", "correct", "the paper's final-only-reward ablation does this"),
        ("pag_verdict_wrong", "wrong", "the paper's ablation without the turn cut does this"),
    ):
        said = sum(h.get(key, 0.0) * c for h, c in zip(records, counts)) / total
        if said >= share:
            return (
                f"verdicts collapsed: {said:.0%} of the last {total:.0f} say the answer is {word} "
                f"(verifier accuracy {info.get('pag_verifier_acc', float('nan')):.0%}); {why}, and so does a "
                "verifier that (almost) never samples the other verdict"
            )
    return None
