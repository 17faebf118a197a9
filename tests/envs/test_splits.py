"""Held-out sets that cannot leak (issue 77): canonical forms, splits by canonical form, the split check over every
registered environment, and a training run's validation split.

The leaks these tests were written against were real: level-1 arithmetic split on a hash of the problem's *text*, so
"12 + 7" could be test while "7 + 12" was train (52 of the first 64 test tasks had their commuted form in training),
and the 64 test tasks held 33 distinct problems. Each attempt to sneak a test problem into training is kept here.
"""

import json
import re
from pathlib import Path

import pytest
from tiny_trainer import tiny_trainer as _trainer
from typer.testing import CliRunner

import turnrl
from turnrl.cli.commands import app
from turnrl.envs import Task, ToolEnv
from turnrl.envs.builtin.arithmetic import GENERATORS, ArithmeticTasks, canonical, held_out_problems, split_of
from turnrl.envs.conformance.split_check import check_splits, held_out_overlap
from turnrl.envs.registry import BUILTIN_ENVS
from turnrl.envs.splits import canonical_expression, canonical_key, normalize_text, split_of_key


@pytest.mark.parametrize(
    "a, b",
    [
        ("12 + 7", "7 + 12"),
        ("(3 + 4) * 5", "5 * (4 + 3)"),
        ("10 + 2 * 3 - 4", "3 * 2 + 10 - 4"),
        ("12.0 + 7", "7 + 12"),
        ("8 × 3", "3 * 8"),
        ("-3 + 5", "5 - 3"),
        ("a_b", None),
    ][:-1],
)
def test_equivalent_expressions_share_a_canonical_form(a, b):
    assert canonical_expression(a) == canonical_expression(b)


@pytest.mark.parametrize(
    "a, b",
    [
        ("12 - 7", "7 - 12"),
        ("56 / 7", "7 / 56"),
        ("(3 + 4) * 5", "3 + 4 * 5"),
        ("2 ** 3", "3 ** 2"),
        ("12 + 7", "12 + 8"),
    ],
)
def test_different_problems_keep_different_forms(a, b):
    assert canonical_expression(a) != canonical_expression(b)


def test_what_is_not_arithmetic_is_refused():
    for bad in ("import os", "x + 1", "12 +", "f(3)"):
        with pytest.raises(ValueError, match="not an arithmetic expression"):
            canonical_expression(bad)


def test_question_text_is_compared_as_a_reader_would():
    assert normalize_text("  What is  the\tcapital of France? ") == normalize_text("what is the capital of france")
    assert canonical_key(Task(id="a", prompt="Who?", answer="")) == canonical_key(Task(id="b", prompt="who", answer=""))
    assert canonical_key(Task(id="a", prompt="x", answer="", metadata={"canonical": "k"})) == "k"


def test_split_of_key_respects_the_shares():
    keys = [f"k{i}" for i in range(20_000)]
    got = [split_of_key(k, {"test": 0.1, "validation": 0.05}) for k in keys]
    assert abs(got.count("test") / len(keys) - 0.1) < 0.01 and abs(got.count("validation") / len(keys) - 0.05) < 0.01
    with pytest.raises(ValueError):
        split_of_key("k", {"test": 0.6, "validation": 0.5})


# ---- arithmetic: the attempts to leak ----


def test_a_sum_and_its_commuted_form_fall_on_the_same_side():
    for a in range(1, 21):
        for b in range(1, 21):
            assert split_of(f"{a} + {b}") == split_of(f"{b} + {a}")


def test_level_1_has_a_test_set_of_at_least_100_distinct_problems_none_in_training():
    test = ArithmeticTasks([1], "test")
    keys = [test[i].metadata["canonical"] for i in range(len(test))]
    assert len(test) >= 100 and len(set(keys)) == len(keys)  # ±5 points of standard error at most
    every = {canonical(f"{a} + {b}") for a in range(1, 21) for b in range(1, 21)}
    assert set(keys) == {k for k in every if split_of_key(k, {"test": 0.52, "validation": 0.15}) == "test"}
    train = ArithmeticTasks([1], "train", 5000)
    seen = {(train[i].prompt, train[i].metadata["canonical"]) for i in range(5000)}
    assert not {k for _, k in seen} & set(keys)
    # training poses both orders of its sums: the canonical split, not the text, keeps them out of test
    prompts = {q for q, _ in seen}
    operands = [q.removeprefix("What is ").removesuffix("?").split(" + ") for q in prompts]
    assert any(a != b and f"What is {b} + {a}?" in prompts for a, b in operands)


def test_a_level_2_run_never_trains_on_a_level_1_test_problem():
    """Sums of 10-20 are problems of both levels: one side for both, or a [1, 2] curriculum would leak."""
    level1_test = {p[2] for p in held_out_problems(1, "test")}
    keys = {canonical(e) for e in level1_test}
    train = ArithmeticTasks([2], "train", 20_000)
    assert not keys & {train[i].metadata["canonical"] for i in range(20_000)}


