"""Environment classes written for TRL's `GRPOTrainer(environment_factory=...)` (tests/trl_classes.py, nothing of
turnrl in them) as turnrl environments: played as TRL plays them, evaluated, trained, and refused clearly when they
cannot be used."""

import json

import pytest
import trl_classes  # the classes' module, on the path the tests run from
from tiny_trainer import opened, tiny_trainer

import turnrl
from turnrl.envs.adapters.trl import TRLEnvError
from turnrl.envs.registry import UnknownEnvironmentError

ROWS = [{"prompt": "Play.", "secret": s} for s in (3, 7, 5, 2)]
GUESS = "trl:trl_classes:GuessNumber"


def call(n):
    return f'<tool_call>{{"name": "guess", "arguments": {{"number": {n}}}}}</tool_call>'


def guess_env(**kwargs):
    return turnrl.make(GUESS, **{"data": ROWS, "reward": "trl_classes:reward_func", **kwargs})


def test_a_trl_class_plays_as_trl_plays_it():
    env = guess_env()
    obs, info = env.reset(seed=0, options={"index": 1})
    assert env.instance.seen == {"prompt": "Play.", "secret": 7}  # reset(**row): every column of the row
    assert obs[-1].content == "Play.\n\nFind the secret number (1 to 9) with the guess tool."  # its text appended
    assert info["task_id"] == "row-1" and len(env) == 4
    schema = env.tool_schemas()
    assert [s["function"]["name"] for s in schema] == ["guess"]  # public methods but reset; _private is hidden
    assert schema[0]["function"]["parameters"]["properties"]["number"] == {
        "description": "the number you guess.",
        "type": "integer",
    }
    assert env.step(call(5))[0][0].content == "higher"
    assert env.step(call(7))[0][0].content == "right"
    out, reward, terminated, _, _ = env.step(call(7))  # the tool raises after the win: the model reads why
    assert "Game over" in out[0].content and reward == 0.0 and not terminated
    _, reward, terminated, truncated, info = env.step("Found it: 7.")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    env.close()


def test_reward_functions_are_weighted_and_none_counts_zero():
    env = guess_env(reward=["trl_classes:reward_func", "trl_classes:fewer_guesses"], reward_weights=[1.0, 2.0])
    env.reset(seed=0, options={"index": 0})  # secret 3
    env.step(call(5))
    env.step(call(3))
    _, reward, _, _, info = env.step("3")
    assert reward == pytest.approx(1.0 + 2.0 * -0.1) and info["metrics"] == {
        "reward_func": 1.0,
        "fewer_guesses": pytest.approx(-0.1),
    }
    env.reset(seed=0, options={"index": 0})
    assert env.step("no idea")[1] == 0.0  # not won: fewer_guesses says None, which counts 0


def test_an_episode_cut_by_the_turn_limit_is_rewarded_from_the_environments_state():
    env = guess_env(max_turns=2)
    env.reset(seed=0, options={"index": 2})  # secret 5
    assert env.step(call(4))[1:4] == (0.0, False, False)
    _, reward, terminated, truncated, info = env.step(call(5))  # right, on the last turn, still calling tools
    assert (reward, terminated, truncated, info["correct"]) == (1.0, False, True, True)


def test_reward_functions_read_the_completion_and_held_out_rows_are_a_split(tmp_path):
    test = tmp_path / "test.jsonl"
    test.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": f"Greet {n}."}],
                    "id": n,
                }
            )
            + "\n"
            for n in ("Ann", "Bo")
        )
    )
    env = turnrl.make(
        "trl:trl_classes:SayHello", data=[{"prompt": "Greet."}], test_data=str(test), reward="trl_classes:says_hello"
    )
    assert (env.split, env.held_out_split, len(env)) == ("train", "test", 1) and env.tool_schemas() == []
    held = turnrl.make(
        "trl:trl_classes:SayHello",
        data=[{"prompt": "Greet."}],
        test_data=str(test),
        reward="trl_classes:says_hello",
        split="test",
    )
    obs, info = held.reset(seed=0, options={"index": 1})
    assert [m.role for m in obs] == ["system", "user"] and obs[-1].content == "Greet Bo." and info["task_id"] == "Bo"
    assert held.step("Hello, Bo!")[1] == 1.0
    held.reset(seed=0, options={"index": 0})
    assert held.step("Go away.")[1] == 0.0


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("trl:trl_classes:NoReset", {}, "has no reset"),
        ("trl:trl_classes:NeedsArgs", {}, "TRL makes the class with no arguments"),
        ("trl:no_such_module:Env", {}, "importing 'no_such_module' failed"),
        ("trl:trl_classes:Missing", {}, "has no 'Missing'"),
        ("trl:trl_classes:reward_func", {}, "is not a class"),
        (GUESS, {"data": [{"secret": 1}]}, "row 0 has no 'prompt'"),
        (GUESS, {"data": "nowhere.jsonl"}, "no data file nowhere.jsonl"),
        (GUESS, {"reward": "trl_classes:nothing"}, "has no 'nothing'"),
        (GUESS, {"split": "test"}, "split='test' needs test_data"),
        (GUESS, {"reward_weights": [1.0, 2.0]}, "2 reward_weights for 1 reward functions"),
    ],
)
def test_what_cannot_be_used_is_one_clear_error(env_id, kwargs, message):
    with pytest.raises(TRLEnvError, match=message):
        turnrl.make(env_id, **{"data": ROWS, "reward": "trl_classes:reward_func", **kwargs})


