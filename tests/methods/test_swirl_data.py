"""SWiRL's data side (docs/algorithms.md §1): the format, generation, filters and the step-wise decomposition."""

import pytest
from typer.testing import CliRunner

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.cli import app
from turnrl.envs.conformance.contract import check_environment
from turnrl.methods.swirl.filters import EmptyFilterError, filter_trajectories, report_table
from turnrl.methods.swirl.generate import generate, without_demos
from turnrl.methods.swirl.judges import RuleStepJudge, StepLabel
from turnrl.methods.swirl.steps import decompose, decompose_all
from turnrl.rl.core.batch import untrainable
from turnrl.rollout.engine import Rollout
from turnrl.storage import load
from turnrl.tokens import ChatRenderer
from turnrl.types import Trajectory

ENV = "turnrl/Arithmetic-v0"
KW = {"level": 2, "tool_style": "swirl"}
TOK = tiny_tokenizer("chatml")


def question(prompt_text):
    return prompt_text.rsplit("What is ", 1)[1].split("?")[0]


def solver(answer_offset=0, calls=1):
    """A scripted SWiRL policy: ``calls`` calculator steps (the first is the question's expression), then the answer
    (off by ``answer_offset``)."""

    def policy(prompt):
        q = question(prompt)
        done = prompt.rsplit("<|im_start|>user", 1)[1].count("<|im_start|>tool")  # after the demonstrations
        if done < calls:
            return f"<math_exp>{q}</math_exp>" if done == 0 else f"<math_exp>{eval(q)} + 0</math_exp>"
        return f"<answer>{eval(q) + answer_offset}</answer>"

    return policy


def guesser(prompt):
    return f"<answer>{eval(question(prompt))}</answer>"  # right, but no tool result behind it


class StopRecorder(ScriptedAgent):
    """A scripted agent that records the stop strings of each generate call."""

    def __init__(self, policy):
        super().__init__(TOK, policy, end_with_eos=False)
        self.stops = []

    def generate(self, prompts, params):
        self.stops.append(params.stop)
        return super().generate(prompts, params)


def episodes(policy, n=2, agent=None):
    agent = agent or ScriptedAgent(TOK, policy, end_with_eos=False)
    return Rollout(agent, SamplingParams(max_new_tokens=64)).run(
        [turnrl.make(ENV, **KW) for _ in range(n)], options=[{"index": i} for i in range(n)]
    )


# ---- the format ----


