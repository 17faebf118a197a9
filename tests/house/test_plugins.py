"""One registry shape for every extension point (turnrl.plugins.Registry): built-ins, entry points of installed
packages and a module's own registration through the same call; unknown names refused with "did you mean". Each
recipe is proved from outside the package: a throw-away distribution declares an algorithm, a monitor, an agent
backend, an environment adapter (an id prefix), a multi-agent environment, a process judge, a tool-call style and a
CLI subcommand as entry points, and a fresh process finds and uses all eight without a change to turnrl's files."""

import os
import subprocess
import sys
import textwrap

import pytest

from turnrl.plugins import Registry


class Thing:
    pass


def test_builtins_lazy_entries_registration_and_did_you_mean():
    seen = []
    reg = Registry(
        "widget",
        "turnrl.no-such-group",
        {"plain": "turnrl.plugins:Registry"},
        check=lambda name, obj: seen.append(name),
        hint="register yours with reg.register",
    )
    assert reg.names() == ["plain"] and "plain" in reg and "nope" not in reg
    assert reg.get("plain") is Registry and seen == ["plain"]  # loaded (and checked) on first use
    assert reg.register("thing")(Thing) is Thing and reg.get("thing") is Thing  # as a decorator
    with pytest.raises(ValueError, match=r"'thing' is already registered \(test_plugins:Thing\), so .* cannot take"):
        reg.register("thing", Registry)
    reg.register("thing", Registry, replace=True)
    with pytest.raises(
        ValueError,
        match=r"unknown widget 'plian'\. Did you mean 'plain'\? Registered: plain, thing; "
        r"register yours with reg.register",
    ):
        reg.get("plian")
    broken = Registry("widget", "turnrl.no-such-group", {"gone": "no_such_module:X"})
    with pytest.raises(
        ValueError,
        match=r"'gone' is registered as 'no_such_module:X', which does not load "
        r"\(ModuleNotFoundError",
    ):
        broken.get("gone")
    reg.reset()
    assert reg.names() == ["plain"]


def test_a_refused_plugin_is_not_registered():
    def check(name, obj):
        if not isinstance(obj, type):
            raise ValueError(f"{name}: not a class")

    reg = Registry("widget", "turnrl.no-such-group", check=check)
    with pytest.raises(ValueError, match="w: not a class"):
        reg.register("w", 3)
    assert "w" not in reg


