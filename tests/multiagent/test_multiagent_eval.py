"""Held-out evaluation of an agent in a seat of a multi-agent environment (turnrl/rl/run/evaluate_multi.py and
``turnrl eval`` on a multi-agent id): wins, draws and losses against named opponents, with Wilson intervals."""

import json

import pytest
from typer.testing import CliRunner

from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.envs.multiagent.tictactoe import board_in, show, text_player
from turnrl.rl.run.evaluate_multi import evaluate_multi_agent
from turnrl.stats import wilson


def test_wilson_intervals():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 8)
    assert lo == 0.0 and hi == pytest.approx(0.3244, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2366, abs=1e-4)


def test_the_text_players_read_the_last_board_they_were_told():
    text = "rules\n" + show("x........") + "\nx played 1.\n" + show("x...o...x") + "\nYour move (o)."
    assert board_in(text) == "x...o...x" and board_in("no board here") is None
    assert text_player("perfect")(text) in {"2", "4", "6", "8"}  # o must take an edge (a corner loses to a fork)
    with pytest.raises(ValueError, match="'perfect' or 'random'"):
        text_player("greedy")


def test_the_random_player_keeps_no_state():
    text = "rules\n" + show("x...o....") + "\nYour move (x)."
    first = text_player("random", seed=3)
    moves = [first(text) for _ in range(5)]
    assert len(set(moves)) == 1 and text_player("random", seed=3)(text) == moves[0]  # the same text, the same move
    assert moves[0] not in {"1", "5"}  # a free cell
    assert len({text_player("random", seed=k)(text) for k in range(20)}) > 3  # other seeds, other cells


def test_a_perfect_player_draws_itself_and_beats_random_play_on_held_out_openings():
    tok = tiny_tokenizer("chatml")
    perfect = ScriptedAgent(tok, text_player("perfect"))
    same = evaluate_multi_agent(
        perfect, "turnrl/TicTacToe-v0", {"split": "train", "max_opening": 0}, opponent="perfect", episodes=4
    )
    assert same["draw_rate"] == 1.0 and same["episodes"] == 4 and same["seat"] == "all"
    m = evaluate_multi_agent(perfect, "turnrl/TicTacToe-v0", opponent="random", episodes=26)
    assert m["env_kwargs"] == {"split": "test"}  # the held-out openings unless told otherwise
    assert m["win_rate"] > 0.6 and m["win_rate"] + m["draw_rate"] + m["loss_rate"] == pytest.approx(1.0)
    lo, hi = m["win_ci95"]
    assert lo < m["win_rate"] < hi and m["invalid_moves_mean"] == 0.0


def test_turnrl_eval_takes_a_multi_agent_id(tmp_path):
    from turnrl.cli import app

    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/TicTacToe-v0",
            "--agent",
            "tiny:chatml",
            "--opponent",
            "perfect",
            "--limit",
            "4",
            "--seat",
            "x",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "4 games as x against perfect" in res.output and "loss: 100.0%" in res.output  # a random model loses
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["loss_rate"] == 1.0 and metrics["invalid_moves_mean"] > 0
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) == 4
    bad = runner.invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/TicTacToe-v0",
            "--agent",
            "tiny:chatml",
            "--seat",
            "z",
            "--limit",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert bad.exit_code == 2 and "has no seat 'z'; its seats: x, o" in bad.output


def test_two_passes_over_the_held_out_openings_play_each_from_both_seats(tmp_path):
    tok = tiny_tokenizer("chatml")
    perfect = ScriptedAgent(tok, text_player("perfect"))
    evaluate_multi_agent(perfect, "turnrl/TicTacToe-v0", opponent="random", episodes=52, out_dir=tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert len({(r["index"] % 26, r["seat"]) for r in rows}) == 52  # 26 test openings × x and o


def test_turnrl_play_puts_a_person_in_one_seat_against_an_opponent():
    from turnrl.cli import app

    runner = CliRunner()
    res = runner.invoke(
        app,
        ["play", "turnrl/TicTacToe-v0", "--seat", "x", "--opponent", "perfect", "--kw", "max_opening=0"],
        input="5\n1\n9\n3\n7\n",
    )
    assert res.exit_code == 0, res.output
    assert "you play x, perfect plays o" in res.output and "[o: perfect] 1" in res.output  # perfect answers a corner
    assert "Cell 1 is taken" in res.output and "game over: loss" in res.output and "invalid moves 2" in res.output
    quit_early = runner.invoke(
        app,
        ["play", "turnrl/TicTacToe-v0", "--seat", "o", "--opponent", "random", "--kw", "max_opening=0"],
        input=":q\n",
    )
    assert quit_early.exit_code == 0 and "[x: random]" in quit_early.output and "Your move (o)" in quit_early.output
    assert quit_early.output.rstrip().endswith("bye")  # x moved first; the person quit at o's first turn
    bad = runner.invoke(app, ["play", "turnrl/TicTacToe-v0", "--seat", "z"])
    assert bad.exit_code == 2 and "has no seat 'z'; its seats: x, o" in bad.output
    gone = runner.invoke(app, ["play", "turnrl/TicTacToe-v0", "--opponent", "hf:/nonexistent/model"])
    assert gone.exit_code == 2 and "--opponent hf:/nonexistent/model" in gone.output
