"""A user's own environment, outside the package, through every command: by ``module:Env-v0`` and through the
``turnrl.envs`` entry point of a small installed package; the documented commands on the example."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import gymnasium as gym
import pytest
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.envs import registry

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()

# A library-lookup environment: two tools and an exact-match verifier, as a new user would write it.
LIBRARY_ENV = '''
import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.tools import ToolError, tool
from turnrl.types import ToolCall
from turnrl.verifiers import Verdict

BOOKS = {"Dune": ("Frank Herbert", 1965), "Emma": ("Jane Austen", 1815), "Ulysses": ("James Joyce", 1922)}


@tool
def search_catalog(query: str) -> list:
    """Titles in the catalog that contain the query (case-insensitive).

    Args:
        query: part of a title.
    """
    return [t for t in BOOKS if query.lower() in t.lower()]


@tool
def book_info(title: str) -> dict:
    """Author and year of a book.

    Args:
        title: the exact title.
    """
    if title not in BOOKS:
        raise ToolError(f"no book titled {title!r}; use search_catalog")
    author, year = BOOKS[title]
    return {"author": author, "year": year}


def exact(text, reference):
    answer = text.strip().removeprefix("ANSWER:").strip()
    return Verdict(correct=answer == reference, score=float(answer == reference), extracted=answer)


class LibraryEnv(ToolEnv):
    """Who wrote it? Look the book up, then answer 'ANSWER: name'."""

    def __init__(self, **options):
        tasks = [Task(id=f"lib/{t}", prompt=f"Who wrote {t}?", answer=a, metadata={"title": t})
                 for t, (a, _) in BOOKS.items()]
        super().__init__(tasks, tools=[search_catalog, book_info], verifier=exact,
                         instruction="Answer with 'ANSWER: <author>'.", **options)

    def oracle_calls(self, task):
        return [ToolCall(name="search_catalog", arguments={"query": task.metadata["title"][:3]}),
                ToolCall(name="book_info", arguments={"title": task.metadata["title"]})]

    def format_answer(self, answer):
        return f"ANSWER: {answer}"
'''

TRAIN_CONFIG = """
model: "tiny:chatml"
env: {{id: "{env_id}"}}
algorithm: {{name: grpo}}
rollout: {{prompts_per_step: 2, group_size: 2, max_new_tokens: 8}}
optim: {{lr: 1.0e-3, minibatch_size: 4}}
steps: 2
eval_tasks: 2
out_dir: {out}
"""


@pytest.fixture
def forget_new_ids():
    """Unregister the ids a test registers, so that the registry is as before for the next test."""
    before = set(gym.registry)
    yield
    for env_id in set(gym.registry) - before:
        del gym.registry[env_id]
        registry._REGISTERED.pop(env_id, None)
        registry._SOURCES.pop(env_id, None)


@pytest.fixture
def as_module(tmp_path, monkeypatch, forget_new_ids):
    """The environment in ``tmp_path/envs/MODULE.py``, registering ``usertest/Library-v0``; the id to use."""
    name = f"library_env_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "envs"
    folder.mkdir()
    (folder / f"{name}.py").write_text(LIBRARY_ENV + f'\nturnrl.register("usertest/Library-v0", "{name}:LibraryEnv")\n')
    monkeypatch.chdir(folder)  # a module in the current folder is found (as `python -m` would)
    return f"{name}:usertest/Library-v0"


@pytest.fixture
def as_package(tmp_path, monkeypatch, forget_new_ids):
    """The environment in an installed package that declares ``pkgtest/Library-v0`` as an entry point; the id."""
    name = f"libpkg_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    (site / name / "envs.py").write_text(LIBRARY_ENV)
    dist = site / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[turnrl.envs]\npkgtest/Library-v0 = {name}.envs:LibraryEnv\n"
        f"turnrl/GSM8K-v0 = {name}.envs:LibraryEnv\npkgtest/Bad-v0 = {name}\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    registry.load_entry_points()  # what `import turnrl` does in a fresh process
    return "pkgtest/Library-v0"


@pytest.fixture(params=["module", "package"])
def user_env(request):
    """The user's environment id, by ``module:Env-v0`` or from an installed package's entry point."""
    return request.getfixturevalue("as_module" if request.param == "module" else "as_package")


def test_check_play_eval_train_a_user_env(user_env, tmp_path):
    result = runner.invoke(app, ["envs", "check", user_env])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output and "oracle agent: 3 step(s), total reward 1" in result.output
    assert "tool 'book_info': 6 generated call(s) ran, 3 malformed call(s) refused" in result.output

    turns = '<tool_call>{"name": "book_info", "arguments": {"title": "Emma"}}</tool_call>\nANSWER: Jane Austen\n'
    result = runner.invoke(app, ["play", user_env, "--index", "1"], input=turns)
    assert result.exit_code == 0, result.output
    assert '{"author": "Jane Austen", "year": 1815}' in result.output  # a dict result as JSON
    assert "reward 1" in result.output and "episode over: terminated=True" in result.output

    out = tmp_path / "eval"
    result = runner.invoke(
        app,
        [
            "eval",
            "--env",
            user_env,
            "--agent",
            "tiny:chatml",
            "--limit",
            "10",
            "--max-new-tokens",
            "8",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"note: --limit 10 is more than the 3 task(s) of {user_env}; evaluating all 3" in result.output
    assert len((out / "items.jsonl").read_text().splitlines()) == 3

    config = tmp_path / "cfg" / "library.yaml"
    config.parent.mkdir()
    config.write_text(TRAIN_CONFIG.format(env_id=user_env, out=tmp_path / "run"))
    result = runner.invoke(app, ["train", str(config), "--no-resume"])
    assert result.exit_code == 0, result.output
    assert "held-out success below is measured on training tasks" in result.output  # no eval_kwargs split
    assert "success on training tasks (no held-out split): " in result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]


def test_envs_list_shows_where_ids_come_from(as_package):
    result = subprocess.run(
        [sys.executable, "-m", "turnrl", "envs", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "pkgtest/Library-v0" in x)
    assert re.search(r"Who wrote it\?.*package libpkg_\w+ 0\.1 \(entry point\)", line), line
    assert "turnrl (built-in)" in result.stdout
    skipped = [x for x in result.stdout.splitlines() if x.startswith("skipped")]
    assert len(skipped) == 2, result.stdout
    assert "'turnrl/GSM8K-v0'" in skipped[0] and "a built-in id cannot be replaced" in skipped[0]
    assert "'pkgtest/Bad-v0'" in skipped[1] and "the value must be 'module.path:EnvClass'" in skipped[1]
    gsm8k = next(x for x in result.stdout.splitlines() if "turnrl/GSM8K-v0 " in x)
    assert "turnrl (built-in)" in gsm8k


def test_a_module_next_to_the_config_is_found_from_another_folder(tmp_path, monkeypatch, forget_new_ids):
    folder = tmp_path / "project"
    folder.mkdir()
    name = f"nextdoor_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        LIBRARY_ENV + f'\nturnrl.register("usertest/Nextdoor-v0", "{name}:LibraryEnv")\n'
    )
    config = TRAIN_CONFIG.format(env_id=f"{name}:usertest/Nextdoor-v0", out=tmp_path / "r")
    (folder / "run.yaml").write_text(config.replace('"tiny:chatml"', '"hf:/no/such/model"'))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # A kwarg the env does not take: the env was found (the message names its accepted kwargs), no model loaded.
    result = runner.invoke(app, ["train", str(folder / "run.yaml"), "env.kwargs.colour=red"])
    assert result.exit_code == 2
    assert result.output.startswith("error: usertest/Nextdoor-v0 does not accept the keyword argument 'colour'")
    accepted = result.output.split("Accepted: ", 1)[1].strip().rstrip(".").split(", ")
    assert accepted == [
        "describe_tools",
        "feedback",
        "max_turns",
        "render_mode",
        "retry",
        "system_prompt",
        "tool_style",
    ]
    # (tasks, tools, verifier and instruction are left out: LibraryEnv passes them itself)


def test_import_option_on_every_command_then_plain_ids(as_module):
    import typer.main

    module = as_module.split(":")[0]

    def leaves(cmd, path=()):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from leaves(sub, (*path, name))
        else:
            yield path, cmd

    commands = list(leaves(typer.main.get_command(app)))
    assert len(commands) >= 8
    for path, cmd in commands:
        assert any("--import" in p.opts for p in cmd.params), f"turnrl {' '.join(path)} lacks --import"
    result = runner.invoke(app, ["envs", "check", "--import", module, "usertest/Library-v0"])
    assert result.exit_code == 0 and "usertest/Library-v0: OK" in result.output, result.output
    result = runner.invoke(app, ["envs", "list", "--import", "no_such_module_xyz"])
    assert result.exit_code == 2
    assert result.output.startswith("error: no module named 'no_such_module_xyz' on sys.path or ")


def test_module_errors_are_one_line_and_say_what_to_change(tmp_path, monkeypatch, forget_new_ids):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_env_mod.py").write_text("import turnrl\n\nx = undefined_name\n")
    (tmp_path / "quiet_env_mod.py").write_text(
        LIBRARY_ENV + '\nturnrl.register("usertest/Quiet-v0", "quiet_env_mod:LibraryEnv")\n'
    )
    cases = {
        "broken_env_mod:usertest/X-v0": "error: importing module 'broken_env_mod' raised NameError: name "
        "'undefined_name' is not defined (broken_env_mod.py:3)",
        "quiet_env_mod:usertest/Quite-v0": "error: module 'quiet_env_mod' was imported but no environment "
        "'usertest/Quite-v0' is registered. Did you mean 'usertest/Quiet-v0'?",
        "turnrl/Arithmetc-v0": "error: unknown environment 'turnrl/Arithmetc-v0'. Did you mean 'turnrl/Arithmetic-v0'",
    }
    for env_id, message in cases.items():
        for args in (["envs", "check", env_id], ["play", env_id], ["eval", "--env", env_id, "--agent", "tiny:chatml"]):
            result = runner.invoke(app, args)
            assert result.exit_code == 2, (args, result.output)
            assert result.output.startswith(message), (args, result.output)
            assert result.output.count("\n") == 1, result.output  # one line


def test_train_errors_are_one_line_before_any_model_loads(tmp_path):
    def train(config_text, *overrides):
        path = tmp_path / "c.yaml"
        path.write_text(config_text)
        return runner.invoke(app, ["train", str(path), *overrides])

    # The model does not exist: reaching it would be a different error, so each error below came first.
    base = "model: hf:/no/such/model\nenv: {id: turnrl/Arithmetic-v0}\n"
    cases = [
        (
            train("model: hf:/no/such/model\nenv: {id: turnrl/Arithmetc-v0}\n"),
            "error: unknown environment 'turnrl/Arithmetc-v0'. Did you mean 'turnrl/Arithmetic-v0'",
        ),
        (
            train(base, "env.kwargs.levle=2"),
            "error: turnrl/Arithmetic-v0 does not accept the keyword argument 'levle'. Did you mean 'level'?",
        ),
        (train(base, "env.eval_kwargs.split=dev"), "error: split must be"),
        (
            train(base, "rollout.group_size=1"),
            "error: override rollout.group_size=1: Input should be greater than or equal to 2 (got 1)",
        ),
        (train(base, "stepz=3"), "error: override stepz=3: unknown key 'stepz'; did you mean 'steps'?"),
        (
            train(base + "rollout: {group_size: 1}\n"),
            f"error: {tmp_path / 'c.yaml'}: rollout.group_size: Input should be greater than or equal to 2 (got 1)",
        ),
        (train("env: [unclosed\n"), f"error: {tmp_path / 'c.yaml'}: while parsing"),
        (runner.invoke(app, ["train", str(tmp_path / "missing.yaml")]), "error: "),
    ]
    for result, message in cases:
        assert result.exit_code == 2, result.output
        assert result.output.startswith(message), result.output
        assert result.output.count("\n") == 1, result.output


def test_the_documented_commands_run_on_the_example(tmp_path, monkeypatch, forget_new_ids):
    """The "Your own environment" commands of docs/environments.md, as written, except the tiny model and fewer
    steps. The first runs as the installed `turnrl` script, in a process of its own, while the others run in this
    process (none depends on another's output; each process start costs the imports again), which they leave as
    they found it: the example's module imported afresh from the copy and forgotten after, its id unregistered, its
    folder off sys.path."""
    page = (REPO / "docs" / "environments.md").read_text()
    section = page.split("## Your own environment", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    commands = [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert [c[:2] for c in commands] == [
        ["cd", "examples"],
        ["turnrl", "envs"],
        ["turnrl", "play"],
        ["turnrl", "eval"],
        ["turnrl", "train"],
    ]
    work = tmp_path / "examples"
    shutil.copytree(REPO / "examples", work)  # runs/ is written there, not into the checkout
    fast = {
        "eval": ["--max-new-tokens", "8"],
        "train": [
            "model=tiny:chatml",
            "steps=2",
            "eval_tasks=2",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "optim.grad_accum=1",
        ],
    }

    def argv(cmd: list[str]) -> list[str]:
        return [*("tiny:chatml" if a == "smollm2-135m-instruct" else a for a in cmd[1:]), *fast.get(cmd[1], [])]

    script = Path(sys.executable).with_name("turnrl")
    with open(tmp_path / "envs.out", "w") as stdout, open(tmp_path / "envs.err", "w") as stderr:
        envs = subprocess.Popen(
            [str(script), *argv(commands[1])],
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        monkeypatch.chdir(work)
        monkeypatch.setenv("COLUMNS", "200")
        monkeypatch.setattr(sys, "path", list(sys.path))  # the commands add the current folder
        monkeypatch.delitem(sys.modules, "unit_converter_env", raising=False)  # (an earlier test's import, put back)
        outputs = {}
        for cmd in commands[2:]:
            done = runner.invoke(app, argv(cmd), input=":oracle\n:oracle\n")
            assert done.exit_code == 0, (cmd, done.output[-3000:], done.exception)
            outputs[cmd[1]] = done.output
        envs.wait(timeout=300)
        outputs["envs"] = (tmp_path / "envs.out").read_text()
        assert envs.returncode == 0, (commands[1], outputs["envs"], (tmp_path / "envs.err").read_text())
    finally:
        sys.modules.pop("unit_converter_env", None)  # the copy's, imported here
        if envs.poll() is None:
            envs.kill()
            envs.wait()
    assert "examples/Units-v0: OK" in outputs["envs"]
    assert "reward 1" in outputs["play"] and "episode over: terminated=True" in outputs["play"]
    assert (work / "runs" / "units-eval" / "report.md").is_file()
    assert "held-out success: " in outputs["train"] and "training tasks" not in outputs["train"]
    assert len((work / "runs" / "units" / "metrics.jsonl").read_text().splitlines()) == 3


def test_example_claims_hold():
    """The docs' line count of the example environment and its entry-point snippet stay true."""
    lines = (REPO / "examples" / "unit_converter_env.py").read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("import "))
    end = next(i for i, x in enumerate(lines) if x.startswith("turnrl.register("))
    assert 55 <= end - start + 1 <= 65  # "about 60 lines" (as ruff format lays it out)
    page = (REPO / "docs" / "environments.md").read_text()
    assert "about 60 lines" in page
    assert (
        textwrap.dedent('''
        [project.entry-points."turnrl.envs"]
        "myproject/Lookup-v0" = "mypackage.envs:LookupEnv"''')
        in page
    )
