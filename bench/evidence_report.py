"""The tables of the preregistered runs (bench/preregistered.md), read from their run folders with `turnrl compare`'s
figures: per seed, held-out success at step 0 and at the end (or, for a run that validated, at the step its validation split
chose: ``OUT@best``), the gain paired item by item (bootstrap 95 % interval,
McNemar's exact p), then the mean over seeds with its interval; and arm against arm at the end, the same way. The
log-probability gap is the worst step's (an offline run's first step's: later steps train on the base model's data).

    python bench/evidence_report.py runs/e77                    # every experiment whose runs are there
    python bench/evidence_report.py runs/e77 --arms full lora   # only these arms (folders ARM-sSEED)

Beside those, what a preregistration names (bench/preregistered.md): arm against arm at a step fixed there as well
as at the end (:data:`AT_STEP`: the difficulty sampler against uniform at step 6); a gain from one arm's step 0 to
another's end (:data:`CHAINS`: PAG's whole recipe, from the base model at the warm-up's step 0); a PAG run's own
figures at the step read (:func:`pag_table`: Acc@turn1, Acc@final, their paired difference, the verifier's balanced
accuracy with a bootstrap interval over items, the validation figures that chose the step); and the gateway
example's gain on the test problems no earlier run of it was scored on (:data:`GATEWAY_SEEN`; also for the arms
trained with its configuration), and whether a gain cleared a bar fixed in advance (:data:`BARS`). A run read at a
step its validation chose that is step 0 has gained nothing by construction (its row says so). And arms against one
evaluation made under another protocol (:data:`BASELINES`: SWiRL and SFT against the base model given the
demonstrations their data came from), the difference named.

Prints Markdown; nothing is run. A seed whose run is missing or unfinished is listed as such, never skipped silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from turnrl.cli.compare import compare_pair
from turnrl.cli.compare_arms import CompareError, evaluation_folder, load_arm

PAIRS = (
    ("lora", "full"),
    ("dapo", "grpo"),
    ("vapo", "grpo"),
    ("vapo", "dapo"),
    ("dqo", "rft"),
    ("dqo", "dpo"),
    ("rft", "dpo"),
    ("difficulty", "uniform"),
    ("swirl", "sft"),
    ("tree", "chain"),
)
#: arm B against arm A at a step fixed in bench/preregistered.md, beside the comparison at the end
AT_STEP = (("difficulty", "uniform", 6), ("tree", "chain", 16))
#: arm B at one step against arm A at another, both fixed in advance: trees at step 16 against chains at step 8, at
#: about equal generated tokens (bench/preregistered.md, trees against chains)
AT_STEPS = (("tree", 16, "chain", 8),)
#: issue 79's goal in tokens: arm B, read where its validation chose, reaches arm A's final figure in at most this
#: share of A's generated tokens (bench/preregistered.md)
TOKEN_GOALS = (("tree", "chain", 0.7),)
#: the gain from arm A's step 0 to arm B's end, where B starts from A (PAG from its warm-up: the base model first)
CHAINS = (("pag-warmup", "pag"),)
#: The 18 of today's 102 level-1 test problems that earlier runs of the gateway example (2026-11-26 to 12-02) were
#: scored on: the canonical forms of the old split's level-1 test tasks 0-319 (a problem's text hashed to test when
#: the first byte of its SHA-256 was 0 mod 10; task i drawn from default_rng([1, 1, i])) that today's split also
#: puts in test. Its configuration was chosen after six of those runs; the other 84 problems no run of it had seen.
GATEWAY_SEEN = frozenset(
    {
        "arithmetic:(4+6)",
        "arithmetic:(16+4)",
        "arithmetic:(16+2)",
        "arithmetic:(2+5)",
        "arithmetic:(12+17)",
        "arithmetic:(1+6)",
        "arithmetic:(12+15)",
        "arithmetic:(16+20)",
        "arithmetic:(13+16)",
        "arithmetic:(1+9)",
        "arithmetic:(11+18)",
        "arithmetic:(11+20)",
        "arithmetic:(18+18)",
        "arithmetic:(14+4)",
        "arithmetic:(13+18)",
        "arithmetic:(10+4)",
        "arithmetic:(5+6)",
        "arithmetic:(10+19)",
    }
)
#: the arms trained with the gateway example's configuration: itself and issue 81's SDK examples, which took it
GATEWAY_CONFIG = ("gateway", "agents-sdk-responses", "anthropic-sdk")
#: arm -> (bar, seeds, strict): its claim is the seeds' pooled 95 % interval, lower end at or above the bar (0.10: +10
#: points; strictly above it where ``strict``), decided once they are all finished (issue 81's SDK examples and its
#: verifiers v1 task set, seeds fixed in bench/preregistered.md)
BARS = {
    "agents-sdk-responses": (0.10, (0, 1, 2), False),
    "anthropic-sdk": (0.10, (0, 1, 2), False),
    "vf-v1": (0.0, (0, 1, 2), True),
}
#: one evaluation (a folder ``OUT/NAME``, no seeds) that arms are compared with seed by seed under another protocol,
#: the difference named: the base model given the demonstrations SWiRL's data came from (``demos: default``; the arms
#: are evaluated without them)
BASELINES = (("swirl-base-demos", ("swirl", "sft")),)
RESAMPLES = 10000


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def finished(run: Path) -> bool:
    """Whether the run evaluated its last step (``steps`` of its config.yaml; a run still going is not read)."""
    import yaml

    config = run / "config.yaml"
    if not config.is_file():
        return False
    steps = (yaml.safe_load(config.read_text()) or {}).get("steps")
    return steps is not None and (run / "eval" / f"step-{steps}" / "items.jsonl").is_file()


def offline(run: Path) -> bool:
    """Whether the run trained from stored data (its config names ``data``)."""
    import yaml

    return bool((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("data"))


def end(run: Path) -> str:
    """Where a run is read: at the step its validation split chose (``OUT@best``) where it validated, else at its
    last evaluation."""
    return f"{run}@best" if (run / "validation").is_dir() else str(run)


def chosen(run: Path) -> str:
    """The step a run is read at, as a table shows it."""
    if not (run / "validation").is_dir():
        return "end"
    from turnrl.cli.compare_arms import best_step

    return f"step {best_step(run)} (validation)"


def seeds_of(out: Path, arm: str) -> list[int]:
    return sorted(int(d.name.rsplit("-s", 1)[1]) for d in out.glob(f"{arm}-s*") if d.name.rsplit("-s", 1)[1].isdigit())


def one_pair(
    a: str, b: str, keep: frozenset[str] | None = None, drop: frozenset[str] = frozenset(), allow_protocol: bool = False
) -> dict[str, Any]:
    """``turnrl compare A B``'s figures of one pair (:func:`turnrl.cli.compare.compare_pair`), on the items of
    ``keep`` (all where None) less those of ``drop``. Where A and B name one evaluation (a run whose validation chose
    step 0, read against its own step 0) the gain is zero by construction: the figures say so instead of refusing.

    Raises:
        CompareError: as ``turnrl compare`` (different items or protocols, an evaluation missing).
    """
    arm_a, arm_b = load_arm(a), load_arm(b)
    if keep is not None or drop:

        def only(arm: Any) -> Any:
            rows = [r for r in arm.rows if (keep is None or r.get("item") in keep) and r.get("item") not in drop]
            return dataclasses.replace(arm, rows=rows)

        arm_a, arm_b = only(arm_a), only(arm_b)
    if arm_a.folder.resolve() != arm_b.folder.resolve():
        return compare_pair(arm_a, arm_b, allow_protocol=allow_protocol)
    from turnrl.stats import collapse

    values = collapse([str(r.get("item") or r["task_id"]) for r in arm_a.rows], arm_a.values())
    acc = sum(values.values()) / len(values)
    return {
        "a": str(arm_a.folder),
        "b": str(arm_b.folder),
        "items": len(values),
        "accuracy_a": acc,
        "accuracy_b": acc,
        "diff": 0.0,
        "se": 0.0,
        "low": 0.0,
        "high": 0.0,
        "mcnemar": {"only_a": 0, "only_b": 0, "p_value": 1.0},
        "notes": ["one evaluation: no gain"],
    }


def pooled(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over seeds of their paired differences with its interval, as ``turnrl compare`` pools them
    (:func:`turnrl.stats.pooled_paired`)."""
    from turnrl.stats import Paired, pooled_paired

    return dataclasses.asdict(
        pooled_paired(
            [
                Paired(p["items"], p["accuracy_a"], p["accuracy_b"], p["diff"], p["se"], p["low"], p["high"])
                for p in pairs
            ]
        )
    )


