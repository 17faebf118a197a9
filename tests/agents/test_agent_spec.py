"""Agent specs are read once, at load (issue 80): the run's model, a reward judge, SWiRL's step judge and an opponent
that is an agent are checked for their form — a backend someone registered, a target of the form it needs — as a
config error naming the field, before anything loads; every consumer reads the parsed spec."""

import pytest
import yaml
from typer.testing import CliRunner

from turnrl.agents import AGENT_BACKENDS, AgentSpec, make_agent
from turnrl.cli import app
from turnrl.rl.config import TrainConfig
from turnrl.rl.config.rewards import RewardConfig


@pytest.mark.parametrize(
    ("spec", "kind", "target"),
    [
        ("smollm2-135m-instruct", "hf", "smollm2-135m-instruct"),  # a built-in name
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "hf", "HuggingFaceTB/SmolLM2-135M-Instruct"),  # a hub id
        ("hf:/models/mine", "hf", "/models/mine"),
        ("openai:http://127.0.0.1:8000/v1#m", "openai", "http://127.0.0.1:8000/v1#m"),
        ("run:runs/a#solver", "run", "runs/a#solver"),
        ("tiny:chatml", "tiny", "chatml"),
    ],
)
def test_a_spec_reads_its_backend_and_target_and_saves_as_written(spec, kind, target):
    read = AgentSpec(spec)
    assert (read.kind, read.target, str(read)) == (kind, target, spec)
    cfg = TrainConfig(model=spec, env={"id": "turnrl/Arithmetic-v0"})
    assert cfg.model.kind == kind and cfg.model_dump(mode="json")["model"] == spec


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("hff:/models/mine", "Did you mean hf:?"),  # a misspelt backend
        ("openai:http://127.0.0.1:8000/v1", "openai:URL#MODEL"),  # no model name
        ("run:", "names no OUT_DIR"),
        ("", "needs a name"),
    ],
)
def test_a_malformed_spec_is_a_config_error_naming_the_field(spec, says):
    with pytest.raises(ValueError, match="model") as e:
        TrainConfig(model=spec, env={"id": "turnrl/Arithmetic-v0"})
    assert says in str(e.value)
    with pytest.raises(ValueError, match="judge"):
        RewardConfig(judge=spec)
    with pytest.raises(ValueError, match=says.replace("?", r"\?")):
        make_agent(spec)  # the same reading where an agent is built


def test_a_registered_backend_is_a_spec_and_policy_is_the_trained_model():
    AGENT_BACKENDS.register("mine", lambda rest, **kw: rest)
    try:
        assert AgentSpec("mine:anything").kind == "mine" and make_agent("mine:x") == "x"
    finally:
        AGENT_BACKENDS.entries.pop("mine")
    with pytest.raises(ValueError, match="unknown agent spec 'mine:x'"):
        AgentSpec("mine:x")
    assert RewardConfig().judge == "policy" and RewardConfig(judge="tiny:chatml").judge.kind == "tiny"


def test_judges_and_opponents_are_read_at_load(tmp_path):
    from turnrl.methods.swirl.algorithm import SWiRLConfig
    from turnrl.rl.config.multi_agent import MultiAgentConfig

    assert SWiRLConfig(reward="judge", judge="rule").judge == "rule"  # a registered judge's name
    assert SWiRLConfig(reward="judge", judge="tiny:chatml").judge.agent.kind == "tiny"  # an agent spec
    assert SWiRLConfig(reward="judge", judge="rule").judge.agent is None
    with pytest.raises(ValueError, match="unknown step judge 'tinny:chatml'.*as an agent spec"):
        SWiRLConfig(reward="judge", judge="tinny:chatml")
    with pytest.raises(ValueError, match="openai:URL#MODEL"):
        MultiAgentConfig(eval_opponent="openai:http://127.0.0.1:9/v1")
    path = tmp_path / "bad.yaml"  # in a config file: refused before anything loads, naming the field
    path.write_text(yaml.safe_dump({"model": "hff:x", "env": {"id": "turnrl/Arithmetic-v0"}}))
    res = CliRunner().invoke(app, ["train", str(path)])
    assert res.exit_code != 0 and "model" in res.output and "Did you mean hf:?" in res.output
