"""Docs are tests (issue 78): every command, config and environment id that docs/multi-agent.md and
docs/bring-your-environment.md show runs here — one step of training, a couple of games or episodes — so a page that
names a command that does not run fails the suite.

What is read from the pages (nothing is listed by hand): every ```bash block, line by line (``cd examples`` and
``cd examples && …`` change the folder, ``turnrl envs serve`` runs in the background for the rest of its block);
every ```yaml block, trained as a config of its own; every inline `` `turnrl …` `` command of the prose (a bare
command name is checked with ``--help``); every concrete environment id in inline code (a ``pettingzoo:``,
``textarena:``, ``turnrl/`` id, with a ``(`key: value`)`` after it as its keyword arguments), checked with
``turnrl envs check`` (which plays whole episodes). Commands run in-process through the CLI (``turnrl`` is
``turnrl.cli.app``), in a folder of their own that holds ``configs/`` and a copy of ``examples/``; a command that
names a file or module of ``examples/`` runs from there, and the page must say so (``cd examples`` or
"from `examples/`" near it). A run folder a command names (``run:runs/X``, ``turnrl compare``, ``turnrl view``) must be
made by a ``turnrl train`` command of one of the two pages, which runs first.

What is changed, all of it here (:data:`SUBSTITUTIONS`): the tiny model in place of SmolLM2 (no network, no
weights); ``turnrl train`` with one step of the tiny model (:data:`TRAIN`); ``turnrl eval`` with ``--limit 2`` and
short moves; ``turnrl play`` reading moves from stdin; a free port in place of 8000; ``turnrl view`` stopping after
a second; the placeholders of the prose (``OUT_DIR``, ``ID``) named in :data:`PLACEHOLDERS`; the data files a yaml block
names as its own (``rows.jsonl``) written from the example's rows. Commands that cannot run here (the network, a GPU)
are listed in :data:`SKIPPED` with the reason, and the page says so: those of verifiers v1 task sets, which need
verifiers 0.4 (tests/envs/test_verifiers_v1.py trains them in a venv of its own).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
PAGES = ("docs/multi-agent.md", "docs/bring-your-environment.md")
TINY = "tiny:chatml"
#: one step of the tiny model, small batches, short moves, two held-out tasks
TRAIN = [
    f"model={TINY}",
    "steps=1",
    "eval_tasks=2",
    "rollout.prompts_per_step=1",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "optim.minibatch_size=2",
    "optim.grad_accum=1",
]
#: what a command shows that is changed to run here (see the module docstring)
SUBSTITUTIONS = {
    "smollm2-135m-instruct": TINY,
    "8000": "<a free port>",
    "--limit N": "--limit 2",
    "turnrl train …": "… " + " ".join(TRAIN),
    "turnrl play …": "moves from stdin",
    "turnrl view …": "--port 0 --stop-after 1",
}
#: the prose's placeholders in inline commands
PLACEHOLDERS = {
    "OUT_A OUT_B": "runs/ttt-league-s0@0 runs/ttt-league-s0",
    "OUT_DIR": "runs/ttt-league-s0",
    "ID": "turnrl/Arithmetic-v0",
}
#: why the verifiers v1 section's training command and config do not run here (tests/envs/test_verifiers_v1.py trains the
#: task set in .venv-verifiers-v1, which scripts/setup.sh makes)
V1 = "they need verifiers 0.4, which the suite's environment cannot hold beside verifiers 0.3"
#: a command as the page shows it -> why it cannot run in the suite, in the words the page says it with
SKIPPED: dict[str, str] = {"turnrl train vf-arithmetic-v1.yaml": V1, "id: verifiers:vf_arithmetic_v1": V1}
#: moves typed into `turnrl play` (cells, then TextArena's and Nim's words); every game ends on them
MOVES = "\n".join(["5", "1", "9", "3", "7", "2", "4", "6", "8", "[check]", "[call]", "1", "2", "3"] * 3) + "\n"
ENV_ID = re.compile(
    r"`((?:turnrl/[A-Za-z]+-v\d+)|(?:textarena:[\w.-]+)|(?:pettingzoo:\w+:\w+))`"
    r"(?:\s*\(`(\w+): (\w+)`\))?"
)


@dataclass(frozen=True)
class Snippet:
    page: str
    kind: str  # bash, yaml, inline, env
    text: str
    line: int
    near: str  # the prose around it (where a page says "from examples/")

    @property
    def id(self) -> str:
        return f"{Path(self.page).stem}:{self.line}:{self.kind}"


def snippets(page: str) -> list[Snippet]:
    text = (REPO / page).read_text()
    out, prose = [], []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        line = text[: m.start()].count("\n") + 1
        after = text.find("\n\n", m.end() + 2)  # the paragraph after it too
        near = text[max(0, m.start() - 400) : after if after > 0 else len(text)]
        if m.group(1) in ("bash", "yaml"):
            out.append(Snippet(page, m.group(1), m.group(2), line, near))
        prose.append((m.start(), m.end()))
    outside = "".join(c if not any(a <= i < b for a, b in prose) else " " for i, c in enumerate(text))
    for m in re.finditer(r"`(turnrl [^`]+)`", outside):
        line = text[: m.start()].count("\n") + 1
        out.append(Snippet(page, "inline", m.group(1), line, text[max(0, m.start() - 300) : m.end() + 300]))
    for m in ENV_ID.finditer(outside):
        if not any(re.fullmatch(r"[A-Z_]+", part) for part in m.group(1).split(":")):  # not a form: GAME, MODULE
            kw = f"{m.group(2)}={m.group(3)}" if m.group(2) else ""
            out.append(
                Snippet(
                    page,
                    "env",
                    f"{m.group(1)} {kw}".strip(),
                    text[: m.start()].count("\n") + 1,
                    text[max(0, m.start() - 300) : m.end() + 300],
                )
            )
    return out


def _once(found: list[Snippet]) -> list[Snippet]:
    """Each environment id (with its keyword arguments) once, where it first appears."""
    seen: set[str] = set()
    out = []
    for s in found:
        if s.kind != "env" or s.text not in seen:
            out.append(s)
            seen.add(s.text)
    return out


ALL = _once([s for page in PAGES for s in snippets(page)])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workspace:
    """The folder commands run in (``configs/``, a copy of ``examples/``), the runs trained so far, servers."""

    def __init__(self, root: Path) -> None:
        self.root, self.examples = root, root / "examples"
        (root / "configs").symlink_to(REPO / "configs")
        shutil.copytree(REPO / "examples", self.examples, ignore=shutil.ignore_patterns("runs", "__pycache__"))
        self.trained: set[tuple[Path, tuple[str, ...]]] = set()
        self.port = free_port()
        self.count = 0

    def needs_examples(self, words: list[str]) -> bool:
        """Whether a command names a file or module of examples/ (and none of the repository's root)."""
        for word in words:
            for piece in re.split(r"[:#=]", word):
                if (
                    piece
                    and not (REPO / piece).exists()
                    and ((REPO / "examples" / piece).is_file() or (REPO / "examples" / f"{piece}.py").is_file())
                ):
                    return True
        return False

    def folder(self, words: list[str], cwd: Path, snippet: Snippet) -> Path:
        if cwd == self.root and self.needs_examples(words):
            assert "examples/" in snippet.near or "cd examples" in snippet.near, (
                f"{snippet.id}: {' '.join(words)} runs from examples/, and the page does not say so"
            )
            return self.examples
        return cwd

    def turnrl(self, argv: list[str], cwd: Path, snippet: Snippet, monkeypatch) -> str:
        """Run one ``turnrl`` command here (after the runs it names), with the substitutions; its output."""
        from turnrl.cli import app

        argv = [TINY if a == "smollm2-135m-instruct" else a.replace("8000", str(self.port)) for a in argv]
        command = argv[:2] if argv[0] == "envs" else argv[:1]
        cwd = self.folder(argv, cwd, snippet)
        for ref in self.runs_named(argv):
            self.make_run(ref, cwd, monkeypatch)
        stdin = None
        if command == ["train"]:
            key = (cwd, tuple(argv))
            if key in self.trained:
                return ""
            argv = [*argv, *TRAIN]
        elif command == ["eval"]:
            argv = _set(_set(argv, "--limit", "2"), "--max-new-tokens", "8")
            if "--out" not in argv:
                self.count += 1
                argv += ["--out", f"runs/docs-eval-{self.count}"]
        elif command == ["play"]:
            argv, stdin = _set(argv, "--max-new-tokens", "8"), MOVES
        elif command == ["view"]:
            argv = [*argv, "--port", "0", "--stop-after", "1"]
        monkeypatch.chdir(cwd)
        res = CliRunner().invoke(app, argv, input=stdin)
        assert res.exit_code == 0, (
            f"{snippet.id}: turnrl {' '.join(argv)} (in {cwd.name}) exited "
            f"{res.exit_code}:\n{res.output[-3000:]}\n{res.exception!r}"
        )
        if command == ["train"]:
            self.trained.add((cwd, tuple(a for a in argv if a not in TRAIN)))
            out = cwd / _out_dir(argv, cwd)
            rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            assert [int(r["step"]) for r in rows][-1] == 1, f"{snippet.id}: {out} did not train its step"
        if command == ["play"]:
            assert "game over" in res.output, f"{snippet.id}: the game did not end:\n{res.output[-2000:]}"
        return res.output

    @staticmethod
    def runs_named(argv: list[str]) -> list[str]:
        """The run folders a command reads: ``run:X``, ``turnrl compare``'s and ``turnrl view``'s arguments."""
        found = [a.split(":", 1)[1].split("#")[0] for a in argv if a.startswith("run:")]
        if argv[0] in ("compare", "view"):  # its arguments, not its options' values (`--score first_correct`)
            flags = {"--allow-different-items", "--allow-different-protocol"}
            found += [
                a
                for i, a in enumerate(argv[1:], 1)
                if not a.startswith("-")
                and not (argv[i - 1].startswith("--") and "=" not in argv[i - 1] and argv[i - 1] not in flags)
            ]
        return ["/".join(Path(a.split("@")[0]).parts[:2]) for a in found]

    def make_run(self, ref: str, cwd: Path, monkeypatch) -> None:
        """Train the run folder ``ref`` with the page command that makes it, unless it exists."""
        if (cwd / ref / "metrics.jsonl").is_file():
            return
        for s in ALL:
            if s.kind != "bash":
                continue
            for line in s.text.splitlines():
                words = shlex.split(line, comments=True)
                if words[:1] == ["cd"] and "&&" in words:
                    words = words[words.index("&&") + 1 :]
                if (
                    words[:2] == ["turnrl", "train"]
                    and self.folder(words[1:], self.root, s) == cwd
                    and _out_dir(words[1:], cwd) == ref
                ):
                    self.turnrl(words[1:], cwd, s, monkeypatch)
                    return
        raise AssertionError(f"a command names the run folder {ref}, which no `turnrl train` of {PAGES} makes")


def _set(argv: list[str], option: str, value: str) -> list[str]:
    if option in argv:
        argv = list(argv)
        argv[argv.index(option) + 1] = value
        return argv
    return [*argv, option, value]


def _out_dir(argv: list[str], cwd: Path) -> str:
    """Where ``turnrl train CONFIG [overrides]`` writes: its out_dir override, else its config's."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("out_dir=")]
    if given:
        return given[-1]
    return yaml.safe_load((cwd / argv[1]).read_text()).get("out_dir", "runs/run")


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ws = Workspace(tmp_path_factory.mktemp("docs"))
    yield ws
    torch.set_num_threads(threads)
    for name, module in list(sys.modules.items()):  # the examples' modules imported from the copy: the next test
        if str(getattr(module, "__file__", None) or "").startswith(str(ws.root)):  # file imports its own
            del sys.modules[name]


@pytest.fixture(autouse=True)
def paths(monkeypatch):
    """A command's module lookups (the current folder joins sys.path) end with the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def run_bash(ws: Workspace, s: Snippet, monkeypatch) -> None:
    cwd, servers = ws.root, []
    try:
        for line in s.text.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if line.strip() in SKIPPED:  # (reported with its reason by test_skipped_commands_say_why)
                continue
            if words[0] == "cd":
                cwd = (cwd / words[1]).resolve()
                words = words[words.index("&&") + 1 :] if "&&" in words else []
                if not words:
                    continue
            if words[0] == "python":  # its own process, as typed (a script registers environments as __main__)
                out = subprocess.run([sys.executable, *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=120)
                assert out.returncode == 0, f"{s.id}: {line} (in {cwd.name}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
            elif words[0] == "curl":
                words = [w.replace("8000", str(ws.port)) for w in words]
                out = subprocess.run(words, capture_output=True, text=True, timeout=60)
                assert out.returncode == 0 and json.loads(out.stdout), f"{s.id}: {line}: {out.stdout}{out.stderr}"
            elif words[:3] == ["turnrl", "envs", "serve"]:
                servers.append(serve(ws, words[1:], cwd))
            else:
                assert words[0] == "turnrl", f"{s.id}: a command the test does not know how to run: {line}"
                ws.turnrl(words[1:], cwd, s, monkeypatch)
    finally:
        for p in servers:
            stop(p)


def serve(ws: Workspace, argv: list[str], cwd: Path) -> subprocess.Popen:
    """``turnrl envs serve …`` in the background, on a free port (``ws.port`` from now on), once it answers /health."""
    ws.port = free_port()
    argv = _set([a.replace("8000", str(ws.port)) for a in argv], "--port", str(ws.port))
    log = (ws.root / f"serve-{ws.port}.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "turnrl", *argv], cwd=cwd, stdout=log, stderr=log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"turnrl {' '.join(argv)} stopped: {Path(log.name).read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ws.port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"turnrl {' '.join(argv)} did not answer within 90 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def skip_if_listed(s: Snippet) -> None:
    for text, why in SKIPPED.items():
        if text in s.text:
            pytest.skip(f"{text}: {why}")


@pytest.mark.parametrize("text", list(SKIPPED) or [None], ids=lambda t: "none" if t is None else t[:40])
def test_skipped_commands_say_why(text):
    """The commands the suite cannot run, one by one, with the reason."""
    if text is None:
        return
    pytest.skip(f"{text}: {SKIPPED[text]}")


def test_the_pages_show_commands_configs_and_ids():
    """The extraction finds what the pages show (a page rewritten so that nothing is read would test nothing)."""
    kinds = {(Path(s.page).stem, s.kind) for s in ALL}
    assert kinds >= {(Path(p).stem, k) for p in PAGES for k in ("bash", "yaml", "inline")}
    assert {s.text.split()[0] for s in ALL if s.kind == "env"} >= {
        "turnrl/TicTacToe-v0",
        "turnrl/SolverCritic-v0",
        "textarena:KuhnPoker-v0",
        "textarena:LiarsDice-v0-small",
        "pettingzoo:pettingzoo_nim:make_nim",
    }
    for text, why in SKIPPED.items():  # a skipped command is one a page shows, and that page says why
        assert any(text in s.text and why in (REPO / s.page).read_text() for s in ALL), (text, why)
    for page in PAGES:  # and each page says that its commands are tested, and which are not
        assert "tests/house/test_docs_commands.py" in (REPO / page).read_text(), page


@pytest.mark.parametrize("s", [s for s in ALL if s.kind == "bash"], ids=lambda s: s.id)
def test_every_bash_block_runs(s, ws, monkeypatch):
    run_bash(ws, s, monkeypatch)


@pytest.mark.parametrize("s", [s for s in ALL if s.kind == "yaml"], ids=lambda s: s.id)
def test_every_yaml_block_trains_one_step(s, ws, monkeypatch):
    skip_if_listed(s)
    config = yaml.safe_load(s.text)
    data = yaml.safe_load((REPO / "examples" / "trl-guess.yaml").read_text())["env"]["kwargs"]
    for key, rows in (("data", data["data"]), ("test_data", data["test_data"])):  # a block's own data files
        name = (config.get("env", {}).get("kwargs") or {}).get(key)
        if isinstance(name, str) and not (ws.examples / name).exists():
            (ws.examples / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    ws.count += 1
    cwd = ws.examples if ws.needs_examples([config["env"]["id"]]) else ws.root
    path = cwd / f"docs-block-{ws.count}.yaml"
    path.write_text(s.text)
    ws.turnrl(["train", path.name, f"out_dir=runs/docs-block-{ws.count}"], cwd, s, monkeypatch)


@pytest.mark.parametrize("s", [s for s in ALL if s.kind == "inline"], ids=lambda s: s.id)
def test_every_inline_command_runs(s, ws, monkeypatch):
    skip_if_listed(s)
    text = s.text
    for name, value in PLACEHOLDERS.items():
        text = re.sub(rf"\b{re.escape(name)}\b", value, text)
    words = shlex.split(text)
    if all(not w.startswith("-") and re.fullmatch(r"[a-z]+", w) for w in words[1:]):  # a command's name: it exists
        from turnrl.cli import app

        res = CliRunner().invoke(app, [*words[1:], "--help"])
        assert res.exit_code == 0, f"{s.id}: `{s.text}` is no command:\n{res.output}"
    elif words[1:3] == ["envs", "serve"]:
        stop(serve(ws, words[1:], ws.root))
    else:
        ws.turnrl(words[1:], ws.root, s, monkeypatch)


@pytest.mark.parametrize("s", [s for s in ALL if s.kind == "env"], ids=lambda s: f"{s.id}:{s.text}")
def test_every_environment_id_plays_whole_episodes(s, ws, monkeypatch):
    skip_if_listed(s)
    env_id, *kw = s.text.split()
    ws.turnrl(["envs", "check", env_id, *(["--kw", kw[0]] if kw else [])], ws.root, s, monkeypatch)