def test_the_swirl_format_of_math_envs(tmp_path):
    env = turnrl.make(ENV, **KW)
    obs, _ = env.reset(options={"index": 0})
    q = question(obs[-1].content)
    assert env.stop == ("</math_exp>", "</answer>") and env.max_turns == 10 and env.unwrapped.answer_format == "tag"
    # the instructions in the system prompt; the default demos as chat turns between it and the question
    assert "<math_exp>" in obs[0].content and "Examples:" not in obs[0].content and obs[-1].content == f"What is {q}?"
    demos = [(m.role, m.content) for m in obs[1:-1]]
    assert demos[:3] == [
        ("user", "Tom has 3 boxes of 12 pens and gives away 5 pens. How many pens does he have?"),
        ("assistant", "<math_exp>3 * 12</math_exp>"),
        ("tool", "3 * 12 -> 36"),
    ]
    assert obs[3].name == "calculator" and sum(r == "user" for r, _ in demos) == 3 and demos[-1][0] == "assistant"
    system_style = turnrl.make(ENV, **KW, demos_in="system").reset()[0]
    assert (
        len(system_style) == 2
        and "Examples:" in system_style[0].content
        and "tool: 3 * 12 -> 36" in system_style[0].content
    )
    with pytest.raises(ValueError, match="demos_in must be"):
        turnrl.make(ENV, **KW, demos_in="user")
    result, reward, done, *_ = env.step(f"<math_exp>{q}</math_exp>")
    assert result[0].content == f"{q} -> {eval(q)}" and reward == 0 and not done  # e.g. "23 + 45 -> 68"
    assert env.step("<math_exp>1 +* 2</math_exp>")[0][0].content.startswith("1 +* 2 -> Error: ")
    _, reward, done, *_ = env.step(f"<answer>{eval(q) + 1}</answer>")
    assert reward == 0.0 and done
    env.reset(options={"index": 0})
    _, reward, done, _, info = env.step(f"<answer>{eval(q)}</answer>")
    assert reward == 1.0 and done and info["correct"]
    # demos: none, a file, the text itself; a misspelled path is an error, not demonstrations
    assert len(turnrl.make(ENV, **KW, demos="none").reset()[0]) == 2
    assert len(turnrl.make(ENV, **KW, demos=None, demos_in="system").reset()[0]) == 2
    demo_file = tmp_path / "demos.txt"
    demo_file.write_text("Question: What is 2 * 3?\nassistant: <math_exp>2 * 3</math_exp>\ntool: 2 * 3 -> 6\n")
    assert turnrl.make(ENV, **KW, demos=str(demo_file)).reset()[0][3].content == "2 * 3 -> 6"
    mine = turnrl.make(ENV, **KW, demos="Question: 1 + 1?\nassistant: <answer>2</answer>", demos_in="system")
    assert (
        "Examples:\n\nQuestion: 1 + 1?" in mine.reset()[0][0].content
        and "Tom has 3 boxes" not in mine.reset()[0][0].content
    )
    with pytest.raises(ValueError, match="must start with a 'Question:' line"):
        turnrl.make(ENV, **KW, demos="assistant: <answer>2</answer>\nQuestion: 1 + 1?")
    with pytest.raises(FileNotFoundError, match="no such file"):
        turnrl.make(ENV, **KW, demos=str(tmp_path / "missing.txt"))
    # the answer goes in <answer> tags: another answer_format cannot go with the swirl style
    with pytest.raises(ValueError, match="answer_format='auto' cannot go with it"):
        turnrl.make(ENV, **KW, answer_format="auto")
    with pytest.raises(ValueError, match="answer_format='boxed'"):
        turnrl.make(ENV, **KW, answer_format="boxed")
    assert turnrl.make(ENV, **KW, answer_format="tag").stop == ("</math_exp>", "</answer>")
    assert turnrl.make(ENV, level=2).unwrapped.answer_format == "boxed" and turnrl.make(ENV, level=2).stop == ()


def test_the_swirl_format_of_hotpotqa():
    env = turnrl.make("turnrl/HotPotQA-v0", tool_style="swirl", limit=3)
    obs, _ = env.reset(options={"index": 0})
    assert env.stop[:2] == ("</search_query>", "</answer>") and env.max_turns == 5 and env.unwrapped.top_k == 1
    demos = obs[1:-1]  # 2 demos, 2 searches each; the question's instruction follows each demo question as well
    assert sum(m.content.startswith("<search_query>") for m in demos) == 4 and demos[2].name == "search"
    assert demos[0].content.endswith("<answer></answer> tags.") and obs[-1].content.endswith("<answer></answer> tags.")
    result, reward, done, *_ = env.step("<search_query>Kiss and Tell 1945 film</search_query>")
    assert result[0].content.startswith("Kiss and Tell 1945 film -> ") and not done
    _, reward, done, *_ = env.step(f"<answer>{env.unwrapped.task.answer}</answer>")
    assert reward == 1.0 and done
    assert len(turnrl.make("turnrl/HotPotQA-v0", tool_style="swirl", limit=1, demos="none").reset()[0]) == 2


def test_the_conformance_harness_passes_the_swirl_styles():
    for env in (
        turnrl.make(ENV, **KW),
        turnrl.make("turnrl/GSM8K-v0", tool_style="swirl", limit=3),
        turnrl.make("turnrl/HotPotQA-v0", tool_style="swirl", limit=3),
    ):
        report = check_environment(env)
        assert report.ok, report
    env = turnrl.make(ENV, **KW)
    env.reset(options={"index": 0})
    assert (
        env.unwrapped.oracle_action().startswith("<math_exp>")
        and env.unwrapped.format_answer("7") == "<answer>7</answer>"
    )


def test_the_rollout_stops_a_turn_at_the_envs_stop_strings():
    agent = StopRecorder(solver())
    (traj,) = episodes(None, n=1, agent=agent)
    assert traj.correct and traj.num_turns == 2
    assert all(set(s) >= {"</math_exp>", "</answer>"} for s in agent.stops)


