"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict`, a broken link or anchor fails
that build, the generated references cover every config key and command, the section numbers the code cites exist,
and no user-facing text points at files outside the repository."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "scripts" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = mkdocs_build(REPO / "mkdocs.yml", out)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def _text(html_file: Path) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_file.read_text()))


def test_the_site_builds_strictly_with_every_page_of_the_nav(site):
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from pages(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)

    listed = set(pages(nav))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert "index.md" not in on_disk  # one front page: the README, generated into the site as index.md
    assert listed == on_disk | {"index.md"}  # every page is reachable, the nav names no missing page
    for page in listed:
        built = site / ("index.html" if page == "index.md" else page[:-3] + "/index.html")
        assert built.is_file(), page
    readme = (site / "index.html").read_text()  # the README rendered, its links pointing at the site's pages
    assert "Train in Python" in readme and 'href="results/#summary"' in readme and 'href="docs/' not in readme
    assert "check_environment" in _text(site / "reference/api/envs/index.html")  # mkdocstrings rendered docstrings
    algorithms = (site / "reference/api/algorithms/index.html").read_text()
    assert ":class:" not in algorithms
    assert '<a href="../../../algorithms/#section-4">§4</a>' in algorithms  # docstring citations link their section
    assert '<a href="../../algorithms/#section-11">§11</a>' in (site / "reference/config/index.html").read_text()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """The same config on a copy of docs/ with one dead link and one dead anchor: the strict build must refuse both.
    (Without mkdocstrings: the API pages' docstrings are not rendered, which spares loading the package; links and
    anchors are checked by mkdocs itself, whatever the plugins.)"""
    shutil.copytree(DOCS, tmp_path / "docs")
    page = tmp_path / "docs" / "concepts.md"
    page.write_text(
        page.read_text() + "\n\nSee [a page](no-such-page.md) and [a section](training.md#no-such-section).\n"
    )
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config["docs_dir"] = str(tmp_path / "docs")
    config["hooks"] = [str(REPO / h) for h in config["hooks"]]
    config["plugins"] = [p for p in config["plugins"] if not (isinstance(p, dict) and "mkdocstrings" in p)]
    for ext in config["markdown_extensions"]:
        if isinstance(ext, dict) and "pymdownx.snippets" in ext:
            ext["pymdownx.snippets"]["base_path"] = [str(REPO)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr and "no-such-section" in result.stderr, result.stderr[-4000:]


def test_every_config_key_is_in_the_reference_with_a_description(site):
    reference = hooks.config_reference()
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `([^`]+)` \|.*\| ([^|]*) \|$", reference, re.M)}
    for path, model in hooks.config_sections():
        for name in model.model_fields:
            key = f"{path}.{name}" if path else name
            assert key in rows, f"config key {key} is missing from the reference"
            assert rows[key].strip(), f"config key {key} has no description: give its Field a description="
    from turnrl.rl.algorithms import algorithm_names

    documented = [name for name, _ in hooks.algorithm_configs()]
    assert sorted(documented) == algorithm_names()  # every algorithm turnrl ships, the methods' entry points included
    for algorithm, cfg in hooks.algorithm_configs():
        table = reference.split(f"### `{algorithm}` ", 1)[1].split("\n### ", 1)[0]
        for name in cfg.model_fields:
            line = next((x for x in table.splitlines() if x.startswith(f"| `{name}` |")), None)
            assert line is not None, f"algorithm {algorithm}: option {name} is missing from the reference"
            assert line.rstrip(" |").rsplit("|", 1)[1].strip(), f"algorithm {algorithm}: option {name} undescribed"
    built = _text(site / "reference/config/index.html")
    assert all(key in built for key in hooks.config_keys() if not key.startswith("algorithm."))
    assert "rollout.kv_cache_mb" in built and "behaviour_is_cap" in built and "{{" not in built


def test_the_cli_reference_lists_every_command(site):
    from turnrl.cli import app

    built = _text(site / "reference/cli/index.html")

    def walk(command, path: str, ctx):
        yield path
        for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:  # a group
            sub = command.get_command(ctx, name)
            yield from walk(sub, f"{path} {name}", typer.Context(sub, info_name=name, parent=ctx))

    root = typer.main.get_command(app)
    commands = list(walk(root, "turnrl", typer.Context(root, info_name="turnrl")))
    assert len(commands) > 15
    for command in commands:
        assert command in built, command
    assert "--max-new-tokens" in built and "--import" in built


def _sections(page: str) -> set[str]:
    return set(re.findall(r"\{#section-(\d+)\}", (DOCS / page).read_text()))


def test_every_cited_section_exists():
    """`docs/algorithms.md §N` and `docs/concepts.md §N` in code, configs, tests and pages name a real section."""
    cited = {"algorithms.md": set(), "concepts.md": set()}
    files = [
        *REPO.glob("turnrl/**/*.py"),
        *REPO.glob("tests/**/*.py"),
        *REPO.glob("bench/*.py"),
        *REPO.glob("examples/*"),
        *REPO.glob("configs/*.yaml"),
        *DOCS.rglob("*.md"),
    ]
    for f in (f for f in files if f.is_file()):  # examples/__pycache__ after a run from examples/ is no file
        for page, numbers in re.findall(r"docs/(algorithms\.md|concepts\.md) (§\d+(?:,? §\d+)*)", f.read_text()):
            cited[page] |= set(re.findall(r"§(\d+)", numbers))
    assert len(cited["algorithms.md"]) >= 12 and len(cited["concepts.md"]) >= 5
    for page, numbers in cited.items():
        assert numbers <= _sections(page), (page, sorted(numbers - _sections(page)))
    assert _sections("algorithms.md") == {str(n) for n in range(15)}  # §0 … §14, the numbers the code cites


def test_user_facing_text_points_at_nothing_outside_the_repository():
    """A clone has no ../shared: no page, docstring, help text, message or config header may send a reader there
    (README's first command sets the development data folder, which is where this checkout keeps it)."""
    files = [
        REPO / "README.md",
        REPO / "mkdocs.yml",
        REPO / "pyproject.toml",
        *DOCS.rglob("*.md"),
        *REPO.glob("turnrl/**/*.py"),
        *REPO.glob("configs/*.yaml"),
        *REPO.glob("examples/*"),
        *REPO.glob("scripts/*"),
        *REPO.glob("bench/*.py"),
    ]
    bad = []
    for f in files:
        if not f.is_file():  # e.g. scripts/__pycache__, once a test has imported a script
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if f.name == "README.md" and n == 4:
                continue
            if re.search(
                r"ALGORITHMS\.md|DESIGN\.md|STYLE\.md|PLATFORM_NOTES|DEVELOPERS\.md|shared/docs|\.\./shared|"
                r"like shared/data",
                line,
            ):
                bad.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
    assert "TURNRL_DATA_DIR=../shared/data" in (REPO / "README.md").read_text().splitlines()[3]


def python_block(page: str, marker: str) -> str:
    """The first ```python block of ``page`` that holds ``marker``."""
    text = (REPO / page).read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if marker in b)


def test_the_front_page_example_runs():
    block = python_block("README.md", "turnrl.make(")  # the site's front page too
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["reward"] == 1.0 and scope["terminated"] is True


def run_python_block(page: str, marker: str, changes: dict[str, str], tmp_path, monkeypatch) -> tuple[dict, list]:
    """Run ``page``'s ```python block holding ``marker`` in ``tmp_path``, each of ``changes`` (which must all be in
    it) made first; the block's names and what it printed."""
    block = python_block(page, marker)
    for old, new in changes.items():
        assert old in block, (page, old)
        block = block.replace(old, new)
    monkeypatch.chdir(tmp_path)
    printed: list = []
    scope: dict = {"print": lambda *a, **k: printed.append(a)}
    exec(compile(block, page, "exec"), scope)
    return scope, printed


