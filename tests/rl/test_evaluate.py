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
        value = eval(q)  # our generated arithmetic
        return f"\\boxed{{{value if value % 2 == 0 else value + 1}}}"

    metrics = evaluate(
        ScriptedAgent(tok, half_right),
        "turnrl/Arithmetic-v0",
        env_kwargs={"level": 2},
        limit=20,
        samples=2,
        out=tmp_path,
    )
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
    kwargs = {"env_kwargs": {"calculator": True, "max_turns": 2}, "limit": 6, "samples": 3, "params": params}
    a = evaluate(agent, "turnrl/Arithmetic-v0", seed=1, out=tmp_path / "a", **kwargs)
    b = evaluate(agent, "turnrl/Arithmetic-v0", seed=1, out=tmp_path / "b", **kwargs)
    evaluate(agent, "turnrl/Arithmetic-v0", seed=2, out=tmp_path / "c", **kwargs)
    items = lambda d: (tmp_path / d / "items.jsonl").read_text()
    assert items("a") == items("b") and items("a") != items("c")
    drop = lambda m: {k: v for k, v in m.items() if k not in ("wall_seconds", "generated_tokens_per_second")}
    assert drop(a) == drop(b)


def test_eval_cli(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/Arithmetic-PAG-v0",
            "--agent",
            "tiny:gemma",
            "--limit",
            "3",
            "--samples",
            "2",
            "--max-new-tokens",
            "8",
            "--out",
            str(tmp_path),
        ],
    )
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
    assert "split: **test** (held-out) · tasks 0–2 of 102 (`arithmetic/test/L1/0` … `arithmetic/test/L1/2`)" in report
    # a split named by the caller is kept, and the report says it is not held out
    m = evaluate(
        agent, "turnrl/Arithmetic-v0", env_kwargs={"split": "train"}, limit=2, params=params, out=tmp_path / "train"
    )
    assert m["split"] == "train" and m["held_out"] is False
    assert (
        "split: **train** — NOT held-out (training tasks; its held-out split is test)"
        in (tmp_path / "train" / "report.md").read_text()
    )
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
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/Arithmetic-v0",
            "--agent",
            "tiny:chatml",
            "--limit",
            "2",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "split: **test** (held-out)" in result.output and "arithmetic/test/L1/1" in result.output
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--env",
            "turnrl/Arithmetic-v0",
            "--agent",
            "tiny:chatml",
            "--limit",
            "1",
            "--max-new-tokens",
            "4",
            "--kw",
            "split=train",
            "--out",
            str(tmp_path / "t"),
        ],
    )
    assert result.exit_code == 0 and "NOT held-out" in result.output, result.output


def test_smollm2_eval_on_gsm8k(tmp_path):
    """The real built-in model, end to end (fetched and converted once into the cache)."""
    agent = make_agent("smollm2-135m-instruct", batch_size=4)
    metrics = evaluate(
        agent, "turnrl/GSM8K-v0", limit=4, out=tmp_path, params=SamplingParams(temperature=0.0, max_new_tokens=48)
    )
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
    assert [r["outcome"] for r in rows] == [r or "correct" for r in reasons]
    report = (tmp_path / "report.md").read_text()
    assert (
        f"| no answer | {reasons.count('no answer')} | {reasons.count('no answer') / len(rows):.3f} |"
        in report.split("## Outcomes", 1)[1]
    )
    episodes = report.split("## Example episodes", 1)[1].split("## Configuration")[0]
    assert episodes.count("### ") == 6  # 2 successes and 4 failures, the reasons taking turns
    assert "(correct, 2 turn(s), reward 1)" in episodes and "(failed: no answer, 2 turn(s)" in episodes
    assert "> **assistant, turn 0, reward 0**: <calculator>" in episodes and "> **tool:calculator**: " in episodes
    titles = [ax.get_title() for ax in figure(json.loads((tmp_path / "metrics.json").read_text()), rows, "t").axes]
    assert titles[0].startswith("outcomes") and "pass@k" not in titles  # one sample: no pass@k curve
    metrics = {"accuracy": 0.5, "pass@1": 0.5, "pass@2": 0.7}
    assert [ax.get_title() for ax in figure(metrics, rows, "t").axes[:2]] == ["outcomes (accuracy 0.500)", "pass@k"]
    assert [ax.get_xlabel() for ax in figure(metrics, rows, "t").axes[2:4]] == [
        "turns per episode",
        "tool calls per episode",
    ]