def test_an_environment_adapter_must_be_an_env_adapter(tmp_path, monkeypatch):
    """ENV_ADAPTERS refuses what is not an EnvAdapter — registered as an object, or a lazy entry when it loads — so
    every reader of an adapter reads its fields, with no defaults of its own."""
    from turnrl.envs.registry import ENV_ADAPTERS, adapter_of

    with pytest.raises(ValueError, match=r"'half' is not an EnvAdapter \(its type is dict\)"):
        ENV_ADAPTERS.register("half", {"make": print, "multi_agent": False})
    assert "half" not in ENV_ADAPTERS
    (tmp_path / "half_adapter.py").write_text("ADAPTER = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ENV_ADAPTERS.register("halflazy", "half_adapter:ADAPTER")
    try:
        with pytest.raises(ValueError, match=r"'halflazy' is not an EnvAdapter \(its type is object\)"):
            adapter_of("halflazy:thing")
    finally:
        ENV_ADAPTERS.entries.pop("halflazy", None)


PLUGIN = '''
import torch
from typing import Literal

from turnrl.rl.algorithms import PolicyGradient, PolicyGradientConfig


class HalfConfig(PolicyGradientConfig):
    name: Literal["half-pg"] = "half-pg"


class HalfPG(PolicyGradient):
    """GRPO's advantages, halved: an algorithm from outside the package."""
    Config = HalfConfig

    def advantages(self, batch, values=None):
        scores = batch.scores
        return 0.5 * (scores - scores.mean())[:, None] * batch.loss_mask, None


def always_quiet(history, info):
    return "quiet monitor ran" if info.get("step") == 1 else None


def make_sums(env_id, **kwargs):
    import turnrl

    return turnrl.make("turnrl/Arithmetic-v0", level=int(env_id.split(":", 1)[1]), **kwargs)


def check_sums(env_id, search):
    from turnrl.envs.registry import UnknownEnvironmentError

    if not env_id.split(":", 1)[1].isdigit():
        raise UnknownEnvironmentError(f"{env_id!r} is not of the form 'sums:LEVEL'")


from turnrl.envs.registry import EnvAdapter
import typer

SUMS = EnvAdapter(make=make_sums, check=check_sums, entry="my_plugin:make_sums")
hello = typer.Typer(help="Say hello from a plug-in.")


@hello.command()
def greet(name: str) -> None:
    print(f"hello {name}")


class StrictJudge:
    """A process judge from outside the package: every step BAD."""

    def __init__(self, verdict="BAD"):
        self.verdict = verdict

    def label_trajectory(self, traj):
        return [self.verdict for _ in traj.turns]

    def label_rows(self, rows):
        return [self.verdict for _ in rows]


from turnrl.envs.multiagent.solver_critic import SolverCritic


class QuietCritic(SolverCritic):
    """A multi-agent environment from outside the package."""


class BangParser:
    """Calls written `!TOOL INPUT`, one a line."""

    style = "bang"

    def __init__(self, names):
        self.names = list(names)

    def parse(self, text):
        from turnrl.tools import ParseResult
        from turnrl.types import ToolCall

        calls = [ToolCall(name=w[1:], raw=rest) for w, _, rest in (line.partition(" ") for line in text.splitlines())
                 if w.startswith("!") and w[1:] in self.names]
        return ParseResult(calls=calls)

    def instructions(self, tools):
        return "Call a tool with a line `!NAME INPUT`."


def bang_parser(tool_names):
    return BangParser(tool_names)


def echo_backend(rest, *, batch_size, tokenizer=None, device="cpu"):
    from turnrl.agents import make_agent

    agent = make_agent("tiny:" + rest, batch_size=batch_size)
    agent.plugin_note = "echo"
    return agent
'''


def test_an_algorithm_a_monitor_a_backend_an_env_adapter_a_judge_a_tool_style_and_a_command_plug_in_from_a_package(
    tmp_path,
):
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    info = tmp_path / "my_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[turnrl.algorithms]\nhalf-pg = my_plugin:HalfPG\n\n"
        "[turnrl.monitors]\nquiet = my_plugin:always_quiet\n\n"
        "[turnrl.agents]\necho = my_plugin:echo_backend\n\n"
        "[turnrl.env_adapters]\nsums = my_plugin:SUMS\n\n"
        "[turnrl.judges]\nstrict = my_plugin:StrictJudge\n\n"
        "[turnrl.multi_agent_envs]\nmine/Critic-v0 = my_plugin:QuietCritic\n\n"
        "[turnrl.tool_parsers]\nbang = my_plugin:bang_parser\n\n"
        "[turnrl.commands]\nhello = my_plugin:hello\ntrain = my_plugin:hello\n"
        "broken = no_such_module:app\n"
    )
    script = textwrap.dedent("""
        from turnrl import make_agent
        from turnrl.rl.algorithms import algorithm_class, algorithm_names
        from turnrl.rl.run.monitors import registered_monitors

        assert "half-pg" in algorithm_names() and algorithm_class("half-pg").__name__ == "HalfPG"
        assert registered_monitors()["quiet"]([], {"step": 1}) == "quiet monitor ran"
        agent = make_agent("echo:chatml")
        assert agent.plugin_note == "echo"
        try:
            make_agent("ecko:chatml")
        except ValueError as e:
            assert "unknown agent spec 'ecko:chatml'" in str(e) and "echo:SPEC" in str(e), str(e)
        else:
            raise AssertionError("an unknown prefix was accepted")
        try:
            algorithm_class("half-gp")
        except ValueError as e:
            assert "Did you mean 'half-pg'?" in str(e), str(e)
        from turnrl.methods.swirl.judges import make_step_judge
        judge = make_step_judge("strict", verdict="UGLY")
        assert type(judge).__name__ == "StrictJudge" and judge.label_rows([1, 2]) == ["UGLY", "UGLY"]
        assert type(make_step_judge("rule")).__name__ == "RuleStepJudge"
        try:
            make_step_judge("strikt")
        except ValueError as e:
            assert "Did you mean 'strict'?" in str(e), str(e)
        else:
            raise AssertionError("an unknown judge was accepted")
        import turnrl
        env = turnrl.make("sums:2")
        obs, info = env.reset(seed=0)
        assert env.unwrapped.spec.id == "sums:2" and obs
        try:
            turnrl.make("sums:x")
        except Exception as e:
            assert "'sums:x' is not of the form 'sums:LEVEL'" in str(e), str(e)
        else:
            raise AssertionError("a malformed id was accepted")
        from turnrl.envs.multiagent import is_multi_agent, make_multi_agent, multi_agent_ids
        assert "mine/Critic-v0" in multi_agent_ids() and is_multi_agent("mine/Critic-v0")
        assert type(make_multi_agent("mine/Critic-v0")).__name__ == "QuietCritic"
        from turnrl.tools import get_parser
        parsed = get_parser("bang", ["calculator"]).parse("!calculator 2+3")
        assert [(c.name, c.raw) for c in parsed.calls] == [("calculator", "2+3")], parsed
        from typer.testing import CliRunner
        from turnrl.cli import app
        result = CliRunner().invoke(app, ["hello", "greet", "world"])
        assert result.exit_code == 0 and "hello world" in result.output, result.output
        result = CliRunner().invoke(app, ["train", "--help"])  # a plug-in cannot take a built-in command's name
        assert result.exit_code == 0 and "Train a policy" in result.output, result.output
        print("plugged in")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and "plugged in" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "'train' is a built-in command's name; skipped" in out.stderr  # and a broken one is skipped, said
    assert "turnrl command 'broken' does not load, skipped" in out.stderr
