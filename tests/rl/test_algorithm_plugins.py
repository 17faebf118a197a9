"""Algorithms as plug-ins: a user module registers one and trains it through `turnrl train --import` without touching
the package; registration refuses incomplete classes and taken names; RLOO and REINFORCE++ (docs/algorithms.md §12) are
built-ins written the same way, each check of §12 a test."""

import json
import sys
from typing import Literal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.rl import algorithms as registry
from turnrl.rl.algorithms import (
    AlgorithmConfig,
    AlgorithmRegistrationError,
    PolicyGradient,
    algorithm_class,
    get_algorithm,
    parse_algorithm_config,
    register_algorithm,
)
from turnrl.rl.config import TrainConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import kl_penalized_rewards, reward_to_go

USER_MODULE = '''
"""A user's own algorithm: sign-PG (the sign of a sample's reward against its group's mean), registered on import."""
from typing import Literal

import torch

from turnrl.rl.algorithms import PolicyGradient, PolicyGradientConfig, register_algorithm


class SignPGConfig(PolicyGradientConfig):
    name: Literal["sign-pg"] = "sign-pg"
    scale: float = 1.0


class SignPG(PolicyGradient):
    name = "sign-pg"
    Config = SignPGConfig

    def advantages(self, batch, max_new_tokens, values=None, bootstrap=None, ref_logp=None):
        groups = batch.group_ids
        means = torch.zeros(int(groups.max()) + 1).index_add_(0, groups, batch.scores)
        means = means / torch.bincount(groups).clamp(min=1)
        return self.cfg.scale * torch.sign(batch.scores - means[groups])[:, None] * batch.loss_mask, None


register_algorithm("sign-pg", SignPG)
'''


@pytest.fixture
def clean_registry():
    saved = dict(registry.ALGORITHMS.entries)
    yield
    registry.ALGORITHMS.entries = saved
    sys.modules.pop("my_algorithms", None)


def write_run(tmp_path, algorithm):
    (tmp_path / "my_algorithms.py").write_text(USER_MODULE)
    config = {
        "model": "tiny:chatml",
        "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
        "algorithm": algorithm,
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        "optim": {"lr": 1e-2, "minibatch_size": 8},
        "steps": 2,
        "eval_tasks": 2,
        "out_dir": str(tmp_path / "run"),
    }
    (tmp_path / "run.yaml").write_text(json.dumps(config))
    return tmp_path / "run.yaml"


def test_a_user_module_registers_an_algorithm_and_turnrl_train_runs_it(tmp_path, monkeypatch, clean_registry):
    path = write_run(tmp_path, {"name": "sign-pg", "scale": 2.0})
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(path), "--import", "my_algorithms"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(torch.isfinite(torch.tensor(h["loss"])) for h in lines[1:])
    assert "zero_variance_groups" in lines[1]  # the PolicyGradient family's batch figure, from the interface
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "sign-pg" in saved and "scale: 2.0" in saved
    assert algorithm_class("sign-pg").__module__ == "my_algorithms"


