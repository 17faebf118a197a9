"""``turnrl compare A B [A2 B2 …]``: two runs evaluated on the same items, compared item by item (issue 77).

Each argument is an evaluation folder (``items.jsonl`` and ``run.json``, as ``turnrl eval --out`` writes) or a
training run's ``OUT_DIR``, read at its evaluation ``OUT_DIR/eval/step-N`` of the largest N unless ``--step N`` or
``OUT_DIR@N`` names another. Arguments come in pairs, run A (the baseline) then run B; several pairs are several
seeds of the same comparison.

Like for like or nothing: a pair is refused (exit 2, one line) when its two evaluations posed different items (how
many only in A, only in B, and the first few) unless ``--allow-different-items`` (then the items both share are
compared), or ran under different protocols — environment and its kwargs, samples, sampling, context — naming each
field that differs, unless ``--allow-different-protocol``.

``--score NAME`` compares another score of the rows than ``correct`` (:mod:`turnrl.cli.compare_arms`): the
solver–critic game records ``first_correct`` (the solver's answer before the review) and ``final_correct``; a number
an environment records in each row's ``metrics`` (HotPotQA's ``f1``, ``support_recall``) is compared by its mean, item
by item, without McNemar's test unless every value is 0 or 1; an evaluation whose rows do not hold it is refused,
naming the scores they hold.

Items are joined by their ``item`` (the problem's canonical form, :func:`turnrl.rl.run.evaluate.item_key`); folders
written before items were named are joined by ``task_id``, and the output says so. An item's several episodes
(samples, or two presentations of one problem) collapse to their mean score first ("repeats collapsed"). Per pair:
distinct items, A's and B's mean score (accuracy by default), B − A with its paired bootstrap 95% interval, and
McNemar's exact test where every item has one episode in each run; over the pairs: the mean difference with its
interval (:func:`turnrl.stats.pooled_paired`). ``--json PATH`` writes the same figures.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from turnrl.cli.compare_arms import (
    DEFAULT_SCORE,
    Arm,
    CompareError,
    load_arm,
)
from turnrl.cli.shared import console, fail

SHOWN = 3  # items named in a refusal
NOT_PROTOCOL = ("seed", "agent", "params.seed")  # what may differ between the runs compared: who played, and its seed


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def protocol(settings: dict[str, Any]) -> dict[str, Any]:
    """What must match for two evaluations to be compared like for like, flat (``env_kwargs.max_turns``): the
    environment and its kwargs as evaluated, samples, sampling parameters, context — everything in ``run.json``'s
    settings but the agent and the seeds (:data:`NOT_PROTOCOL`)."""
    return {k: v for k, v in _flat(settings).items() if k not in NOT_PROTOCOL}


def same_setting(x: Any, y: Any) -> bool:
    """Whether two values of one setting mean the same: equal, or one value and a list of only that value
    (``level: 1`` and ``level: [1]`` pose the same problems)."""
    one = lambda v: v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v
    return bool(x == y or one(x) == one(y))


def protocol_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Each field of two protocols that differs (:func:`same_setting`), as ``field (x in A, y in B)``."""
    shown = lambda d, k: repr(d[k]) if k in d else "unset"
    return [
        f"{k} ({shown(a, k)} in A, {shown(b, k)} in B)"
        for k in sorted(set(a) | set(b))
        if k not in a or k not in b or not same_setting(a[k], b[k])
    ]


def code_note(a: Arm, b: Arm) -> str | None:
    """A note where the two evaluations ran different turnrl code (their ``run.json`` ``code``: version and git
    commit), or where one does not say; None when both name the same version and commit. Not a refusal: a comparison
    across commits is common, but the reader must know that environments and graders may have changed between
    them. (Uncommitted changes are named where the commits differ; two runs of one commit with uncommitted changes
    cannot be told apart.)"""

    def name(arm: Arm) -> str:
        code = arm.code or {}
        sha = code.get("commit")
        return (
            f"turnrl {code.get('turnrl', '?')}"
            + (f" at {sha[:10]}" if sha else "")
            + (" with uncommitted changes" if code.get("dirty") else "")
        )

    if a.code is None or b.code is None:
        lacking = a if a.code is None else b
        return f"code not checked: {lacking.folder}/run.json does not say which turnrl wrote it"
    if all(a.code.get(k) == b.code.get(k) for k in ("turnrl", "commit")):
        return None
    return f"evaluated by different code: {name(a)} (A), {name(b)} (B)"


