import asyncio
import json

import gymnasium as gym
import pytest

import turnrl
from turnrl.envs import (
    DataFormatError,
    DataNotFoundError,
    InvalidEnvKwargs,
    ResetNeeded,
    Task,
    ToolEnv,
    UnknownEnvironmentError,
)
from turnrl.envs.builtin.arithmetic import ArithmeticTasks, split_of
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.data import load_rows
from turnrl.envs.formats.self_verify import SelfVerify
from turnrl.tools import tool
from turnrl.verifiers.math import verify


# the shipped envs (the tests register toy ones, some broken on purpose: a hanging one, one that kills workers)
@pytest.mark.parametrize("env_id", [e for e in turnrl.registered() if not e.startswith("tests/")])
def test_every_registered_env_passes_the_conformance_harness(env_id):
    report = check_environment(turnrl.make(env_id), seed=1)
    assert report.ok, str(report)
    assert any(ep.agent == "oracle" for ep in report.episodes)


def test_harness_reports_a_broken_env():
    class Broken(ToolEnv):
        def _step(self, action):
            return (), float("nan") if action else 1.0, True, False, {}

        def wrong_action(self):
            return ""  # the broken env rewards an empty answer

    env = Broken([Task(id="a", prompt="p", answer="1")], verifier=verify)
    report = check_environment(env)
    assert not report.ok
    text = str(report)
    assert "wrong agent" in text and "rewarded" in text


def test_builtin_ids():
    assert {
        "turnrl/GSM8K-v0",
        "turnrl/MATH500-v0",
        "turnrl/Arithmetic-v0",
        "turnrl/GSM8K-PAG-v0",
        "turnrl/MATH500-PAG-v0",
    } <= set(turnrl.registered())


def test_gymnasium_make_works_too():
    env = gym.make("turnrl/Arithmetic-v0", level=2)
    obs, _info = env.reset(seed=0)
    assert obs[-1].role == "user" and "What is" in obs[-1].content
    _, reward, terminated, truncated, _ = env.step(env.unwrapped.oracle_action())
    assert reward == 1.0 and terminated and not truncated


def test_unknown_id_suggests_close_match():
    with pytest.raises(UnknownEnvironmentError, match="Did you mean 'turnrl/GSM8K-v0'"):
        turnrl.make("turnrl/GSM8k-v0")


def test_a_misspelt_adapter_prefix_is_named_with_the_prefixes():
    """An id whose part before ':' does not import, and looks like an adapter's prefix, names the prefix it meant; a
    module that is plainly not one gets no such guess."""
    from turnrl.envs.registry import EnvImportError

    with pytest.raises(UnknownEnvironmentError, match=r"not of the form .* Did you mean the prefix 'remote:'\? Id "):
        turnrl.make("remot:http://127.0.0.1:1/x/Y-v0")  # (a URL's ':' makes it no module:Name id)
    with pytest.raises(EnvImportError, match=r"no module named 'verifers'.* Did you mean the prefix 'verifiers:'"):
        turnrl.make("verifers:vf_arithmetic")
    with pytest.raises(EnvImportError, match=r"Did you mean the prefix 'textarena:'"):
        turnrl.make("texarena:TicTacToe-v0")
    with pytest.raises(EnvImportError) as e:
        turnrl.make("no_such_module_xyz:Name-v0")
    assert "Did you mean" not in str(e.value)


def test_bad_kwargs_are_named_with_suggestion():
    with pytest.raises(InvalidEnvKwargs, match="'max_turn'.*Did you mean 'max_turns'"):
        turnrl.make("turnrl/Arithmetic-v0", max_turn=3)
    with pytest.raises(ValueError, match="answer_format must be one of"):
        turnrl.make("turnrl/Arithmetic-v0", answer_format="latex")
    with pytest.raises(ValueError, match="max_turns must be a positive integer"):
        turnrl.make("turnrl/GSM8K-v0", max_turns=0)
    with pytest.raises(ValueError, match="levels must be"):
        turnrl.make("turnrl/Arithmetic-v0", level=9)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        turnrl.make("turnrl/GSM8K-PAG-v0", alpah=1.0)


def test_step_order_and_action_type_are_enforced():
    env = turnrl.make("turnrl/Arithmetic-v0")
    with pytest.raises(ResetNeeded, match="call reset"):
        env.step("hi")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="must be the assistant message as a str"):
        env.step(["not", "a", "string"])
    env.step("\\boxed{0}")
    with pytest.raises(ResetNeeded, match="episode has ended"):
        env.step("again")
    with pytest.raises(TypeError, match="options must be a dict"):
        env.reset(options=3)
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"idx": 3})
    with pytest.raises(ValueError, match=r"index.*must be an integer in \[0, 100000\)"):
        env.reset(options={"index": -1})