def test_the_readme_training_example_trains(tmp_path, monkeypatch):
    """README's "Train in Python" block, run as written with the real model, one step instead of ten (a smaller
    batch, shorter replies and a smaller evaluation, its folder under tmp_path): the config validates, training runs,
    metrics come back and the run folder it names is written — so the first Python a newcomer copies keeps working."""
    assert '"out_dir": "runs/first"' in python_block("README.md", "Trainer(config)")
    small = {
        '"steps": 10': '"steps": 1, "eval_tasks": 2',
        '"prompts_per_step": 4': '"prompts_per_step": 1',
        '"group_size": 8': '"group_size": 2',
        '"max_new_tokens": 48': '"max_new_tokens": 16',
    }
    scope, _ = run_python_block("README.md", "Trainer(config)", small, tmp_path, monkeypatch)
    history = scope["history"]
    steps = [h for h in history if "success" in h]  # the rest: the held-out evaluations before and after
    assert [h["step"] for h in steps] == [1] and 0.0 <= steps[0]["success"] <= 1.0
    assert steps[0]["loss"] == steps[0]["loss"] and any("eval_success" in h for h in history)
    assert (tmp_path / "runs" / "first" / "metrics.jsonl").is_file()


def test_the_evaluation_pages_python_example_evaluates(tmp_path, monkeypatch):
    """docs/evaluation.md's Python block, run as written but on the tiny model, two tasks of two samples and short
    replies: the top-level names import, the held-out split is evaluated and reported, and the folder is written."""
    assert python_block("docs/evaluation.md", "evaluate(").startswith(
        "from turnrl import SamplingParams, evaluate, make_agent\n"
    )
    small = {
        '"smollm2-135m-instruct"': '"tiny:chatml"',
        "limit=200": "limit=2",
        "samples=4": "samples=2",
        "max_new_tokens=256": "max_new_tokens=8",
    }
    _, printed = run_python_block("docs/evaluation.md", "evaluate(", small, tmp_path, monkeypatch)
    assert printed and printed[0][0] == "test" and 0.0 <= printed[0][1] <= 1.0  # GSM8K's held-out split
    assert printed[0][2] <= printed[0][1] <= printed[0][3]
    assert (tmp_path / "runs" / "gsm8k" / "metrics.json").is_file()