def _keys(rows: list[dict[str, Any]], by_item: bool) -> list[str]:
    return [str(r["item"] if by_item else r["task_id"]) for r in rows]


def _collapsed(arm: Arm, by_item: bool) -> tuple[dict[str, float], bool]:
    """Each item's mean score (the arm's :attr:`~Arm.score`), and whether any item had several episodes."""
    from turnrl.stats import collapse

    keys = _keys(arm.rows, by_item)
    return collapse(keys, arm.values()), len(set(keys)) < len(keys)


def _few(keys: list[str]) -> str:
    """The first :data:`SHOWN` keys, quoted, and an ellipsis where there are more."""
    return ", ".join(map(repr, keys[:SHOWN])) + (", …" if len(keys) > SHOWN else "")


def compare_pair(
    a: Arm, b: Arm, *, allow_items: bool = False, allow_protocol: bool = False, resamples: int = 10000, seed: int = 0
) -> dict[str, Any]:
    """The figures of one pair (run B against run A on their items): ``items``, ``accuracy_a``/``accuracy_b`` with
    their intervals (each run's mean score: its accuracy for ``correct``, its mean F1 for ``--score f1``), ``diff``
    (B − A) with its paired bootstrap ``se``/``low``/``high``, ``mcnemar`` (None where skipped) and ``notes`` (what
    the reader must know: repeats collapsed, items joined by task id, …).

    Raises:
        CompareError: the item sets or the protocols differ and that is not allowed.
    """
    from turnrl.stats import is_binary, mcnemar_exact, mean_interval, paired_bootstrap

    notes: list[str] = []
    if a.folder.resolve() == b.folder.resolve():
        raise CompareError(
            f"{a.label} and {b.label} are the same evaluation ({a.folder}): nothing to compare (a "
            "training run's OUT_DIR is read at its last complete evaluation; name the steps, OUT_DIR@N)"
        )
    named = [any(r.get("item") is not None for r in arm.rows) for arm in (a, b)]
    if named[0] != named[1]:  # the task ids of two split versions may name different problems
        old = a if not named[0] else b
        raise CompareError(
            f"{old.folder} was evaluated before items were named by their canonical form, the other "
            "after: the same task id may pose different problems in the two (the splits changed on "
            "2026-12-05); evaluate both with today's turnrl"
        )
    if a.settings is None or b.settings is None:
        lacking = a if a.settings is None else b
        if not allow_protocol:
            raise CompareError(
                f"{lacking.folder} has no run.json, so its protocol (environment, samples, sampling) "
                "cannot be checked; pass --allow-different-protocol to compare anyway"
            )
        notes.append(f"protocol not checked: {lacking.folder} has no run.json")
    else:
        differ = protocol_differences(protocol(a.settings), protocol(b.settings))
        if differ and not allow_protocol:
            raise CompareError(
                f"{a.label} and {b.label} were evaluated under different protocols: "
                f"{'; '.join(differ)}; pass --allow-different-protocol to compare anyway"
            )
        if differ:
            notes.append(f"protocols differ (--allow-different-protocol): {'; '.join(differ)}")
    if (note := code_note(a, b)) is not None:
        notes.append(note)
    by_item = all(r.get("item") is not None for r in a.rows + b.rows)
    if not by_item:
        notes.append(
            "items joined by task_id: an evaluation written before items were named (canonical forms), so "
            "two presentations of one problem count as two items"
        )
    if a.score != b.score:
        raise CompareError(
            f"{a.label} is read on its score {a.score!r} and {b.label} on {b.score!r}: compare one score"
        )
    va, repeats_a = _collapsed(a, by_item)
    vb, repeats_b = _collapsed(b, by_item)
    only_a, only_b = [k for k in va if k not in vb], [k for k in vb if k not in va]
    shared = [k for k in va if k in vb]
    if only_a or only_b:
        what = f"{len(only_a)} only in A ({_few(only_a)}), {len(only_b)} only in B ({_few(only_b)})"
        if not allow_items:
            raise CompareError(
                f"{a.label} and {b.label} were evaluated on different items: {what}; evaluate both on "
                f"the same tasks, or pass --allow-different-items to compare the {len(shared)} shared"
            )
        notes.append(f"compared the {len(shared)} items both share (--allow-different-items): {what}")
    if not shared:
        raise CompareError(f"{a.label} and {b.label} share no items")
    if repeats_a or repeats_b:
        notes.append("repeats collapsed: an item's several episodes count once, at their mean score")
    xa, xb = [va[k] for k in shared], [vb[k] for k in shared]
    paired = paired_bootstrap(xa, xb, resamples=resamples, seed=seed)
    mcnemar = None
    if repeats_a or repeats_b:
        notes.append("McNemar skipped: items have several episodes, so their outcomes are not right-or-wrong")
    elif not is_binary(xa + xb):
        notes.append(f"McNemar skipped: the score {a.score!r} is a number, not right-or-wrong (means compared)")
    else:
        mcnemar = asdict(mcnemar_exact(xa, xb))
    ia, ib = mean_interval(xa), mean_interval(xb)
    return {
        "a": str(a.folder),
        "b": str(b.folder),
        "items": paired.n,
        "only_in_a": len(only_a),
        "only_in_b": len(only_b),
        "accuracy_a": ia.mean,
        "accuracy_a_low": ia.low,
        "accuracy_a_high": ia.high,
        "accuracy_b": ib.mean,
        "accuracy_b_low": ib.low,
        "accuracy_b_high": ib.high,
        "diff": paired.diff,
        "se": paired.se,
        "low": paired.low,
        "high": paired.high,
        "mcnemar": mcnemar,
        "notes": notes,
    }