def test_reset_selects_tasks_reproducibly():
    env = turnrl.make("turnrl/GSM8K-v0")
    a, info_a = env.reset(seed=5)
    b, info_b = env.reset(seed=5)
    _c, info_c = env.reset(seed=6)
    assert a == b and info_a["task_id"] == info_b["task_id"] != info_c["task_id"]
    obs, info = env.reset(options={"index": 3})
    assert info["task_id"] == "gsm8k/test/3" and env.task.answer == "540"
    obs, info = env.reset(options={"task": {"id": "mine", "prompt": "What is 6*7?", "answer": "42"}})
    assert info["task_id"] == "mine" and "What is 6*7?" in obs[-1].content
    assert env.step("\\boxed{42}")[1] == 1.0


@pytest.mark.parametrize(
    "fmt, good, bad",
    [
        ("auto", "2 plus 2 makes 4. The answer is 4.", "The answer is 4 or 5."),
        ("boxed", "\\boxed{4}", "#### 4"),
        ("hash", "so\n#### 4", "\\boxed{5}"),
        ("tag", "<answer>4</answer>", "\\boxed{4}"),
    ],
)
def test_answer_formats(fmt, good, bad):
    env = turnrl.make("turnrl/Arithmetic-v0", answer_format=fmt)
    task = {"id": "t", "prompt": "What is 2 + 2?", "answer": "4"}
    obs, _ = env.reset(options={"task": task})
    assert {"boxed": "\\boxed{}", "hash": "####", "tag": "<answer>", "auto": "The answer is N"}[fmt] in obs[-1].content
    assert env.step(good)[1] == 1.0
    env.reset(options={"task": task})
    assert env.step(bad)[1] == 0.0


def test_retry_gives_feedback_then_accepts_a_correction():
    env = turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=3)
    env.reset(options={"task": {"id": "t", "prompt": "What is 2 + 2?", "answer": "4"}})
    obs, r, term, trunc, info = env.step("\\boxed{5}")
    assert (r, term, trunc, info["correct"]) == (0.0, False, False, False)
    assert obs[0].role == "user" and "not correct" in obs[0].content
    obs, r, term, trunc, info = env.step("I think it's four")  # no boxed answer
    assert "No final answer was found" in obs[0].content and "\\boxed{}" in obs[0].content
    obs, r, term, trunc, info = env.step("\\boxed{4}")
    assert (r, term, trunc, info["correct"]) == (1.0, True, False, True)


def test_last_wrong_answer_terminates():
    env = turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=2)
    env.reset(options={"task": {"id": "t", "prompt": "What is 2 + 2?", "answer": "4"}})
    env.step("\\boxed{5}")
    _, r, term, trunc, _ = env.step("\\boxed{6}")
    assert (r, term, trunc) == (0.0, True, False)


@pytest.mark.parametrize(
    "style, call",
    [
        ("hermes", '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>'),
        ("tags", "<calculator>17 * 23</calculator>"),
    ],
)
def test_calculator_tool_flow(style, call):
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, tool_style=style)
    obs, _ = env.reset(options={"task": {"id": "t", "prompt": "What is 17 * 23?", "answer": "391"}})
    assert obs[0].role == "system" and "calculator" in obs[0].content
    assert env.tool_schemas()[0]["function"]["name"] == "calculator"
    obs, r, term, trunc, info = env.step(call)
    assert obs[0].role == "tool" and obs[0].name == "calculator" and obs[0].content == "391"
    assert (r, term, trunc) == (0.0, False, False)
    assert info["tool_calls"][0]["name"] == "calculator" and info["error"] is None
    _, r, term, _, _ = env.step("\\boxed{391}")
    assert r == 1.0 and term


@pytest.mark.parametrize(
    "action, fragment",
    [
        ('<tool_call>{"name": "calc", "arguments": {"expression": "1"}}</tool_call>', "unknown tool 'calc'"),
        ('<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>', "invalid arguments"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9"}}</tool_call>', "power too large"),
        ("<tool_call>{name: calculator}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "calculator"', "never closed"),
    ],
)
def test_bad_tool_calls_become_observations_and_the_episode_goes_on(action, fragment):
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, max_turns=3)
    env.reset(options={"task": {"id": "t", "prompt": "What is 2 + 2?", "answer": "4"}})
    obs, r, term, trunc, info = env.step(action)
    assert fragment in obs[-1].content and obs[-1].content.startswith("Error:")
    assert (r, term, trunc) == (0.0, False, False) and fragment in info["error"]
    _, r, term, _, _ = env.step("\\boxed{4}")
    assert r == 1.0 and term


def test_tool_calls_at_the_turn_limit_truncate():
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, max_turns=2)
    env.reset(seed=0)
    assert env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>')[3] is False
    _, r, term, trunc, _ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2"}}</tool_call>')
    assert (r, term, trunc) == (0.0, False, True)


