"""Every headline learning figure of the docs, with the one command that reproduces it — the quick ones re-run.

    python bench/claims.py                        # run the quick claims one after the other, then print the table
    python bench/claims.py --list                 # every claim: its command, its published figure, quick or long
    python bench/claims.py --only gateway-example quickstart
    python bench/claims.py --out runs/claims      # where the runs go (default runs/claims; kept)
    python bench/claims.py --read runs/claims     # the table of runs already made (nothing is run)

A claim is what docs/results.md or the README publishes about training, and the command that measured it. It states
a **gain**: held-out success before and after training (greedy, on the environment's held-out split), so
``after - before`` on the same items; or a **difference between two arms** (``arms``: two runs in the claim's
folder, arm B's final held-out success minus arm A's, on the same items). ``published`` holds the two figures
(before, after; or arm A, arm B), and their difference is the claimed gain; a claim whose figures are equal states
nothing this rule can check and is refused when it is defined.

The figures count **distinct items**: each ``items.jsonl`` row names its ``item`` (the task's canonical form; rows
written before items were named fall back to ``task_id``), repeats of an item (several samples, two presentations of
one problem) collapse to their mean (``turnrl.stats.collapse``), and the two evaluations are paired item by item;
they must hold the same items. Today's gain is the mean paired difference with its paired bootstrap 95 % interval
over the distinct items (``turnrl.stats.paired_bootstrap``, 10,000 resamples, seed 0, so one run gives one answer).

A claim **holds** when today's re-run gives all of:

1. an interval that excludes zero in the claimed direction (for a gain, ``low > 0``): training still gains at all.
   With ``min_gain`` the interval must exclude that much instead (``low > min_gain``), on the whole evaluation and on
   every subset (``subsets``: task indices of the evaluation), e.g. the gateway example on its documented tasks and
   on tasks it never saw;
2. the published gain inside today's interval of the gain: the size of the published gain is reproduced, not just
   its sign. The gain, not the final figure, is what is compared: the claim is what training adds, and a final
   figure can match while the gain does not (a re-measured split moves before and after together);
3. where every item is right or wrong, McNemar's exact test rejecting "no change" at 5 %: a percentile bootstrap is
   too narrow when only a few items change (4 items gained and none lost out of 102 gives a bootstrap interval above
   zero, p = 0.125).

How close the published figure must be is therefore today's interval, not a fixed noise: it narrows with the number
of distinct items and widens where few items differ between before and after; the table reports ``n`` per claim.
Per claim (and per subset) the table prints the published figures, today's before -> after, the gain with its 95 %
interval, n distinct items, whether it holds (and if not, which condition failed) and the run's time.

Quick claims (each under about 15 minutes on 2 CPU cores) run one after the other, each alone: the script refuses
to start while another process keeps a core busy (it names it), because training figures taken beside another
torch process are not the figures a user gets. A claim whose command fails is reported as failed, never skipped.
The long claims (a teacher's dataset first, or several seeds) are listed with their commands; run them by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tppo_vs_ppo import points

from turnrl.stats import Paired, collapse, mcnemar_exact, paired_bootstrap

REPO = Path(__file__).resolve().parents[1]
CONFIDENCE = 0.95
RESAMPLES = 10_000


@dataclass(frozen=True)
class Claim:
    """One published learning figure (see the module docstring)."""

    name: str
    doc: str  # where the docs publish it
    command: str  # ``{out}``: the run's folder; run from ``cwd``
    published: tuple[float, float]  # held-out success before -> after (or arm A, arm B)
    minutes: float  # about how long on 2 CPU cores, alone
    cwd: str = "."
    min_gain: float | None = None  # the interval must exclude this gain (on every subset), not only zero
    subsets: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> task indices [a, b) of the eval
    quick: bool = True
    figure: str = ""  # the published figure in words, where held-out before -> after does not say it all
    arms: tuple[str, str] | None = None  # a difference between two arms: their run folders inside ``{out}``

    def __post_init__(self) -> None:
        if self.gain == 0:
            raise ValueError(
                f"claim {self.name!r}: published {self.published} states no gain and no difference, "
                "so no re-run could contradict it; state the claimed direction"
            )
        if self.min_gain is not None and not self.min_gain > 0:
            raise ValueError(f"claim {self.name!r}: min_gain {self.min_gain} must be a positive size of gain")

    @property
    def gain(self) -> float:
        """The published gain (after - before, or arm B - arm A)."""
        return self.published[1] - self.published[0]

    def shown(self) -> str:
        """The command as a user types it (``OUT``: a folder of theirs)."""
        return self.command.replace("{out}", "OUT")


CLAIMS = [
    Claim(
        "quickstart",
        "docs/results/evidence.md#evidence (the quickstart, seed 0 of three; `turnrl quickstart` trains it)",
        "turnrl train configs/quickstart.yaml out_dir={out} --no-resume",
        (0.363, 0.676),
        6,
        figure="held-out 36.3 % -> 67.6 % on the 102 distinct level-1 test problems (seed 0; seeds 1 and 2: 49.0 %, "
        "60.8 %; over the three seeds +22.9 points, 95 % interval [+4.3, +41.5])",
    ),
    Claim(
        "quickstart-lora",
        "docs/results/evidence.md#evidence (LoRA, seed 0 of three)",
        "turnrl train configs/quickstart.yaml out_dir={out} --no-resume "
        "'learner.lora={r: 16, alpha: 32, target_modules: all-linear}' optim.lr=2.0e-4",
        (0.363, 0.775),
        6,
        figure="held-out 36.3 % -> 77.5 % (seed 0; seeds 1 and 2: 75.5 %, 86.3 %)",
    ),
    Claim(
        "lora-vs-full",
        "docs/results/evidence.md#evidence (LoRA - full at the end, seed 0 of three)",
        "turnrl train configs/quickstart.yaml out_dir={out}/full --no-resume && turnrl train configs/quickstart.yaml "
        "out_dir={out}/lora --no-resume 'learner.lora={r: 16, alpha: 32, target_modules: all-linear}' "
        "optim.lr=2.0e-4",
        (0.676, 0.775),
        12,
        arms=("full", "lora"),
        figure="LoRA - full +9.8 points at the end (seed 0; +26.5 and +25.5 on seeds 1 and 2; over the three "
        "+20.6, [+2.3, +38.9]), each at its own learning rate",
    ),
    Claim(
        "gateway-example",
        "docs/results/gateway-evidence.md#gateway (seed 0 of three; configuration chosen before the "
        "split, with test exposure: 18 of the 102 problems)",
        "turnrl train openai_agent.yaml eval_tasks=102 out_dir={out} --no-resume",
        (0.441, 0.843),
        15,
        cwd="examples",
        min_gain=0.10,
        figure="held-out 44.1 % -> 84.3 % of 102 distinct test problems (seed 0; seeds 1 and 2: 84.3 %, 86.3 %; "
        "over the three +40.8, [+29.3, +52.4])",
    ),
    Claim(
        "agents-sdk-example",
        "docs/results/gateway-evidence.md#sdk-agents (the OpenAI Agents SDK on the Responses API, seed 0 of three; "
        "configuration chosen before the split, with test exposure: 18 of the 102 problems)",
        "turnrl train agents_sdk_responses_agent.yaml eval_tasks=102 seed=0 out_dir={out} --no-resume",
        (0.402, 0.824),
        9,
        cwd="examples",
        min_gain=0.10,
        figure="held-out 40.2 % -> 82.4 % of 102 distinct test problems (seed 0; seeds 1 and 2: 82.4 %, 81.4 %; "
        "over the three +41.8, [+30.5, +53.2])",
    ),
    Claim(
        "anthropic-sdk-example",
        "docs/results/gateway-evidence.md#sdk-agents (the anthropic SDK on the Messages API, seed 0 of three; "
        "configuration chosen before the split, with test exposure: 18 of the 102 problems)",
        "turnrl train anthropic_agent.yaml eval_tasks=102 seed=0 out_dir={out} --no-resume",
        (0.373, 0.804),
        9,
        cwd="examples",
        min_gain=0.10,
        figure="held-out 37.3 % -> 80.4 % of 102 distinct test problems (seed 0; seeds 1 and 2: 88.2 %, 83.3 %; "
        "over the three +46.7, [+34.2, +59.3])",
    ),
    Claim(
        "verifiers-v1-example",
        "docs/results/gateway-evidence.md#verifiers-v1 (a verifiers 0.4 task set, its agent a subprocess, seed 0 of "
        "three; in .venv-verifiers-v1, which scripts/setup.sh builds)",
        "../.venv-verifiers-v1/bin/turnrl train vf-arithmetic-v1.yaml eval_tasks=200 seed=0 out_dir={out} --no-resume",
        (0.16, 0.44),
        31,
        cwd="examples",
        quick=False,
        figure="held-out 16.0 % -> 44.0 % of 200 distinct test problems (seed 0; seeds 1 and 2: 49.5 %, 42.5 %; "
        "over the three +29.3, [+19.9, +38.8])",
    ),
    Claim(
        "swirl-guided",
        "docs/results.md#withdrawn (a format floor: re-measured against SFT and the base model given "
        "the demonstrations in docs/results/evidence.md#swirl)",
        "the data commands in the header of configs/swirl-arith.yaml (11.5 min), then "
        "turnrl train configs/swirl-arith.yaml out_dir={out}",
        (0.0, 1.0),
        25,
        quick=False,
        figure="held-out 0 % -> 100 % at step 5, a calculator call in every episode",
    ),
    Claim(
        "dqo",
        "docs/results.md#withdrawn (the leaky split; re-measured in docs/results/evidence.md#evidence)",
        "the dataset command of that section (9 min), then turnrl train configs/dqo-arith.yaml out_dir={out}",
        (0.172, 0.719),
        31,
        quick=False,
        figure="held-out 17.2 % -> 71.9 % after one epoch of 2048 episodes",
    ),
    Claim(
        "pag-checking",
        "docs/results.md#unverified (pag-self-correcting-verifier-policies)",
        "bash scripts/pag_checking_verifier.sh {out}",
        (0.391, 0.766),
        35,
        quick=False,
        figure="after 4 PAG steps: balanced verifier accuracy 80.8 %, Acc@turn1 39.1 %, Acc@final 76.6 %",
    ),
    Claim(
        "samplers",
        "docs/results.md#withdrawn (re-measured as preregistered in docs/results/evidence.md#sampler)",
        "python bench/samplers.py --seeds 0 1 2 3",
        (0.037, 0.169),
        280,
        quick=False,
        figure="the difficulty sampler's mean curve reaches uniform's final 16.9 % at step 6, "
        "uniform at step 12 (2.0x fewer steps)",
    ),
    Claim(
        "tppo",
        "docs/results.md#unverified (t-ppo: seeds 20-25, then bench/tppo_seeds.py over the six pairs)",
        "for S in 20 21 22 23 24 25: python bench/tppo_vs_ppo.py --steps 10 --eval-every 2 --eval-tasks 64 "
        "--max-new 1024 --window 128 --train-on finished --seed S --prompts 8 --tppo-set algorithm.min_groups=8 "
        "--tppo-set algorithm.refill=prompts --tppo-set steps=12 --set optim.micro_tokens=4096 "
        "--out runs/t1024_w128_p8_sS",
        (0.562, 0.832),
        150,
        quick=False,
        figure="the mean T-PPO curve against PPO's mean final held-out success (docs/results.md#t-ppo)",
    ),
]


# ---- reading a run ----


def eval_steps(out: Path) -> list[int]:
    """The steps of the held-out evaluations of the run in ``out`` (its metrics.jsonl, read as tppo_vs_ppo does)."""
    return [step for step, _, _ in points(out)]


def outcomes(folder: Path, a: int = 0, b: int | None = None) -> dict[str, float]:
    """Success per distinct item in one evaluation (``folder``/items.jsonl), tasks ``a``..``b-1`` only: each row's
    ``item`` (else its ``task_id``), its repeats collapsed to their mean."""
    rows = [json.loads(line) for line in (folder / "items.jsonl").read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if a <= int(r["index"]) < (b if b is not None else float("inf"))]
    if not chosen:
        raise ValueError(f"{folder}: no evaluated task in {a}..{'' if b is None else b - 1}")
    keys = [str(r["item"] if r.get("item") is not None else r["task_id"]) for r in chosen]
    return collapse(keys, [float(bool(r["correct"])) for r in chosen])


def pair(first: dict[str, float], second: dict[str, float], where: str) -> Paired:
    """The paired gain ``second - first`` over the items both hold (they must hold the same ones)."""
    if first.keys() != second.keys():
        only_first, only_second = len(first.keys() - second.keys()), len(second.keys() - first.keys())
        raise ValueError(
            f"{where}: the two evaluations hold different items ({only_first} only in the first, "
            f"{only_second} only in the second); a gain is paired on the same items"
        )
    items = list(first)
    return paired_bootstrap(
        [first[k] for k in items], [second[k] for k in items], resamples=RESAMPLES, seed=0, confidence=CONFIDENCE
    )


def evaluations(claim: Claim, out: Path) -> tuple[Path, Path]:
    """The two evaluation folders a claim compares: the first and the last of its run, or each arm's last."""
    if claim.arms:
        folders = []
        for arm in claim.arms:
            steps = eval_steps(out / arm)
            if not steps:
                raise ValueError(f"{out / arm}: no held-out evaluation")
            folders.append(out / arm / "eval" / f"step-{steps[-1]}")
        return folders[0], folders[1]
    steps = eval_steps(out)
    if len(steps) < 2:
        raise ValueError(f"{out}: {len(steps)} held-out evaluation(s); a claim needs one before and one after")
    return out / "eval" / f"step-{steps[0]}", out / "eval" / f"step-{steps[-1]}"


