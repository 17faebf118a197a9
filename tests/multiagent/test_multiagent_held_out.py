"""A held-out evaluation of a game is held out (issue 78): never against an opponent the run trains against (refused
before a model loads, or labelled "not held out" where a run opts in), with a random legal player's figures from the
same states beside the policy's (the floor), and rows that `turnrl compare` pairs by starting state and seat."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.cli import app
from turnrl.envs.multiagent.tictactoe import text_player
from turnrl.rl.config import TrainConfig
from turnrl.rl.run.evaluate_multi import evaluate_multi_agent, run_not_held_out

pytestmark = pytest.mark.timeout(300)
TTT = "turnrl/TicTacToe-v0"


def config(out, env=TTT, **ma):
    return TrainConfig(
        model="tiny",
        env={"id": env},
        algorithm={"name": "grpo"},
        steps=1,
        seed=3,
        rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6, "max_context": 1024, "temperature": 1.5},
        eval_tasks=4,
        out_dir=str(out),
        multi_agent=ma,
    )


@pytest.mark.parametrize(
    ("ma", "named"),
    [
        ({"opponent": "random"}, ["eval_opponent 'random' (the default on turnrl/TicTacToe-v0)", "opponent 'random'"]),
        ({"opponent": "perfect", "eval_opponent": "perfect"}, ["eval_opponent 'perfect'", "opponent 'perfect'"]),
        ({"opponent": "league", "eval_opponent": "self"}, ["eval_opponent 'self'", "opponent 'league'"]),
        ({"opponent": "self", "eval_opponent": "hf:tiny"}, ["eval_opponent 'hf:tiny'", "opponent 'self'"]),  # its start
        ({"opponent": "hf:/models/m", "eval_opponent": "/models/m/"}, ["'/models/m/'", "opponent 'hf:/models/m'"]),
        (
            {"policies": {"X": {"seats": ["x"]}, "O": {"seats": ["o"]}}, "eval_opponent": "self"},
            ["eval_opponent 'self'", "policies (X, O)"],
        ),
    ],
)
def test_an_evaluation_against_a_training_opponent_is_refused_naming_both(tmp_path, ma, named):
    with pytest.raises(ValueError, match="is an opponent this run trains against") as e:
        config(tmp_path, **ma)
    assert all(n in str(e.value) for n in named) and "eval_not_held_out: true" in str(e.value)


def test_the_runs_own_folder_is_the_policy_itself(tmp_path):
    with pytest.raises(ValueError, match="is an opponent this run trains against"):
        config(tmp_path / "run", eval_opponent=f"run:{tmp_path / 'run' / 'checkpoints' / 'step-2'}")
    config(tmp_path / "run", eval_opponent=f"run:{tmp_path / 'other-run'}")  # another run: held out


def test_held_out_opponents_pass_and_the_opt_in_is_explicit(tmp_path):
    assert config(tmp_path).multi_agent.not_held_out(TTT, "tiny", str(tmp_path)) is None  # self-play, random
    assert config(tmp_path, opponent="random", eval_opponent="perfect").multi_agent.eval_not_held_out is False
    assert config(tmp_path, opponent="random", eval_not_held_out=True).multi_agent.eval_not_held_out
    with pytest.raises(ValueError, match="eval_not_held_out: true, but the held-out opponent 'random' is not one"):
        config(tmp_path, eval_not_held_out=True)


def test_turnrl_train_refuses_it_before_a_model_loads(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "hf:/nonexistent/model",
                "env": {"id": TTT},
                "multi_agent": {"opponent": "random"},
                "out_dir": str(tmp_path / "r"),
            }
        )
    )
    res = CliRunner().invoke(app, ["train", str(path)])
    assert res.exit_code != 0 and "is an opponent this run trains against" in res.output
    assert "nonexistent" not in res.output.replace(str(path), "")  # it stopped before the model


def test_turnrl_train_says_whether_its_figures_are_held_out_beside_the_floor_and_the_paired_gain(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "tiny:chatml",
                "env": {"id": TTT},
                "algorithm": {"name": "grpo"},
                "rollout": {
                    "prompts_per_step": 2,
                    "group_size": 2,
                    "max_new_tokens": 6,
                    "temperature": 1.5,
                    "max_context": 1024,
                },
                "multi_agent": {"opponent": "random", "eval_opponent": "perfect"},
                "steps": 1,
                "eval_tasks": 4,
                "out_dir": str(tmp_path / "r"),
            }
        )
    )
    res = CliRunner().invoke(app, ["train", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "vs random" in res.output  # the step's frozen opponent, not "self"
    assert "wins against perfect (held out), floor 0.0: " in res.output
    assert "over 4 distinct items (paired" in res.output  # step 0 and step 1 paired by starting state and seat


def test_an_opted_in_run_labels_its_figures_not_held_out(tmp_path, trainer_of):
    tok = tiny_tokenizer("chatml")
    tr = trainer_of(config(tmp_path, opponent="random", eval_not_held_out=True), tok, tiny_model(tok, seed=0))
    history = tr.train()
    report = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert report["held_out"] == "not held out" and history[-1]["eval_held_out"] == 0.0
    assert "trains against (multi_agent.opponent 'random')" in report["held_out_notes"][0]


def test_a_held_out_run_evaluates_its_floor_once_and_reports_it_every_time(tmp_path, monkeypatch, trainer_of):
    from turnrl.rl.run import evaluate_multi

    played = []
    real = evaluate_multi._play
    monkeypatch.setattr(evaluate_multi, "_play", lambda *a, **k: played.append(a[4]) or real(*a, **k))
    tok = tiny_tokenizer("chatml")
    tr = trainer_of(config(tmp_path, opponent="random", eval_opponent="perfect"), tok, tiny_model(tok, seed=0))
    history = tr.train()
    rows = [h for h in history if "eval_success" in h]
    assert len(rows) == 2 and all(h["eval_held_out"] == 1.0 for h in rows)
    report = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert report["held_out_notes"][0] == "opponent: perfect, not one the run trains against"
    assert len(played) == 3  # the policy at steps 0 and 1, the floor once
    assert rows[0]["eval_floor_win_rate"] == rows[1]["eval_floor_win_rate"]
    assert rows[0]["eval_floor_draw_rate"] + rows[0]["eval_floor_loss_rate"] + rows[0]["eval_floor_win_rate"] == 1
    floor = json.loads((tmp_path / "eval" / "step-0" / "floor" / "metrics.json").read_text())  # its games, once
    assert floor["player"] == "random legal moves" and floor["invalid_moves_mean"] == 0 and floor["episodes"] == 4
    last = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert last["floor"]["win_rate"] == floor["win_rate"] and not (tmp_path / "eval" / "step-1" / "floor").exists()


def test_the_floor_is_a_random_legal_player_from_the_same_states_against_the_same_opponent(tmp_path):
    tok = tiny_tokenizer("chatml")
    perfect = ScriptedAgent(tok, text_player("perfect"))
    blunder = ScriptedAgent(tok, lambda text: "no move")  # forfeits every game
    m = evaluate_multi_agent(perfect, TTT, opponent="random", episodes=52, out_dir=tmp_path / "perfect")
    bad = evaluate_multi_agent(blunder, TTT, opponent="random", episodes=52, out_dir=tmp_path / "blunder")
    assert m["floor"] == bad["floor"]  # whoever is evaluated: the same floor (deterministic)
    floor = m["floor"]
    assert floor["player"] == "random legal moves" and floor["invalid_moves_mean"] == 0.0 and floor["episodes"] == 52
    assert bad["loss_rate"] == 1.0 and 0.2 < floor["win_rate"] < m["win_rate"]  # between forfeits and perfect play
    assert m["floor_win_rate"] == floor["win_rate"]
    rows = [json.loads(x) for x in (tmp_path / "perfect" / "floor" / "items.jsonl").read_text().splitlines()]
    mine = [json.loads(x) for x in (tmp_path / "perfect" / "items.jsonl").read_text().splitlines()]
    assert [r["item"] for r in rows] == [r["item"] for r in mine]  # the same states, from the same seats
    assert evaluate_multi_agent(perfect, TTT, opponent="self", episodes=4)["floor"]["player"] is None


def test_rows_carry_an_item_per_starting_state_and_seat_and_compare_pairs_them(tmp_path):
    tok = tiny_tokenizer("chatml")
    perfect = ScriptedAgent(tok, text_player("perfect"))
    m = evaluate_multi_agent(perfect, TTT, opponent="random", episodes=52, out_dir=tmp_path / "a", floor=False)
    evaluate_multi_agent(
        ScriptedAgent(tok, text_player("random", 9)),
        TTT,
        opponent="random",
        episodes=52,
        out_dir=tmp_path / "b",
        floor=False,
    )
    rows = [json.loads(x) for x in (tmp_path / "a" / "items.jsonl").read_text().splitlines()]
    assert len({r["item"] for r in rows}) == m["distinct_items"] == 52  # 26 states x 2 seats
    assert all(r["item"].startswith("tictactoe:") and r["item"].endswith("@" + r["seat"]) for r in rows)
    assert all(r["correct"] == (r["outcome"] == "win") for r in rows)
    res = CliRunner().invoke(
        app, ["compare", str(tmp_path / "b"), str(tmp_path / "a"), "--json", str(tmp_path / "c.json")]
    )
    assert res.exit_code == 0, res.output
    (pair,) = json.loads((tmp_path / "c.json").read_text())["pairs"]
    assert pair["items"] == 52 and pair["accuracy_b"] == m["win_rate"] and pair["diff"] > 0
    evaluate_multi_agent(perfect, TTT, opponent="perfect", episodes=52, out_dir=tmp_path / "p", floor=False)
    other = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "p")])
    assert other.exit_code == 2 and "opponent ('random' in A, 'perfect' in B)" in other.output


def test_turnrl_eval_of_a_run_against_its_training_opponent_says_not_held_out(tmp_path):
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({"model": "tiny", "env": {"id": TTT}, "multi_agent": {"opponent": "random"}})
    )
    checked, why = run_not_held_out(f"run:{tmp_path}", TTT, "random")
    assert checked and "--opponent 'random' is an opponent this run trains against" in why
    assert run_not_held_out(f"run:{tmp_path}", TTT, "perfect") == (True, None)
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "config.yaml").write_text(yaml.safe_dump({"model": "tiny", "env": {"id": TTT}}))
    assert "opponent 'self'" in run_not_held_out(f"run:{tmp_path / 'self'}", TTT, "self")[1]  # self-play vs itself
    assert run_not_held_out("tiny:chatml", TTT, "random") == (False, None)  # no run: nothing known
    tok = tiny_tokenizer("chatml")
    m = evaluate_multi_agent(
        ScriptedAgent(tok, text_player("perfect")), TTT, opponent="random", episodes=4, not_held_out=why, floor=False
    )
    assert m["held_out"] == "not held out" and why in m["held_out_notes"][0]


def test_the_starting_states_say_whether_they_are_held_out(tmp_path):
    tok = tiny_tokenizer("chatml")
    perfect = ScriptedAgent(tok, text_player("perfect"))
    held = evaluate_multi_agent(perfect, TTT, opponent="random", episodes=4, floor=False)
    assert held["held_out"] == "held out" and "none reachable from training" in held["held_out_notes"][1]
    assert "training opponents are not known here" in held["held_out_notes"][0]  # (no run: nothing checked)
    empty = evaluate_multi_agent(perfect, TTT, {"max_opening": 0}, opponent="random", episodes=4, floor=False)
    assert empty["held_out"] == "opponent only" and "opponent only" in empty["held_out_notes"][1]
    train = evaluate_multi_agent(perfect, TTT, {"split": "train"}, opponent="random", episodes=4, floor=False)
    assert train["held_out"] == "opponent only" and "not the game's held-out split" in train["held_out_notes"][1]


def test_greedy_games_from_one_board_against_a_fixed_player_are_counted_once_and_sampled_ones_differ(tmp_path):
    tok = tiny_tokenizer("chatml")
    policy = HFAgent(tiny_model(tok, seed=0), tok, kv_cache_mb=0)
    kw = {"max_opening": 0}  # every game starts from the empty board
    greedy = evaluate_multi_agent(
        policy,
        TTT,
        kw,
        opponent="perfect",
        episodes=8,
        floor=False,
        params=SamplingParams(temperature=0.0, max_new_tokens=6),
    )
    assert greedy["distinct_games"] == 2  # one game from each seat, played four times
    assert any("only 2 of 8 differ" in n and "eval_temperature" in n for n in greedy["held_out_notes"])
    sampled = evaluate_multi_agent(
        policy,
        TTT,
        kw,
        opponent="perfect",
        episodes=8,
        floor=False,
        seed=1,
        params=SamplingParams(temperature=1.5, max_new_tokens=6),
        out_dir=tmp_path / "a",
    )
    assert sampled["distinct_games"] == 8
    assert "games: sampled at temperature 1.5, each game its own seed; all 8 differ" in sampled["held_out_notes"]
    again = evaluate_multi_agent(
        policy,
        TTT,
        kw,
        opponent="perfect",
        episodes=8,
        floor=False,
        seed=1,
        params=SamplingParams(temperature=1.5, max_new_tokens=6),
        out_dir=tmp_path / "b",
    )
    rows = [[json.loads(x)["game"] for x in (tmp_path / d / "items.jsonl").read_text().splitlines()] for d in "ab"]
    assert rows[0] == rows[1]  # the same seeds: the same games, so two evaluations pair game by game
    assert again["distinct_games"] == 8


def test_a_runs_held_out_games_are_sampled_at_its_evaluation_temperature(tmp_path, trainer_of):
    tok = tiny_tokenizer("chatml")
    cfg = config(tmp_path, opponent="self", eval_opponent="perfect", eval_temperature=1.5)
    cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={"kwargs": {"max_opening": 0}})})
    tr = trainer_of(cfg, tok, tiny_model(tok, seed=0))
    tr.evaluate(tmp_path / "e")
    run = json.loads((tmp_path / "e" / "run.json").read_text())
    assert run["settings"]["params"]["temperature"] == 1.5
    assert tr.eval_metrics["distinct_games"] == 4 and tr.eval_metrics["env"]["distinct_games"] == 4.0


def test_validation_games_are_not_the_test_games_replayed_and_the_opponent_stays_greedy(tmp_path):
    from turnrl.envs.multiagent.external import listed_moves

    tok = tiny_tokenizer("chatml")
    policy = HFAgent(tiny_model(tok, seed=0), tok, kv_cache_mb=0)
    asked: list[float] = []

    class Opponent(HFAgent):  # a frozen model opponent that says how it was asked to sample
        def generate(self, prompts, params, **kw):
            asked.append(params.temperature)
            return super().generate(prompts, params, **kw)

    first_legal = ScriptedAgent(tok, lambda text: (listed_moves(text) or [""])[0])  # a fixed player
    sampled = SamplingParams(temperature=1.5, max_new_tokens=6)
    prints = {}
    for split in ("test", "validation"):  # every game of either split starts from the empty board
        m = evaluate_multi_agent(
            policy,
            "textarena:TicTacToe-v0",
            {"split": split},
            opponent=first_legal,
            episodes=6,
            floor=False,
            params=sampled,
            out_dir=tmp_path / split,
        )
        assert m["distinct_games"] == 6
        prints[split] = {json.loads(x)["game"] for x in (tmp_path / split / "items.jsonl").read_text().splitlines()}
    assert not prints["test"] & prints["validation"]  # other streams: validation chooses on games test never plays
    frozen = Opponent(tiny_model(tok, seed=1), tok, kv_cache_mb=0)
    m = evaluate_multi_agent(
        policy,
        TTT,
        {"max_opening": 0},
        opponent=frozen,
        opponent_label="hf:frozen",
        episodes=4,
        floor=False,
        params=sampled,
    )
    assert asked and set(asked) == {0.0}  # the held-out opponent is the same fixed player at any temperature
    assert any("the opponent (a model) greedy" in n for n in m["held_out_notes"])
