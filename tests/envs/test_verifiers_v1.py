"""verifiers v1 task sets (turnrl/envs/adapters/verifiers_v1.py) with the real verifiers package: the task set's own harness
runs its agent in a subprocess, verifiers' interception server relays the agent's model calls to a turnrl gateway
session, and the task's reward scores the trace.

One Python environment holds one verifiers release: .venv has verifiers 0.3 (classic environments,
tests/envs/test_verifiers_env.py), where a v1 task set is refused with the version and the fix. The tests that need 0.4
run in .venv-verifiers-v1 (scripts/setup.sh: verifiers 0.4 over .venv's packages), which
test_the_v1_tests_pass_under_verifiers_0_4 starts from the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_trainer import opened, tiny_trainer

import turnrl
from turnrl.envs.adapters.verifiers_env import VerifiersEnvError

vf = pytest.importorskip("verifiers", reason="verifiers is installed by scripts/setup.sh")
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
V1_PYTHON = REPO / ".venv-verifiers-v1" / "bin" / "python"
VERSION = tuple(int(p) for p in re.findall(r"\d+", vf.__version__)[:2])
needs_04 = pytest.mark.skipif(
    VERSION < (0, 4),
    reason="needs verifiers 0.4: run in .venv-verifiers-v1 by test_the_v1_tests_pass_under_verifiers_0_4",
)
ARITH = "verifiers:vf_arithmetic_v1"
SMALL = {"num_train": 12, "num_eval": 6}


@pytest.fixture(autouse=True)
def _search_paths(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))


@pytest.mark.skipif(VERSION >= (0, 4), reason="verifiers 0.3 only")
def test_a_v1_task_set_under_verifiers_0_3_is_refused_with_the_version_and_the_fix():
    with pytest.raises(
        VerifiersEnvError,
        match=r"is a v1 task set .*installed verifiers 0\.3\.\d+ .*"
        r"pip install 'turnrl\[verifiers-v1\]'",
    ):
        turnrl.make(ARITH)


@pytest.mark.skipif(VERSION >= (0, 4), reason="verifiers 0.3 only: this is what starts the run under 0.4")
@pytest.mark.timeout(900)  # the whole module's v1 tests in one run (about 90 s on 2 free cores)
def test_the_v1_tests_pass_under_verifiers_0_4():
    assert V1_PYTHON.is_file(), f"{V1_PYTHON} is missing: run `bash scripts/setup.sh` (it makes the verifiers 0.4 venv)"
    env = {
        k: v
        for k, v in os.environ.items()  # the inner run's own (its torch threads as this worker's share)
        if not k.startswith("PYTEST_") or k == "PYTEST_XDIST_WORKER_COUNT"
    }
    done = subprocess.run(
        [str(V1_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", __file__],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
        check=False,
    )
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
    assert done.returncode == 0, tail
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed and int(passed.group(1)) >= 9, tail  # every test of the module that needs 0.4 ran


@needs_04
def test_tasks_load_by_name_with_a_held_out_split_that_cannot_leak():
    train, held = turnrl.make(ARITH, split="train", **SMALL), turnrl.make(ARITH, split="test", **SMALL)
    assert (len(train), len(held), train.split, held.split) == (12, 6, "train", "test")
    assert train.held_out_split == held.held_out_split == "test"
    obs, info = held.reset(options={"index": 0})
    assert [m.role for m in obs] == ["system", "user"] and obs[1].content.startswith("What is ")
    assert info["task_id"] == held.tasks[0].id and held.tasks[0].answer.lstrip("-").isdigit()
    # ids are the canonical problem (`7+12` is `12+7`): no held-out problem is a training one in any order
    assert not {t.id for t in train.tasks} & {t.id for t in held.tasks}
    with pytest.raises(
        VerifiersEnvError, match=r"its harness plays each episode.*turnrl\.envs\.adapters\.verifiers_v1:play"
    ):
        held.step("What is it? 3")  # played natively, without the program: refused, saying what to add


def problem_of(question: str) -> tuple:
    """A problem as arithmetic sees it, worked out here and not by the example: the operation and its operands, a
    sum's unordered."""
    a, op, b = question.removeprefix("What is ").removesuffix("?").split()
    return ("+", *sorted((int(a), int(b)))) if op == "+" else ("-", int(a), int(b))


