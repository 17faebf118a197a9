"""Write tests/slow_tests.txt: the tests that `bash scripts/test.sh --fast` leaves out, from a timed run of the suite;
and tests/module_seconds.txt: each test module's seconds in that run, longest first.

    .venv/bin/python -m pytest -q --junitxml=runs/suite.xml      # the whole suite, alone on the machine
    .venv/bin/python scripts/slow_tests.py runs/suite.xml         # tests over 1 s (--over) become "slow"

A test is slow when its recorded time (set-up, call and tear-down) is over ``--over`` seconds, except that every test
module keeps its fastest test in the fast tier, so the tier still touches every module's contract. Tests added
after the list was written are fast until the list is written again. The full suite (CI) runs every test.

The full suite's processes (pytest-xdist, each module in one process) take the modules longest first in the order
tests/module_seconds.txt gives (tests/conftest.py): the last modules handed out are short, so that no process is
left running a long one alone at the end. A module the list does not name goes last.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "slow_tests.txt"
MODULES = REPO / "tests" / "module_seconds.txt"


def node_id(classname: str, name: str) -> str:
    """``tests.rl.test_x`` + ``test_y[a]`` -> ``tests/rl/test_x.py::test_y[a]`` (a class in the name: ``::Class::test``)."""
    parts = classname.split(".")
    module = next(i for i, p in enumerate(parts) if p.startswith("test_"))
    path = "/".join(parts[: module + 1]) + ".py"
    return "::".join([path, *parts[module + 1 :], name])


def module_seconds(junit: Path) -> dict[str, float]:
    """Each test module's seconds (its tests' recorded times summed), longest first."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).iter("testcase"):
        if case.get("classname"):
            seconds[node_id(case.get("classname"), case.get("name", "")).split("::")[0]] += float(case.get("time", 0))
    return dict(sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])))


def slow_tests(junit: Path, over: float) -> list[str]:
    """The node ids over ``over`` seconds, less each module's fastest test."""
    by_module: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for case in ET.parse(junit).iter("testcase"):
        if not case.get("classname"):  # a module skipped as a whole (e.g. tests/agents/test_vllm.py without vLLM)
            continue
        nid = node_id(case.get("classname"), case.get("name", ""))
        by_module[nid.split("::")[0]].append((float(case.get("time", 0)), nid))
    slow = []
    for cases in by_module.values():
        fastest = min(cases)[1]
        slow += [nid for t, nid in cases if t > over and nid != fastest]
    return sorted(slow)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="the junit XML of a whole-suite run")
    parser.add_argument("--over", type=float, default=1.0, help="seconds above which a test is slow (default 1)")
    args = parser.parse_args()
    slow = slow_tests(args.junit, args.over)
    OUT.write_text(
        "# Written by scripts/slow_tests.py from a timed run of the whole suite; `bash scripts/test.sh "
        "--fast` leaves these out.\n" + "\n".join(slow) + "\n"
    )
    print(f"{len(slow)} slow tests (over {args.over:g} s) -> {OUT.relative_to(REPO)}")
    seconds = module_seconds(args.junit)
    MODULES.write_text(
        "# Written by scripts/slow_tests.py from a timed run of the whole suite: seconds per test module, "
        "the order the full suite hands modules out in.\n" + "".join(f"{t:.1f} {path}\n" for path, t in seconds.items())
    )
    print(f"{len(seconds)} modules' seconds -> {MODULES.relative_to(REPO)}")


if __name__ == "__main__":
    main()
