"""Sandbox start-up latency and throughput: LocalSandbox vs a bare `python -c` on this machine.

Reports the median latency of a trivial program (print) under LocalSandbox and as a bare subprocess, the
overhead per run (target < 50 ms), and runs/s at concurrency 1, 4 and 16.

Usage: python bench/sandbox.py [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time

from turnrl.tools.sandbox import LocalSandbox

CODE = "print(sum(range(1000)))"


def bare(python: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-I", "-c", CODE], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return times


def sandboxed(sb: LocalSandbox, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = sb.run(CODE, timeout=10)
        assert r.ok and r.stdout == "499500\n", r
        times.append(time.perf_counter() - t0)
    return times


async def throughput(sb: LocalSandbox, concurrency: int, runs: int) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            r = await sb.arun(CODE, timeout=30)
            assert r.ok, r

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    return runs / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    sb = LocalSandbox(max_concurrency=16)
    sandboxed(sb, 3)  # warm up
    b, s = bare(sb.python, args.runs), sandboxed(sb, args.runs)
    mb, ms = statistics.median(b), statistics.median(s)
    print(f"interpreter {sb.python}; {args.runs} runs each; medians")
    print(f"bare `python -c`        : {mb * 1000:6.1f} ms")
    print(f"LocalSandbox (bwrap)    : {ms * 1000:6.1f} ms")
    print(f"overhead per run        : {(ms - mb) * 1000:6.1f} ms  (target < 50 ms)")
    for c in (1, 4, 16):
        rate = asyncio.run(throughput(sb, c, max(args.runs, 2 * c)))
        print(f"throughput, concurrency {c:>2}: {rate:6.1f} runs/s")


if __name__ == "__main__":
    main()