@needs_04
def test_the_examples_held_out_split_holds_no_training_problem_in_any_order():
    """The example's default splits (600 training, 200 held-out problems) and others: no held-out problem is a
    training one, a sum's operands in either order, and every task's answer is its problem's."""
    from vf_arithmetic_v1 import ArithmeticConfig, ArithmeticTaskset

    for settings in ({}, {"seed": 3}, {"num_train": 800, "num_eval": 130}):
        train, held = (
            list(ArithmeticTaskset(ArithmeticConfig(id="vf_arithmetic_v1", split=split, **settings)))
            for split in ("train", "test")
        )
        seen, posed = {problem_of(t.data.prompt) for t in train}, [problem_of(t.data.prompt) for t in held]
        assert len(seen) == len(train) and len(set(posed)) == len(held) == settings.get("num_eval", 200)
        assert not seen & set(posed), sorted(seen & set(posed))[:5]
        for t in [*train, *held]:
            _, a, b = problem_of(t.data.prompt)
            assert t.data.answer == (a + b if " + " in t.data.prompt else a - b)


@needs_04
def test_the_examples_reward_is_the_result_not_the_problem_restated():
    """The reward reads the last number of the final reply; the problem's own expression restated is passed over (an
    echo of `What is 14 - 7?` ends on 7, its result), and a number too long to be one is wrong, not an error."""
    import asyncio
    from types import SimpleNamespace

    from vf_arithmetic_v1 import ArithmeticData, ArithmeticTask, same_problem

    def reward(question: str, answer: int, reply: str) -> float:
        task = ArithmeticTask(ArithmeticData(prompt=question, answer=answer, problem=same_problem(question)))
        return asyncio.run(task.correct(SimpleNamespace(last_reply=reply)))

    for reply, paid in (
        ("What is 14 - 7?", 0),
        ("14 - 7", 0),
        ("14-7", 0),
        ("", 0),
        ("9" * 5000, 0),
        ("-7", 0),
        ("7", 1),
        ("The answer is 7.", 1),
        ("14 - 7 = 7", 1),
        ("7, that is 14 - 7", 1),
    ):
        assert reward("What is 14 - 7?", 7, reply) == paid, reply
    for reply, paid in (("12 + 7", 0), ("7+12", 0), ("12 + 7 = 19", 1), ("19", 1)):
        assert reward("What is 7 + 12?", 19, reply) == paid, reply


@needs_04
def test_a_classic_environment_under_verifiers_0_4_is_named_with_the_version_and_the_fix():
    with pytest.raises(
        VerifiersEnvError,
        match=r"installed verifiers 0\.4\.\d+ has no load_environment.*"
        r"verifiers==0\.3\.1.*v1 task sets",
    ):
        turnrl.make("verifiers:vf_envs", kind="sum")


@needs_04
def test_an_episode_is_the_agents_calls_through_the_gateway_with_exact_tokens():
    """Two calls of the example's agent (turns: 2), the second extending the first: the gateway prompts it with the
    first call's exact tokens (the sampled ones, which the tiny model's random bytes would not re-tokenize to) and
    the episode is one token sequence."""
    from turnrl.agents.hf import HFAgent
    from turnrl.agents.tiny import tiny_model, tiny_tokenizer
    from turnrl.envs.adapters.verifiers_v1 import play
    from turnrl.gateway import Gateway, build_trajectory

    tok = tiny_tokenizer("chatml")
    env = turnrl.make(ARITH, split="test", harness={"turns": 2}, **SMALL)
    gateway = Gateway(
        HFAgent(tiny_model(tok), tok, batch_size=4, kv_cache_mb=32), "tiny", max_context=2048, max_new_tokens=8
    ).start()
    try:
        obs, info = env.reset(options={"index": 1})
        sid = gateway.open("v1", seed=5)
        result = play(
            gateway.base_url(sid), gateway.api_key, {"id": info["task_id"], "index": 1, "model": gateway.model}
        )
        session = gateway.close(sid)
    finally:
        gateway.stop()
    first, second = session.calls
    assert first.messages == [m.to_chat() for m in obs]  # the agent asked what the task set posed
    assert obs[-1].content == env.tasks[1].prompt and info["task_id"] == env.tasks[1].id  # task 1, as asked
    assert second.prompt[: len(first.prompt) + len(first.outs[0].token_ids)] == first.prompt + first.outs[0].token_ids
    traj = build_trajectory(
        session.calls, reward=result["reward"], correct=result["correct"], eos_ids=gateway.eos_ids, tokenizer=tok
    )
    assert traj.segments is None and traj.num_turns == 2 and traj.metadata["gateway"]["reused_prompts"] == 1
    assert traj.token_ids == second.prompt + second.outs[0].token_ids
    assert traj.metadata["gateway"]["template_drift"]  # re-rendering the random text would not give these tokens


