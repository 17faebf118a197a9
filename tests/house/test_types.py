import math

import pytest
from pydantic import ValidationError

from turnrl import storage
from turnrl.types import Message, ToolCall, Trajectory, Turn


def make_trajectory(with_tokens: bool = True) -> Trajectory:
    call = ToolCall(name="calculator", arguments={"expression": "2+3", "nested": {"a": [1, 2.5, None]}}, id="c1")
    turns = [
        Turn(
            index=0,
            action=Message(role="assistant", content="<tool_call>…</tool_call>", tool_calls=[call]),
            observation=[Message(role="tool", name="calculator", content="5", tool_call_id="c1")],
            reward=0.0,
            info={"tool_calls": [call.model_dump()], "correct": None, "ünïcode": "✓", "x": 1e-300},
            token_span=(3, 6),
            obs_span=(6, 8),
        ),
        Turn(
            index=1,
            role="verifier",
            action=Message(role="assistant", content="\\boxed{5}"),
            reward=1.0,
            terminated=True,
            info={"correct": True, "metrics": {"f1": 0.25}},
            token_span=(8, 10),
        ),
    ]
    kwargs = {}
    if with_tokens:
        kwargs = {
            "token_ids": [1, 2, 3, 10, 11, 12, 20, 21, 13, 14],
            "loss_mask": [0, 0, 0, 1, 1, 1, 0, 0, 1, 1],
            "logprobs": [0.0, 0.0, 0.0, -0.1, -0.2, -0.30000000000000004, 0.0, 0.0, -1e-9, -2.5],
        }
    return Trajectory(
        env_id="turnrl/Arithmetic-v0",
        task_id="t/1",
        seed=7,
        group_id="g0",
        prompt=[Message(role="system", content="sys"), Message(role="user", content="What is 2+3?")],
        turns=turns,
        terminated=True,
        metadata={"level": 1, "tags": ["a", "b"]},
        **kwargs,
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("with_tokens", [True, False])
def test_round_trip_is_lossless(tmp_path, suffix, with_tokens):
    trajs = [make_trajectory(with_tokens), make_trajectory(with_tokens)]
    path = tmp_path / f"t{suffix}"
    assert storage.save(trajs, path) == 2
    back = storage.load(path)
    assert back == trajs
    assert back[0].turns[1].token_span == (8, 10)


def test_jsonl_append_keeps_earlier_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    storage.write_jsonl([make_trajectory()], path, append=True)
    storage.write_jsonl([make_trajectory()], path, append=True)
    assert len(storage.read_jsonl(path)) == 2


def test_broken_jsonl_line_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    storage.write_jsonl([make_trajectory()], path)
    with path.open("a") as f:
        f.write("{not json\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:2"):
        storage.read_jsonl(path)


def test_unknown_suffix_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="use .jsonl or .parquet"):
        storage.save([], tmp_path / "t.csv")


def test_token_rewards_land_on_last_token_of_each_turn():
    traj = make_trajectory()
    rewards = traj.token_rewards()
    assert rewards[5] == 0.0 and rewards[9] == 1.0 and math.fsum(rewards) == traj.total_reward


def test_views():
    traj = make_trajectory()
    assert [m.role for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.num_turns == 2 and traj.correct is True
    chat = traj.turns[0].action.to_chat()
    assert chat["tool_calls"][0]["function"]["name"] == "calculator"


@pytest.mark.parametrize(
    "change, match",
    [
        ({"logprobs": [0.0]}, "same length"),
        ({"loss_mask": [0, 0, 0, 1, 1, 2, 0, 0, 1, 1]}, "only 0 and 1"),
        ({"loss_mask": [0, 0, 0, 1, 0, 1, 0, 0, 1, 1]}, "must be 1 inside token_span"),
        ({"logprobs": None}, "given together"),
    ],
)
def test_inconsistent_token_fields_are_rejected(change, match):
    data = make_trajectory().model_dump()
    data.update(change)
    with pytest.raises(ValidationError, match=match):
        Trajectory.model_validate(data)


def test_unknown_fields_and_roles_are_rejected():
    with pytest.raises(ValidationError):
        Message(role="robot", content="x")
    with pytest.raises(ValidationError):
        Message(role="user", content="x", colour="red")
