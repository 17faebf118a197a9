"""Where a command's CPU goes, by kind of process: run it, read every process's CPU time from /proc every
``--every`` seconds, and print the CPU-seconds that the command and every process it starts (and they start) spent,
by kind of process, beside the wall time and the cores' busy seconds.

Written for the test suite (issue 80: which processes its time goes to), it works for any command:

    python bench/suite_cpu.py --json runs/suite.cpu.json -- bash scripts/test.sh --durations=0

Kinds, by a process's command line: ``pytest`` (the pytest processes: the main one and xdist's workers), ``ray
worker`` (Ray's worker processes: rollout workers, learner ranks, tasks), ``ray daemon`` (raylet, GCS, the
dashboard's agents, log monitors), ``python`` (other Python processes: what the tests start, ``python -m turnrl …``),
``type checker`` (mypy), ``compiler`` (a C++ build: a torch extension compiled at run time) and ``other``. A process
is counted at its last sample, so one that lives less than a sample period is missed, and so is one orphaned before
its first sample: the line "seen" against "busy" (the machine's busy CPU-seconds from /proc/stat, everything on it)
says how much. Linux only. Run it alone for timings: anything else on the machine slows the command and counts in
"busy", though in no kind.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def kind(cmdline: str) -> str:
    """The kind of a process from its command line (arguments joined by spaces)."""
    if "ray::" in cmdline or "default_worker.py" in cmdline:
        return "ray worker"
    if any(d in cmdline for d in ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env")):
        return "ray daemon"
    if "pytest" in cmdline or "xdist" in cmdline or "exec(eval(sys.stdin.readline()))" in cmdline:  # xdist's workers
        return "pytest"
    if "mypy" in cmdline:
        return "type checker"
    first = cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]  # a compiler's arguments name Python's headers: not Python
    if first in ("cc1plus", "cc1", "c++", "g++", "gcc", "cc", "ld", "collect2", "as", "ninja"):
        return "compiler"
    if "python" in cmdline:
        return "python"
    return "other"


def busy_seconds() -> float:
    """The machine's busy CPU-seconds since boot (every state of /proc/stat's cpu line but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def sample(root: int, seen: dict[int, tuple[str, float]]) -> None:
    """Adds or updates the (kind, CPU-seconds so far) of ``root`` and every process descended from it in ``seen``, by
    pid and start time (a pid used again is a new process). A process whose parent died before it was sampled (an
    orphan, adopted by init) is not seen."""
    procs = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # ppid, utime + stime, start time
        procs[pid] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, int(fields[19]), cmd)
    ours = {root}
    for pid in procs:
        chain: list[int] = []
        p = pid
        while p in procs and p not in ours and p > 1 and len(chain) < 64:
            chain.append(p)
            p = procs[p][0]
        if p in ours:
            ours.update(chain)
    for pid in ours & procs.keys():
        _, cpu, start, cmd = procs[pid]
        if cmd:
            seen[pid * 10**12 + start] = (kind(cmd), cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    seen: dict[int, tuple[str, float]] = {}
    busy0, start = busy_seconds(), time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(proc.pid, seen)
        time.sleep(args.every)
    wall, busy = time.monotonic() - start, busy_seconds() - busy0
    totals: dict[str, list[float]] = {}
    for k, cpu in seen.values():
        if cpu > 0:
            totals.setdefault(k, [0.0, 0])
            totals[k][0] += cpu
            totals[k][1] += 1
    figures = {
        "command": command,
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "busy_cpu_s": round(busy, 1),
        "cores": os.cpu_count(),
        "seen_cpu_s": round(sum(v[0] for v in totals.values()), 1),
        "kinds": {k: {"cpu_s": round(v[0], 1), "processes": v[1]} for k, v in sorted(totals.items())},
    }
    print(f"wall {wall:.1f} s, busy {busy:.1f} CPU-s of {wall * (os.cpu_count() or 1):.1f}", file=sys.stderr)
    for k, v in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"  {k:13s} {v[0]:8.1f} CPU-s  {v[1]:5d} processes", file=sys.stderr)
    print(f"  {'seen':13s} {figures['seen_cpu_s']:8.1f} CPU-s (busy {busy:.1f})", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
