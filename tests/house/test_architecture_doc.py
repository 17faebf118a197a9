"""docs/ARCHITECTURE.md names every module of the package, and only modules that exist.

The page lists each ``turnrl/**/*.py`` file by its path relative to ``turnrl/`` in backticks (``rl/core/learner.py``).
These tests read the page and the file tree only (no turnrl module is imported), so a module added without a line on
the page, or a module moved or deleted while the page still names it, fails here with the paths to fix.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "turnrl"
DOC = REPO / "docs" / "ARCHITECTURE.md"
# Backticked paths that start with one of these folders are relative to the repository root, not to turnrl/.
REPO_FOLDERS = ("tests/", "examples/", "scripts/", "bench/")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PY_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*\.py")


def package_modules() -> list[str]:
    """Every module file of the package but ``__init__.py`` files, as ``a/b.py`` relative to ``turnrl/``."""
    return sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    )


def backticked() -> set[str]:
    """The text of every inline code span of the page, outside fenced code blocks (where backticks are literal)."""
    text = FENCE.sub("", DOC.read_text(encoding="utf-8"))
    return {span.strip() for span in CODE_SPAN.findall(text)}


def test_every_module_is_named_on_the_architecture_page():
    """A new module gets its line in docs/ARCHITECTURE.md: the page maps every module, so none may be missing."""
    named = backticked()
    missing = [module for module in package_modules() if module not in named]
    assert not missing, (
        "modules of turnrl/ not named in docs/ARCHITECTURE.md (add each, in backticks and relative "
        "to turnrl/, with one line saying what it holds):\n  " + "\n  ".join(missing)
    )


def test_every_module_path_on_the_architecture_page_exists():
    """A module moved or deleted makes the page stale: every backticked ``.py`` path on it must still be a file
    (under ``turnrl/``, or under the repository root for ``tests/``, ``examples/``, ``scripts/`` and ``bench/``)."""
    paths = sorted(span for span in backticked() if PY_PATH.fullmatch(span))
    assert paths, "docs/ARCHITECTURE.md names no module paths: did the page or this test's pattern change?"
    stale = [path for path in paths if not ((REPO if path.startswith(REPO_FOLDERS) else PACKAGE) / path).is_file()]
    assert not stale, (
        "paths in docs/ARCHITECTURE.md that name no file (relative to turnrl/; tests/, examples/, "
        "scripts/ and bench/ relative to the repository):\n  " + "\n  ".join(stale)
    )


#: module names every room may use for its own (a room's contract, a method's algorithm, its source and its
#: commands): two of them in different rooms are two rooms' own, not a concept named twice (``core`` and ``registry``
#: are not: the two of each are one concept at two layers, and say so)
ROOM_NAMES = {"__init__", "__main__", "base", "algorithm", "source", "cli"}


def test_two_modules_of_one_name_say_why_each_names_the_other():
    """No two modules of one name in different rooms unless they are the same concept at two layers (or, as ``cli/``
    names a module after its command, the name is the room's rule): each says so by naming its namesakes in its
    docstring — so a reader of one knows where the other is and how they differ."""
    by_name: dict[str, list[Path]] = {}
    for path in sorted((REPO / "turnrl").rglob("*.py")):
        by_name.setdefault(path.stem, []).append(path)
    twins = {n: paths for n, paths in by_name.items() if len(paths) > 1 and n not in ROOM_NAMES}
    assert len(twins) >= 10, sorted(twins)  # the walk found them
    silent = []
    for paths in twins.values():
        for path in paths:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            for other in paths:
                dotted = ".".join(other.relative_to(REPO).with_suffix("").parts)
                if other != path and dotted not in doc:
                    silent.append(f"{path.relative_to(REPO)} does not name {dotted}")
    assert not silent, "modules of one name that do not name each other in their docstrings:\n  " + "\n  ".join(silent)
