"""Every headline learning figure of the docs, with the one command that reproduces it — the quick ones re-run.

    python bench/claims.py                        # run the quick claims one after the other, then print the table
    python bench/claims.py --list                 # every claim: its command, its published figure, quick or long
    python bench/claims.py --only gateway-example quickstart
    python bench/claims.py --out runs/claims      # where the runs go (default runs/claims; kept)
    python bench/claims.py --read runs/claims     # the table of runs already made (nothing is run)

A claim is a held-out success before and after training (greedy, on the environment's test split) that
docs/results.md or the README publishes, the command that measured it, and the noise it is stated with: one run's
figure on 64 test tasks has about 6 points of standard error, so a re-run is *within noise* when its final figure is
within two of them (12 points) of the published one. A claim may also say how much training must gain at least
(``min_gain``): the gateway example must raise held-out success by 10 points on the documented tasks and on tasks
it never saw. Per claim the table prints the published figure, today's, whether today's holds, and the run's time.

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

REPO = Path(__file__).resolve().parents[1]
NOISE = 0.12  # two standard errors of one 64-task held-out figure


@dataclass(frozen=True)
class Claim:
    """One published learning figure (see the module docstring)."""

    name: str
    doc: str  # where the docs publish it
    command: str  # ``{out}``: the run's folder; run from ``cwd``
    published: tuple[float, float]  # held-out success before -> after
    minutes: float  # about how long on 2 CPU cores, alone
    cwd: str = "."
    noise: float = NOISE
    min_gain: float | None = None  # after - before must be at least this (on every subset)
    subsets: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> task indices [a, b) of the eval
    quick: bool = True
    figure: str = ""  # the published figure in words, where held-out before -> after does not say it all

    def shown(self) -> str:
        """The command as a user types it (``OUT``: a folder of theirs)."""
        return self.command.replace("{out}", "OUT")


CLAIMS = [
    Claim("quickstart", "docs/results.md#lora (full fine-tuning row; `turnrl quickstart` trains this config)",
          "turnrl train configs/quickstart.yaml out_dir={out} --no-resume", (0.562, 0.734), 4),
    Claim("quickstart-lora", "docs/results.md#lora (LoRA row)",
          "turnrl train configs/quickstart.yaml out_dir={out} --no-resume "
          "'learner.lora={r: 16, alpha: 32, target_modules: all-linear}' optim.lr=2.0e-4", (0.562, 0.875), 4),
    Claim("arith-grpo", "docs/results.md#training-runs (sums without the calculator, 10 steps)",
          "turnrl train configs/arith-grpo.yaml steps=10 out_dir={out} --no-resume", (0.17, 0.83), 6),
    Claim("gateway-example", "docs/results.md#training-an-openai-client-agent-through-the-gateway",
          "turnrl train openai_agent.yaml eval_tasks=320 out_dir={out} --no-resume", (0.531, 0.872), 15,
          cwd="examples", min_gain=0.10, subsets={"tasks 0-63": (0, 64), "tasks 64-319": (64, 320)},
          figure="held-out 53.1 % -> 87.2 % on 320 test tasks: 56.2 % -> 89.1 % on the 64 documented ones, "
                 "52.3 % -> 86.7 % on tasks 64-319 (seed 0; seeds 1 and 2 in the docs); the 93.8 % of 2026-11-26 was "
                 "withdrawn (issue 70)"),
    Claim("swirl-guided", "docs/results.md#swirl (data_action from the base model)",
          "the data commands in the header of configs/swirl-arith.yaml (11.5 min), then "
          "turnrl train configs/swirl-arith.yaml out_dir={out}", (0.0, 1.0), 25, quick=False,
          figure="held-out 0 % -> 100 % at step 5, a calculator call in every episode"),
    Claim("dqo", "docs/results.md#offline-dqo-dpo-rft-on-one-dataset",
          "the dataset command of that section (9 min), then turnrl train configs/dqo-arith.yaml out_dir={out}",
          (0.172, 0.719), 31, quick=False, figure="held-out 17.2 % -> 71.9 % after one epoch of 2048 episodes"),
    Claim("pag-checking", "docs/results.md#pag-self-correcting-verifier-policies",
          "bash scripts/pag_checking_verifier.sh {out}", (0.391, 0.766), 35, quick=False,
          figure="after 4 PAG steps: balanced verifier accuracy 80.8 %, Acc@turn1 39.1 %, Acc@final 76.6 %"),
    Claim("samplers", "docs/results.md#which-tasks", "python bench/samplers.py --seeds 0 1 2 3", (0.037, 0.169),
          280, quick=False, figure="the difficulty sampler's mean curve reaches uniform's final 16.9 % at step 6, "
                                   "uniform at step 12 (2.0x fewer steps)"),
    Claim("tppo", "docs/results.md#t-ppo (seeds 20-25, then bench/tppo_seeds.py over the six pairs)",
          "for S in 20 21 22 23 24 25: python bench/tppo_vs_ppo.py --steps 10 --eval-every 2 --eval-tasks 64 "
          "--max-new 1024 --window 128 --train-on finished --seed S --prompts 8 --tppo-set algorithm.min_groups=8 "
          "--tppo-set algorithm.refill=prompts --tppo-set steps=12 --set optim.micro_tokens=4096 "
          "--out runs/t1024_w128_p8_sS", (0.562, 0.832), 150, quick=False,
          figure="the mean T-PPO curve against PPO's mean final held-out success (docs/results.md#t-ppo)"),
]


# ---- reading a run ----

def held_out(out: Path) -> tuple[float, float]:
    """The first and the last held-out success of the run in ``out`` (its metrics.jsonl, read as tppo_vs_ppo does)."""
    evals = [success for _, _, success in points(out)]
    if len(evals) < 2:
        raise ValueError(f"{out}: {len(evals)} held-out evaluation(s); a claim needs one before and one after")
    return evals[0], evals[-1]


def subset(out: Path, a: int, b: int) -> tuple[float, float]:
    """Held-out success on tasks ``a``..``b-1`` of the first and the last evaluation (their items.jsonl)."""
    steps = sorted((d for d in (out / "eval").iterdir() if d.name.startswith("step-")),
                   key=lambda d: int(d.name.split("-")[1]))
    figures = []
    for d in (steps[0], steps[-1]):
        items = [json.loads(line) for line in (d / "items.jsonl").read_text().splitlines() if line.strip()]
        chosen = [bool(i["correct"]) for i in items if a <= int(i["index"]) < b]
        if not chosen:
            raise ValueError(f"{d}: no evaluated task in {a}..{b - 1}")
        figures.append(sum(chosen) / len(chosen))
    return figures[0], figures[1]


def verdict(claim: Claim, out: Path) -> dict[str, object]:
    """Today's figures of ``claim`` from its run in ``out`` and whether they hold (see the module docstring)."""
    before, after = held_out(out)
    holds = abs(after - claim.published[1]) <= claim.noise
    parts = {"all": (before, after)}
    for name, (a, b) in claim.subsets.items():
        parts[name] = subset(out, a, b)
    if claim.min_gain is not None:
        holds = holds and all(y - x >= claim.min_gain - 1e-9 for x, y in parts.values())
    return {"before": before, "after": after, "parts": parts, "holds": holds}


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
                fields = stat[stat.rindex(")") + 2:].split()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except (OSError, ValueError):
                continue
            out[int(d.name)] = (int(fields[11]) + int(fields[12]), cmd or stat[stat.index("(") + 1:stat.rindex(")")])
        return out

    if not Path("/proc/self/stat").exists():
        return []
    first = ticks()
    time.sleep(seconds)
    second = ticks()
    hz = os.sysconf("SC_CLK_TCK")
    mine = {os.getpid(), os.getppid()}
    return [f"{pid} {cmd[:120]}" for pid, (t, cmd) in second.items()
            if pid not in mine and pid in first and (t - first[pid][0]) / hz / seconds > share]


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
            proc = subprocess.run(command, shell=True, cwd=REPO / claim.cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=timeout)
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


