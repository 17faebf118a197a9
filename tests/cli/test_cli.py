import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from turnrl.cli.commands import app, parse_kwargs

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def test_envs_list():
    result = runner.invoke(app, ["envs", "list"])
    assert result.exit_code == 0
    for env_id in ("turnrl/GSM8K-v0", "turnrl/MATH500-PAG-v0", "turnrl/Arithmetic-v0"):
        assert env_id in result.output


def test_envs_check_passes_and_reports_bad_input():
    result = runner.invoke(app, ["envs", "check", "turnrl/Arithmetic-v0", "--kw", "level=3", "-k", "calculator=true"])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output and "oracle agent" in result.output
    result = runner.invoke(app, ["envs", "check", "turnrl/Arithmetic-v0", "-k", "calculator=true", "--no-call-tools"])
    assert result.exit_code == 0 and "generated call(s) ran" not in result.output, result.output
    result = runner.invoke(app, ["envs", "check", "turnrl/Arithmetc-v0"])
    assert result.exit_code == 2 and "Did you mean 'turnrl/Arithmetic-v0'" in result.output
    result = runner.invoke(app, ["envs", "check", "turnrl/Arithmetic-v0", "--kw", "levle=2"])
    assert result.exit_code == 2 and "Did you mean 'level'" in result.output


def test_play_reads_turns_from_stdin():
    turns = "<calculator>40 + 2</calculator>\nso it is \\\n\\boxed{42}\n"
    result = runner.invoke(
        app,
        ["play", "turnrl/Arithmetic-v0", "-k", "calculator=true", "-k", "tool_style=tags", "--index", "0"],
        input=turns,
    )
    assert result.exit_code == 0, result.output
    assert "[tool:calculator] 42" in result.output
    assert "episode over" in result.output


def test_play_oracle_and_quit():
    result = runner.invoke(app, ["play", "turnrl/GSM8K-v0", "--index", "0"], input=":oracle\n")
    assert result.exit_code == 0 and "reward 1" in result.output and "episode over" in result.output
    result = runner.invoke(app, ["play", "turnrl/GSM8K-v0"], input=":q\n")
    assert result.exit_code == 0 and "bye" in result.output


def test_parse_kwargs():
    assert parse_kwargs(["a=3", "b=true", "c=[1, 2]", "d=text", "e="]) == {
        "a": 3,
        "b": True,
        "c": [1, 2],
        "d": "text",
        "e": "",
    }


def test_quickstart_command_runs_as_installed():
    result = subprocess.run(
        [sys.executable, "-m", "turnrl", "quickstart", "--no-model"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "scripted episodes OK" in result.stdout and "total reward 3 over 3 turn(s)" in result.stdout


def test_example_env_script():
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "unit_converter_env.py")], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "examples/Units-v0: OK" in result.stdout and "reward: 1.0 correct: True" in result.stdout


def test_quickstart_trains_a_model(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "turnrl", "quickstart", "--model", "tiny:chatml", "--steps", "2", "--eval-tasks", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "held-out success before training" in result.stdout and "step 2/2" in result.stdout
    assert "after 2 GRPO steps" in result.stdout
    run = tmp_path / "runs" / "quickstart"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    for name in ("curves.png", "checkpoint.pt", "eval/step-0/report.md", "eval/step-2/items.jsonl"):
        assert (run / name).exists(), name


def test_quickstart_config_file_is_the_embedded_run():
    from turnrl.cli.quickstart import QUICKSTART
    from turnrl.rl.run.trainer import TrainConfig, load_config

    assert load_config(REPO / "configs" / "quickstart.yaml") == TrainConfig.model_validate(QUICKSTART)


def test_every_shipped_config_validates_and_names_a_registered_env():
    import turnrl
    from turnrl.rl.run.evaluate import run_eval_kwargs
    from turnrl.rl.run.held_out import check_held_out
    from turnrl.rl.run.trainer import load_config

    paths = sorted((REPO / "configs").glob("*.yaml"))
    assert len(paths) >= 5
    from turnrl.envs.multiagent import make_multi_agent

    for path in paths:
        cfg = load_config(path)
        assert cfg.out_dir == f"runs/{path.stem}", path
        if cfg.multi_agent is not None:  # a game: its held-out split is another than the one it trains on
            game = make_multi_agent(cfg.env.id, **cfg.env.kwargs)
            held = make_multi_agent(
                cfg.env.id, **{**cfg.env.kwargs, "split": game.held_out_split, **(cfg.env.eval_kwargs or {})}
            )
            assert game.held_out_split is not None and held.split != game.split, path
            continue
        train = turnrl.make(cfg.env.id, **cfg.env.kwargs)
        env = turnrl.make(cfg.env.id, **run_eval_kwargs(train, cfg.env.kwargs, cfg.env.eval_kwargs))  # builds too
        assert check_held_out(cfg.env.id, train, env, cfg.eval_tasks) is None, path  # held out, by canonical form
        env.close()
        assert cfg.out_dir == f"runs/{path.stem}", path
    held, train = (turnrl.make("turnrl/Arithmetic-v0", split=s) for s in ("test", "train"))
    assert check_held_out("a", train, held, 64) is None
    assert "no held-out split here" in check_held_out(
        "a", train, turnrl.make("turnrl/Arithmetic-v0", split="train", retry=True), 4
    )


def test_train_help_names_every_algorithm():
    from turnrl.rl import algorithms

    if hasattr(algorithms, "algorithm_names"):  # the algorithm registry
        names = set(algorithms.algorithm_names())
    else:
        import typing

        names = set(typing.get_args(algorithms.AlgorithmConfig.model_fields["name"].annotation))
    result = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert names and all(name in result.output for name in names), (names, result.output)


def test_an_env_constructor_that_raises_is_one_line_with_its_place(tmp_path, monkeypatch):
    import gymnasium as gym

    from turnrl.envs import registry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "raising_env_mod.py").write_text(
        "import turnrl\nfrom turnrl.envs import TextEnv\n\n\nclass Boom(TextEnv):\n    def __init__(self):\n"
        "        raise RuntimeError('the catalog file is missing')\n\n\n"
        "turnrl.register('clitest/Boom-v0', 'raising_env_mod:Boom')\n"
    )
    try:
        for args in (["envs", "check", "raising_env_mod:clitest/Boom-v0"], ["play", "raising_env_mod:clitest/Boom-v0"]):
            result = runner.invoke(app, args)
            assert result.exit_code == 2
            assert result.output == (
                "error: making raising_env_mod:clitest/Boom-v0 raised RuntimeError: the catalog "
                "file is missing (raising_env_mod.py:7)\n"
            )
    finally:
        del gym.registry["clitest/Boom-v0"]
        registry._REGISTERED.pop("clitest/Boom-v0")
        registry._SOURCES.pop("clitest/Boom-v0")


def test_play_an_index_past_the_last_task_is_one_error_line():
    result = runner.invoke(app, ["play", "turnrl/GSM8K-v0", "--index", "99999"])
    assert result.exit_code == 2
    assert result.output.startswith("error: options['index'] must be an integer in [0, 1319), got 99999")
