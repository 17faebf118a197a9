"""Issue 77, item 2: the solver–critic pair against the solver trained alone, like for like.

The pair is scored after a review and a revision, the solver alone after one answer: two test-time procedures. What
makes them comparable, tested here: the solver–critic game records both the solver's first answer and its final one
per problem (``scores`` in each row of ``items.jsonl``); ``turnrl compare --score`` pairs two evaluations on either;
a run trained alone is evaluated through the same review protocol (``extra_evals``: its own policy in both seats, the
pair's settings), so that each comparison is one ``turnrl compare``; a game with a validation split validates on it.
Scripted agents answer where the figures must be exact; the tiny model trains where the whole path must run.
"""

from __future__ import annotations

import json
import re

import pytest
from tiny_trainer import opened
from typer.testing import CliRunner

from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.cli import app
from turnrl.envs.multiagent import make_multi_agent
from turnrl.rl.run.evaluate_multi import evaluate_multi_agent

pytestmark = pytest.mark.timeout(600)
GAME = "turnrl/SolverCritic-v0"


def solver(first: str, final: str):
    """A policy for both seats: as the solver, its first answer is right or off by one (``first``), its answer after
    the review likewise (``final``); as the critic, a fixed review."""

    def play(text: str) -> str:
        if "You review" in text:
            return "Check the sum again. VERDICT: wrong"
        a, op, b = re.findall(r"What is (\d+) ([-+*]) (\d+)", text)[0]
        right = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        after_review = "A reviewer read" in text
        return f"\\boxed{{{right + (0 if (final if after_review else first) == 'right' else 1)}}}"

    return play


def evaluation(tmp_path, name: str, first: str, final: str, episodes: int = 6, **kwargs):
    tok = tiny_tokenizer("chatml")
    out = tmp_path / name
    m = evaluate_multi_agent(
        ScriptedAgent(tok, solver(first, final)),
        GAME,
        {"levels": [1], **kwargs},
        opponent="self",
        episodes=episodes,
        max_context=2048,
        out_dir=out,
    )
    return m, [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]