def table(rows: list[tuple[Claim, dict[str, object] | None, float | None, str | None]]) -> str:
    lines = ["| claim | published | today | holds | minutes |", "|---|---|---|---|---|"]
    for claim, v, seconds, error in rows:
        published = f"{pct(claim.published[0])} → {pct(claim.published[1])}"
        minutes = "" if seconds is None else f"{seconds / 60:.1f}"
        if v is None:
            lines.append(f"| {claim.name} | {published} | **failed**: {error} | no | {minutes} |")
            continue
        today = "; ".join(f"{name}: {pct(a)} → {pct(b)}" for name, (a, b) in v["parts"].items())  # type: ignore[union-attr]
        gain = f" (gain ≥ {100 * claim.min_gain:.0f} points)" if claim.min_gain is not None else ""
        lines.append(f"| {claim.name} | {published} | {today} | {'yes' if v['holds'] else '**no**'}{gain} | {minutes} |")
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
            print(f"{c.name} ({kind}): {what}; {c.doc}\n"
                  f"    {'cd ' + c.cwd + ' && ' if c.cwd != '.' else ''}{c.shown()}")
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
            raise SystemExit("refusing to time training figures while other processes keep a core busy:\n  "
                             + "\n  ".join(busy) + "\nwait for them to end (or stop them) and run this again")
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