def test_a_raising_tool_is_an_observation():
    @tool
    def lookup(key: str) -> str:
        """Look up a key."""
        return {"a": "1"}[key]

    env = ToolEnv([Task(id="t", prompt="p", answer="1")], tools=[lookup], verifier=verify, max_turns=2)
    env.reset(seed=0)
    obs, *_ = env.step('<tool_call>{"name": "lookup", "arguments": {"key": "zz"}}</tool_call>')
    assert obs[0].content == "Error: lookup failed: KeyError: 'zz'"


def test_astep_runs_many_envs_concurrently_with_the_same_results():
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'

    async def episode(i):
        env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, level=3)
        env.reset(seed=i)
        obs, *_ = await env.astep(call)
        answer = env.oracle_action()
        _, r, term, _, _ = await env.astep(answer)
        return obs[0].content, r, term

    async def main():
        return await asyncio.gather(*(episode(i) for i in range(8)))

    assert asyncio.run(main()) == [("42", 1.0, True)] * 8


def test_info_is_json_serializable():
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True)
    _, info = env.reset(seed=0)
    json.dumps(info)
    _, _, _, _, info = env.step(
        '<calculator>1</calculator> <tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
    )
    json.dumps(info)


def test_render_ansi():
    env = turnrl.make("turnrl/Arithmetic-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step("\\boxed{1}")
    text = env.render()
    assert "[user] What is" in text and "[assistant] \\boxed{1}" in text


# ---- Arithmetic ----


def test_arithmetic_levels_and_answers():
    for level in range(1, 6):
        tasks = ArithmeticTasks([level], "train", size=50)
        for i in range(50):
            t = tasks[i]
            assert t.metadata["level"] == level
            expr = t.metadata["expression"]
            assert int(t.answer) == eval(expr.replace("/", "//"))  # our own generated expressions
            assert int(t.answer) >= 0


def test_arithmetic_is_deterministic_and_splits_are_disjoint():
    train, test = ArithmeticTasks([1, 2, 3, 4, 5], "train", 2000), ArithmeticTasks([1, 2, 3, 4, 5], "test", 2000)
    assert [train[i] for i in range(10)] == [ArithmeticTasks([1, 2, 3, 4, 5], "train", 2000)[i] for i in range(10)]
    train_q = {train[i].prompt for i in range(2000)}
    test_q = {test[i].prompt for i in range(len(test))}
    assert train_q.isdisjoint(test_q)
    assert all(split_of(test[i].metadata["expression"]) == "test" for i in range(len(test)))
    assert len(test) == 510 and len(test_q) == 510  # a real held-out set of distinct problems, not repeats


def test_arithmetic_curriculum_mixes_levels():
    env = turnrl.make("turnrl/Arithmetic-v0", level=[1, 5])
    levels = set()
    for i in range(4):
        env.reset(options={"index": i})
        levels.add(env.task.metadata["level"])
    assert levels == {1, 5}


# ---- data resolution ----


def test_data_from_explicit_path(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "What is 1+1?", "answer": "1+1=2\\n#### 2"}\n\n')
    env = turnrl.make("turnrl/GSM8K-v0", path=str(path))
    assert len(env) == 1
    env.reset(seed=0)
    assert env.step("\\boxed{2}")[1] == 1.0


def test_malformed_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q2", "answer": \n')
    with pytest.raises(DataFormatError, match=r"bad\.jsonl:2: malformed JSON"):
        turnrl.make("turnrl/GSM8K-v0", path=str(path))
    path.write_text('{"question": "q"}\n')
    with pytest.raises(DataFormatError, match="missing or non-text field 'answer'"):
        turnrl.make("turnrl/GSM8K-v0", path=str(path))


def test_missing_data_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=r"TURNRL_DATA_DIR=.* has no gsm8k/test\.jsonl.*Fix: pass path="):
        turnrl.make("turnrl/GSM8K-v0")
    monkeypatch.delenv("TURNRL_DATA_DIR")
    with pytest.raises(DataNotFoundError, match=r"\$TURNRL_DATA_DIR is not set"):
        load_rows("math500", "test")
    with pytest.raises(DataNotFoundError, match="does not exist"):
        turnrl.make("turnrl/GSM8K-v0", path=str(tmp_path / "nope.jsonl"))