# ---- decomposition ----


def test_decomposition_gives_one_row_per_step_with_growing_token_exact_prefixes():
    trajs = episodes(solver(calls=2), n=3)
    rows = decompose_all(trajs)
    assert len(rows) == sum(t.num_turns for t in trajs) == 9
    for t in trajs:
        mine = [r for r in rows if r.group_id == t.id]
        starts = [r.metadata["swirl"]["prefix_len"] for r in mine]
        assert all(a < b for a, b in zip(starts, starts[1:]))  # prefixes strictly grow
        for i, r in enumerate(mine):
            s, e = t.turns[i].token_span
            assert starts[i] == s and r.id == f"{t.id}/step-{i}"
            assert r.token_ids[:s] == t.token_ids[:s] and r.token_ids == t.token_ids[:e]  # the state, token-exact
            assert r.loss_mask == [0] * s + [1] * (e - s)
            assert r.logprobs[s:e] == t.logprobs[s:e] and not any(r.logprobs[:s])
            assert r.turns[-1].token_span == (s, e) and all(u.token_span is None for u in r.turns[:-1])
            assert r.turns[-1].action.content == t.turns[i].action.content and len(r.turns) == i + 1
            assert r.prompt == t.prompt and r.task_id == t.task_id
            meta = r.metadata["swirl"]
            assert (meta["source"], meta["step"], meta["steps"], meta["task_id"]) == (t.id, i, 3, t.task_id)
            Trajectory.model_validate(r.model_dump())  # every row passes the validators
            assert untrainable(r) is None
        assert mine[-1].correct and mine[0].correct is None  # only the answer step is graded
    with pytest.raises(ValueError, match="no token fields"):
        decompose(trajs[0].model_copy(update={"token_ids": None, "loss_mask": None, "logprobs": None}))


# ---- filters ----


class ScriptedJudge:
    """A step judge of our own: labels each step by a rule on its text (``GOOD`` / ``BAD`` / ``None``)."""

    def __init__(self, rule):
        self.rule = rule

    def label_trajectory(self, traj):
        return [StepLabel(self.rule(turn.action.content)) for turn in traj.turns]

    def label_rows(self, rows):
        return [StepLabel(self.rule(r.turns[-1].action.content)) for r in rows]


def test_the_filter_truth_table():
    right = episodes(solver(calls=1))  # every step GOOD, answer right
    wrong = episodes(solver(answer_offset=1, calls=1))  # the answer follows no result: BAD, and wrong
    lucky = episodes(guesser)  # right, but a guess (BAD)
    process_ok_but_wrong = episodes(solver(calls=1))
    for t in process_ok_but_wrong:  # good steps, but the verifier says the final answer is wrong
        t.turns[-1].info["correct"] = False
    ungraded = episodes(solver(calls=1))
    for t in ungraded:  # no gold label
        t.turns[-1].info["correct"] = None
    broken = episodes(solver(calls=1))[:1]
    broken[0].error = "env step failed: boom"
    data = right + wrong + lucky + process_ok_but_wrong + ungraded + broken
    judge = RuleStepJudge()
    kept = {m: {t.id for t in filter_trajectories(data, m, judge)[0]} for m in ("none", "process", "outcome", "both")}
    ids = lambda ts: {t.id for t in ts}
    assert kept["none"] == ids(data) - ids(broken)  # errors are left out by every mode
    assert kept["process"] == ids(right + process_ok_but_wrong + ungraded)  # process-only keeps a wrong answer
    assert kept["outcome"] == ids(right + lucky)  # outcome needs the gold label: ungraded ones are out
    assert kept["both"] == kept["process"] & kept["outcome"] == ids(right)
    out, report = filter_trajectories(data, "both", judge)
    assert report["trajectories"] == 11 and report["errors"] == 1 and report["ungraded"] == 2
    assert (report["kept_by_process"], report["kept_by_outcome"], report["kept_by_both"], report["kept"]) == (
        6,
        4,
        2,
        2,
    )
    assert report["steps_bad"] == 6 and report["steps_good"] == 12 and report["kept_steps"] == 4  # wrong: both BAD
    assert all(lb["good"] for t in out for lb in t.metadata["swirl_labels"])
    assert all("swirl_labels" not in t.metadata for t in data)  # the inputs are not changed
    table = report_table(report)
    assert "| every step GOOD (process) | 6 / 11 |" in table and "2 ungraded" in table
    _, report = filter_trajectories(data, "outcome")
    assert report["kept_by_process"] is None and report["kept_by_both"] is None and "not judged" in report_table(report)