def verdict(claim: Claim, out: Path) -> dict[str, object]:
    """Today's paired figures of ``claim`` from its run in ``out`` and whether it holds (the module docstring's rule):
    ``parts`` (``all`` and each subset -> :class:`turnrl.stats.Paired`), ``holds`` and ``why`` (the failed
    condition, or "")."""
    first, last = evaluations(claim, out)
    parts = {"all": pair(outcomes(first), outcomes(last), str(out))}
    for name, (a, b) in claim.subsets.items():
        parts[name] = pair(outcomes(first, a, b), outcomes(last, a, b), f"{out} ({name})")
    sign = 1.0 if claim.gain > 0 else -1.0
    bound = claim.min_gain or 0.0
    why = []
    for name, p in parts.items():
        nearest = p.low if sign > 0 else -p.high  # the interval's end nearest to no gain, in the claimed direction
        if not nearest > bound:
            noun = "gain" if sign > 0 else "loss"
            what = f"a {noun} of more than {100 * bound:.0f} points" if bound else f"a {noun}"
            why.append(f"the interval{'' if name == 'all' else ' on ' + name} does not show {what}")
    a, b = outcomes(first), outcomes(last)
    items = list(a)
    if all(v in (0.0, 1.0) for v in [*a.values(), *b.values()]):  # right-or-wrong items: the exact test as well
        test = mcnemar_exact([a[k] for k in items], [b[k] for k in items])
        if not test.p_value < 1 - CONFIDENCE:  # a percentile bootstrap is too narrow when few items change
            why.append(
                f"McNemar's exact test does not reject no change (p = {test.p_value:.3g}: "
                f"{test.only_b} item(s) gained, {test.only_a} lost)"
            )
    whole = parts["all"]
    if not whole.low - 1e-9 <= claim.gain <= whole.high + 1e-9:
        why.append(
            f"the published gain {points_(claim.gain)} lies outside today's interval "
            f"[{points_(whole.low)}, {points_(whole.high)}]"
        )
    return {"parts": parts, "holds": not why, "why": "; ".join(why)}


