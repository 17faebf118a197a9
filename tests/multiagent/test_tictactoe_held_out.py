"""Tic-tac-toe's held-out starting states are held out by construction (issue 78): no game from a training opening
passes through a test opening, symmetric positions counting as one; the check that says so, and `turnrl envs check`
reporting it."""

import pytest

from turnrl.envs.conformance.report import CheckReport
from turnrl.envs.multiagent import make_multi_agent
from turnrl.envs.multiagent.checks import check_held_out_states
from turnrl.envs.multiagent.tictactoe import (
    SYMMETRIES,
    HeldOutStates,
    canonical,
    held_out_reached,
    openings,
    positions_of,
    reachable,
)

ROTATE = (6, 3, 0, 7, 4, 1, 8, 5, 2)  # a quarter turn: cell i of the turned board is cell ROTATE[i] of the board


def turned(board):
    return "".join(board[ROTATE[i]] for i in range(9))


def test_the_symmetries_are_the_eight_of_the_square_and_name_the_known_classes():
    assert len(set(SYMMETRIES)) == 8 and all(sorted(p) == list(range(9)) for p in SYMMETRIES)
    # positions without a winner after 0..4 moves, up to rotation and reflection (OEIS-known counts)
    assert [len({canonical(b) for b in positions_of(m)}) for m in range(5)] == [1, 3, 12, 38, 108]
    board = "x.o..x..."
    assert canonical(turned(board)) == canonical(board) == canonical(board[::-1])  # (reversal: a half turn)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_no_training_game_can_reach_a_test_opening(k):
    train, test = openings("train", k), openings("test", k)
    assert train and test
    assert {9 - b.count(".") for b in train} == {k, k + 1}  # k or k + 1 moves: each seat moves first in some
    assert [9 - b.count(".") for b in train[:6]] == [k, k + 1] * 3  # in turn, for a sampler that reads in order
    assert "." * 9 not in train and "." * 9 in test  # training never starts from the empty board
    assert not {canonical(b) for b in train} & {canonical(b) for b in test}  # no class in both splits
    assert held_out_reached(k) == []  # every continuation of every training opening played out
    env = make_multi_agent("turnrl/TicTacToe-v0", split="test", max_opening=k)
    states = env.held_out_states()
    assert states.ok and states.claimed and f"positions of {k} moves" in states.rule


def test_the_default_test_split_is_one_position_per_class_and_a_fair_order():
    test = openings("test")
    assert len(test) == len({canonical(b) for b in test}) == 26 and all(canonical(b) == b for b in test)
    moves = [9 - b.count(".") for b in test]
    assert moves != sorted(moves) and {1, 2, 3} <= set(moves[:13])  # any first half mixes move counts (by hash)
    env = make_multi_agent("turnrl/TicTacToe-v0", split="test")
    assert [env.state_key(i) for i in range(len(env))] == [f"tictactoe:{b}" for b in test]


def test_the_reach_check_finds_what_a_training_game_could_reach():
    """The check can fail: a training split that started from the empty board, or from a turned copy of a test
    opening, or from one of its parents, reaches test openings."""
    test = openings("test")
    assert set(test) <= reachable(["." * 9])  # the old split: the empty board was a training opening
    three = next(b for b in test if b.count(".") == 6)
    assert canonical(three) in reachable([turned(three)])  # a rotation of a test opening is that opening
    parent = three.replace("x", ".", 1)  # two moves: a game from it can play x's second move
    assert canonical(three) in reachable([parent]) and canonical(three) not in reachable(
        [b for b in positions_of(3) if canonical(b) != three]
    )


def test_max_opening_0_holds_no_state_out_and_says_so():
    env = make_multi_agent("turnrl/TicTacToe-v0", split="test", max_opening=0)
    states = env.held_out_states()
    assert not states.claimed and not states.ok and "opponent only" in states.rule
    report = CheckReport("t")
    check_held_out_states(env, report)
    assert report.ok and any("no held-out starting states" in n for n in report.notes)


def test_envs_check_fails_a_game_whose_held_out_states_training_reaches():
    class Leaky:
        def held_out_states(self):
            return HeldOutStates(True, ("........x",), "a rule")

    report = CheckReport("t")
    check_held_out_states(Leaky(), report)
    assert not report.ok and "can be reached by a training game" in report.failures[0]
    good = CheckReport("t")
    check_held_out_states(make_multi_agent("turnrl/TicTacToe-v0"), good)
    assert good.ok and any("none reachable from training" in n for n in good.notes)


def test_turnrl_envs_check_reports_the_held_out_states():
    from typer.testing import CliRunner

    from turnrl.cli import app

    res = CliRunner().invoke(app, ["envs", "check", "turnrl/TicTacToe-v0"])
    assert res.exit_code == 0 and "held-out starting states: none reachable from training" in res.output


def test_a_run_whose_held_out_openings_its_training_reaches_is_refused_before_a_model_loads(tmp_path):
    """eval_kwargs may make the held-out game otherwise than the training one: training from 1- and 2-move openings
    reaches the default test split's openings (all 1- and 2-move classes among them)."""
    import yaml
    from typer.testing import CliRunner

    from turnrl.cli import app
    from turnrl.rl.run.held_out import HeldOutError, check_game_held_out

    env = "turnrl/TicTacToe-v0"
    assert check_game_held_out(env, {"split": "train"}, None, 52) is None
    assert check_game_held_out(env, {"max_opening": 3}, {"max_opening": 2}, 52) is None  # fewer moves: unreachable
    assert check_game_held_out(env, {"max_opening": 0}, None, 4) is None  # holds no state out, and says so
    with pytest.raises(HeldOutError, match=r"23 held-out starting state\(s\) .* can be reached by a game from the tr"):
        check_game_held_out(env, {"max_opening": 1}, {"max_opening": 3}, 52)
    reached = make_multi_agent(env, split="test").reached_by(make_multi_agent(env, max_opening=1))
    assert any(b.count(".") == 6 for b in reached)  # 3-move openings no training game starts from, but reaches
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "hf:/nonexistent/model",
                "out_dir": str(tmp_path / "r"),
                "env": {"id": env, "kwargs": {"max_opening": 1}, "eval_kwargs": {"max_opening": 3}},
            }
        )
    )
    res = CliRunner().invoke(app, ["train", str(path)])
    assert res.exit_code != 0 and "can be reached by a game from the training ones" in res.output