def compare_runs(
    args: list[str],
    *,
    step: int | None = None,
    allow_items: bool = False,
    allow_protocol: bool = False,
    resamples: int = 10000,
    seed: int = 0,
    score: str = DEFAULT_SCORE,
) -> dict[str, Any]:
    """Every pair of ``args`` (A B A2 B2 …) compared on ``score`` (:func:`compare_pair`;
    :func:`~turnrl.cli.compare_arms.score_of`) and pooled over the pairs as seeds
    (:func:`turnrl.stats.pooled_paired`): ``{"pairs": [...], "over_seeds": {...}, "score": ..., ...}``.

    Raises:
        CompareError: an odd number of arguments, an evaluation whose rows do not hold ``score``, or a pair that
            cannot be compared.
    """
    from turnrl.stats import Paired, pooled_paired

    if len(args) < 2 or len(args) % 2:
        raise CompareError(
            f"compare takes runs in pairs, A B [A2 B2 …] (each pair one seed), got {len(args)} argument(s)"
        )
    arms = [load_arm(arg, step, score) for arg in args]
    pairs = []
    for i in range(0, len(arms), 2):
        try:
            pairs.append(
                compare_pair(
                    arms[i],
                    arms[i + 1],
                    allow_items=allow_items,
                    allow_protocol=allow_protocol,
                    resamples=resamples,
                    seed=seed,
                )
            )
        except CompareError as e:
            raise CompareError(f"pair {i // 2 + 1}: {e}" if len(arms) > 2 else str(e)) from None
    pooled = pooled_paired(
        [Paired(p["items"], p["accuracy_a"], p["accuracy_b"], p["diff"], p["se"], p["low"], p["high"]) for p in pairs]
    )
    return {
        "pairs": pairs,
        "over_seeds": asdict(pooled),
        "score": score,
        "confidence": 0.95,
        "resamples": resamples,
        "bootstrap_seed": seed,
    }


def gain_line(out_dir: str, step: int) -> str:
    """The run's gain, step 0 to ``step``, paired on the items both evaluations posed, with its 95 % interval (what
    `turnrl compare OUT_DIR@0 OUT_DIR` prints), or why it cannot be given."""
    try:
        pair = compare_runs([f"{out_dir}@0", f"{out_dir}@{step}"])["pairs"][0]
    except (CompareError, OSError, ValueError) as e:
        return f"gain: not computed ({e})"
    return (
        f"gain {100 * pair['diff']:+.1f} points, 95 % interval [{100 * pair['low']:+.1f}, {100 * pair['high']:+.1f}] "
        f"over {pair['items']} distinct items (paired; one run: `turnrl compare` pools seeds)"
    )


def _plain(value: Any) -> Any:
    """``value`` with nan as None (JSON has no nan)."""
    if isinstance(value, float) and value != value:  # nan
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, list) else value


def _f(x: float) -> str:
    return "n/a" if x != x else f"{x:.3f}"  # nan


