"""The house in figures (issue 80's "report the house before and after"): rooms and their modules, the largest
modules, the longest functions, the functions with the most parameters, the classes with the most methods, the
parameters that take the whole run configuration (``TrainConfig``) where a component could take its sections, the
module names used in more than one room, and the counts of ``# noqa`` and ``# type: ignore`` — of the package at HEAD
or at any commit.

    python scripts/house_report.py              # the working tree's turnrl/
    python scripts/house_report.py --at REV     # turnrl/ as commit REV has it (read with git, nothing checked out)
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sources(rev: str | None) -> dict[str, str]:
    """``{path: text}`` of every Python file under turnrl/, in the working tree or at ``rev``."""
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "turnrl").rglob("*.py"))}
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "turnrl"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    return {
        n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        for n in names
        if n.endswith(".py")
    }


def report(files: dict[str, str], top: int = 8) -> list[str]:
    rooms = Counter(str(Path(p).parent) for p in files)
    lines = [
        f"modules: {len(files)}, lines: {sum(t.count(chr(10)) for t in files.values())}",
        f"# noqa: {sum(t.count('# noqa') for t in files.values())}, "
        f"# type: ignore: {sum(t.count('type: ignore') for t in files.values())}",
        f"rooms over 15 modules: {', '.join(f'{r} ({n})' for r, n in rooms.most_common() if n > 15) or 'none'}",
        "largest modules: "
        + ", ".join(
            f"{p} ({t.count(chr(10))})" for p, t in sorted(files.items(), key=lambda kv: -kv[1].count("\n"))[:top]
        ),
    ]
    functions, classes, whole = [], [], Counter()
    for path, text in files.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                params -= bool(a.args and a.args[0].arg in ("self", "cls"))
                functions.append((f"{path}:{node.name}", (node.end_lineno or node.lineno) - node.lineno + 1, params))
                whole[path] += sum(
                    arg.annotation is not None and ast.unparse(arg.annotation).strip("'\"") == "TrainConfig"
                    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]
                )
            elif isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                classes.append((f"{path}:{node.name}", n))
    lines.append(
        "longest functions: " + ", ".join(f"{n} ({k})" for n, k, _ in sorted(functions, key=lambda f: -f[1])[:top])
    )
    many = [f for f in functions if f[2] > 12]
    lines.append(
        f"functions over 12 parameters: {len(many)}: "
        + ", ".join(f"{n} ({p})" for n, _, p in sorted(many, key=lambda f: -f[2])[:top])
    )
    lines.append(
        f"parameters taking the whole TrainConfig: {sum(whole.values())} in {sum(n > 0 for n in whole.values())} "
        "modules"
    )
    names = Counter(Path(p).stem for p in files if Path(p).stem not in ("__init__", "__main__"))
    lines.append("module names in several rooms: " + ", ".join(f"{n} ({k})" for n, k in names.most_common() if k > 1))
    big = [c for c in classes if c[1] > 25]
    lines.append(
        f"classes over 25 methods: {len(big)}: " + ", ".join(f"{n} ({k})" for n, k in sorted(big, key=lambda c: -c[1]))
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", help="a git revision (default: the working tree)")
    args = parser.parse_args()
    print("\n".join(report(sources(args.at))))


if __name__ == "__main__":
    main()