def test_word_problems_are_the_same_problem_once_the_story_is_stripped():
    """Ava's savings and a farmer's trees are one problem when their arithmetic is (level 5's templates)."""
    assert canonical("3 * 5 - 4") == canonical("5 * 3 - 4")
    tasks = ArithmeticTasks([5], "train", 3000)
    stories: dict[str, set[str]] = {}
    for i in range(3000):
        t = tasks[i]
        stories.setdefault(t.metadata["canonical"], set()).add(t.prompt.split()[1])
    assert any(len(s) > 1 for s in stories.values())  # one problem told as several stories: one split for all


@pytest.mark.parametrize("levels", [[1], [3], [1, 2, 3, 4, 5], [1, 1, 2]])
def test_held_out_splits_hold_distinct_problems_and_nothing_of_training(levels):
    report = check_splits("turnrl/Arithmetic-v0", {"level": levels}, limit=5000)
    assert report.ok, str(report)
    assert (
        report.tasks["test"] == report.distinct["test"] and report.tasks["validation"] == report.distinct["validation"]
    )


def test_every_level_generates_problems_whose_answers_are_right():
    for level in GENERATORS:
        for _q, answer, expr in held_out_problems(level, "test")[:50]:
            assert answer == eval(expr.replace("/", "//"))  # our own generated expressions


# ---- the check over every registered environment ----


@pytest.mark.parametrize(
    "env_id, kwargs",
    [(e, {}) for e in sorted(BUILTIN_ENVS) if e != "turnrl/Mixture-v0"]
    + [
        ("turnrl/GSM8K-v0", {"split": "train"}),
        ("turnrl/HotPotQA-v0", {"split": "dev-train"}),
        ("turnrl/Mixture-v0", {"envs": [{"id": "turnrl/Arithmetic-v0"}, {"id": "turnrl/Functions-v0"}]}),
    ],
)
def test_every_registered_environment_with_splits_keeps_them_apart(env_id, kwargs, data_dir):
    report = check_splits(env_id, kwargs, limit=5000)
    assert report.ok, str(report)


class Leaky(ToolEnv):
    """Splits on the problem's text, as level 1 did: "a + b" in test, "b + a" in train."""

    def __init__(self, split="train"):
        pairs = [(a, b) for a in range(1, 6) for b in range(1, 6) if a != b]
        mine = [(a, b) for a, b in pairs if (a < b) == (split == "test")]
        super().__init__(
            [
                Task(
                    id=f"{a}+{b}",
                    prompt=f"What is {a} + {b}?",
                    answer=str(a + b),
                    metadata={"canonical": canonical(f"{a} + {b}")},
                )
                for a, b in mine
            ],
            verifier=lambda text, ref: None,
        )
        self.split, self.held_out_split = split, "test"


turnrl.register("tests/Leaky-v0", Leaky)


def test_a_split_on_text_is_caught_by_the_check_and_by_envs_check():
    report = check_splits("tests/Leaky-v0")
    assert not report.ok and report.overlaps[("train", "test")] == sorted(
        {canonical(f"{a} + {b}") for a in range(1, 6) for b in range(a + 1, 6)}
    )
    assert "FAIL splits train and test share 10 problem(s)" in str(report)
    result = CliRunner().invoke(app, ["envs", "check", "tests/Leaky-v0", "--no-call-tools"])
    assert result.exit_code == 1 and "share 10 problem(s)" in result.output
    assert held_out_overlap(turnrl.make("tests/Leaky-v0"), turnrl.make("tests/Leaky-v0", split="test"), 3)


# ---- a training run's validation split ----


def _config(tmp_path, env, **extra):
    from turnrl.rl.run.trainer import TrainConfig

    return TrainConfig(
        model="tiny",
        env=env,
        algorithm={"name": "grpo"},
        rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
        optim={"lr": 1e-2, "minibatch_size": 4},
        steps=2,
        eval_tasks=3,
        out_dir=str(tmp_path),
        **extra,
    )


def test_validate_every_reads_the_validation_split_and_eval_reads_test(tmp_path):
    trainer = _trainer(_config(tmp_path, {"id": "turnrl/Arithmetic-v0"}, validate_every=2, validation_tasks=4))
    try:
        history = trainer.train()
    finally:
        trainer.close()
    assert [h["step"] for h in history if "val_success" in h] == [0.0, 2.0]
    assert [h["step"] for h in history if "eval_success" in h] == [0.0, 2.0]
    for step in (0, 2):
        val = [json.loads(x)["task_id"] for x in (tmp_path / "validation" / f"step-{step}" / "items.jsonl").open()]
        test = [json.loads(x)["task_id"] for x in (tmp_path / "eval" / f"step-{step}" / "items.jsonl").open()]
        assert val == [f"arithmetic/validation/L1/{i}" for i in range(4)]
        assert test == [f"arithmetic/test/L1/{i}" for i in range(3)]


