"""A training config's mistakes on one line that says where: the file's own keys by their path in the file, a
command-line override by the override; an unknown key with "did you mean" (as environment ids have)."""

import re

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from turnrl.cli import app
from turnrl.rl.config import config_error, load_config

BASE = "model: tiny:chatml\nenv: {id: turnrl/Arithmetic-v0}\n"


def _error(path, overrides=()):
    with pytest.raises(ValidationError) as info:
        load_config(path, list(overrides))
    return config_error(info.value, path, list(overrides))


def test_unknown_keys_get_did_you_mean_in_the_file_and_in_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + "rollout: {group_sise: 4}\nstepz: 3\n")
    assert _error(path) == (
        f"{path}: rollout.group_sise: unknown key 'group_sise'; did you mean 'group_size'?; "
        f"{path}: stepz: unknown key 'stepz'; did you mean 'steps'?"
    )
    path.write_text(BASE)
    assert _error(path, ["optim.lerning_rate=1"]) == (
        "override optim.lerning_rate=1: unknown key 'lerning_rate'; optim takes: lr, weight_decay, grad_clip, "
        "warmup_steps, epochs, minibatch_size, grad_accum, micro_tokens, shuffle, share_prompts, prefix_tree, lanes, "
        "recompute_logprobs"
    )
    assert _error(path, ["algorithm.kl_coeff=0.1"]) == (
        "override algorithm.kl_coeff=0.1: algorithm: algorithm 'grpo' has no option 'kl_coeff' (did you mean "
        "'kl_coef'?); its options: eps_low, eps_high, dual_clip, agg, kl_coef, nll_coef, behaviour_is_cap, "
        "behaviour_is, behaviour_is_floor, dynamic_sampling, max_resample, overlong, advantage"
    )


def test_an_error_in_an_override_names_the_override_not_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE + "rollout: {group_size: 4}\n")
    assert _error(path, ["rollout.group_size=1", "steps=2"]) == (
        "override rollout.group_size=1: Input should be greater than or equal to 2 (got 1)"
    )
    # a section only the override made: the required field it lacks is the override's too
    assert _error(path, ["rollout.context.budgit=64"]) == (
        "override rollout.context.budgit=64: rollout.context.budget: Field required; "
        "override rollout.context.budgit=64: unknown key 'budgit'; did you mean 'budget'?"
    )
    # the file's own mistake stays the file's, whatever the overrides
    path.write_text(BASE + "rollout: {group_size: 1}\n")
    assert _error(path, ["steps=2"]) == (
        f"{path}: rollout.group_size: Input should be greater than or equal to 2 (got 1)"
    )
    # a whole-config check: the file, with the overrides that took part
    path.write_text(BASE)
    assert _error(path, ["rollout.max_staleness=1", "steps=2"]).startswith(
        f"{path} (with rollout.max_staleness=1, steps=2): rollout.max_staleness=1 lets rollouts of the next step run"
    )


def test_the_train_command_prints_it_on_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    result = CliRunner().invoke(app, ["train", str(path), "rollout.temprature=0.5"])
    assert result.exit_code == 2
    assert result.output == (
        "error: override rollout.temprature=0.5: unknown key 'temprature'; did you mean 'temperature'?\n"
    )
    result = CliRunner().invoke(app, ["train", str(path), "steps"])
    assert result.exit_code == 2 and result.output == "error: override must be key.sub=value, got 'steps'\n"