def test_an_unparseable_judgement_is_never_good():
    data = episodes(solver(calls=1))
    unsure = ScriptedJudge(lambda text: None if "<answer>" in text else True)
    with pytest.raises(EmptyFilterError, match=r"every step GOOD: 0") as e:
        filter_trajectories(data, "process", unsure)
    assert e.value.report["steps_unparseable"] == 2 and e.value.report["steps_good"] == 2
    kept, _ = filter_trajectories(data, "process", ScriptedJudge(lambda text: True))
    assert len(kept) == 2
    with pytest.raises(ValueError, match="must label every step"):
        filter_trajectories(data, "process", type("Short", (), {"label_trajectory": lambda self, t: []})())


def test_an_empty_filter_result_says_which_filter_removed_everything():
    data = episodes(guesser)
    with pytest.raises(
        EmptyFilterError, match=r"the process filter kept none of 2 .*every step GOOD: 0, correct answer: 2"
    ):
        filter_trajectories(data, "process", RuleStepJudge())
    wrong = episodes(solver(answer_offset=1))
    with pytest.raises(EmptyFilterError, match=r"the outcome filter kept none of 2 .*correct answer: 0 \(0 ungraded\)"):
        filter_trajectories(wrong, "outcome")
    with pytest.raises(EmptyFilterError, match="the both filter kept none of 4"):
        filter_trajectories(data + wrong, "both", RuleStepJudge())
    with pytest.raises(ValueError, match="needs a step judge"):
        filter_trajectories(data, "process")
    with pytest.raises(ValueError, match="one of none, process, outcome, both"):
        filter_trajectories(data, "strict")


# ---- generation ----


class FlakyAgent(ScriptedAgent):
    """A teacher endpoint that goes down: its generate raises on the calls listed in ``fail_on`` (0-based)."""

    def __init__(self, policy, fail_on):
        super().__init__(TOK, policy, end_with_eos=False)
        self.n_calls, self.fail_on = 0, set(fail_on)

    def generate(self, prompts, params):
        self.n_calls += 1
        if self.n_calls - 1 in self.fail_on:
            raise ConnectionError("the endpoint went away")
        return super().generate(prompts, params)


def test_a_failing_teacher_is_retried_then_its_question_skipped_and_nothing_written_is_lost(tmp_path):
    out = tmp_path / "data.parquet"
    settings = {"max_new_tokens": 64, "batch_episodes": 2}  # one question (2 samples, 2 steps) per batch
    # question 0 takes calls 0-1; question 1's first call fails: it is retried after question 2, and succeeds
    first = generate(FlakyAgent(solver(), fail_on={2}), "teacher", ENV, KW, out=out, tasks=3, samples=2, **settings)
    assert first["skipped_questions"] == 0 and first["retried_questions"] == 1 and first["episodes"] == 6
    got = load(out)
    assert all(t.error is None and t.correct for t in got) and first["steps_per_trajectory"] == 2
    env = turnrl.make(ENV, **KW)
    for t in got:  # what the later stages need: the gold answer and the question
        env.reset(options={"index": t.metadata["task_index"]})
        assert t.metadata["gold"] == env.unwrapped.task.answer and t.metadata["question"] == env.unwrapped.task.prompt

    # an endpoint that stays down: its questions are skipped and counted; the questions already written stay
    out2 = tmp_path / "data2.parquet"
    generate(
        ScriptedAgent(TOK, solver(), end_with_eos=False), "teacher", ENV, KW, out=out2, tasks=1, samples=2, **settings
    )
    before = load(out2)
    down = FlakyAgent(solver(), fail_on=set(range(100)))
    summary = generate(down, "teacher", ENV, KW, out=out2, tasks=3, samples=2, retries=1, **settings)
    assert summary["skipped_questions"] == 2 and summary["retried_questions"] == 2 and summary["episodes"] == 2
    assert down.n_calls == 4  # 2 questions x (1 try + 1 retry); question 0 is not asked again
    assert [t.model_dump() for t in load(out2)] == [t.model_dump() for t in before]

    # resume once the endpoint is back: only the skipped questions are sampled
    back = ScriptedAgent(TOK, solver(), end_with_eos=False)
    summary = generate(back, "teacher", ENV, KW, out=out2, tasks=3, samples=2, **settings)
    assert summary["episodes"] == 6 and summary["skipped_questions"] == 0 and len(back.calls) == 4
    again = load(out2)
    assert sorted({t.metadata["task_index"] for t in again}) == [0, 1, 2]
    assert [t.id for t in again if t.metadata["task_index"] == 0] == [t.id for t in before]