# ---- a machine to time on ----


def busy_processes(seconds: float = 1.0, share: float = 0.3) -> list[str]:
    """Other processes that used more than ``share`` of a core over ``seconds`` (Linux /proc), as 'PID command'."""

    def ticks() -> dict[int, tuple[int, str]]:
        out = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except (OSError, ValueError):
                continue
            out[int(d.name)] = (int(fields[11]) + int(fields[12]), cmd or stat[stat.index("(") + 1 : stat.rindex(")")])
        return out

    if not Path("/proc/self/stat").exists():
        return []
    first = ticks()
    time.sleep(seconds)
    second = ticks()
    hz = os.sysconf("SC_CLK_TCK")
    mine = {os.getpid(), os.getppid()}
    return [
        f"{pid} {cmd[:120]}"
        for pid, (t, cmd) in second.items()
        if pid not in mine and pid in first and (t - first[pid][0]) / hz / seconds > share
    ]


# ---- running ----


def run(claim: Claim, out: Path, timeout: float) -> tuple[dict[str, object] | None, float, str | None]:
    """Run ``claim``'s command into ``out``; (verdict or None, seconds, why it failed or None)."""
    command = claim.command.replace("{out}", str(out.resolve()))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    t0 = time.perf_counter()
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log.open("w") as f:
            proc = subprocess.run(
                command, shell=True, cwd=REPO / claim.cwd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout
            )
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, f"ran past {timeout:.0f} s (log: {log})"
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return None, seconds, f"exit {proc.returncode}: {tail[0][:200]} (log: {log})"
    try:
        return verdict(claim, out), seconds, None
    except (OSError, ValueError, KeyError) as e:
        return None, seconds, f"no figure in {out}: {e}"