@needs_04
def test_one_training_step_of_a_tiny_model_is_token_exact_and_evaluates_on_held_out_rows(tmp_path, one_thread):
    """GRPO through the gateway on the example task set, with a reward plugged in from its config (verifiers' own
    mechanism) that varies where the tiny model never solves a task: the learner's log-probabilities match the
    sampler's, the guard is silent, the update runs, and the held-out evaluation plays the test split."""
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.trainer import TrainConfig
    from turnrl.storage import read_jsonl

    tok = tiny_tokenizer("chatml")
    plugged = {"task": {"rewards": {"parity": {"fn": "vf1_sets:parity"}}}}
    cfg = TrainConfig(
        model="tiny",
        env={"id": ARITH, "kwargs": {"split": "train", **SMALL, **plugged}},
        program={"function": "turnrl.envs.adapters.verifiers_v1:play", "concurrency": 4, "timeout": 120},
        algorithm={"name": "grpo"},
        steps=1,
        eval_tasks=2,
        out_dir=str(tmp_path),
        rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6},
        optim={"lr": 1e-2, "minibatch_size": 4},
    )
    torch.manual_seed(0)
    with opened(tiny_trainer(cfg, tok)) as trainer:
        before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
        history = trainer.train()
    step = history[-1]
    assert step["rollout_episodes"] == 4 and step["error_episodes"] == 0, step
    episodes = read_jsonl(tmp_path / "train" / "step-1" / "trajectories.jsonl")
    assert len({t.total_reward for t in episodes}) > 1, [t.total_reward for t in episodes]
    assert step["logp_diff_max"] < 1e-4 and step["guard_violations"] == 0, step
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())
    held = {t.id for t in turnrl.make(ARITH, split="test", **SMALL).tasks}
    evals = read_jsonl(tmp_path / "eval" / "step-1" / "trajectories.jsonl")
    assert len(evals) == 2 and all(t.task_id in held and t.error is None for t in evals)


def agents_running() -> list:
    """The agent processes of vf1_sets' harness still running under this process."""
    import psutil

    def cmdline(p):
        try:
            return " ".join(p.cmdline())
        except psutil.Error:
            return ""

    return [p for p in psutil.Process().children(recursive=True) if "the agent fell over" in cmdline(p)]


def play_posed(kwargs, timeout=60.0, max_context=None):
    """One episode of vf1_sets' first task with a scripted policy, through a gateway (of ``max_context`` tokens): the
    program's result."""
    from turnrl.agents.scripted import ScriptedAgent
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.envs.adapters.verifiers_v1 import play
    from turnrl.gateway import Gateway

    env = turnrl.make("verifiers:vf1_sets", timeout=timeout, **kwargs)
    gateway = Gateway(
        ScriptedAgent(tiny_tokenizer("chatml"), lambda prompt: "1"), "tiny", max_context=max_context
    ).start()
    try:
        _, info = env.reset(options={"index": 0})
        sid = gateway.open("x")
        try:
            return play(gateway.base_url(sid), gateway.api_key, {"id": info["task_id"], "model": "tiny"})
        finally:
            gateway.close(sid)
    finally:
        gateway.stop()


@needs_04
def test_what_cannot_be_played_is_one_clear_error():
    played = play_posed({})  # the set itself plays: the scripted policy's "1" is the right answer to 0 + 1
    assert (played["reward"], played["correct"], played["stop_condition"]) == (1.0, True, "agent_completed")
    for kwargs, words in (
        ({"kind": "broken"}, r"episode failed: .*KeyError"),
        ({"harness": {"crash": True}}, r"episode failed: .*the agent fell over"),
        ({"harness": {"delay": 30.0}}, r"did not finish within timeout=2 s"),
    ):
        with pytest.raises(VerifiersEnvError, match=words):
            play_posed(kwargs, timeout=2.0 if "delay" in str(kwargs) else 60.0)
    # a call past the context: the gateway's refusal reaches the agent, and verifiers makes it the episode's error
    with pytest.raises(VerifiersEnvError, match=r"episode failed: .*maximum context length is 8 tokens"):
        play_posed({}, max_context=8)
    # the episode past its timeout was cancelled, its runtime torn down: its agent (asleep for 30 s) is gone
    deadline = time.monotonic() + 10
    while agents_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not agents_running(), "the timed-out episode's agent process was left running"
    with pytest.raises(VerifiersEnvError, match=r"infinite task set.*num_tasks"):
        turnrl.make("verifiers:vf1_sets", kind="endless")
    assert len(turnrl.make("verifiers:vf1_sets", kind="endless", num_tasks=3)) == 3
    with pytest.raises(VerifiersEnvError, match=r"settings are not valid: taskset\.kind"):
        turnrl.make("verifiers:vf1_sets", kind="nope")
    with pytest.raises(VerifiersEnvError, match=r"settings are not valid: taskset\.nope"):
        turnrl.make("verifiers:vf1_sets", nope=1)
    with pytest.raises(VerifiersEnvError, match=r"neither a load_environment\(\).*nor a verifiers\.v1 Taskset"):
        turnrl.make("verifiers:conftest")
    from turnrl.envs.adapters.verifiers_v1 import play

    with pytest.raises(VerifiersEnvError, match=r"was not posed by a verifiers v1 task set"):
        play("http://127.0.0.1:9/v1", "key", {"id": "vf1_sets/unknown"})
    assert sys.modules["verifiers"].__version__.startswith("0.4")


