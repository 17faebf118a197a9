"""The calculator teacher (turnrl/methods/swirl/gold_steps.py): each generated arithmetic problem's calculator path,
one operation a turn, played in the live environment, for training problems only."""

import pytest
from typer.testing import CliRunner

import turnrl
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.cli import app
from turnrl.envs.builtin.arithmetic import LEVELS
from turnrl.envs.core import Task
from turnrl.methods.swirl.filters import filter_trajectories
from turnrl.methods.swirl.gold_steps import GoldStepsAgent, calculator_steps
from turnrl.methods.swirl.judges import RuleStepJudge
from turnrl.storage import load

TOK = tiny_tokenizer("chatml")


def test_the_steps_follow_the_order_of_evaluation_with_the_earlier_steps_values():
    assert calculator_steps("60 - 4 * 8") == [("4 * 8", 32), ("60 - 32", 28)]
    assert calculator_steps("(23 + 18) * 4") == [("23 + 18", 41), ("41 * 4", 164)]
    assert calculator_steps("12 * 3 + 7 * 2") == [("12 * 3", 36), ("7 * 2", 14), ("36 + 14", 50)]
    assert calculator_steps("672 / 8") == [("672 / 8", 84)]
    assert calculator_steps("5") == []
    for bad in ("7 / 2", "3 / 0", "2 ** 8", "1.5 + 2", "x + 1", "__import__('os')", "3 +", "True + 1"):
        with pytest.raises(ValueError):
            calculator_steps(bad)


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_s_path_ends_at_the_gold_answer(level):
    """The path's last value is the task's answer on 300 training problems of every level: the teacher never
    teaches a wrong sum."""
    tasks = turnrl.make("turnrl/Arithmetic-v0", level=level, split="train").unwrapped.tasks
    for i in range(300):
        task = tasks[i]
        steps = calculator_steps(task.metadata["expression"])
        assert steps and str(steps[-1][1]) == task.answer, (task.prompt, steps)


def _generate(tmp_path, *kw, tasks="10"):
    args = ["swirl", "generate", "--env", "turnrl/Arithmetic-v0", "--agent", "gold", "--tokenizer", "tiny:chatml"]
    for k in kw:
        args += ["--kw", k]
    out = str(tmp_path / "gold.parquet")
    return CliRunner().invoke(app, [*args, "--tasks", tasks, "--samples", "1", "--max-new-tokens", "64", "--out", out])


def test_the_teacher_plays_one_operation_a_turn_then_the_gold_answer(tmp_path):
    r = _generate(tmp_path, "level=[4,5]", "split=train", "tool_style=swirl")
    assert r.exit_code == 0 and "10 trajectories of 10 questions" in r.output, r.output
    trajs = load(str(tmp_path / "gold.parquet"))
    tasks = turnrl.make("turnrl/Arithmetic-v0", level=[4, 5], split="train").unwrapped.tasks
    by_question = {tasks[i].prompt: tasks[i] for i in range(10)}
    assert {t.metadata["question"] for t in trajs} == set(by_question)
    for t in trajs:
        task = by_question[t.metadata["question"]]
        steps = calculator_steps(task.metadata["expression"])
        actions = [turn.action.content for turn in t.turns]
        assert actions == [f"<math_exp>{s}</math_exp>" for s, _ in steps] + [f"<answer>{task.answer}</answer>"]
        # the calculator's own results, as the environment wrote them, carry each step's value
        for turn, (s, v) in zip(t.turns, steps):
            assert turn.observation[0].content.strip().endswith(f"{s} -> {v}"), turn.observation[0].content
        assert t.correct is True and len(t.turns) >= 3  # levels 4 and 5 take two or three operations
    # SWiRL's filters keep every one: each step is GOOD for the rule judge and the outcome is right
    kept, report = filter_trajectories(trajs, "both", RuleStepJudge())
    assert len(kept) == len(trajs), report


@pytest.mark.parametrize("split", ["validation", "test"])
def test_the_teacher_refuses_held_out_problems(tmp_path, split):
    r = _generate(tmp_path, "level=4", f"split={split}", "tool_style=swirl")
    assert r.exit_code == 2 and "held-out split" in r.output, r.output


def test_the_teacher_finds_the_last_problem_posed_and_refuses_an_unknown_one():
    short = Task(id="a", prompt="What is 7 + 1?", answer="8", metadata={"expression": "7 + 1"})
    longer = Task(id="b", prompt="What is 7 + 12?", answer="19", metadata={"expression": "7 + 12"})
    word = Task(id="c", prompt="Tom has 3 boxes of 5 pens.", answer="15", metadata={"expression": "3 * 5"})
    agent = GoldStepsAgent(TOK, [short, longer, word])
    # a demonstration's problem (and its calculator call) before the one asked, and a problem whose text begins
    # another's: the last and longest is the one answered, and only the calls after it count
    demo = "user\nTom has 3 boxes of 5 pens.\nassistant\n<math_exp>3 * 5</math_exp>\ntool\n3 * 5 -> 15\n"
    prompt = f"{demo}user\nWhat is 7 + 12?\n"
    assert agent.step(prompt) == "<math_exp>7 + 12</math_exp>"
    assert agent.step(prompt + "assistant\n<math_exp>7 + 12</math_exp>\n") == "<answer>19</answer>"
    assert agent.step("user\nWhat is 7 + 1?\n") == "<math_exp>7 + 1</math_exp>"
    with pytest.raises(ValueError, match="found none of its"):
        agent.step("user\nWhat is the capital of France?\n")
    with pytest.raises(ValueError, match="metadata\\['expression'\\]"):
        GoldStepsAgent(TOK, [Task(id="d", prompt="Who wrote Hamlet?", answer="Shakespeare")])