def _arithmetic_policy(prompt: str) -> str:
    """By the task's sum: right, a long reply cut at the token limit before its (right) answer, no answer, wrong."""
    value = eval(prompt.rsplit("What is ", 1)[1].split("?")[0])  # our generated arithmetic
    return [
        f"\\boxed{{{value}}}",
        "Let me think step by step. " * 10 + f"\\boxed{{{value}}}",
        "I am not sure.",
        f"\\boxed{{{value + 1}}}",
    ][value % 4]


def test_replies_cut_at_max_new_tokens_are_counted_apart(tmp_path):
    """Issue 32 §6: a reply cut at max_new_tokens is its own outcome — not 'no answer' — in the items, the metrics,
    the report (each cut turn marked) and the plot (the limit drawn on the per-turn lengths)."""
    from turnrl.rl.run.evaluate import figure

    agent = ScriptedAgent(tiny_tokenizer("chatml"), _arithmetic_policy)
    m = evaluate(
        agent, "turnrl/Arithmetic-v0", limit=16, params=SamplingParams(temperature=0.0, max_new_tokens=12), out=tmp_path
    )
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    cut = [r for r in rows if r["final_response"].startswith("Let me think")]
    assert cut and all(r["outcome"] == r["failure"] == "token limit" and r["turn_tokens"] == [12] for r in cut)
    assert {r["outcome"] for r in rows} == {"correct", "token limit", "no answer", "wrong"}
    assert m["outcomes"]["token limit"] == len(cut) == m["turns_cut_at_token_limit"]
    assert m["outcomes"]["no answer"] == sum(r["final_response"] == "I am not sure." for r in rows)
    assert sum(m["outcomes"].values()) == 16 and m["token_limit_rate"] == len(cut) / 16
    report = (tmp_path / "report.md").read_text()
    assert f"| token limit | {len(cut)} | {len(cut) / 16:.3f} |" in report
    assert "- *token limit*: the last reply was cut at its token limit (12)" in report
    assert "(failed: token limit, 1 turn(s), reward 0)" in report
    assert "> **assistant, turn 0, reward 0, cut at max_new_tokens (12 tokens)**: Let me think" in report
    fig = figure(m, rows, "t", max_new_tokens=12)
    bars = dict(
        zip([t.get_text() for t in fig.axes[0].get_xticklabels()], [p.get_height() for p in fig.axes[0].patches])
    )
    assert bars["token limit"] == len(cut) and bars["no answer"] == m["outcomes"]["no answer"]
    per_turn = next(ax for ax in fig.axes if ax.get_xlabel() == "generated tokens per turn")
    assert [line.get_xdata()[0] for line in per_turn.get_lines()] == [12]
    assert per_turn.get_legend().get_texts()[0].get_text() == "max_new_tokens = 12"
    assert per_turn.get_title() == f"{len(cut)} of 16 turn(s) cut at the token limit"
    # a cut reply that leaves no room in the context is the context's doing, not the token limit's
    m = evaluate(
        agent,
        "turnrl/Arithmetic-v0",
        limit=4,
        params=SamplingParams(temperature=0.0, max_new_tokens=64),
        max_context=56,
    )
    assert m["outcomes"]["token limit"] == 0 and m["outcomes"]["context limit"] >= 1, m["outcomes"]