def test_an_episode_verifiers_retried_is_refused_not_scored():
    """verifiers reruns a failed attempt when its config has retries; the good attempt then carries the failed ones'
    errors, and the gateway session holds every attempt's calls, which the last attempt's reward must not score."""
    from types import SimpleNamespace

    from turnrl.envs.adapters.verifiers_v1_run import outcome

    def episode(*errors):
        trace = SimpleNamespace(
            ok=True, errors=list(errors), reward=1.0, metrics={"turns": 2}, stop_condition="agent_completed"
        )
        return SimpleNamespace(ok=True, errors=[], traces=[trace])

    assert outcome("s", episode(), 1.0) == {
        "reward": 1.0,
        "correct": True,
        "metrics": {"turns": 2.0},
        "stop_condition": "agent_completed",
    }
    failed = SimpleNamespace(type="HarnessError", message="harness 's' exited 1")
    with pytest.raises(
        VerifiersEnvError,
        match=r"succeeded only after verifiers retried it \(1 earlier error\(s\), "
        r"the first HarnessError: harness 's' exited 1\).*retries to 0",
    ):
        outcome("s", episode(failed), 1.0)
    retried = episode()
    retried.errors.append(failed)  # a whole-episode retry keeps the history on the episode
    with pytest.raises(VerifiersEnvError, match="retried"):
        outcome("s", retried, 1.0)


@needs_04
def test_the_pages_v1_commands_and_config_run_as_written(tmp_path, monkeypatch):
    """docs/bring-your-environment.md#verifiers-v1's commands and config, which the page test (in verifiers 0.3's
    environment) skips: run here, in verifiers 0.4's, as a user runs them — from the repository's root, `cd examples`,
    the example's listing, then `turnrl train` of the example's config (a process of its own, as typed) and of the
    page's own (the same command, run in this process), one step of the tiny model each (the page test's
    substitutions, with one held-out task)."""
    from test_docs_commands import TRAIN
    from typer.testing import CliRunner

    from turnrl.cli import app

    page = (REPO / "docs" / "bring-your-environment.md").read_text()
    section = page[page.index("{#verifiers-v1}") :]
    section = section.split("\n## ")[0]
    blocks = dict(re.findall(r"^```(bash|yaml)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL))
    commands = blocks["bash"].strip().splitlines()
    assert commands[0] == "cd examples" and len(commands) == 3, commands
    (tmp_path / "page.yaml").write_text(blocks["yaml"])
    cwd = REPO / commands[0].split()[1]
    turnrl_cli = [sys.executable, "-m", "turnrl"]  # what .venv-verifiers-v1/bin/turnrl runs
    listing = subprocess.run(
        [sys.executable, *commands[1].split()[1:]], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert listing.returncode == 0 and "problems in both splits (in any order): 0" in listing.stdout, listing.stderr
    args = commands[2].split()[1:]
    assert args[0] == "train"
    done = subprocess.run(
        [*turnrl_cli, *args, *TRAIN, "eval_tasks=1", f"out_dir={tmp_path / 'run0'}", "--no-resume"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and "held-out success" in done.stdout + done.stderr, (args, done.stderr[-2000:])
    monkeypatch.chdir(cwd)
    page = [str(tmp_path / "page.yaml"), *TRAIN, "eval_tasks=1", f"out_dir={tmp_path / 'run1'}", "--no-resume"]
    res = CliRunner().invoke(app, ["train", *page])
    assert res.exit_code == 0 and "held-out success" in res.output, (res.output[-2000:], res.exception)