def test_an_override_through_a_value_names_the_override(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    for overrides, where in (
        (["rollout.temperature=0.5", "rollout.temperature.x=1"], "rollout.temperature"),
        (["env=foo", "env.id=x"], "env"),
    ):
        with pytest.raises(ValueError) as info:
            load_config(path, overrides)
        message = config_error(info.value, path, overrides)
        assert message.startswith(f"override {overrides[1]}: {where} is a value") and str(path) not in message


def test_a_nucleus_without_the_learners_old_logprobs_is_refused_with_what_to_set(tmp_path):
    """Issue 66: with top_p < 1 the sampler's μ is of the nucleus, renormalized; a ratio over it is off from the
    first step unless the learner scores π_old itself."""
    path = tmp_path / "c.yaml"
    path.write_text(BASE)
    message = _error(path, ["rollout.top_p=0.9"])
    assert "rollout.top_p=0.9" in message and "optim.recompute_logprobs=true" in message and "\n" not in message
    load_config(path, ["rollout.top_p=0.9", "optim.recompute_logprobs=true"])  # accepted


def test_opponents_are_read_once_at_load_into_their_kind_and_saved_as_written(tmp_path):
    """multi_agent.opponent, eval_opponent and an extra evaluation's opponent are typed at load (an Opponent: the
    string as written, with its kind), so a malformed script is a config error before anything runs, the league is
    refused where a fixed opponent is needed, and the saved config reads exactly as the user wrote it."""
    from turnrl.rollout.opponents import Opponent

    assert [Opponent(n).kind for n in ("self", "league", "random", "perfect", "script:m:f", "hf:x", "run:out")] == [
        "self",
        "league",
        "scripted",
        "scripted",
        "script",
        "agent",
        "agent",
    ]
    assert Opponent("league").is_policy and not Opponent("random").is_policy and Opponent("run:o").needs_model
    assert Opponent("perfect").is_scripted and Opponent("script:m:f").is_scripted
    assert not Opponent("run:o").is_scripted and not Opponent("self").is_scripted
    path = tmp_path / "c.yaml"
    game = "model: tiny:chatml\nenv: {id: turnrl/TicTacToe-v0}\n"
    path.write_text(game + "multi_agent: {opponent: league, eval_opponent: 'script:my_players:fixed'}\n")
    cfg = load_config(path, [])
    ma = cfg.multi_agent
    assert (ma.opponent.kind, ma.eval_opponent.kind, ma.held_out_opponent(cfg.env.id).kind) == (
        "league",
        "script",
        "script",
    )
    assert cfg.model_dump(mode="json")["multi_agent"]["opponent"] == "league"  # saved as written
    assert ma.held_out_opponent("turnrl/SolverCritic-v0") == "script:my_players:fixed"
    assert cfg.multi_agent.not_held_out(cfg.env.id) is None  # a script is not the league the run trains against
    path.write_text(game + "multi_agent: {opponent: 'script:my_players'}\n")
    assert "is not of the form script:MODULE:FUNCTION" in _error(path)
    path.write_text(game + "multi_agent: {eval_opponent: league}\n")
    assert "the league is the training opponent" in _error(path)
    path.write_text(BASE + "extra_evals: {games: {env: turnrl/TicTacToe-v0, opponent: league}}\n")
    assert "the league is a training opponent" in _error(path)


def test_a_misspelt_keyword_among_agent_specs_is_refused_with_the_keyword_it_meant(tmp_path):
    """Where a few words mean something of their own and any other bare word names a model — an opponent's self,
    league, random and perfect, a step judge's rule, a reward judge's policy — a near miss is a config error (and an
    option's error) saying which word it meant, not a model name that fails later; a model of that name is still
    reachable as hf:NAME, and prefixed or path-like specs are never taken for a keyword."""
    from typer.testing import CliRunner

    from turnrl.cli import app
    from turnrl.methods.swirl.judges import StepJudgeSpec
    from turnrl.rollout.opponents import Opponent

    for typo, meant in (("slef", "self"), ("leage", "league"), ("randon", "random"), ("perfekt", "perfect")):
        with pytest.raises(ValueError, match=rf"opponent '{typo}': did you mean '{meant}'\? .*write hf:{typo}"):
            Opponent(typo)
    assert [Opponent(s).kind for s in ("hf:slef", "./slef", "gpt2", "smollm2-135m-instruct")] == ["agent"] * 4
    with pytest.raises(ValueError, match=r"step judge 'rulle': did you mean 'rule'\?"):
        StepJudgeSpec("rulle")
    assert StepJudgeSpec("rule").is_registered and not StepJudgeSpec("tiny:chatml").is_registered
    path = tmp_path / "c.yaml"
    path.write_text(BASE + "reward: {judge: polcy}\n")
    assert "reward.judge 'polcy': did you mean 'policy'?" in _error(path)
    path.write_text("model: tiny:chatml\nenv: {id: turnrl/TicTacToe-v0}\nmulti_agent: {opponent: slef}\n")
    assert "opponent 'slef': did you mean 'self'?" in _error(path)
    result = CliRunner().invoke(
        app, ["eval", "--env", "turnrl/TicTacToe-v0", "--agent", "tiny:chatml", "--opponent", "randon"]
    )
    plain = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())  # the message out of rich's box
    assert result.exit_code == 2 and "did you mean 'random'?" in plain
    result = CliRunner().invoke(app, ["swirl", "filter", "x.jsonl", "--out", "y.jsonl", "--judge", "rulle"])
    plain = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2 and "did you mean 'rule'?" in plain