def test_generation_takes_the_demonstrations_out_of_the_stored_states(tmp_path):
    """The teacher sees the demos; the stored trajectory holds the prompt without them, token-exact, and the same
    generated and environment tokens after it."""
    agent = ScriptedAgent(TOK, solver(), end_with_eos=False)
    kept = generate(
        agent, "teacher", ENV, KW, out=tmp_path / "kept.parquet", tasks=2, samples=1, keep_demos=True, max_new_tokens=64
    )
    taken = generate(agent, "teacher", ENV, KW, out=tmp_path / "taken.parquet", tasks=2, samples=1, max_new_tokens=64)
    assert kept["success_rate"] == taken["success_rate"] == 1.0
    env = turnrl.make(ENV, **KW, demos="none")
    renderer = ChatRenderer(TOK)
    for with_demos, without in zip(load(tmp_path / "kept.parquet"), load(tmp_path / "taken.parquet")):
        assert len(with_demos.prompt) == 2 + 14 and len(without.prompt) == 2  # 3 demos: 6 + 4 + 4 messages
        assert without.metadata["demos"] == "removed" and "demos" not in with_demos.metadata
        obs, _ = env.reset(options={"index": without.metadata["task_index"]})
        assert [m.content for m in without.prompt] == [m.content for m in obs]
        n_old, n_new = len(renderer.prompt_tokens(with_demos.prompt)), len(renderer.prompt_tokens(obs))
        assert without.token_ids == renderer.prompt_tokens(obs) + with_demos.token_ids[n_old:]
        assert without.loss_mask[n_new:] == with_demos.loss_mask[n_old:] and sum(without.loss_mask[:n_new]) == 0
        for a, b in zip(with_demos.turns, without.turns):
            assert b.token_span == (a.token_span[0] - n_old + n_new, a.token_span[1] - n_old + n_new)
            assert without.token_ids[slice(*b.token_span)] == with_demos.token_ids[slice(*a.token_span)]
        rows = decompose(without)
        assert len(rows) == 2 and "Tom has 3 boxes" not in TOK.decode(rows[-1].token_ids)
    with pytest.raises(ValueError, match="not this tokenizer's rendering"):
        without_demos(
            load(tmp_path / "kept.parquet")[0],
            turnrl.make(ENV, **KW).unwrapped.prompt_demos,
            ChatRenderer(tiny_tokenizer("llama3")),
        )


# ---- the command line ----


def test_the_command_line_pipeline(tmp_path):
    runner = CliRunner()
    data, kept, steps = (str(tmp_path / f) for f in ("data.parquet", "kept.parquet", "steps.parquet"))
    r = runner.invoke(
        app,
        [
            "swirl",
            "generate",
            "--env",
            ENV,
            "--kw",
            "level=2",
            "--kw",
            "tool_style=swirl",
            "--agent",
            "tiny:chatml",
            "--tasks",
            "2",
            "--samples",
            "2",
            "--max-new-tokens",
            "8",
            "--out",
            data,
        ],
    )
    assert r.exit_code == 0, r.output
    assert "4 trajectories of 2 questions" in r.output and "0 questions skipped" in r.output
    assert all(t.metadata["gold"] and t.metadata["question"] for t in load(data))
    # a random tiny model writes no valid step: the process filter keeps nothing, and says so
    r = runner.invoke(app, ["swirl", "filter", data, "--mode", "process", "--out", kept])
    assert r.exit_code == 2 and "error:" in r.output and "the process filter kept none of 4" in r.output, r.output
    r = runner.invoke(app, ["swirl", "filter", data, "--mode", "strict", "--out", kept])
    assert r.exit_code == 2 and "--mode must be one of" in r.output
    r = runner.invoke(app, ["swirl", "filter", data, "--mode", "none", "--out", kept])
    assert r.exit_code == 0 and "kept 4 of 4" in r.output and "| criterion |" in r.output, r.output
    r = runner.invoke(app, ["swirl", "decompose", kept, "--out", steps])
    assert r.exit_code == 0 and "step rows from 4 trajectories" in r.output, r.output
    rows, source = load(steps), load(kept)
    assert len(rows) == sum(t.num_turns for t in source)
    assert all(
        r.token_ids == t.token_ids[: r.turns[-1].token_span[1]] for t in source for r in rows if r.group_id == t.id
    )


