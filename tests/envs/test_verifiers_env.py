"""verifiers environments as turnrl environments (turnrl/envs/adapters/verifiers_env.py), with the real verifiers package:
its own rollout loop, parser, tools and rubric run; turnrl's policy answers each model request."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from tiny_trainer import opened, tiny_trainer

import turnrl
from turnrl.envs.adapters.verifiers_env import VerifiersEnvError
from turnrl.envs.registry import UnknownEnvironmentError
from turnrl.episode import play_episode

pytest.importorskip("verifiers", reason="verifiers is installed by scripts/setup.sh")

SUM = "verifiers:vf_envs"


def scripted(*replies):
    """A policy that says each of ``replies`` in turn."""
    it = iter(replies)
    return lambda conversation, env: next(it)


def test_a_single_turn_environment_asks_the_policy_and_its_rubric_grades_the_answer():
    env = turnrl.make(SUM, kind="sum")
    try:
        assert len(env) == 8 and env.held_out_split == "test"
        obs, info = env.reset(seed=0, options={"index": 2})  # What is 2 + 3?
        assert [m.role for m in obs] == ["system", "user"] and obs[1].content == "What is 2 + 3?"
        assert info["task_id"] == "vf_envs/train/2" and "<answer>" in obs[0].content
        _, reward, terminated, truncated, step = env.step("<answer>5</answer>")
        assert (reward, terminated, truncated, step["correct"]) == (1.0, True, False, True)
        # asked reads the row's question column: the whole row reaches the rubric, as verifiers' own generate passes it
        assert {k: step["metrics"][k] for k in ("correct_answer", "format_reward", "asked")} == {
            "correct_answer": 1.0,
            "format_reward": 1.0,
            "asked": 1.0,
        }
        env.reset(options={"index": 2})
        _, reward, _, _, step = env.step("it is 5")  # not in the format its parser reads
        assert (reward, step["correct"], step["metrics"]["format_reward"]) == (0.0, False, 0.0)
        env.reset(options={"index": 2})
        _, reward, terminated, _, step = env.step("")  # an error to verifiers; the policy's, so it stands
        assert (reward, terminated) == (0.0, True) and step["error"].startswith("EmptyModelResponseError")
    finally:
        env.close()
    held_out = turnrl.make(SUM, kind="sum", split="test")
    try:
        obs, _ = held_out.reset(options={"index": 0})
        assert len(held_out) == 4 and obs[1].content == "What is 100 + 101?"
    finally:
        held_out.close()


def test_a_tool_environment_runs_its_own_tools_on_the_policys_calls():
    env = turnrl.make(SUM, kind="tools")
    try:
        assert [s["function"]["name"] for s in env.tool_schemas()] == ["add"]
        trajectory = play_episode(
            env,
            scripted('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', "<answer>3</answer>"),
            options={"index": 1},
        )
    finally:
        env.close()
    assert trajectory.error is None, trajectory.error
    assert "<tool_call>" in trajectory.prompt[0].content  # its tools described as turnrl's tool environments do
    first, last = trajectory.turns
    assert [(c["name"], c["arguments"]) for c in first.info["tool_calls"]] == [("add", {"a": 1, "b": 2})]
    assert [(m.role, m.name, m.content) for m in first.observation] == [("tool", "add", "3")]
    assert (last.reward, last.terminated, last.info["correct"]) == (1.0, True, True)
    env = turnrl.make(SUM, kind="tools")
    try:  # a call that cannot be parsed is no call: verifiers' ToolEnv takes the reply as the answer
        played = play_episode(
            env, scripted('<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call>'), options={"index": 1}
        )
    finally:
        env.close()
    assert played.error is None and played.turns[0].reward == 0.0 and "not valid JSON" in played.turns[0].info["error"]


def test_a_rewritten_history_renders_each_tool_call_once():
    """The call blocks the policy wrote go to the environment as ``tool_calls``, and its content is the text around
    them: a history the environment sends back (here trimmed) renders each call once, from ``tool_calls``."""
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.tokens import ChatRenderer

    call = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    env = turnrl.make(SUM, kind="tools", trim=True, describe_tools=False)
    try:
        played = play_episode(
            env, scripted(f"Let me add. {call}", f"Again. {call}", "<answer>3</answer>"), options={"index": 1}
        )
        tools = env.tool_schemas()
    finally:
        env.close()
    assert played.error is None and played.turns[-1].reward == 1.0
    assert [bool(t.info.get("history")) for t in played.turns] == [False, True, False]
    history = played.turns[1].observation
    assistant = next(m for m in history if m.role == "assistant")
    assert assistant.content == "Again." and [(c.name, c.arguments) for c in assistant.tool_calls] == [
        ("add", {"a": 1, "b": 2})
    ]
    text = ChatRenderer(tiny_tokenizer("qwen_tools"), tools).render(list(history), add_generation_prompt=True)
    turn = text.split("<|im_start|>assistant")[1].split("<|im_end|>")[0]
    assert turn.count("<tool_call>") == 1 and "Again." in turn


def test_a_multi_turn_game_gives_its_feedback_and_a_rewritten_history_is_the_whole_observation():
    env = turnrl.make(SUM, kind="guess", max_turns=6)
    try:
        played = play_episode(env, scripted(*(f"<answer>{g}</answer>" for g in (5, 2, 3))), options={"index": 0})
        assert [t.observation[0].content for t in played.turns[:2]] == ["lower", "higher"]
        assert played.turns[-1].reward == 1.0 and played.terminated
        assert not any(t.info.get("history") for t in played.turns)
    finally:
        env.close()
    trimmed = turnrl.make(SUM, kind="guess", trim=True, max_turns=6)
    seen = []

    def policy(conversation, env):
        seen.append([m.content for m in conversation])
        return f"<answer>{(5, 2, 3)[len(seen) - 1]}</answer>"

    try:
        played = play_episode(trimmed, policy, options={"index": 0})
    finally:
        trimmed.close()
    assert played.turns[-1].reward == 1.0
    assert [bool(t.info.get("history")) for t in played.turns] == [False, True, False]
    # the third request holds the opening and the latest exchange only: what the policy was shown
    assert seen[2][-3:] == [seen[0][-1], "<answer>2</answer>", "higher"] and "lower" not in seen[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "nope"}, "unknown kind"),
        ({"kind": "grouped"}, "group-level reward functions"),
        ({"kind": "tools", "split": "test"}, "no eval dataset"),
        ({"kind": "sum", "split": "validation"}, "split is 'train'"),
    ],
)
def test_what_cannot_be_used_is_one_clear_error(kwargs, message):
    with pytest.raises(VerifiersEnvError, match=message):
        turnrl.make(SUM, **kwargs)


def test_a_missing_environment_or_package_is_one_line_with_what_to_do(monkeypatch):
    with pytest.raises(VerifiersEnvError, match="no environment module 'no_such_env'.*no_such_env.py"):
        turnrl.make("verifiers:no_such_env")
    with pytest.raises(UnknownEnvironmentError, match="'verifiers:NAME'"):
        turnrl.make("verifiers:a:b")
    monkeypatch.setitem(sys.modules, "verifiers", None)  # as if it were not installed
    with pytest.raises(VerifiersEnvError, match=r"pip install 'turnrl\[verifiers\]'"):
        turnrl.make("verifiers:another_env")


def test_loading_keeps_the_processs_signal_handlers_and_works_off_the_main_thread():
    """verifiers' Environment installs SIGINT/SIGTERM handlers when made; turnrl eval's own must stay, and the
    environment server makes environments in threads, where installing one raises."""
    import signal
    import threading

    def mine(signum, frame):
        """A handler of the process's own."""

    before = signal.signal(signal.SIGTERM, mine)
    try:
        turnrl.make(SUM, kind="sum", n=5).close()  # new arguments: a new environment object is made
        assert signal.getsignal(signal.SIGTERM) is mine
        made = []
        thread = threading.Thread(target=lambda: made.append(turnrl.make(SUM, kind="sum", n=6)))
        thread.start()
        thread.join(60)
        assert len(made) == 1 and len(made[0]) == 6 and signal.getsignal(signal.SIGTERM) is mine
        made[0].close()
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_raising_rubric_errs_its_episode_and_a_silent_environment_times_out():
    env = turnrl.make(SUM, kind="broken")
    try:
        played = play_episode(env, scripted("<answer>5</answer>"), options={"index": 2})
        assert played.error is not None and "rubric failed" in played.error and "broken_reward" in played.error
        played = play_episode(env, scripted("<answer>5</answer>"), options={"index": 2})  # the next one too, alone
        assert "broken_reward raised KeyError" in played.error
        logging.disable(logging.CRITICAL)  # verifiers' own report of it silenced: still an error
        try:
            played = play_episode(env, scripted("<answer>5</answer>"), options={"index": 2})
        finally:
            logging.disable(logging.NOTSET)
        assert "broken_reward raised KeyError" in played.error
    finally:
        env.close()
    slow = turnrl.make(SUM, kind="slow", delay=2.0, turn_timeout=0.5)
    try:
        slow.reset(options={"index": 0})
        with pytest.raises(VerifiersEnvError, match="did not go on within turn_timeout=0.5 s"):
            slow.step("<answer>1</answer>")
        obs, _ = slow.reset(options={"index": 1})  # a new episode after the failed one
        assert obs[-1].content.startswith("Guess my number")
    finally:
        slow.close()


