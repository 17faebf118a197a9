import json
import math

import pytest
from typer.testing import CliRunner

from turnrl.agents import SamplingParams, make_agent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.cli import app
from turnrl.rl.run.evaluate import evaluate, pass_at_k


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 3) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    assert pass_at_k(10, 3, 10) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_scripted_eval_counts_correct_answers(tmp_path):
    tok = tiny_tokenizer("chatml")

    def half_right(prompt: str) -> str:  # right on even sums, wrong on odd ones
        q = prompt.rsplit("What is ", 1)[1].split("?")[0]
        value = eval(q)  # noqa: S307 — our generated arithmetic
        return f"\\boxed{{{value if value % 2 == 0 else value + 1}}}"

    metrics = evaluate(ScriptedAgent(tok, half_right), "turnrl/Arithmetic-v0", env_kwargs={"level": 2}, limit=20,
                       samples=2, out=tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and metrics["episodes"] == 40 and metrics["tasks"] == 20
    expected = sum(int(r["final_response"][7:-1]) % 2 == 0 and r["correct"] for r in rows) / 40
    assert metrics["accuracy"] == pytest.approx(expected) and 0 < metrics["accuracy"] < 1
    assert metrics["pass@1"] == metrics["accuracy"] and metrics["pass@2"] == metrics["accuracy"]  # deterministic agent
    assert (tmp_path / "report.md").read_text().startswith("# turnrl/Arithmetic-v0")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 40


def test_eval_repeats_with_the_same_seed(tmp_path):
    agent = make_agent("tiny:chatml")
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    kwargs = dict(env_kwargs={"calculator": True, "max_turns": 2}, limit=6, samples=3, params=params)
    a = evaluate(agent, "turnrl/Arithmetic-v0", seed=1, out=tmp_path / "a", **kwargs)
    b = evaluate(agent, "turnrl/Arithmetic-v0", seed=1, out=tmp_path / "b", **kwargs)
    evaluate(agent, "turnrl/Arithmetic-v0", seed=2, out=tmp_path / "c", **kwargs)
    items = lambda d: (tmp_path / d / "items.jsonl").read_text()  # noqa: E731
    assert items("a") == items("b") and items("a") != items("c")
    drop = lambda m: {k: v for k, v in m.items() if k not in ("wall_seconds", "generated_tokens_per_second")}  # noqa: E731
    assert drop(a) == drop(b)


def test_eval_cli(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--env", "turnrl/Arithmetic-PAG-v0", "--agent", "tiny:gemma", "--limit",
                                      "3", "--samples", "2", "--max-new-tokens", "8", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "pass@2" in result.output and (tmp_path / "metrics.json").exists()
    result = CliRunner().invoke(app, ["eval", "--env", "turnrl/Arithmetic-v0", "--agent", "gpt:x"])
    assert result.exit_code == 2 and "unknown agent spec" in result.output



def test_eval_defaults_to_the_held_out_split_and_says_so(tmp_path):
    agent = make_agent("tiny:chatml")
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    m = evaluate(agent, "turnrl/Arithmetic-v0", limit=3, params=params, out=tmp_path / "held")
    ids = [json.loads(x)["task_id"] for x in (tmp_path / "held" / "items.jsonl").read_text().splitlines()]
    assert ids == [f"arithmetic/test/L1/{i}" for i in range(3)] and m["split"] == "test" and m["held_out"] is True
    report = (tmp_path / "held" / "report.md").read_text()
    assert "split: **test** (held-out) · tasks 0–2 of 100000 (`arithmetic/test/L1/0` … `arithmetic/test/L1/2`)" in report
    # a split named by the caller is kept, and the report says it is not held out
    m = evaluate(agent, "turnrl/Arithmetic-v0", env_kwargs={"split": "train"}, limit=2, params=params,
                 out=tmp_path / "train")
    assert m["split"] == "train" and m["held_out"] is False
    assert "split: **train** — NOT held-out (training tasks; its held-out split is test)" in (
        tmp_path / "train" / "report.md").read_text()
    # PAG wraps its inner env's splits; an env that declares none is reported as unknown
    m = evaluate(agent, "turnrl/Arithmetic-PAG-v0", limit=1, params=params)
    assert m["split"] == "test" and m["held_out"] is True
    evaluate(agent, "toy_envs:tests/Upper-v0", limit=1, params=params, out=tmp_path / "toy")
    assert "split: not declared by the environment" in (tmp_path / "toy" / "report.md").read_text()


def test_training_evaluates_the_held_out_split_unless_told():
    import turnrl
    from turnrl.rl.run.evaluate import run_eval_kwargs

    train = turnrl.make("turnrl/Arithmetic-v0", split="train", level=2)
    assert run_eval_kwargs(train, {"split": "train", "level": 2}, None) == {"split": "test", "level": 2}
    assert run_eval_kwargs(train, {"level": 2}, {"level": 3}) == {"split": "test", "level": 3}
    assert run_eval_kwargs(train, {"split": "train"}, {"split": "train"}) == {"split": "train"}  # said explicitly
    gsm = turnrl.make("turnrl/GSM8K-v0", split="train", limit=2)
    assert run_eval_kwargs(gsm, {"split": "train", "limit": 2}, None)["split"] == "test"
    assert turnrl.make("turnrl/HotPotQA-v0").held_out_split == "dev"


def test_eval_cli_reports_the_split(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--env", "turnrl/Arithmetic-v0", "--agent", "tiny:chatml", "--limit", "2",
                                      "--max-new-tokens", "4", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "split: **test** (held-out)" in result.output and "arithmetic/test/L1/1" in result.output
    result = CliRunner().invoke(app, ["eval", "--env", "turnrl/Arithmetic-v0", "--agent", "tiny:chatml", "--limit", "1",
                                      "--max-new-tokens", "4", "--kw", "split=train", "--out", str(tmp_path / "t")])
    assert result.exit_code == 0 and "NOT held-out" in result.output, result.output


@pytest.mark.slow
def test_smollm2_eval_on_gsm8k(tmp_path):
    """The real built-in model, end to end (fetched and converted once into the cache)."""
    agent = make_agent("smollm2-135m-instruct", batch_size=4)
    metrics = evaluate(agent, "turnrl/GSM8K-v0", limit=4, out=tmp_path,
                       params=SamplingParams(temperature=0.0, max_new_tokens=48))
    assert metrics["episodes"] == 4 and metrics["errors"] == 0
    assert 0 < metrics["generated_tokens_per_episode"] <= 48
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert all(r["final_response"] for r in rows)  # the model said something


def test_report_shows_whole_episodes_and_why_answers_failed(tmp_path):
    """A scripted agent that calls the calculator, then answers right, wrong or not at all by the task's sum."""
    import re

    from turnrl.rl.run.evaluate import figure

    tok = tiny_tokenizer("chatml")

    def policy(prompt: str) -> str:
        question = prompt.rsplit("What is ", 1)[1].split("?")[0]
        if "<calculator>" not in prompt.rsplit("What is ", 1)[1]:
            return f"<calculator>{question}</calculator>"
        value = int(re.findall(r"-?\d+", prompt.rsplit("<calculator>", 1)[1].split("</calculator>", 1)[1])[0])
        return [f"\\boxed{{{value}}}", f"\\boxed{{{value + 1}}}", "I am not sure."][value % 3]

    env_kwargs = {"level": 1, "calculator": True, "tool_style": "tags"}
    evaluate(ScriptedAgent(tok, policy), "turnrl/Arithmetic-v0", env_kwargs=env_kwargs, limit=12, out=tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    reasons = [r["failure"] for r in rows]
    assert {None, "wrong", "no answer"} == set(reasons) and all(r["tool_calls"] == 1 for r in rows)
    report = (tmp_path / "report.md").read_text()
    failed = [r for r in reasons if r]
    assert (f"| no answer | {failed.count('no answer')} | {failed.count('no answer') / len(failed):.3f} |"
            in report.split("## Why answers failed", 1)[1])
    episodes = report.split("## Example episodes", 1)[1].split("## Configuration")[0]
    assert episodes.count("### ") == 6  # 2 successes and 4 failures, the reasons taking turns
    assert "(correct, 2 turn(s), reward 1)" in episodes and "(failed: no answer, 2 turn(s)" in episodes
    assert "> **assistant, turn 0, reward 0**: <calculator>" in episodes and "> **tool:calculator**: " in episodes
    titles = [ax.get_title() for ax in figure(json.loads((tmp_path / "metrics.json").read_text()), rows, "t").axes]
    assert titles[0].startswith("outcomes") and "pass@k" not in titles  # one sample: no pass@k curve
    metrics = {"accuracy": 0.5, "pass@1": 0.5, "pass@2": 0.7}
    assert figure(metrics, rows, "t").axes[0].get_title() == "pass@k"
    assert [ax.get_xlabel() for ax in figure(metrics, rows, "t").axes[1:3]] == ["turns per episode",
                                                                               "tool calls per episode"]
