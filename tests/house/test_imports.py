"""The shape of turnrl's imports, checked by reading the source (``ast``); no turnrl module is imported.

Four rules:

1. Layers point down: every module belongs to one layer of the block under "## Layers" in docs/ARCHITECTURE.md (the
   page declares the order once; this test reads it), and no import reaches a higher layer.
2. No import circle among turnrl's modules.
3. Environments, tools and verifiers (and the methods' environment and verifier files) never reach ``turnrl.rl`` or
   ``turnrl.agents``, directly or through other modules.
4. No module over 450 lines unless its docstring says why, with the phrase ``Over 450 lines:``. (The code is kept
   formatted by ruff, whose lines are about 13 % more than the hand-wrapped ones this rule first counted at 400:
   41,289 lines became 46,787 when the whole package was formatted.)

How the module graph is built:

- Every ``turnrl/**/*.py`` file is a module; ``pkg/__init__.py`` is the module ``pkg``.
- Every import statement counts, wherever it stands: top level, in a function, in a ``try``, and under
  ``if TYPE_CHECKING:`` (an annotation's import is a dependency too). Dynamic imports (``importlib.import_module``,
  ``"module:attr"`` entries) are not seen: they are how plug-ins are found, and name no module to this test.
- ``import a.b`` is an edge to ``a.b``; ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to
  ``a.b``. Relative imports are resolved first. A name that is no module falls back to its longest known prefix.
- Importing ``turnrl.a.b.c`` also runs ``turnrl/a/b/__init__.py`` and ``turnrl/a/__init__.py``, so the import is an edge
  to those parent packages too, except to the importer's own packages (Python has already run those).
- An edge from a module to itself is dropped.

Run as a script (``python tests/house/test_imports.py``) it prints every finding and exits 1 if there are any;
``python tests/house/test_imports.py --house`` draws the house instead: each layer's modules and lines, and the layers each
one imports.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "turnrl"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
LAYERS_HEADING = "## Layers"
MAX_LINES = 450
LONG_MODULE_MARKER = "Over 450 lines:"
# Modules that must not reach FORBIDDEN: whole packages, plus files of these names under turnrl/methods/.
ISOLATED_PACKAGES = ("turnrl.envs", "turnrl.tools", "turnrl.verifiers")
ISOLATED_METHOD_FILES = ("env.py", "envs.py", "verifier.py", "verdicts.py")
FORBIDDEN = ("turnrl.rl", "turnrl.agents")
# The fields of a syntax node that hold statements (or handlers and match cases, which hold statements).
STATEMENT_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


class Site(NamedTuple):
    """Where an edge comes from: the import statement's place and the module it names."""

    path: Path
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} (imports {self.imported})"


# ---------------------------------------------------------------------------------------------- reading the source


def module_name(path: Path) -> str:
    """``turnrl/a/b.py`` -> ``turnrl.a.b``; ``turnrl/a/__init__.py`` -> ``turnrl.a``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


class Facts(NamedTuple):
    """What the checks need from one file."""

    imports: list[ast.Import | ast.ImportFrom]
    docstring: str
    lines: int


@functools.cache
def facts(path: Path) -> Facts:
    """The file's imports, module docstring and line count; the file is parsed once per run and its syntax
    tree is not kept (keeping every tree alive makes the garbage collector slow the run down several times)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    return Facts(all_imports(tree), ast.get_docstring(tree) or "", len(text.splitlines()))


def all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, ``if TYPE_CHECKING:`` bodies included.

    Imports are statements, so only statement blocks are walked (bodies of modules, functions, classes, ``if``,
    loops, ``with``, ``try`` and its handlers, ``match`` cases), never into expressions: that keeps it fast."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        else:
            for block in STATEMENT_BLOCKS:
                stack.extend(getattr(node, block, ()))
    return sorted(found, key=lambda node: node.lineno)