def test_episodes_train_token_exact_with_segments_and_a_rubric_that_always_raises_stops_the_run(tmp_path, one_thread):
    """GRPO steps with the tiny model through verifiers' own loop: token-exact (the learner's log-probabilities
    match the sampler's) in a multi-turn game whose history is rewritten (segments); a held-out evaluation on the
    eval dataset; a rubric that raises errs every episode, so the run stops at step 1 with its error (a run that
    trains nothing says so) and the step's episodes are kept."""
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.monitors import EpisodeFailures
    from turnrl.rl.run.trainer import TrainConfig

    tok = tiny_tokenizer("chatml")
    runs = {
        "game": {"kind": "guess", "trim": True, "max_turns": 4},
        "sum": {"kind": "sum"},
        "broken": {"kind": "broken"},
    }
    for name, kwargs in runs.items():
        cfg = TrainConfig(
            model="tiny",
            env={"id": SUM, "kwargs": kwargs},
            algorithm={"name": "grpo"},
            rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
            optim={"minibatch_size": 4},
            steps=2,
            eval_tasks=2,
            out_dir=str(tmp_path / name),
        )
        with opened(tiny_trainer(cfg, tok)) as trainer:
            if name == "broken":  # every episode errs: the run stops at step 1 with the first error
                with pytest.raises(EpisodeFailures, match="step 1: all 4 episodes failed.*broken_reward"):
                    trainer.train()
            else:
                history = trainer.train()
        stored = [
            json.loads(line)
            for line in (tmp_path / name / "train" / "step-1" / "trajectories.jsonl").read_text().splitlines()
        ]
        if name == "broken":
            assert trainer.step == 0 and len(stored) == 4
            assert all("broken_reward" in t["error"] for t in stored)
            continue
        steps = history[1:]
        assert len(steps) == 2 and all(s["rollout_episodes"] == 4 for s in steps)
        assert all(s["error_episodes"] == 0 and s["logp_diff_max"] < 1e-4 for s in steps), steps
        if name == "game":  # the tiny model never guesses right: four turns, the last three after a rewrite
            assert all(t["segments"] and len(t["segments"]) == 3 for t in stored), [t["segments"] for t in stored]
        else:
            assert history[0]["eval_success"] is not None