def test_validate_every_on_an_environment_without_a_validation_split_is_refused(tmp_path):
    import toy_envs  # noqa: F401 — registers tests/Upper-v0 (no splits)

    config = tmp_path / "c.yaml"
    config.write_text(f"model: tiny\nenv: {{id: tests/Upper-v0}}\nvalidate_every: 1\nout_dir: {tmp_path / 'run'}\n")
    result = CliRunner().invoke(app, ["train", str(config), "--import", "toy_envs"])
    assert result.exit_code != 0 and "declares no validation split" in result.output


def test_validation_problems_a_run_trains_on_are_refused(data_dir):
    """The review's cases: a run trained on its validation split, and GSM8K given one file by path for both."""
    from turnrl.rl.run.held_out import HeldOutError, check_validation

    on_validation = turnrl.make("turnrl/Arithmetic-v0", split="validation")
    with pytest.raises(HeldOutError, match="would pose 42 problem"):
        check_validation("turnrl/Arithmetic-v0", on_validation, {"split": "validation"}, 64)
    check_validation("turnrl/Arithmetic-v0", turnrl.make("turnrl/Arithmetic-v0"), {"split": "validation"}, 64)
    with pytest.raises(ValueError, match="validation would be the training problems"):
        turnrl.make("turnrl/GSM8K-v0", split="validation", path=str(data_dir / "gsm8k" / "train.jsonl"))


def test_the_check_reads_the_training_split_whichever_split_the_environment_was_made_with(data_dir):
    for env_id, train in (
        ("turnrl/GSM8K-v0", "train"),
        ("turnrl/Arithmetic-v0", "train"),
        ("turnrl/Functions-v0", "train"),
    ):
        report = check_splits(env_id, {"split": "test"}, limit=2000)
        assert report.ok and train in report.tasks and len(report.overlaps) == 3, str(report)


def test_a_game_with_a_list_of_problems_is_checked_like_an_environment():
    """The review's case: the solver-critic game trained on its test split was evaluated on that same split."""
    from turnrl.rl.run.held_out import HeldOutError, check_game_held_out

    with pytest.raises(HeldOutError, match="would pose 8 problem"):
        check_game_held_out("turnrl/SolverCritic-v0", {"split": "test", "levels": [1]}, None, 8)
    assert check_game_held_out("turnrl/SolverCritic-v0", {"split": "train", "levels": [1]}, None, 64) is None
    assert check_game_held_out("turnrl/TicTacToe-v0", {}, None, 8) is None  # starting states, no problems to compare


def test_turnrl_train_refuses_validation_problems_it_trains_on_before_a_model_loads(tmp_path):
    """With validate_every, a run on its own validation split is refused by the command line's checks (before the
    model loads), not only by the trainer at its first evaluation."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: no-such-model-so-loading-would-fail\nenv: {id: turnrl/Arithmetic-v0, kwargs: "
        f"{{split: validation}}, eval_kwargs: {{split: test}}}}\nvalidate_every: 1\nout_dir: {tmp_path}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code != 0
    assert "the validation split 'validation' would pose 42 problem(s) this run trains on" in " ".join(
        result.output.split()
    )


def test_task_keys_reads_an_environments_tasks_once():
    from turnrl.envs.conformance.split_check import task_keys

    env = turnrl.make("turnrl/Arithmetic-v0", split="validation")
    reads = []
    task_at = env.unwrapped.task_at
    env.unwrapped.task_at = lambda i: reads.append(i) or task_at(i)
    first = task_keys(env, 30)
    assert len(reads) == 30 and task_keys(env, 20) == first[:20] and len(reads) == 30
    assert task_keys(env, 40)[:30] == first and len(reads) == 70  # more than kept: read again


def test_every_parse_in_the_package_and_examples_takes_the_one_lock():
    """CPython 3.11's ast.parse keeps its recursion depth interpreter-wide: two parses in threads at once can fail
    with "SystemError: AST constructor recursion depth mismatch" (cpython#106905; a gateway test with 32 sessions
    did on CI). Every parse must go through ``turnrl.utils.parse_python`` — locks of their own do not exclude
    each other. The sandbox's harness runs in a process of its own and is exempt."""
    root = Path(__file__).resolve().parents[2]
    exempt = {root / "turnrl" / "verifiers" / "harness.py", root / "turnrl" / "utils.py"}
    offenders = [
        str(p.relative_to(root))
        for folder in ("turnrl", "examples", "bench")
        for p in (root / folder).rglob("*.py")
        if p not in exempt and re.search(r"\bast\.parse\(", p.read_text())
    ]
    assert not offenders, f"ast.parse outside turnrl.utils.parse_python: {offenders}"


def test_canonical_forms_parse_in_many_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor

    expressions = [f"({i} + {i + 1}) * {i % 7} - {i}" for i in range(400)]
    with ThreadPoolExecutor(16) as pool:
        forms = list(pool.map(canonical_expression, expressions))
    assert forms == [canonical_expression(e) for e in expressions]