# ---- hindsight answers ----


def _hotpot_teacher(tasks):
    """A scripted HotPotQA teacher that finds the evidence and answers badly: it searches each supporting title,
    then copies a long passage into its answer (BAD: not a short answer; wrong)."""
    by_question = {t.prompt: t for t in tasks}

    def policy(prompt):
        task = next(t for q, t in by_question.items() if q in prompt)
        done = prompt.count("<|im_start|>tool")
        titles = task.metadata["supporting_titles"]
        if done < len(titles):
            return f"<search_query>{titles[done]}</search_query>"
        return "<answer>" + " ".join(prompt.rsplit("->", 1)[1].split()[:20]) + "</answer>"

    return policy


def test_hindsight_answers_cut_at_the_evidence_and_answer_there_with_the_gold_span(tmp_path):
    from turnrl.envs.builtin.hotpotqa import hotpotqa_tasks
    from turnrl.methods.swirl.relabel import ground_answers

    tasks = hotpotqa_tasks("dev")[:8]
    kw = {"tool_style": "swirl", "demos": "none", "limit": 8}
    agent = ScriptedAgent(TOK, _hotpot_teacher(tasks), end_with_eos=True)
    generate(
        agent,
        "teacher",
        "turnrl/HotPotQA-v0",
        kw,
        out=tmp_path / "d.parquet",
        tasks=8,
        samples=1,
        max_new_tokens=200,
        max_context=4096,
    )
    trajs = load(tmp_path / "d.parquet")
    assert all(t.correct is False and t.num_turns == 3 for t in trajs)  # two searches, then a copied passage
    judge = RuleStepJudge()
    assert all(judge.label_trajectory(t)[-1].good is False for t in trajs)
    out, report = ground_answers(trajs, TOK)
    assert len(out) == len(trajs) and report["relabelled"] + report["not_grounded"] == len(trajs)
    changed = [(old, new) for old, new in zip(trajs, out) if "relabel" in new.metadata]
    assert len(changed) == report["relabelled"] >= 4, report
    for old, new in changed:
        at = new.metadata["relabel"]["step"]
        start = old.turns[at].token_span[0]
        gold = old.metadata["gold"]
        assert new.num_turns == at + 1 and 1 <= at <= 2 and new.correct is True
        assert new.token_ids[:start] == old.token_ids[:start]  # the teacher's own state, token for token
        assert TOK.decode(new.token_ids[start:]) == f"<answer>{gold}</answer>{TOK.eos_token}"
        assert new.loss_mask[start:] == [1] * (len(new.token_ids) - start) and len(new.logprobs) == len(new.token_ids)
        assert [lb.good for lb in judge.label_trajectory(new)] == [True] * new.num_turns  # every step GOOD
        # the earliest grounded step: one search earlier the gold answer was not yet in a result
        early = new.model_copy(update={"turns": [*new.turns[: at - 1], new.turns[-1]]})
        assert at == 1 or judge.label_trajectory(early)[-1].good is False
        rows = decompose(new)
        assert len(rows) == at + 1 and rows[-1].token_ids[:start] == decompose(old)[at].token_ids[:start]
        Trajectory.model_validate(new.model_dump())
    # what is left alone: no gold in the results, no gold label, an answer already right
    unreachable = trajs[0].model_copy(update={"metadata": {**trajs[0].metadata, "gold": "xyzzy plugh"}})
    unlabelled = trajs[0].model_copy(update={"metadata": {k: v for k, v in trajs[0].metadata.items() if k != "gold"}})
    right = changed[0][1]
    out, report = ground_answers([unreachable, unlabelled, right], TOK)
    assert out == [unreachable, unlabelled, right]
    assert (report["not_grounded"], report["no_gold"], report["already_correct"], report["relabelled"]) == (1, 1, 1, 0)
    # the command line
    r = CliRunner().invoke(
        app,
        [
            "swirl",
            "relabel",
            str(tmp_path / "d.parquet"),
            "--out",
            str(tmp_path / "r.parquet"),
            "--tokenizer",
            "tiny:chatml",
        ],
    )
    assert r.exit_code == 0 and f"relabelled {len(changed)} of 8 trajectories" in r.output, r.output
    assert len(load(tmp_path / "r.parquet")) == 8