def show(result: dict[str, Any]) -> None:
    """Print the comparison: a row per pair (a seed's A and B, numbered in the order given) and one over them, then
    each pair's folders and notes."""
    from rich import box
    from rich.table import Table

    score = result.get("score", DEFAULT_SCORE)
    on = "" if score == DEFAULT_SCORE else f" on the score {score}"
    table = Table(
        title=f"B − A{on}, paired by item; McNemar: items only A / only B got right, exact p",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name in ("pair", "items", "A", "B", "B − A", "95% interval", "McNemar", "p"):
        table.add_column(name, justify="left" if name == "pair" else "right", no_wrap=True)
    for n, p in enumerate(result["pairs"], 1):
        mc = p["mcnemar"]
        table.add_row(
            str(n),
            str(p["items"]),
            _f(p["accuracy_a"]),
            _f(p["accuracy_b"]),
            f"{p['diff']:+.3f}",
            f"[{_f(p['low'])}, {_f(p['high'])}]",
            "skipped" if mc is None else f"{mc['only_a']} / {mc['only_b']}",
            "" if mc is None else f"{mc['p_value']:.3g}",
        )
    o, pairs = result["over_seeds"], result["pairs"]
    if len(pairs) > 1:
        table.add_row(
            "mean",
            "",
            _f(sum(p["accuracy_a"] for p in pairs) / len(pairs)),
            _f(sum(p["accuracy_b"] for p in pairs) / len(pairs)),
            f"{o['diff']:+.3f}",
            f"[{_f(o['low'])}, {_f(o['high'])}]",
            "",
            "",
            style="bold",
        )
    console.print(table)
    for n, p in enumerate(pairs, 1):
        # numbered by their order on the command line, not by seed: runs/x-s0 is pair 1
        console.print(f"pair {n}: A = {p['a']}, B = {p['b']}", soft_wrap=True, markup=False, highlight=False)
        for note in p["notes"]:
            console.print(f"  note: {note}", soft_wrap=True, markup=False, highlight=False)
    console.print(
        f"over {o['seeds']} seed(s): B − A{on} = {o['diff']:+.3f}, 95% interval [{_f(o['low'])}, "
        f"{_f(o['high'])}] ({o['method']}); each distinct item counts once",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )


def compare_command(
    runs: Annotated[
        list[str],
        typer.Argument(
            metavar="A B [A2 B2 ...]",
            help="evaluations in pairs, run A (baseline) then run B; each pair is one seed. An evaluation folder "
            "(`turnrl eval --out`) or a training run's OUT_DIR (its last eval/step-N; OUT_DIR@N for step N; "
            "OUT_DIR@best for the step its validation split chose)",
        ),
    ],
    step: Annotated[int | None, typer.Option(help="read training runs at eval/step-N (default: their last)")] = None,
    allow_different_items: Annotated[
        bool, typer.Option("--allow-different-items", help="compare the items both runs share instead of refusing")
    ] = False,
    allow_different_protocol: Annotated[
        bool,
        typer.Option(
            "--allow-different-protocol", help="compare runs evaluated under different protocols instead of refusing"
        ),
    ] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="also write the figures to this JSON file")] = None,
    resamples: Annotated[int, typer.Option(help="bootstrap resamples")] = 10000,
    seed: Annotated[int, typer.Option(help="the bootstrap's random seed")] = 0,
    score: Annotated[
        str,
        typer.Option(
            help="the score of each episode compared: correct (solved or won), one a "
            "game records in its rows' `scores`, such as first_correct (the "
            "solver–critic game's first answer) or final_correct, or a number an "
            "environment records in its rows' `metrics`, such as f1 or support_recall "
            "(HotPotQA; means compared)"
        ),
    ] = DEFAULT_SCORE,
) -> None:
    """Compare run B with run A item by item: accuracy over distinct items, B − A with its paired bootstrap 95%
    interval and McNemar's exact test per seed, the mean difference over seeds. Refuses (exit 2) evaluations of
    different items or under different protocols (environment, kwargs, samples, sampling, context)."""
    try:
        result = compare_runs(
            runs,
            step=step,
            allow_items=allow_different_items,
            allow_protocol=allow_different_protocol,
            resamples=resamples,
            seed=seed,
            score=score,
        )
    except (ValueError, OSError) as e:  # a CompareError, bad --resamples, an unreadable file
        fail(str(e))
    show(result)
    if json_path is not None:
        json_path.write_text(json.dumps(_plain(result), indent=2))
        console.print(f"figures written to {json_path}", soft_wrap=True, markup=False, highlight=False)