def test_a_malformed_id_is_refused():
    with pytest.raises(UnknownEnvironmentError, match="trl:module.path:ClassName"):
        turnrl.make("trl:GuessNumber")


def test_a_trl_class_trains_and_a_reward_that_always_raises_stops_the_run(tmp_path, one_thread):
    """GRPO steps with the tiny model: token-exact episodes through the class's tools, a held-out evaluation on its
    test rows; a reward function that raises errs every episode, so the run stops at step 1 with its error (a run
    that trains nothing says so) and the step's episodes are kept."""
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.monitors import EpisodeFailures
    from turnrl.rl.run.trainer import TrainConfig

    tok = tiny_tokenizer("chatml")
    for reward, name in (("trl_classes:reward_func", "ok"), ("trl_classes:broken_reward", "broken")):
        held = [
            {"prompt": "Play.", "secret": s} for s in (4, 6)
        ]  # secrets training never poses (ROWS[:2] would be refused)
        cfg = TrainConfig(
            model="tiny",
            env={"id": GUESS, "kwargs": {"data": ROWS, "test_data": held, "reward": reward, "max_turns": 2}},
            algorithm={"name": "grpo"},
            rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
            optim={"minibatch_size": 4},
            steps=2,
            eval_tasks=2,
            out_dir=str(tmp_path / name),
        )
        with opened(tiny_trainer(cfg, tok)) as trainer:
            if name == "broken":
                with pytest.raises(EpisodeFailures, match="step 1: all 4 episodes failed.*reward function broken_"):
                    trainer.train()
            else:
                history = trainer.train()
        if name == "ok":
            steps = history[1:]
            assert len(steps) == 2 and all(s["rollout_episodes"] == 4 for s in steps)
            assert all(s["error_episodes"] == 0 and s["logp_diff_max"] < 1e-4 for s in steps)
            assert history[0]["eval_success"] is not None
        else:
            assert trainer.step == 0
            stored = tmp_path / name / "train" / "step-1" / "trajectories.jsonl"
            errors = [json.loads(line)["error"] for line in stored.read_text().splitlines()]
            assert len(errors) == 4 and all("reward function broken_reward raised KeyError" in e for e in errors)


def test_the_tool_rule_at_its_edges_and_numpy_rewards_once_an_episode():
    env = turnrl.make("trl:trl_classes:Quirky", data=ROWS, reward="trl_classes:numpy_reward", max_turns=2)
    assert sorted(s["function"]["name"] for s in env.tool_schemas()) == ["close", "guess"]
    env.reset(seed=0, options={"index": 2})  # secret 5
    trl_classes.CALLS.clear()
    env.step(call(4))
    _, reward, _, truncated, _ = env.step(call(5))
    assert (reward, truncated, len(trl_classes.CALLS)) == (1.0, True, 1)  # cut by the turn limit, rewarded once
    env.close()  # its close(reason) is a tool, not called here (nor does it raise)
    with pytest.raises(TRLEnvError, match="split is 'train'"):
        guess_env(split="validation", test_data=ROWS)


def test_a_relative_data_file_is_found_beside_the_classs_module(tmp_path, monkeypatch):
    """`data: rows.jsonl` in a config beside the class's module works from any folder (as `turnrl train
    examples/x.yaml` from the repository's root runs it)."""
    (tmp_path / "beside_env.py").write_text(
        "class Echo:\n    def reset(self, **row):\n        return None\n\n\n"
        "def reward(environments, **kwargs):\n    return [1.0 for _ in environments]\n"
    )
    (tmp_path / "rows.jsonl").write_text(json.dumps({"prompt": "Say hi.", "id": "hi"}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    env = turnrl.make("trl:beside_env:Echo", data="rows.jsonl", reward="beside_env:reward")
    try:
        assert [r["id"] for r in env.rows] == ["hi"]
    finally:
        env.close()
    with pytest.raises(TRLEnvError, match=r"no data file other.jsonl \(nor in .*\)"):
        turnrl.make("trl:beside_env:Echo", data="other.jsonl", reward="beside_env:reward")