def gain_table(out: Path, arm: str) -> list[str]:
    """Per seed the arm's step-0 and final held-out success and its gain; then the mean over the finished seeds."""
    lines = [
        f"**{arm}**: held-out success, step 0 → end, and the gain paired on the same items",
        "",
        "| seed | items | step 0 | read at | success there | gain (points) | 95 % interval | McNemar p (gained / lost) "
        "| logp gap, guard |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    pairs, fixed = [], []  # every finished seed's pair; those of the seeds a bar was fixed for (BARS)
    for seed in seeds_of(out, arm):
        run = out / f"{arm}-s{seed}"
        if not finished(run):
            lines.append(f"| {seed} | — | — | — | — | not finished | | | |")
            continue
        p = one_pair(f"{run}@0", end(run))
        m = p["mcnemar"] or {}
        steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        gaps = [h["logp_diff"] for h in steps if "logp_diff" in h]
        # the rollout-learner log-prob gap, worst step; an offline run's data is the base model's, so only its first
        # step (before any update) measures the learner against the sampler
        gap = (gaps[0] if gaps else 0.0) if offline(run) else max(gaps or [0.0])
        violations = sum(h.get("guard_violations", 0.0) for h in steps)
        lines.append(
            f"| {seed} | {p['items']} | {pct(p['accuracy_a'])} | {chosen(run)} | {pct(p['accuracy_b'])} | "
            f"{pts(p['diff'])} | "
            f"[{pts(p['low'])}, {pts(p['high'])}] | {m.get('p_value', float('nan')):.2g} "
            f"({m.get('only_b', '—')} / {m.get('only_a', '—')}) | {gap:.1e}, {violations:.0f} |"
        )
        pairs.append(p)
        fixed += [p] if seed in BARS.get(arm, (0, (), False))[1] else []
    if len(pairs) >= 2:
        o = pooled(pairs)
        lines.append(f"| mean of {o['seeds']} | | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | | |")
    if arm in BARS:
        bar, seeds, strict = BARS[arm]
        where = "above" if strict else "at or above"
        claim = f"Claim: the pooled 95 % interval of seeds {', '.join(map(str, seeds))} {where} {pts(bar)} points"
        o = pooled(fixed)
        holds = o["low"] > bar or (o["low"] == bar and not strict)
        lines += [
            "",
            f"{claim}: not decided, {len(fixed)} of {len(seeds)} finished."
            if len(fixed) < len(seeds)
            else f"{claim}: **{'holds' if holds else 'does not hold'}** (lower end {pts(o['low'])}).",
        ]
    return [*lines, ""]


def arms_table(out: Path, b: str, a: str, at: int | None = None, at_a: int | None = None) -> list[str]:
    """Arm ``b`` against arm ``a`` at the end (``at``: at that step instead; ``at_a``: ``a`` at that other step),
    seed by seed (same seed in both), then over seeds."""
    both = sorted(set(seeds_of(out, a)) & set(seeds_of(out, b)))
    both = [s for s in both if finished(out / f"{a}-s{s}") and finished(out / f"{b}-s{s}")]
    if not both:
        return []
    read = (lambda run: f"{run}@{at}") if at is not None else end
    read_a = (lambda run: f"{run}@{at_a}") if at_a is not None else read
    try:
        pairs = [one_pair(read_a(out / f"{a}-s{s}"), read(out / f"{b}-s{s}")) for s in both]
    except CompareError as e:
        return [f"**{b} − {a}**: not compared ({e})", ""]
    where = (
        f"{b} at step {at}, {a} at step {at_a} (fixed in advance)"
        if at_a is not None
        else f"at step {at} (fixed in advance)"
        if at is not None
        else "each at its best step on validation"
        if end(out / f"{a}-s{both[0]}").endswith("@best")
        else "at the end"
    )
    lines = [
        f"**{b} − {a}** {where}, paired on the same items and seeds",
        "",
        f"| seed | items | {a} | {b} | {b} − {a} (points) | 95 % interval | McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, p in zip(both, pairs):
        m = p["mcnemar"] or {}
        lines.append(
            f"| {s} | {p['items']} | {pct(p['accuracy_a'])} | {pct(p['accuracy_b'])} | {pts(p['diff'])} | "
            f"[{pts(p['low'])}, {pts(p['high'])}] | {m.get('p_value', float('nan')):.2g} |"
        )
    o = pooled(pairs)
    lines.append(f"| mean of {o['seeds']} | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | |")
    return [*lines, ""]


def baseline_table(out: Path, base: str, arm: str) -> list[str]:
    """Arm ``arm`` (each seed at its validation step, or its end) against the one evaluation ``OUT/base`` made under
    another protocol, paired on the same items; the protocols' difference is printed under the table."""
    seeds = [s for s in seeds_of(out, arm) if finished(out / f"{arm}-s{s}")]
    if not seeds or not (out / base / "items.jsonl").is_file():
        return []
    pairs = [one_pair(str(out / base), end(out / f"{arm}-s{s}"), allow_protocol=True) for s in seeds]
    lines = [
        f"**{arm} − {base}**, {arm} each at its best step on validation, paired on the same items",
        "",
        f"| seed | items | {base} | {arm} | {arm} − {base} (points) | 95 % interval | McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, p in zip(seeds, pairs):
        m = p["mcnemar"] or {}
        lines.append(
            f"| {s} | {p['items']} | {pct(p['accuracy_a'])} | {pct(p['accuracy_b'])} | {pts(p['diff'])} | "
            f"[{pts(p['low'])}, {pts(p['high'])}] | {m.get('p_value', float('nan')):.2g} |"
        )
    if len(pairs) >= 2:
        o = pooled(pairs)
        lines.append(f"| mean of {o['seeds']} | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | |")
    notes = sorted({n for p in pairs for n in p.get("notes", [])})
    return lines + [""] + [f"({n})" for n in notes] + ([""] if notes else [])


def chain_table(out: Path, a: str, b: str) -> list[str]:
    """The gain from arm ``a``'s step 0 to arm ``b``'s end (``b`` started from ``a``'s policy), seed by seed (same
    seed in both), then over seeds."""
    both = [
        s
        for s in sorted(set(seeds_of(out, a)) & set(seeds_of(out, b)))
        if finished(out / f"{a}-s{s}") and finished(out / f"{b}-s{s}")
    ]
    if not both:
        return []
    try:
        pairs = [one_pair(f"{out / f'{a}-s{s}'}@0", end(out / f"{b}-s{s}")) for s in both]
    except CompareError as e:
        return [f"**{a} step 0 → {b}**: not compared ({e})", ""]
    lines = [
        f"**{a} step 0 → {b}** (the whole recipe's gain), paired on the same items and seeds",
        "",
        f"| seed | items | {a} at step 0 | {b} read at | success there | gain (points) | 95 % interval | McNemar p "
        "(gained / lost) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, p in zip(both, pairs):
        m = p["mcnemar"] or {}
        lines.append(
            f"| {s} | {p['items']} | {pct(p['accuracy_a'])} | {chosen(out / f'{b}-s{s}')} | "
            f"{pct(p['accuracy_b'])} | {pts(p['diff'])} | [{pts(p['low'])}, {pts(p['high'])}] | "
            f"{m.get('p_value', float('nan')):.2g} ({m.get('only_b', '—')} / {m.get('only_a', '—')}) |"
        )
    if len(pairs) >= 2:
        o = pooled(pairs)
        lines.append(f"| mean of {o['seeds']} | | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | |")
    return [*lines, ""]


def subset_table(out: Path, arm: str, seen: frozenset[str], what: str) -> list[str]:
    """The arm's gain (step 0 → end) on the items not in ``seen`` and on those in it, seed by seed and pooled."""
    runs = [(s, out / f"{arm}-s{s}") for s in seeds_of(out, arm) if finished(out / f"{arm}-s{s}")]
    if not runs:
        return []
    lines = [
        f"**{arm}**: the gain on {what}, and on the others",
        "",
        "| seed | items | step 0 | end | gain (points) | 95 % interval | McNemar p (gained / lost) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, keep, drop in (("not seen", None, seen), ("seen", seen, frozenset())):
        pairs = []
        for s, run in runs:
            p = one_pair(f"{run}@0", end(run), keep=keep, drop=drop)
            m = p["mcnemar"] or {}
            lines.append(
                f"| {s}, {label} | {p['items']} | {pct(p['accuracy_a'])} | {pct(p['accuracy_b'])} | "
                f"{pts(p['diff'])} | [{pts(p['low'])}, {pts(p['high'])}] | "
                f"{m.get('p_value', float('nan')):.2g} ({m.get('only_b', '—')} / {m.get('only_a', '—')}) |"
            )
            pairs.append(p)
        if len(pairs) >= 2:
            o = pooled(pairs)
            lines.append(
                f"| mean of {o['seeds']}, {label} | | | | {pts(o['diff'])} | [{pts(o['low'])}, {pts(o['high'])}] | |"
            )
    return [*lines, ""]


def pag_items(folder: Path) -> list[dict[str, Any]]:
    """Per distinct item of a PAG evaluation (its ``trajectories.jsonl``, or ``trajectories.jsonl.gz`` as the kept
    records hold it, joined to ``items.jsonl`` by task id), the
    counts its episodes give (:func:`turnrl.envs.formats.self_verify_metrics.pag_episode`): ``episodes``, ``turn1`` and
    ``final`` (right first and final answers), ``right`` and ``wrong`` (verified episodes whose first answer was
    right / wrong) and ``right_ok`` and ``wrong_ok`` (of those, verdicts that were right: "correct" on a right first
    answer, "wrong" on a wrong one; an unparseable verdict is never right), ``unparseable``."""
    from turnrl.envs.formats.self_verify_metrics import pag_episode

    item_of = {}
    for line in (folder / "items.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            item_of[row["task_id"]] = str(row.get("item") or row["task_id"])
    by_item: dict[str, dict[str, int]] = {}
    path = folder / "trajectories.jsonl"
    if not path.is_file() and (folder / "trajectories.jsonl.gz").is_file():  # as bench/evidence keeps them
        import gzip

        text = gzip.decompress((folder / "trajectories.jsonl.gz").read_bytes()).decode()
    else:
        text = path.read_text()
    for line in text.splitlines():
        if not line.strip():
            continue
        traj = json.loads(line)
        e = pag_episode(SimpleNamespace(turns=[SimpleNamespace(info=t.get("info") or {}) for t in traj["turns"]]))
        if e is None:
            continue
        c = by_item.setdefault(
            item_of.get(traj["task_id"], traj["task_id"]),
            dict.fromkeys(("episodes", "turn1", "final", "right", "wrong", "right_ok", "wrong_ok", "unparseable"), 0),
        )
        c["episodes"] += 1
        c["turn1"] += e["first_correct"]
        c["final"] += e["final_correct"]
        if e["verified"]:
            truth = "right" if e["first_correct"] else "wrong"
            c[truth] += 1
            c[f"{truth}_ok"] += bool(e["verdict_right"])
            c["unparseable"] += e["verdict"] is None
    return list(by_item.values())


def balanced(items: list[dict[str, Any]], resamples: int = RESAMPLES, seed: int = 0) -> dict[str, float]:
    """The verifier's balanced accuracy over ``items`` (:func:`pag_items`): the mean of its accuracy on right first
    answers and on wrong ones (0.5 for verdicts that ignore the answer), with its bootstrap standard error and
    percentile 95 % interval over items resampled with their episodes (numpy ``default_rng(seed)``; a resample
    without right or without wrong first answers has no balanced accuracy and is left out, ``dropped``)."""
    counts = np.array([[c["right"], c["right_ok"], c["wrong"], c["wrong_ok"]] for c in items], dtype=float)
    nan = float("nan")
    if not len(counts) or counts[:, 0].sum() == 0 or counts[:, 2].sum() == 0:
        return {
            "value": nan,
            "se": nan,
            "low": nan,
            "high": nan,
            "on_right": nan,
            "on_wrong": nan,
            "right": 0,
            "wrong": 0,
            "dropped": 0,
        }
    total = counts.sum(axis=0)
    on_right, on_wrong = total[1] / total[0], total[3] / total[2]
    draws = np.random.default_rng(seed).integers(0, len(counts), size=(resamples, len(counts)))
    sums = counts[draws].sum(axis=1)  # (resamples, 4)
    ok = (sums[:, 0] > 0) & (sums[:, 2] > 0)
    values = 0.5 * (sums[ok, 1] / sums[ok, 0] + sums[ok, 3] / sums[ok, 2])
    low, high = np.quantile(values, [0.025, 0.975])
    return {
        "value": 0.5 * (on_right + on_wrong),
        "se": float(values.std(ddof=1)),
        "low": float(low),
        "high": float(high),
        "on_right": on_right,
        "on_wrong": on_wrong,
        "right": int(total[0]),
        "wrong": int(total[2]),
        "dropped": int((~ok).sum()),
    }


def validation_line(run: Path) -> str:
    """The validation figures by step that chose the step a run is read at (validation Acc@final, the verifier's
    balanced accuracy there)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    cells = [
        f"step {int(r['step'])}: {pct(r['val_success'])}"
        + (f" (verifier {pct(r['val_pag_verifier_balanced_acc'])})" if "val_pag_verifier_balanced_acc" in r else "")
        for r in rows
        if "val_success" in r and "step" in r
    ]
    return "; ".join(cells) or "no validation recorded"


def pag_table(out: Path, arm: str) -> list[str]:
    """A PAG arm at the step each run is read at: Acc@turn1 and Acc@final on the same items and their paired
    difference (what the revision adds), and the verifier's balanced accuracy with its interval, seed by seed, then
    over seeds (balanced accuracy pooled as its distance from 0.5, as ``turnrl compare`` pools a difference)."""
    from turnrl.stats import mcnemar_exact, paired_bootstrap

    runs = [(s, out / f"{arm}-s{s}") for s in seeds_of(out, arm) if finished(out / f"{arm}-s{s}")]
    per_seed = [(s, run, pag_items(evaluation_folder(end(run)))) for s, run in runs]
    per_seed = [x for x in per_seed if x[2]]
    if not per_seed:
        return []
    lines = [
        f"**{arm}**: at the step read, the first answer, the final answer and the verifier, on the same items",
        "",
        "| seed | read at | items | Acc@turn1 | Acc@final | final − turn1 (points) | 95 % interval | McNemar p | "
        "balanced verifier accuracy | 95 % interval | 'correct' on right first answers | 'wrong' on wrong ones "
        "| unparseable verdicts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    revisions, verifiers = [], []
    for s, run, items in per_seed:
        n = [c["episodes"] for c in items]
        turn1 = [c["turn1"] / k for c, k in zip(items, n)]
        final = [c["final"] / k for c, k in zip(items, n)]
        p = paired_bootstrap(turn1, final, resamples=RESAMPLES, seed=0)
        mc = mcnemar_exact(turn1, final).p_value if set(n) == {1} else float("nan")
        v = balanced(items)
        verdicts = sum(c["right"] + c["wrong"] for c in items)
        lines.append(
            f"| {s} | {chosen(run)} | {p.n} | {pct(p.mean_a)} | {pct(p.mean_b)} | {pts(p.diff)} | "
            f"[{pts(p.low)}, {pts(p.high)}] | {mc:.2g} | {pct(v['value'])} | [{pct(v['low'])}, "
            f"{pct(v['high'])}] | {pct(v['on_right'])} of {v['right']} | {pct(v['on_wrong'])} of "
            f"{v['wrong']} | {sum(c['unparseable'] for c in items)} of {verdicts} |"
        )
        revisions.append(
            {
                "items": p.n,
                "accuracy_a": p.mean_a,
                "accuracy_b": p.mean_b,
                "diff": p.diff,
                "se": p.se,
                "low": p.low,
                "high": p.high,
            }
        )
        verifiers.append(
            {
                "items": p.n,
                "accuracy_a": 0.5,
                "accuracy_b": v["value"],
                "diff": v["value"] - 0.5,
                "se": v["se"],
                "low": v["low"] - 0.5,
                "high": v["high"] - 0.5,
            }
        )
    if len(per_seed) >= 2:
        r, b = pooled(revisions), pooled(verifiers)
        lines.append(
            f"| mean of {r['seeds']} | | | | | {pts(r['diff'])} | [{pts(r['low'])}, {pts(r['high'])}] | | "
            f"{pct(0.5 + b['diff'])} | [{pct(0.5 + b['low'])}, {pct(0.5 + b['high'])}] | | | |"
        )
    lines += ["", "Validation by step (the step read is the highest validation Acc@final, earliest on ties):", ""]
    lines += [f"- seed {s}: {validation_line(run)}" for s, run, _ in per_seed]
    return [*lines, ""]


def generated_tokens(run: Path, upto: int) -> float:
    """The tokens a run's rollouts generated in its steps 1..``upto`` (the sum of ``generated_tokens`` in its
    metrics.jsonl; step 0 generates nothing)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return sum(float(r.get("generated_tokens", 0.0)) for r in rows if "step" in r and 0 < r["step"] <= upto)


def token_goal_table(out: Path, b: str, a: str, share: float) -> list[str]:
    """Issue 79's goal: ``b`` read at its validation's step reaches ``a``'s final figure in at most ``share`` of
    ``a``'s generated tokens. Per seed the two figures and token sums; the goal is judged on the means over the seeds
    (as the issue states it: the ratio of the mean token sums, the mean figures), the difference's pooled interval
    printed beside."""
    import yaml

    from turnrl.cli.compare_arms import best_step

    both = sorted(set(seeds_of(out, a)) & set(seeds_of(out, b)))
    both = [s for s in both if finished(out / f"{a}-s{s}") and finished(out / f"{b}-s{s}")]
    if not both:
        return []
    lines = [
        f"**Goal: {b} reaches {a}'s final figure in ≤ {share:g}× its generated tokens** ({b} at its validation's "
        f"step, {a} at its last)",
        "",
        f"| seed | {a} at end | its tokens | {b} read at | success there | its tokens | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    pairs, ratios, spent = [], [], []
    for s in both:
        run_a, run_b = out / f"{a}-s{s}", out / f"{b}-s{s}"
        last = int((yaml.safe_load((run_a / "config.yaml").read_text()) or {})["steps"])
        step = best_step(run_b) if (run_b / "validation").is_dir() else last
        p = one_pair(str(run_a), f"{run_b}@{step}")
        t_a, t_b = generated_tokens(run_a, last), generated_tokens(run_b, step)
        ratios.append(t_b / t_a if t_a else float("nan"))
        spent.append((t_a, t_b))
        pairs.append(p)
        lines.append(
            f"| {s} | {pct(p['accuracy_a'])} | {t_a:,.0f} | step {step} | {pct(p['accuracy_b'])} | {t_b:,.0f} | "
            f"{ratios[-1]:.2f} |"
        )
    o = pooled(pairs)
    mean_a = float(np.mean([p["accuracy_a"] for p in pairs]))
    mean_b = float(np.mean([p["accuracy_b"] for p in pairs]))
    ratio = float(np.mean([b for _, b in spent]) / np.mean([a for a, _ in spent]))  # of the mean token sums
    holds = ratio <= share and mean_b >= mean_a
    lines += [
        f"| mean of {len(pairs)} | {pct(mean_a)} | | | {pct(mean_b)} | | {ratio:.2f} |",
        "",
        f"{b} − {a} there: {pts(o['diff'])} points [{pts(o['low'])}, {pts(o['high'])}]. Goal (mean ratio ≤ {share:g} "
        f"and mean {b} ≥ mean {a}): **{'holds' if holds else 'does not hold'}**"
        + ("" if len(pairs) >= 3 else f" (only {len(pairs)} seed(s) finished)")
        + ".",
    ]
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arms", nargs="*", default=None)
    args = parser.parse_args()
    arms = args.arms or sorted({d.name.rsplit("-s", 1)[0] for d in args.out.glob("*-s*") if d.is_dir()})
    lines: list[str] = []
    for arm in arms:
        lines += gain_table(args.out, arm)
    for a, b in CHAINS:
        if a in arms and b in arms:
            lines += chain_table(args.out, a, b)
    for arm in GATEWAY_CONFIG:
        if arm in arms:
            lines += subset_table(
                args.out,
                arm,
                GATEWAY_SEEN,
                "the test problems no earlier run of the gateway example was scored on (not seen)",
            )
    for b, a in PAIRS:
        if b in arms and a in arms:
            lines += arms_table(args.out, b, a)
    for base, versus in BASELINES:
        for arm in versus:
            if arm in arms:
                lines += baseline_table(args.out, base, arm)
    for b, a, at in AT_STEP:
        if b in arms and a in arms:
            lines += arms_table(args.out, b, a, at)
    for b, at, a, at_a in AT_STEPS:
        if b in arms and a in arms:
            lines += arms_table(args.out, b, a, at, at_a)
    for b, a, share in TOKEN_GOALS:
        if b in arms and a in arms:
            lines += token_goal_table(args.out, b, a, share)
    for arm in arms:
        if arm == "pag":
            lines += pag_table(args.out, arm)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