def known_prefix(name: str) -> str:
    """The longest dotted prefix of ``name`` that is a module of the package."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name


def absolute_from(node: ast.ImportFrom, importer: str) -> str:
    """The module a ``from ... import`` names, with relative imports resolved against the importer."""
    if not node.level:
        return node.module or ""
    package = importer if modules()[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imported_modules(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The package modules one import statement names (an empty list for outside imports)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        source = absolute_from(node, importer)
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules() else source for alias in node.names]
    inside = [name for name in names if name == PACKAGE or name.startswith(PACKAGE + ".")]
    return [known_prefix(name) for name in inside]


def targets(imported: str, importer: str) -> list[str]:
    """The modules that importing ``imported`` runs: it, and its parent packages that are not the importer's own."""
    found = [imported]
    parent = imported.rpartition(".")[0]
    while parent:
        if not (importer == parent or importer.startswith(parent + ".")):
            found.append(parent)
        parent = parent.rpartition(".")[0]
    return [name for name in found if name != importer]


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, dict[str, list[Site]]]:
    """``graph[a][b]``: the import sites by which module ``a`` runs module ``b`` (first site first)."""
    graph: dict[str, dict[str, list[Site]]] = {name: {} for name in modules()}
    for importer, path in modules().items():
        for node in facts(path).imports:
            for imported in imported_modules(node, importer):
                for target in targets(imported, importer):
                    graph[importer].setdefault(target, []).append(Site(path, node.lineno, imported))
    return graph


# ---------------------------------------------------------------------------------------------- the layers


class Layer(NamedTuple):
    """One line of the layers block: its position (0 = the bottom), its patterns and what the page says of it."""

    rank: int
    patterns: tuple[str, ...]
    text: str


@functools.lru_cache(maxsize=1)
def layers() -> list[Layer]:
    """The layers block of docs/ARCHITECTURE.md: the first fenced block after the "## Layers" heading, one layer a
    line, the top first; a line is ``PATTERN PATTERN … | what the layer holds``.

    Raises:
        ValueError: no such heading or block, or a line without patterns.
    """
    page = ARCHITECTURE.read_text(encoding="utf-8")
    if LAYERS_HEADING not in page:
        raise ValueError(f"{ARCHITECTURE} has no '{LAYERS_HEADING}' section")
    after = page.split(LAYERS_HEADING, 1)[1]
    if "```" not in after:
        raise ValueError(f"{ARCHITECTURE}: no fenced block of layers under '{LAYERS_HEADING}'")
    block = after.split("```", 2)[1].split("\n", 1)[1]  # past the fence's language tag
    lines = [line for line in block.splitlines() if line.strip()]
    found = []
    for i, line in enumerate(reversed(lines)):
        patterns, _, text = line.partition("|")
        if not patterns.split():
            raise ValueError(f"{ARCHITECTURE}: a layer line without patterns: {line!r}")
        found.append(Layer(i, tuple(patterns.split()), text.strip()))
    return found


@functools.cache
def layer_of(name: str) -> Layer | None:
    """The layer of a module: of its most specific pattern (a module pattern, ``x.py`` or ``a/*/x.py``, beats any
    folder; a longer folder, ``a/b/``, beats a shorter one); None when no pattern matches."""
    rel = modules()[name].relative_to(ROOT / PACKAGE).as_posix()
    best: tuple[int, Layer] | None = None
    for layer in layers():
        for pattern in layer.patterns:
            if pattern.endswith("/"):
                score = len(pattern) if rel.startswith(pattern) else -1
            else:
                score = 10_000 if fnmatch.fnmatchcase(rel, pattern) else -1
            if score >= 0 and (best is None or score > best[0]):
                best = (score, layer)
    return None if best is None else best[1]


# ---------------------------------------------------------------------------------------------- graph algorithms