def test_the_documented_example_algorithm_trains_as_written(tmp_path, monkeypatch, clean_registry):
    """The "Your own algorithm" module of docs/training.md, copied as it stands, trains through `turnrl train
    --import`."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text()
    start = readme.index("## Your own algorithm")
    block = readme[
        readme.index("```python", start) + len("```python") : readme.index("```", readme.index("```python", start) + 9)
    ]
    path = write_run(tmp_path, {"name": "sign-pg", "scale": 2.0})
    (tmp_path / "my_algorithms.py").write_text(block)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(path), "--import", "my_algorithms"])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3


def test_without_the_import_the_name_is_unknown_and_the_error_says_how(tmp_path, monkeypatch, clean_registry):
    path = write_run(tmp_path, {"name": "sign-pg"})
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 2
    assert "unknown algorithm 'sign-pg'" in result.output and "--import MODULE" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_option_of_another_algorithm_names_its_owners(tmp_path, monkeypatch, clean_registry):
    path = write_run(tmp_path, {"name": "sign-pg", "critic_model": "tiny:chatml"})
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", str(path), "--import", "my_algorithms"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "'critic_model' (an option of" in result.output and "ppo" in result.output and "scale" in result.output


class HalfConfig(AlgorithmConfig):
    name: Literal["half"] = "half"


class Half(PolicyGradient):  # no advantages: PolicyGradient supplies counts and loss only
    name = "half"
    Config = HalfConfig


def test_registration_refuses_an_incomplete_class_and_a_taken_name(clean_registry):
    with pytest.raises(AlgorithmRegistrationError, match=r"does not implement advantages; every algorithm defines"):
        register_algorithm("half", Half)
    with pytest.raises(AlgorithmRegistrationError, match=r"Config's name defaults to 'half'.*Literal\['halve'\]"):
        register_algorithm("halve", Half)
    with pytest.raises(AlgorithmRegistrationError, match="not a subclass of turnrl.rl.algorithms.Algorithm"):
        register_algorithm("thing", dict)  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(AlgorithmRegistrationError, match=r"'grpo' is already registered .*replace=True"):
        register_algorithm("grpo", Half)
    register_algorithm("broken", "no_such_module_here:Thing")
    with pytest.raises(
        AlgorithmRegistrationError,
        match=r"'broken' is registered as 'no_such_module_here:Thing', "
        r"which does not load \(ModuleNotFoundError",
    ):
        algorithm_class("broken")


def test_an_installed_package_registers_through_the_entry_point_group(tmp_path, monkeypatch, clean_registry):
    (tmp_path / "my_algorithms.py").write_text(USER_MODULE.replace('register_algorithm("sign-pg", SignPG)', ""))
    info = tmp_path / "my_algorithms-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-algorithms\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[turnrl.algorithms]\nsign-pg = my_algorithms:SignPG\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry.ALGORITHMS, "_read", False)
    assert "sign-pg" in registry.algorithm_names()
    algo = get_algorithm({"name": "sign-pg", "scale": 3.0})
    assert type(algo).__module__ == "my_algorithms" and algo.cfg.scale == 3.0


def test_the_methods_come_in_through_the_entry_point_group_and_keep_their_names(monkeypatch, clean_registry):
    """turnrl's own methods are declared as any installed package's algorithms are; the registry's own table holds
    only the general estimators, and a plug-in cannot take a method's name, even before anything asked for it."""
    from importlib.metadata import entry_points

    declared = {ep.name: ep.value for ep in entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert {"pag", "pag-grpo", "swirl", "dqo", "dpo", "rft", "sft"} <= set(declared)
    assert all(declared[n].startswith("turnrl.methods.") for n in ("pag", "swirl", "dqo", "sft"))
    assert not any("methods" in entry for entry in registry.BUILTINS.values())
    registry.ALGORITHMS.reset()
    with pytest.raises(
        AlgorithmRegistrationError,
        match=r"'pag' is already registered "
        r"\(turnrl.methods.pag.algorithm:PAG\), so .*Half cannot take",
    ):
        register_algorithm("pag", Half)
    assert algorithm_class("pag").__module__ == "turnrl.methods.pag.algorithm"


# ---- RLOO (docs/algorithms.md §12) ----


def batch_of(scores, groups, T=5, mask=None):
    B = len(scores)
    m = torch.ones(B, T) if mask is None else mask
    rewards = torch.zeros(B, T)
    last = (m * torch.arange(T)).argmax(-1)
    rewards[torch.arange(B), last] = torch.tensor(scores, dtype=torch.float32)
    return Batch(
        input_ids=torch.ones(B, T, dtype=torch.long),
        attention_mask=torch.ones(B, T, dtype=torch.long),
        loss_mask=m,
        old_logp=torch.zeros(B, T),
        token_rewards=rewards * m,
        turn_ids=torch.zeros(B, T, dtype=torch.long),
        roles=torch.zeros(B, T, dtype=torch.long),
        response_lengths=m.sum(-1),
        scores=torch.tensor(scores, dtype=torch.float32),
        correct=torch.zeros(B),
        group_ids=torch.tensor(groups),
        truncated=torch.zeros(B),
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=16), st.integers(1, 4))
def test_rloo_advantages_sum_to_zero_in_every_group(scores, n_groups):
    groups = [i % n_groups for i in range(len(scores))]
    adv, _ = get_algorithm({"name": "rloo"}).advantages(batch_of(scores, groups), 8)
    per_seq = adv[:, 0]
    for g in set(groups):
        members = [i for i, x in enumerate(groups) if x == g]
        if len(members) > 1:
            assert abs(float(per_seq[members].sum())) < 1e-4
    assert torch.all(adv == per_seq[:, None])  # broadcast to every generated token, no std


def test_rloo_values_and_k_one_refused():
    adv, _ = get_algorithm({"name": "rloo"}).advantages(batch_of([1.0, 0.0, 0.0, 5.0], [0, 0, 0, 1]), 8)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -0.5, -0.5, 0.0])  # R_i − mean of the others; alone: 0
    with pytest.raises(ValueError, match="group_size"):
        TrainConfig.model_validate(
            {"env": {"id": "turnrl/Arithmetic-v0"}, "algorithm": "rloo", "rollout": {"group_size": 1}}
        )
    assert parse_algorithm_config("rloo").agg == "seq-mean-token-sum"


# ---- REINFORCE++ (docs/algorithms.md §12) ----


def test_reward_to_go_and_the_kl_penalty():
    mask = torch.tensor([[0.0, 1, 1, 0, 1]])
    r = torch.tensor([[9.0, 0, 1, 7, 2]])  # rewards off the mask never count
    assert reward_to_go(r, mask).tolist() == [[0.0, 3.0, 3.0, 0.0, 2.0]]
    logp, ref = torch.tensor([[0.0, -1, -1, 0, -2]]), torch.tensor([[5.0, -2, -1, 5, -1]])
    assert kl_penalized_rewards(r, logp, ref, mask, 0.5).tolist() == [[9.0, -0.5, 1.0, 7.0, 2.5]]


def test_reinforce_plus_plus_whitens_over_the_whole_batch_not_per_group():
    # group 0 all right, group 1 all wrong: group normalization gives 0 everywhere, global whitening does not
    b = batch_of([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1])
    algo = get_algorithm({"name": "reinforce++", "kl_reward_coef": 0.0})
    assert not algo.needs_reference
    adv, _ = algo.advantages(b, 8)
    m = b.loss_mask.bool()
    assert float(adv[m].mean()) == pytest.approx(0.0, abs=1e-6) and float(adv[m].var(correction=0)) == pytest.approx(
        1.0, abs=1e-4
    )
    assert torch.all(adv[:2] > 0) and torch.all(adv[2:] < 0)
    with_kl = get_algorithm({"name": "reinforce++"})
    assert with_kl.needs_reference
    with pytest.raises(ValueError, match="reference log-probabilities"):
        with_kl.advantages(b, 8)
    ref = torch.full_like(b.old_logp, -1.0)  # π_old above π_ref: a penalty on every token
    shaped, _ = with_kl.advantages(b, 8, ref_logp=ref)
    assert not torch.allclose(shaped, adv)