def compare(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


def test_each_problem_records_the_solvers_first_answer_and_its_final_one(tmp_path):
    revises, rows = evaluation(tmp_path, "revises", "wrong", "right")  # wrong, then right after the review
    assert [r["scores"] for r in rows] == [{"first_correct": False, "final_correct": True}] * 6
    assert all(r["correct"] for r in rows)  # the game's own score is the final answer's
    assert revises["first_correct_rate"] == 0.0 and revises["final_correct_rate"] == 1.0
    assert revises["success_rate"] == 1.0 and revises["first_correct_ci95"][1] < 0.5
    spoils, rows = evaluation(tmp_path, "spoils", "right", "wrong")  # right, then talked out of it
    assert [r["scores"] for r in rows] == [{"first_correct": True, "final_correct": False}] * 6
    assert not any(r["correct"] for r in rows) and spoils["first_correct_rate"] == 1.0
    # each row is one problem, by its canonical form: the items two evaluations pair on
    game = make_multi_agent(GAME, levels=[1], split="test")
    assert sorted(r["item"].split("@")[0] for r in rows) == sorted(game.state_key(i) for i in range(6))
    assert game.state_key(0).startswith("arithmetic:(")
    # a game cut after the first answer: the score the game recorded counts, from whichever seat's view holds it
    # (the critic, cut before it moved, was told nothing of it), and the one it never recorded is false
    _, rows = evaluation(tmp_path, "cut", "right", "right", max_turns=1)
    assert {r["seat"] for r in rows} == {"solver", "critic"} and all(r["outcome"] == "truncated" for r in rows)
    assert [r["scores"] for r in rows] == [{"first_correct": True, "final_correct": False}] * 6


def test_compare_pairs_two_evaluations_on_either_score_and_refuses_a_score_they_do_not_hold(tmp_path):
    evaluation(tmp_path, "revises", "wrong", "right")
    evaluation(tmp_path, "spoils", "right", "wrong")
    out = tmp_path / "first.json"
    first = compare("--score", "first_correct", tmp_path / "revises", tmp_path / "spoils", "--json", out)
    assert first.exit_code == 0, first.output
    figures = json.loads(out.read_text())
    (p,) = figures["pairs"]
    assert figures["score"] == "first_correct" and p["items"] == 6
    assert p["accuracy_a"] == 0.0 and p["accuracy_b"] == 1.0 and p["diff"] == 1.0
    assert "on the score first_correct" in first.output
    for score in ("final_correct", "correct"):  # the final answer, by its name or as the game's own score
        res = compare("--score", score, tmp_path / "revises", tmp_path / "spoils", "--json", out)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["pairs"][0]["diff"] == -1.0
    plain = compare(tmp_path / "revises", tmp_path / "spoils", "--json", out)  # the default: unchanged
    assert plain.exit_code == 0 and json.loads(out.read_text())["score"] == "correct"
    assert "on the score" not in plain.output and json.loads(out.read_text())["pairs"][0]["diff"] == -1.0
    bad = compare("--score", "first_answer", tmp_path / "revises", tmp_path / "spoils")
    assert bad.exit_code == 2
    assert "hold no score 'first_answer'" in bad.output and "correct, final_correct, first_correct" in bad.output
    # an evaluation of one agent records `correct` alone
    from sums_env import ENV, A

    from turnrl.rl.run.evaluate import evaluate

    evaluate(A, ENV, out=tmp_path / "one", limit=4)
    evaluate(A, ENV, out=tmp_path / "two", limit=4)
    one = compare("--score", "first_correct", tmp_path / "one", tmp_path / "two")
    assert one.exit_code == 2 and "every row holds correct" in " ".join(one.output.split())


TINY = [
    "model=tiny:chatml",
    "steps=1",
    "eval_tasks=3",
    "validate_every=1",
    "validation_tasks=2",
    "rollout.prompts_per_step=1",
    "rollout.group_size=2",
    "rollout.max_new_tokens=6",
    "optim.minibatch_size=2",
    "optim.grad_accum=1",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The pair and the solver alone, as the shipped configs train them (one step of the tiny model)."""
    root = tmp_path_factory.mktemp("like-for-like")
    for config, name in (("configs/solver-critic-lora.yaml", "pair"), ("configs/solver-alone-lora.yaml", "alone")):
        res = CliRunner().invoke(app, ["train", config, *TINY, f"out_dir={root / name}", "--no-resume"])
        assert res.exit_code == 0, res.output
    return root


def test_the_solver_alone_is_evaluated_through_the_review_protocol_as_the_pair_is(runs, tmp_path):
    pair, alone = runs / "pair", runs / "alone"
    for step in (0, 1):  # beside its own single answer on the arithmetic test problems, as before
        assert (alone / "eval" / f"step-{step}" / "report.md").is_file()
        rows = [json.loads(x) for x in (alone / "review" / "eval" / f"step-{step}" / "items.jsonl").open()]
        assert len(rows) == 3 and all(set(r["scores"]) == {"first_correct", "final_correct"} for r in rows)
    history = [json.loads(x) for x in (alone / "metrics.jsonl").read_text().splitlines()]
    assert all(
        {"eval_success", "eval_review_success", "eval_review_first_correct_rate", "val_review_final_correct_rate"}
        <= set(h)
        for h in history
    )
    settings = [
        json.loads((run / "eval" / "step-1" / "run.json").read_text())["settings"] for run in (pair, alone / "review")
    ]
    for s in settings:
        del s["agent"], s["seed"]
    assert settings[0] == settings[1]  # one protocol: the game, its kwargs and split, seats, sampling, context
    out = tmp_path / "figures.json"
    for score in ("first_correct", "correct"):  # each comparison is one command: alone (A) against the pair (B)
        res = compare("--score", score, alone / "review", pair, "--json", out)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["pairs"][0]["items"] == 3
    assert compare(alone / "review@0", pair / "eval" / "step-0").exit_code == 0
    unlike = compare(alone, pair)  # its single answer against the pair's review: refused, naming why
    assert unlike.exit_code == 2 and "different protocols" in unlike.output and "env_id" in unlike.output


def test_a_checkpoint_evaluated_with_turnrl_eval_through_the_review_protocol_pairs_with_the_pair(runs, tmp_path):
    out = tmp_path / "alone-review"
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            GAME,
            "--kw",
            "levels=[1]",
            "--kw",
            "answer_format=auto",
            "--agent",
            f"run:{runs / 'alone'}",
            "--opponent",
            "self",
            "--limit",
            "3",
            "--max-new-tokens",
            "6",
            "--max-context",
            "1536",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "first_correct:" in res.output or "first_correct" in (out / "metrics.json").read_text()
    both = compare("--score", "first_correct", out, runs / "pair")
    assert both.exit_code == 0, both.output
    other = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            GAME,
            "--kw",
            "levels=[1]",
            "--agent",
            f"run:{runs / 'alone'}",
            "--opponent",
            "self",
            "--limit",
            "3",
            "--max-new-tokens",
            "6",
            "--max-context",
            "1536",
            "--out",
            str(tmp_path / "other"),
        ],
    )
    assert other.exit_code == 0, other.output
    refused = compare(tmp_path / "other", runs / "pair")  # a setting left out is another protocol
    assert refused.exit_code == 2 and "answer_format" in refused.output


def test_a_game_validates_on_its_validation_split_and_never_on_training_or_test_problems(runs):
    pair = runs / "pair"
    validation = make_multi_agent(GAME, levels=[1], split="validation")
    test = make_multi_agent(GAME, levels=[1], split="test")

    def problems(folder):
        return [json.loads(x)["item"].split("@")[0] for x in (folder / "items.jsonl").open()]

    for step in (0, 1):
        val, held = problems(pair / "validation" / f"step-{step}"), problems(pair / "eval" / f"step-{step}")
        assert sorted(val) == sorted(validation.state_key(i) for i in range(2))
        assert sorted(held) == sorted(test.state_key(i) for i in range(3)) and not set(val) & set(held)
    history = [json.loads(x) for x in (pair / "metrics.jsonl").read_text().splitlines()]
    assert all({"val_success", "val_first_correct_rate", "eval_first_correct_rate"} <= set(h) for h in history)
    from turnrl.rl.run.held_out import HeldOutError, check_game_validation

    with pytest.raises(HeldOutError, match="validation split 'validation' would pose 2 problem"):
        check_game_validation(GAME, {"levels": [1], "split": "validation"}, None, 2)
    with pytest.raises(ValueError, match="declares none"):
        check_game_validation("turnrl/TicTacToe-v0", {}, None, 2)


def train_refusal(tmp_path, text: str) -> str:
    """``turnrl train`` on a config that must be refused before a model loads (its model names none)."""
    config = tmp_path / "c.yaml"
    config.write_text("model: no-such-model-so-loading-would-fail\nout_dir: " + str(tmp_path / "run") + "\n" + text)
    res = CliRunner().invoke(app, ["train", str(config)])
    assert res.exit_code != 0 and "no-such-model" not in res.output, res.output
    return " ".join(res.output.split())


ARITH = "env: {id: turnrl/Arithmetic-v0, kwargs: {level: [1]}}\n"
REVIEW = "extra_evals: {review: {env: turnrl/SolverCritic-v0, kwargs: {levels: [1]}}}\n"


def test_bad_extra_evaluations_are_refused_before_a_model_loads(tmp_path):
    on_test = (
        "env: {id: turnrl/Arithmetic-v0, kwargs: {level: [1], split: test}, eval_kwargs: {split: validation}}\n"
        + REVIEW
    )
    assert (
        "extra_evals.review (turnrl/SolverCritic-v0): the held-out evaluation (split 'test') would pose"
        in train_refusal(tmp_path, on_test)
    )  # a run that trains on the problems the review would pose
    from turnrl.envs.registry import make
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.run.held_out import HeldOutError, check_extra_evals

    cfg = TrainConfig(
        model="tiny",
        env={"id": "turnrl/Arithmetic-v0", "kwargs": {"level": [1]}},
        validate_every=1,
        extra_evals={"review": {"env": GAME, "kwargs": {"levels": [1]}}},
    )
    assert check_extra_evals(cfg, make("turnrl/Arithmetic-v0", level=[1])) is None
    with pytest.raises(HeldOutError, match="extra_evals.review .*: its validation split 'validation' would pose"):
        check_extra_evals(cfg, make("turnrl/Arithmetic-v0", level=[1], split="validation"))
    assert "declares no validation split" in train_refusal(
        tmp_path, ARITH + "validate_every: 1\nextra_evals: {ttt: {env: turnrl/TicTacToe-v0}}\n"
    )
    assert "does not make" in train_refusal(
        tmp_path, ARITH + "extra_evals: {review: {env: turnrl/SolverCritic-v0, kwargs: {levels: [9]}}}\n"
    )
    assert "name an evaluation with letters" in train_refusal(
        tmp_path, ARITH + "extra_evals: {eval: {env: turnrl/SolverCritic-v0}}\n"
    )
    assert "has one agent: drop opponent and seat" in train_refusal(
        tmp_path, ARITH + "extra_evals: {gsm: {env: turnrl/Arithmetic-v0, opponent: random}}\n"
    )
    assert "drop extra_evals" in train_refusal(
        tmp_path, "env: {id: turnrl/SolverCritic-v0}\nmulti_agent: {eval_not_held_out: true}\n" + REVIEW
    )
    assert "declares none" in train_refusal(tmp_path, "env: {id: turnrl/TicTacToe-v0}\nvalidate_every: 1\n")


def test_a_killed_and_resumed_run_records_each_steps_extra_evaluation_once(tmp_path):
    """A run killed after a step it did not checkpoint plays that step again when resumed: metrics.jsonl holds each
    step once (its own evaluation's figures and the extra evaluation's), as the checkpoint left it, then the rest."""
    from turnrl.rl.run.trainer import Trainer, load_config

    out = tmp_path / "alone"
    cfg = load_config(
        "configs/solver-alone-lora.yaml",
        [
            "model=tiny:chatml",
            "steps=4",
            "eval_every=1",
            "checkpoint_every=2",
            "eval_tasks=2",
            "rollout.prompts_per_step=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
            "optim.minibatch_size=2",
            "optim.grad_accum=1",
            f"out_dir={out}",
        ],
    )
    with opened(Trainer(cfg)) as killed:
        killed.train(stop_after=3)  # steps 1-3 recorded, the checkpoint at step 2: killed before step 4
    before = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    with opened(Trainer(cfg)) as resumed:
        resumed.load(out / "checkpoint.pt")
        resumed.train()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4]
    assert all("eval_review_success" in r and "eval_review_first_correct_rate" in r for r in rows)
    figures = [k for k in rows[3] if k.startswith("eval_")]
    assert {k: rows[3][k] for k in figures} == {k: before[3][k] for k in figures}  # step 3 again, as it was
    assert sorted(d.name for d in (out / "review" / "eval").iterdir()) == [f"step-{i}" for i in range(5)]


def test_an_offline_dataset_that_poses_an_extra_evaluations_problems_is_refused(tmp_path):
    """An offline run's data is checked against its extra evaluations' problems too: episodes sampled from the
    arithmetic test split pose the review's test problems, even where the run's own evaluation reads another split."""
    from turnrl.agents.base import SamplingParams
    from turnrl.agents.tiny import tiny_model
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.run.trainer import Trainer
    from turnrl.rl.sources.collect import rollout_dataset
    from turnrl.rl.sources.replay import OfflineDataError

    tok = tiny_tokenizer("chatml")
    for split in ("test", "train"):  # right answers (rft needs some to imitate)
        rollout_dataset(
            ScriptedAgent(tok, solver("right", "right")),
            "scripted",
            "turnrl/Arithmetic-v0",
            out=tmp_path / f"{split}.jsonl",
            tasks=4,
            samples=1,
            params=SamplingParams(temperature=1.0, max_new_tokens=16),
            env_kwargs={"split": split, "level": [1]},
        )

    def config(data: str) -> TrainConfig:
        return TrainConfig.model_validate(
            {
                "model": "tiny:chatml",
                "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": [1]}, "eval_kwargs": {"split": "validation"}},
                "algorithm": {"name": "rft"},
                "data": {"path": str(tmp_path / data), "batch_size": 2},
                "rollout": {"max_new_tokens": 4},
                "eval_tasks": 4,
                "out_dir": str(tmp_path / "run"),
                "extra_evals": {"review": {"env": GAME, "kwargs": {"levels": [1]}}},
            }
        )

    with pytest.raises(OfflineDataError, match=r"holds 4 of the problems of extra_evals.review's held-out evaluation"):
        Trainer(config("test.jsonl"), model=tiny_model(tok), tokenizer=tok)
    Trainer(config("train.jsonl"), model=tiny_model(tok), tokenizer=tok).close()  # training problems: accepted


@pytest.mark.parametrize("index", [0, 7])
def test_the_solver_alone_trains_under_the_prompt_the_pairs_solver_sees(index):
    """Like for like in training too: configs/solver-alone-lora.yaml poses each problem with exactly the system message
    and user message the pair's solver is shown in turnrl/SolverCritic-v0, so that both solvers are scored under the
    prompt they trained under (not Arithmetic-v0's default prompt and its "End with 'The answer is N.'")."""
    import turnrl
    from turnrl.rl.config import load_config

    cfg = load_config("configs/solver-alone-lora.yaml", [])
    alone, _ = turnrl.make(cfg.env.id, **cfg.env.kwargs).reset(options={"index": index})
    pair_cfg = load_config("configs/solver-critic-lora.yaml", [])
    game = make_multi_agent(pair_cfg.env.id, **pair_cfg.env.kwargs)
    game.reset(options={"index": index})
    seen = game.observe("solver")
    assert [(m.role, m.content) for m in alone] == [(m.role, m.content) for m in seen] and len(seen) == 2