def test_data_dir_layout(data_dir):
    train, validation = (turnrl.make("turnrl/GSM8K-v0", split=s) for s in ("train", "validation"))
    assert len(train) == 6973 and len(validation) == 500  # the train file, its last 500 held apart for choices
    assert validation.task_at(0).id == "gsm8k/train/6973" and train.task_at(6972).id == "gsm8k/train/6972"
    assert len(turnrl.make("turnrl/GSM8K-v0")) == 1319
    assert len(turnrl.make("turnrl/MATH500-v0", limit=10)) == 10
    assert len(load_rows("hotpotqa", "dev")) == 500
    with pytest.raises(ValueError, match="has no split 'validation'"):
        load_rows("gsm8k", "validation")


# ---- PAG self-verification (docs/algorithms.md §7) ----

TASK = {"id": "t", "prompt": "What is 2 + 2?", "answer": "4"}


def pag_episode(actions, **kwargs):
    env = turnrl.make("turnrl/Arithmetic-PAG-v0", **kwargs)
    _obs, info = env.reset(options={"task": TASK})
    assert info["next_role"] == "policy"
    steps = []
    for a in actions:
        _obs, r, term, trunc, info = env.step(a)
        steps.append((info["role"], r, term))
        if term or trunc:
            break
    return steps, env


@pytest.mark.parametrize(
    "answer, verdict, revision, expected",
    [
        ("\\boxed{4}", "The answer is correct", None, [("policy", 1.0, False), ("verifier", 1.0, True)]),
        ("\\boxed{5}", "The answer is correct", None, [("policy", 0.0, False), ("verifier", 0.0, True)]),
        (
            "\\boxed{5}",
            "Step 1 is off. The answer is wrong",
            "\\boxed{4}",
            [("policy", 0.0, False), ("verifier", 1.0, False), ("policy", 2.0, True)],
        ),
        (
            "\\boxed{4}",
            "The answer is wrong",
            "\\boxed{5}",
            [("policy", 1.0, False), ("verifier", 0.0, False), ("policy", -1.0, True)],
        ),
        (
            "\\boxed{4}",
            "The answer is wrong",
            "\\boxed{4}",
            [("policy", 1.0, False), ("verifier", 0.0, False), ("policy", 1.0, True)],
        ),
        (
            "\\boxed{5}",
            "The answer is wrong",
            "\\boxed{6}",
            [("policy", 0.0, False), ("verifier", 1.0, False), ("policy", 0.0, True)],
        ),
        (
            "\\boxed{5}",
            "The answer is wrong. The answer is correct",
            None,
            [("policy", 0.0, False), ("verifier", 0.0, True)],
        ),
    ],
)
def test_pag_rewards_and_roles(answer, verdict, revision, expected):
    steps, _ = pag_episode([answer, verdict, revision])
    assert steps == expected


def test_pag_eval_mode_revises_after_unparseable_verdict():
    steps, _ = pag_episode(["\\boxed{5}", "hmm", "\\boxed{4}"], mode="eval")
    assert steps == [("policy", 0.0, False), ("verifier", 0.0, False), ("policy", 2.0, True)]


def test_pag_prompts_and_info():
    env = turnrl.make("turnrl/Arithmetic-PAG-v0")
    env.reset(options={"task": TASK})
    obs, _, _, _, info = env.step("\\boxed{5}")
    assert "end with 'The answer is wrong'" in obs[0].content
    assert info["phase"] == "answer" and info["next_role"] == "verifier" and info["correct"] is False
    obs, _, _, _, info = env.step("The answer is wrong")
    assert "previous answer was wrong" in obs[0].content and info["verdict"] == "wrong"
    assert info["next_role"] == "policy"


def test_self_verify_needs_a_gradable_env():
    class NoScore(turnrl.envs.TextEnv):
        pass

    with pytest.raises(TypeError, match="score"):
        SelfVerify(NoScore())
    env = SelfVerify(turnrl.make("turnrl/Arithmetic-v0", calculator=True))
    assert env.max_turns == 3


def test_pag_gsm8k_oracle():
    env = turnrl.make("turnrl/GSM8K-PAG-v0", limit=5)
    env.reset(seed=0)
    rewards = []
    while True:
        _, r, term, trunc, _ = env.step(env.oracle_action())
        rewards.append(r)
        if term or trunc:
            break
    assert rewards == [1.0, 1.0]