def test_ray_rollout_workers_play_it_token_exact_with_its_segments(ray_cluster, tmp_path):
    """placement: ray — a worker loads the environment itself and runs verifiers' rollouts on its own loop; the
    rewritten histories arrive as segments and the learner's log-probabilities match the worker's sampling (one
    worker: what a worker does with the environment does not depend on how many there are)."""
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.config import TrainConfig

    cfg = TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": SUM, "kwargs": {"kind": "guess", "trim": True, "max_turns": 4}},
            "placement": "ray",
            "ray": {"rollout_workers": 1, "start_timeout": 90},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
            "optim": {"minibatch_size": 4},
            "steps": 1,
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
        }
    )
    tok = tiny_tokenizer("chatml")
    with opened(tiny_trainer(cfg, tok)) as trainer:
        (step,) = trainer.train()[1:]
    assert step["rollout_episodes"] == 4 and step["error_episodes"] == 0 and step["guard_violations"] == 0
    assert step["logp_diff_max"] < 1e-4
    stored = [
        json.loads(line) for line in (tmp_path / "train" / "step-1" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert all(len(t["segments"]) == 3 and t["error"] is None for t in stored)


def test_a_verifiers_without_the_classic_api_is_named_with_its_version_and_the_fix():
    """verifiers 0.4 ships only its v1 task sets: a module without load_environment is refused, naming the installed
    version and the release turnrl plays, not an AttributeError."""
    import types

    from turnrl.envs.adapters.verifiers_env import VerifiersEnvError
    from turnrl.envs.adapters.verifiers_load import check_version

    v1_only = types.SimpleNamespace(__name__="verifiers")
    with pytest.raises(
        VerifiersEnvError,
        match=r"verifiers:vf-x: the installed verifiers \S+ has no load_environment.*"
        r"pip install 'verifiers==0.3.1'",
    ):
        check_version("vf-x", v1_only)
    import verifiers

    check_version("vf-x", verifiers)  # the installed one (0.3) passes


def test_the_examples_reward_does_not_pay_a_restated_question(monkeypatch):
    """examples/vf_arithmetic.py read the last number of the reply, so an echo of `What is 14 - 7?` (ending on 7, the
    result) was paid; through the environment (the rubric is handed the prompt) and on the function itself."""
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    monkeypatch.syspath_prepend(str(examples))
    import verifiers as vf
    import vf_arithmetic

    env = turnrl.make("verifiers:vf_arithmetic")
    try:
        index = next(
            i
            for i in range(200)
            if (q := env.task_at(i).prompt)
            and " - " in str(q)
            and int(str(q).split()[2]) == 2 * int(str(q).split()[4].rstrip("?"))
        )
        obs, _ = env.reset(options={"index": index})
        question = obs[-1].content
        _, echoed, *_ = env.step(question)
        env.reset(options={"index": index})
        _, answered, *_ = env.step(
            f"{question.split()[2]} - {question.split()[4].rstrip('?')} = {env.task_at(index).answer}"
        )
    finally:
        env.close()
    assert (echoed, answered) == (0.0, 1.0), question
    parser = vf.Parser()
    reply = lambda text: [{"role": "assistant", "content": text}]
    asked = [{"role": "user", "content": "What is 12 + 7?"}]
    assert vf_arithmetic.correct_answer(reply("7+12"), "19", parser, prompt=asked) == 0.0  # either order
    assert vf_arithmetic.correct_answer(reply("So 19."), "19", parser, prompt=asked) == 1.0
    assert vf_arithmetic.correct_answer(reply("9" * 5000), "19", parser, prompt=asked) == 0.0