def pct(x: float) -> str:
    return "—" if x != x else f"{100 * x:.1f} %"


def points_(x: float) -> str:
    return "—" if x != x else f"{100 * x:+.1f}"


def table(rows: list[tuple[Claim, dict[str, object] | None, float | None, str | None]]) -> str:
    """Per claim (and per subset): published, today's before -> after, the gain with its 95 % interval, n distinct
    items, holds, minutes."""
    lines = [
        "| claim | published | today | gain (95 % interval) | items | holds | minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for claim, v, seconds, error in rows:
        published = f"{pct(claim.published[0])} → {pct(claim.published[1])} ({points_(claim.gain)})"
        minutes = "" if seconds is None else f"{seconds / 60:.1f}"
        if v is None:
            lines.append(f"| {claim.name} | {published} | **failed**: {error} | | | no | {minutes} |")
            continue
        for name, p in v["parts"].items():  # type: ignore[union-attr]  # a claim with parts
            label, shown = (claim.name, published) if name == "all" else (f"{claim.name}: {name}", "")
            holds = ("yes" if v["holds"] else f"**no**: {v['why']}") if name == "all" else ""
            lines.append(
                f"| {label} | {shown} | {pct(p.mean_a)} → {pct(p.mean_b)} | {points_(p.diff)} "
                f"[{points_(p.low)}, {points_(p.high)}] | {p.n} | {holds} | {minutes if name == 'all' else ''} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="print every claim and its command, run nothing")
    parser.add_argument("--only", nargs="*", default=None, help="claims to run (names from --list)")
    parser.add_argument("--out", default="runs/claims", help="folder for the runs (one per claim)")
    parser.add_argument("--read", default=None, help="print the table of the runs in this folder; run nothing")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one claim's command may take")
    args = parser.parse_args()
    names = {c.name for c in CLAIMS}
    unknown = sorted(set(args.only or []) - names)
    if unknown:
        raise SystemExit(f"unknown claim(s) {', '.join(unknown)}; the claims are: {', '.join(sorted(names))}")
    if args.list:
        for c in CLAIMS:
            kind = f"quick, ~{c.minutes:.0f} min" if c.quick else f"long, ~{c.minutes:.0f} min"
            what = c.figure or f"held-out {pct(c.published[0])} -> {pct(c.published[1])}"
            print(
                f"{c.name} ({kind}): {what}; {c.doc}\n    {'cd ' + c.cwd + ' && ' if c.cwd != '.' else ''}{c.shown()}"
            )
        return
    chosen = [c for c in CLAIMS if (c.name in args.only if args.only else c.quick)]
    rows: list[tuple[Claim, dict[str, object] | None, float | None, str | None]] = []
    if args.read:
        for c in [c for c in chosen if c.quick]:
            folder = Path(args.read) / c.name
            try:
                rows.append((c, verdict(c, folder), None, None))
            except (OSError, ValueError, KeyError) as e:
                rows.append((c, None, None, f"no run read in {folder}: {e}"))
        print(table(rows))
        return
    for c in [c for c in chosen if not c.quick]:
        print(f"{c.name} is a long claim (~{c.minutes:.0f} min), run by hand: {c.shown()}")
    for c in [c for c in chosen if c.quick]:
        busy = busy_processes()
        if busy:
            raise SystemExit(
                "refusing to time training figures while other processes keep a core busy:\n  "
                + "\n  ".join(busy)
                + "\nwait for them to end (or stop them) and run this again"
            )
        print(f"{c.name}: running (~{c.minutes:.0f} min) ...", flush=True)
        v, seconds, error = run(c, Path(args.out) / c.name, args.timeout)
        rows.append((c, v, seconds, error))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    for c in CLAIMS:
        if not c.quick and c not in chosen:
            print(f"long, not run: {c.name}: {c.shown()}")


if __name__ == "__main__":
    main()