# ---- the gold-path teacher ----


def test_the_gold_path_teacher_searches_the_question_then_the_missing_article_then_answers_gold(tmp_path):
    from turnrl.envs.builtin.hotpotqa import hotpotqa_tasks
    from turnrl.methods.swirl.gold import GoldPathAgent

    runner, data = CliRunner(), str(tmp_path / "gold.parquet")
    r = runner.invoke(
        app,
        [
            "swirl",
            "generate",
            "--env",
            "turnrl/HotPotQA-v0",
            "--agent",
            "gold",
            "--tokenizer",
            "tiny:chatml",
            "--kw",
            "split=dev-train",
            "--kw",
            "limit=12",
            "--kw",
            "tool_style=swirl",
            "--tasks",
            "12",
            "--samples",
            "1",
            "--max-new-tokens",
            "400",
            "--max-context",
            "8192",
            "--out",
            data,
        ],
    )
    assert r.exit_code == 0 and "12 trajectories of 12 questions" in r.output, r.output
    trajs, tasks = load(data), {t.prompt: t for t in hotpotqa_tasks("dev-train")[:12]}
    for t in trajs:
        task = tasks[t.metadata["question"]]
        steps = [turn.action.content for turn in t.turns]
        assert steps[0] == f"<search_query>{task.prompt}</search_query>"  # the question's own words first
        assert 2 <= len(steps) <= 3 and steps[-1] == f"<answer>{task.answer}</answer>" and t.correct is True
        assert all(s.startswith("<search_query>") for s in steps[:-1])
        if len(steps) == 3:  # the second search asks for a supporting article the first one missed
            title = steps[1].removeprefix("<search_query>").removesuffix("</search_query>")
            assert (
                title in task.metadata["supporting_titles"] and f"-> {title}:" not in t.turns[0].observation[0].content
            )
        assert t.metadata.get("demos") == "removed"  # the stored states hold no demonstrations
    # the answer is always the gold one, so the process filter decides what is worth learning: an answer that no
    # result of the path holds is BAD
    judge = RuleStepJudge()
    labels = [judge.label_trajectory(t)[-1].good for t in trajs]
    grounded = [any(task_answer_in(turn, t.metadata["gold"]) for turn in t.turns[:-1]) for t in trajs]
    assert sum(labels) >= 8 and all(g for g, lb in zip(grounded, labels) if lb), (labels, grounded)
    # it refuses the held-out split and environments without supporting articles
    r = runner.invoke(
        app,
        [
            "swirl",
            "generate",
            "--env",
            "turnrl/HotPotQA-v0",
            "--agent",
            "gold",
            "--tokenizer",
            "tiny:chatml",
            "--kw",
            "split=dev-test",
            "--kw",
            "tool_style=swirl",
            "--out",
            str(tmp_path / "x.parquet"),
        ],
    )
    assert r.exit_code == 2 and "held-out split" in r.output, r.output
    with pytest.raises(ValueError, match="supporting_titles"):
        GoldPathAgent(TOK, turnrl.make(ENV, **KW).unwrapped.tasks)
    with pytest.raises(ValueError, match="found none of its"):
        GoldPathAgent(TOK, list(tasks.values())).step("<|im_start|>user\nWho wrote Hamlet?<|im_end|>")


def task_answer_in(turn, gold):
    """Whether ``gold`` occurs in the tool results of ``turn`` (case-insensitive)."""
    return any(gold.lower() in o.content.lower() for o in turn.observation)
