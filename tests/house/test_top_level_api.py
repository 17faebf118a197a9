"""The package's front door: what a user reaches for first is one import away, and ``import turnrl`` stays light."""

import subprocess
import sys
import textwrap

import turnrl


def test_the_names_a_user_reaches_for_first_are_at_the_top():
    from turnrl import SamplingParams, TrainConfig, Trainer, evaluate, load_config, make, make_agent
    from turnrl.agents import make_agent as agents_make_agent
    from turnrl.rl.config import TrainConfig as Config
    from turnrl.rl.run.evaluate import evaluate as run_evaluate
    from turnrl.rl.run.trainer import Trainer as RunTrainer
    from turnrl.types import SamplingParams as Params

    assert Trainer is RunTrainer and TrainConfig is Config and evaluate is run_evaluate
    assert make_agent is agents_make_agent and callable(load_config) and make is turnrl.make
    assert SamplingParams is Params
    assert all(getattr(turnrl, name) is not None for name in turnrl.__all__)  # each name resolves
    assert "importlib" not in dir(turnrl) and set(turnrl.__all__) <= set(dir(turnrl))
    try:
        turnrl.Trainr  # noqa: B018 — a typo is an AttributeError naming it
    except AttributeError as e:
        assert "Trainr" in str(e)
    else:
        raise AssertionError("turnrl.Trainr did not raise")


def test_import_turnrl_loads_neither_torch_nor_the_trainer():
    script = textwrap.dedent("""
        import sys
        import turnrl
        env = turnrl.make("turnrl/Arithmetic-v0", level=1)
        env.reset(seed=0)
        heavy = sorted(m for m in ("torch", "turnrl.rl", "turnrl.agents", "transformers") if m in sys.modules)
        print("heavy:", heavy)
        turnrl.TrainConfig
        print("after:", "turnrl.rl.config" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "heavy: []" in out.stdout and "after: True" in out.stdout, out.stdout