def strongly_connected(graph: dict[str, dict[str, list[Site]]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively; each component sorted, components sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(components)


def shortest_path(
    graph: dict[str, dict[str, list[Site]]], start: str, goal: Callable[[str], bool], allowed: set[str] | None = None
) -> list[str] | None:
    """The shortest module path from ``start`` (excluded) to a module where ``goal(module)`` holds, by breadth first
    search through ``allowed`` modules only (all when None); None when there is none."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child in previous or (allowed is not None and child not in allowed):
                continue
            previous[child] = node
            if goal(child):
                path = [child]
                while path[-1] != start or len(path) == 1:
                    path.append(previous[path[-1]])
                return path[::-1]
            queue.append(child)
    return None


def describe_path(graph: dict[str, dict[str, list[Site]]], path: list[str]) -> list[str]:
    """One line per edge of the path: ``a -> b  file:line (imports x)``, with a count of further sites."""
    lines = []
    for source, target in zip(path, path[1:]):
        sites = graph[source][target]
        more = f" (+{len(sites) - 1} more)" if len(sites) > 1 else ""
        lines.append(f"    {source} -> {target}  at {sites[0]}{more}")
    return lines


# ---------------------------------------------------------------------------------------------- the findings


def cycle_report() -> list[str]:
    """Each import circle: its modules, then shortest cycles through them until every module has been shown in one."""
    graph = import_graph()
    report = []
    for component in (c for c in strongly_connected(graph) if len(c) > 1):
        members = set(component)
        report.append(f"cycle of {len(component)} modules: {', '.join(component)}")
        shown: set[str] = set()
        for module in component:
            if module in shown:
                continue
            path = shortest_path(graph, module, lambda name, module=module: name == module, members)
            shown.update(path)
            report.append(f"  through {module}:")
            report.extend(describe_path(graph, path))
    return report


def layer_report(graph: dict[str, dict[str, list[Site]]] | None = None) -> list[str]:
    """Modules in no layer, and every import that reaches a higher layer (with where it stands), in ``graph``
    (default: the package's)."""
    graph = import_graph() if graph is None else graph
    report = []
    for name in sorted(graph):
        if layer_of(name) is None:
            report.append(
                f"{modules()[name].relative_to(ROOT)} is in no layer of {ARCHITECTURE.name}'s '{LAYERS_HEADING}' block"
            )
    for source in sorted(graph):
        low = layer_of(source)
        if low is None:
            continue
        for target, sites in sorted(graph[source].items()):
            high = layer_of(target)
            if high is not None and high.rank > low.rank:
                report.append(
                    f"{source} (layer {' '.join(low.patterns)}) imports {target} (layer "
                    f"{' '.join(high.patterns)}), a higher layer, at {sites[0]}"
                )
    return report


def is_isolated(name: str) -> bool:
    """True for the modules that must not reach turnrl.rl or turnrl.agents."""
    if any(name == package or name.startswith(package + ".") for package in ISOLATED_PACKAGES):
        return True
    path = modules()[name]
    return name.startswith(f"{PACKAGE}.methods.") and path.name in ISOLATED_METHOD_FILES


def is_forbidden(name: str) -> bool:
    """True for turnrl.rl, turnrl.agents and their modules."""
    return any(name == package or name.startswith(package + ".") for package in FORBIDDEN)


def layering_report() -> list[str]:
    """For each environment, tool or verifier module that reaches turnrl.rl or turnrl.agents: the shortest chain."""
    graph = import_graph()
    report = []
    for module in sorted(filter(is_isolated, graph)):
        path = shortest_path(graph, module, is_forbidden)
        if path:
            report.append(f"{module} reaches {path[-1]} in {len(path) - 1} step(s):")
            report.extend(describe_path(graph, path))
    return report


def room_of(name: str) -> str:
    """The folder a module stands in, relative to ``turnrl/`` (``cli``, ``methods/pag``, ``envs/remote``; a package's
    ``__init__`` stands in its own folder; a top-level module in ``.``)."""
    path = modules()[name]
    folder = path.parent.relative_to(ROOT / PACKAGE)
    return str(folder) if str(folder) != "." else "."


def folder_pair_report(graph: dict[str, dict[str, list[Site]]] | None = None) -> list[str]:
    """Pairs of folders that import each other (one folder's modules import the other's and the reverse), each with
    one import of either direction: two rooms that lean on each other are one room, or want a seam between them. The
    top folder is left out: it holds the foundation, which every room imports, and the front door, which imports
    what it offers."""
    graph = import_graph() if graph is None else graph
    first: dict[tuple[str, str], Site] = {}
    for source, edges in sorted(graph.items()):
        for target, sites in sorted(edges.items()):
            a, b = room_of(source), room_of(target)
            if a != b:
                first.setdefault((a, b), sites[0])
    return [
        f"{a} <-> {b}: {first[(a, b)]} and {first[(b, a)]}"
        for a, b in sorted(first)
        if a < b and (b, a) in first and "." not in (a, b)
    ]


def long_module_report() -> list[str]:
    """Modules over MAX_LINES lines whose docstring lacks the LONG_MODULE_MARKER reason."""
    report = []
    for path in modules().values():
        found = facts(path)
        if found.lines > MAX_LINES and LONG_MODULE_MARKER not in found.docstring:
            reason = f"no '{LONG_MODULE_MARKER}' reason in its docstring"
            report.append(f"{path.relative_to(ROOT)}: {found.lines} lines, {reason}")
    return report


# ---------------------------------------------------------------------------------------------- the tests


def test_layers_point_down():
    """Every module is in a layer, and no import (TYPE_CHECKING and function-level ones included) reaches up."""
    assert len(layers()) >= 10  # the page's block was read (a missing block would make the rule vacuous)
    report = layer_report()
    assert not report, "imports that point up, or modules in no layer:\n" + "\n".join(report)


def test_the_layer_rule_fails_on_an_upward_import():
    """The rule itself: a made-up import from the verifiers up into rl/ is reported, with its place."""
    graph = {name: dict(edges) for name, edges in import_graph().items()}
    site = Site(modules()["turnrl.verifiers.base"], 1, "turnrl.rl.core.learner")
    graph["turnrl.verifiers.base"]["turnrl.rl.core.learner"] = [site]
    report = layer_report(graph)
    assert any(
        line.startswith(
            "turnrl.verifiers.base (layer verifiers/) imports turnrl.rl.core.learner (layer rl/core/), a higher layer"
        )
        for line in report
    ), report
    assert layer_of("turnrl.methods.pag.cli") == layer_of("turnrl.cli.commands")  # a module pattern beats its folder
    assert layer_of("turnrl.rl.core.learner") != layer_of("turnrl.rl")  # a longer folder beats a shorter one


def test_no_two_folders_import_each_other():
    """No folder pair points at each other (cli and methods did: the CLI mounted the methods' subcommands by name while
    their subcommands import cli/shared); the check itself reports a made-up pair."""
    report = folder_pair_report()
    assert not report, "folders that import each other:\n" + "\n".join(report)
    graph = {name: dict(edges) for name, edges in import_graph().items()}
    graph["turnrl.cli.commands"]["turnrl.methods.pag.cli"] = [Site(modules()["turnrl.cli.commands"], 1, "x")]
    graph["turnrl.methods.pag.cli"]["turnrl.cli.shared"] = [Site(modules()["turnrl.methods.pag.cli"], 1, "y")]
    assert any(line.startswith("cli <-> methods/pag") for line in folder_pair_report(graph))


def test_no_import_cycles():
    """No set of turnrl modules imports itself round in a circle."""
    report = cycle_report()
    assert not report, "import cycles (cut one edge of each):\n" + "\n".join(report)


def test_envs_tools_verifiers_do_not_reach_rl_or_agents():
    """Environments, tools and verifiers stand below the RL and agent code: no chain of imports leads up to it."""
    report = layering_report()
    assert not report, "environment/tool/verifier modules reaching turnrl.rl or turnrl.agents:\n" + "\n".join(report)


def test_long_modules_give_a_reason():
    """A module over 450 lines says why in its docstring (``Over 450 lines: ...``)."""
    report = long_module_report()
    assert not report, f"modules over {MAX_LINES} lines:\n" + "\n".join(report)


def house_report() -> list[str]:
    """The house drawn from the imports: each layer, top first, with its modules and lines, and the layers it
    imports (with how many module-to-module imports)."""
    graph = import_graph()
    placed = {name: layer_of(name) for name in graph}

    def label(layer: Layer) -> str:
        return layer.patterns[0] + (" …" if len(layer.patterns) > 1 else "")

    out = []
    for layer in sorted(layers(), key=lambda layer: -layer.rank):
        members = [name for name, at in placed.items() if at == layer]
        size = sum(facts(modules()[name]).lines for name in members)
        arrows: dict[str, int] = {}
        for name in members:
            for target in graph[name]:
                below = placed.get(target)
                if below is not None and below != layer:
                    arrows[label(below)] = arrows.get(label(below), 0) + 1
        out.append(f"{' '.join(layer.patterns)}: {len(members)} modules, {size} lines")
        if arrows:
            ranked = sorted(arrows.items(), key=lambda kv: -kv[1])
            out.append("    -> " + ", ".join(f"{name} ({n})" for name, n in ranked))
    return out


def main() -> int:
    """Print every finding, section by section; 1 if there were any."""
    sections = [
        ("Imports that point up (docs/ARCHITECTURE.md, Layers)", layer_report()),
        ("Import cycles", cycle_report()),
        ("Folders that import each other", folder_pair_report()),
        ("envs/tools/verifiers reaching turnrl.rl or turnrl.agents", layering_report()),
        (f"Modules over {MAX_LINES} lines without a reason", long_module_report()),
    ]
    for title, report in sections:
        print(f"== {title}: {'none' if not report else ''}")
        print("\n".join(report) + ("\n" if report else ""), end="")
    return 1 if any(report for _, report in sections) else 0


if __name__ == "__main__":
    if "--house" in sys.argv[1:]:
        print("\n".join(house_report()))
        sys.exit(0)
    sys.exit(main())