def test_count_axes_have_integer_ticks():
    """Issue 32 §8: episodes, turns and tool calls are counted in whole numbers on every plot axis."""
    from turnrl.rl.run.evaluate import figure

    rows = [
        {"correct": c, "outcome": o, "turns": t, "tool_calls": 0, "generated_tokens": g, "turn_tokens": [g]}
        for c, o, t, g in ((True, "correct", 1, 5), (False, "wrong", 2, 7), (False, "wrong", 1, 3))
    ]
    fig = figure({"accuracy": 1 / 3, "pass@1": 1 / 3}, rows, "t", max_new_tokens=8)
    fig.canvas.draw()
    for ax in fig.axes:
        axis_ticks = [("y", ax.get_yticks())] + (
            [("x", ax.get_xticks())] if ax.get_xlabel().endswith("episode") or "tokens" in ax.get_xlabel() else []
        )
        for which, ticks in axis_ticks:
            assert all(float(t).is_integer() for t in ticks), (ax.get_title(), ax.get_xlabel(), which, ticks)


def test_replies_without_visible_text_are_shown_not_empty(tmp_path):
    """Issue 32 §8: a reply of whitespace or special tokens shows what was generated, escaped, not '(empty)'."""
    tok = tiny_tokenizer("chatml")
    replies = {"5 + 19": "\n\n\n", "17 + 17": "<pad><pad>", "6 + 2": "  \t<pad>"}  # the test split's first 3

    def policy(prompt: str) -> str:
        return replies.get(prompt.rsplit("What is ", 1)[1].split("?")[0], "\\boxed{0}")

    evaluate(ScriptedAgent(tok, policy), "turnrl/Arithmetic-v0", limit=3, out=tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "(empty)" not in report
    n = len(tok.encode("\n\n\n", add_special_tokens=False)) + 1  # and the end-of-turn token
    assert (
        f"(no visible text: {n} generated token(s), whitespace and special tokens only: `\\n\\n\\n<|im_end|>`)"
        in report
    )
    assert "(no visible text: 3 generated token(s), special tokens only: `<pad><pad><|im_end|>`)" in report
    assert "whitespace and special tokens only: `  \\t<pad><|im_end|>`" in report
    # without a tokenizer to decode them: the text, escaped
    from turnrl.rl.run.eval_report import shown_reply
    from turnrl.types import Message, Trajectory, Turn

    turn = Turn(index=0, action=Message(role="assistant", content="\n \n"), token_span=(4, 7))
    assert (
        shown_reply(Trajectory(turns=[turn]), turn)
        == "(no visible text: 3 generated token(s), whitespace only: `\\n \\n`)"
    )
    turn = Turn(index=0, action=Message(role="assistant", content=""), token_span=(4, 4))
    assert shown_reply(Trajectory(turns=[turn]), turn) == "(empty: no tokens generated)"


def test_eval_on_a_split_that_is_not_held_out_says_so_first(tmp_path):
    """Issue 32 §4: the warning is at the top of `turnrl eval`'s output, before the model loads, not only in the
    report; none for the held-out split."""
    args = ["eval", "--agent", "tiny:chatml", "--limit", "1", "--max-new-tokens", "2"]
    result = CliRunner().invoke(
        app, [*args, "--env", "turnrl/Arithmetic-v0", "--kw", "split=train", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "warning: evaluating turnrl/Arithmetic-v0's 'train' split, which is NOT held out: "
        "these are training tasks (its held-out split is 'test'"
    ), result.output
    result = CliRunner().invoke(
        app, [*args, "--env", "turnrl/Arithmetic-v0", "--kw", "split=validation", "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 0, result.output  # a validation split is not training data: it says what it is for
    assert result.output.startswith(
        "note: evaluating turnrl/Arithmetic-v0's validation split 'validation': problems training does not see"
    ), result.output
    assert "split: **validation** (validation: for choosing steps" in (tmp_path / "v" / "report.md").read_text()
    result = CliRunner().invoke(app, [*args, "--env", "toy_envs:tests/Upper-v0", "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("warning: toy_envs:tests/Upper-v0 declares no split, so turnrl cannot tell"), (
        result.output
    )
    result = CliRunner().invoke(app, [*args, "--env", "turnrl/Arithmetic-v0", "--out", str(tmp_path / "c")])
    assert result.exit_code == 0 and "warning" not in result.output, result.output


def test_the_example_environment_is_evaluated_on_its_held_out_split(tmp_path):
    """Issue 32 §4: the README's example environment declares its splits, so `turnrl eval` uses test tasks."""
    from pathlib import Path

    import gymnasium as gym

    import turnrl
    from turnrl.envs import registry
    from turnrl.rl.run.evaluate import held_out_kwargs

    registry.resolve("unit_converter_env:examples/Units-v0", [Path(__file__).resolve().parents[2] / "examples"])
    try:
        env = turnrl.make("examples/Units-v0")
        assert (env.split, env.held_out_split) == ("train", "test")
        assert held_out_kwargs(env, {}) == {"split": "test"} and held_out_kwargs(env, {"split": "train"}) is None
        test = turnrl.make("examples/Units-v0", split="test")
        assert not {t.prompt for t in env.unwrapped.tasks} & {t.prompt for t in test.unwrapped.tasks}
        m = evaluate(
            ScriptedAgent(tiny_tokenizer("chatml"), lambda p: "<answer>1</answer>"),
            "examples/Units-v0",
            limit=2,
            out=tmp_path,
        )
        assert m["split"] == "test" and m["held_out"] is True
        assert [json.loads(x)["task_id"] for x in (tmp_path / "items.jsonl").read_text().splitlines()] == [
            "units/test/0",
            "units/test/1",
        ]
    finally:
        del gym.registry["examples/Units-v0"]
        registry._REGISTERED.pop("examples/Units-v0", None)
        registry._SOURCES.pop("examples/Units-v0", None)


def test_an_interrupted_evaluation_writes_what_finished_and_resumes(tmp_path, sigint_raises):
    """Issue 32 §3, in process: a real SIGINT at the 5th episode (the episodes whose last step was under way finish
    too); the items, report and metrics of those that finished are written and marked interrupted; --resume plays
    only the others and ends as an uninterrupted run."""
    import os
    import signal

    from turnrl.rl.run.evaluate import EvaluationInterrupted

    agent = ScriptedAgent(tiny_tokenizer("chatml"), _arithmetic_policy)
    kwargs = {
        "limit": 6,
        "samples": 2,
        "params": SamplingParams(temperature=0.0, max_new_tokens=12),
        "batch_episodes": 4,
        "agent_name": "scripted",
    }
    seen: list[str] = []

    def stop_at_five(traj):
        seen.append(traj.metadata["job"])
        if len(seen) == 5:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(EvaluationInterrupted) as stopped:
        evaluate(agent, "turnrl/Arithmetic-v0", out=tmp_path / "run", on_episode=stop_at_five, **kwargs)
    done = stopped.value.done
    assert 5 <= done < 12 and stopped.value.total == 12 and len(seen) == done
    items = lambda d: [json.loads(x) for x in (tmp_path / d / "items.jsonl").read_text().splitlines()]
    order = [f"0-0-{r['index']}-{r['sample']}" for r in items("run")]
    assert order == sorted(seen, key=lambda k: [int(x) for x in k.split("-")])  # each finished episode, in order
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["interrupted"] is True and m["episodes"] == done and m["episodes_planned"] == 12
    assert f"**Interrupted**: {done} of 12 episodes finished" in (tmp_path / "run" / "report.md").read_text()
    assert (tmp_path / "run" / "plot.png").is_file()
    with pytest.raises(ValueError, match=r"other settings \(seed: 0 there, 1 now\)"):
        evaluate(agent, "turnrl/Arithmetic-v0", out=tmp_path / "run", resume=True, seed=1, **kwargs)
    seen.clear()
    m = evaluate(agent, "turnrl/Arithmetic-v0", out=tmp_path / "run", resume=True, on_episode=seen.append, **kwargs)
    assert len(seen) == 12 - done and m["resumed_episodes"] == done and "interrupted" not in m
    full = evaluate(agent, "turnrl/Arithmetic-v0", out=tmp_path / "full", **kwargs)
    assert items("run") == items("full")
    same = lambda d: {
        k: v for k, v in d.items() if k not in ("wall_seconds", "generated_tokens_per_second", "resumed_episodes")
    }
    assert same(m) == same(full)
    streamed = (tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["metadata"]["job"] for x in streamed) == sorted(
        f"0-0-{i}-{s}" for i in range(6) for s in range(2)
    )
    report = lambda d: (tmp_path / d / "report.md").read_text().split("## Outcomes")[1]
    assert report("run") == report("full")  # the same outcomes, examples and configuration


def test_eval_resume_refuses_other_settings_before_loading_a_model(tmp_path):
    args = [
        "eval",
        "--env",
        "turnrl/Arithmetic-v0",
        "--agent",
        "tiny:chatml",
        "--limit",
        "2",
        "--max-new-tokens",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    result = CliRunner().invoke(app, [*args, "--seed", "3", "--kw", "level=2", "--resume"])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: --resume: {tmp_path} was evaluated with other settings ("), result.output
    assert "env_kwargs.level: None there, 2 now; seed: 0 there, 3 now" in " ".join(result.output.split())
    result = CliRunner().invoke(app, [*args, "--agent", "tiny:gemma", "--resume"])
    assert result.exit_code == 2 and "agent: 'tiny:chatml' there, 'tiny:gemma' now" in " ".join(result.output.split())
    (tmp_path / "run.json").unlink()
    result = CliRunner().invoke(app, [*args, "--resume"])
    assert result.exit_code == 2 and "holds trajectories but no run.json" in result.output
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "new"), "--resume"])
    assert result.exit_code == 0 and "holds no earlier evaluation; evaluating every episode" in result.output


def test_outcome_precedence_a_graded_answer_outranks_an_earlier_tool_error_and_a_short_cut_is_a_token_limit():
    from turnrl.rl.run.eval_report import outcome
    from turnrl.types import Message, Trajectory, Turn

    def turn(text, **info):
        return Turn(index=0, action=Message(role="assistant", content=text), info=info)

    failed_call = turn("<tool_call>…</tool_call>", tool_calls=[{"name": "calculator"}], error="bad expression")
    wrong = turn("The answer is 5.", correct=False, extracted="5")
    assert outcome(Trajectory(turns=[failed_call, wrong])) == "wrong"
    assert outcome(Trajectory(turns=[failed_call, turn("I give up.", correct=False, extracted=None)])) == "tool error"
    # cut below max_new_tokens by a limit of the request's own (a gateway program's max_tokens), not the context
    short = Trajectory(turns=[turn("Let me", finish_reason="length")])
    short.turns[0].token_span = (10, 14)
    assert outcome(short, max_new_tokens=64) == "token limit"
    short.turns[0].info["cut_by"] = "context"  # the rollout's mark: the context's room was the smaller budget
    assert outcome(short, max_new_tokens=64) == "context limit"


def test_resume_with_a_smaller_limit_keeps_the_episodes_past_it(tmp_path):
    agent = ScriptedAgent(tiny_tokenizer("chatml"), _arithmetic_policy)
    kwargs = {"params": SamplingParams(temperature=0.0, max_new_tokens=12), "agent_name": "scripted", "out": tmp_path}
    evaluate(agent, "turnrl/Arithmetic-v0", limit=4, **kwargs)
    m = evaluate(agent, "turnrl/Arithmetic-v0", limit=2, resume=True, **kwargs)
    assert m["resumed_episodes"] == 2 and len((tmp_path / "items.jsonl").read_text().splitlines()) == 2
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == 4  # the other two are kept
    calls = len(agent.calls)
    m = evaluate(agent, "turnrl/Arithmetic-v0", limit=4, resume=True, **kwargs)
    assert m["resumed_episodes"] == 4 and len(agent.calls) == calls  # nothing played again
