"""The training gateway: a real HTTP server on 127.0.0.1, the official `openai` client, tiny real models.

Token-exactness against a native turnrl rollout, segments where a program rewrites its history, 32 concurrent
sessions recorded once each, and every kind of bad input answered in OpenAI's error shape or as an errored episode.
"""

import functools
import json
import sys
import threading
import time

import httpx
import openai
import pytest
import torch
from openai import OpenAI
from tiny_trainer import opened, tiny_trainer, train_tiny

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.gateway import Gateway, Program, build_trajectory, parse_outcome
from turnrl.gateway.history import ChatHistory
from turnrl.gateway.program import ProgramError, load_function
from turnrl.gateway.runner import play_programs
from turnrl.rl.sources.base import Job
from turnrl.rollout.engine import Rollout


def arithmetic(turns=4):
    return turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=turns)


@pytest.fixture(scope="module")
def agent():
    tok = tiny_tokenizer("chatml")
    return HFAgent(tiny_model(tok), tok, batch_size=8, kv_cache_mb=64)


@pytest.fixture
def gateway(agent):
    gw = Gateway(agent, "tiny", max_context=4096).start()
    yield gw
    gw.stop()


def play_env_through(client, env, seed, max_tokens=12):
    """A program that plays a turnrl environment by hand through an OpenAI client (append-only history)."""
    obs, _ = env.reset(seed=seed)
    messages = [m.to_chat() for m in obs]
    while True:
        reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens, temperature=1.0)
        text = reply.choices[0].message.content
        messages.append({"role": "assistant", "content": text})
        obs, reward, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            return reward, info
        messages += [m.to_chat() for m in obs]


def test_the_recorded_episode_equals_a_native_rollout_token_for_token(agent, gateway):
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    native = Rollout(agent, params, continuous=True).run([arithmetic()], seeds=[3], sample_seeds=[77])[0]
    sid = gateway.open("same", seed=77)  # the session's stream: call k samples with seed 77·1009 + k, like turn k
    reward, info = play_env_through(OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key), arithmetic(), 3)
    session = gateway.close(sid)
    traj = build_trajectory(
        session.calls, reward=reward, correct=info.get("correct"), eos_ids=gateway.eos_ids, tokenizer=agent.tokenizer
    )
    assert native.num_turns == traj.num_turns == 4 and native.error is None
    assert traj.token_ids == native.token_ids
    assert traj.loss_mask == native.loss_mask
    assert [t.token_span for t in traj.turns] == [t.token_span for t in native.turns]
    assert [t.obs_span for t in traj.turns[:-1]] == [t.obs_span for t in native.turns[:-1]]
    assert torch.allclose(torch.tensor(traj.logprobs), torch.tensor(native.logprobs), atol=1e-5, rtol=0)
    assert traj.segments is None and traj.metadata["gateway"]["reused_prompts"] == 3
    # the tiny model samples random bytes: re-tokenizing its replies would not give back the sampled tokens
    assert traj.metadata["gateway"]["template_drift"], "expected drift from re-rendering random text"


def test_a_rewritten_history_becomes_a_new_token_exact_segment(agent, gateway):
    sid = gateway.open("rewrite", seed=5)
    client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key)
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}]
    first = client.chat.completions.create(model="tiny", messages=history, max_tokens=8)
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And 4 + 4?"},
    ]
    client.chat.completions.create(model="tiny", messages=history, max_tokens=8)
    summary = [history[0], {"role": "user", "content": "Summary so far: two sums. What is 9 - 1?"}]
    client.chat.completions.create(model="tiny", messages=summary, max_tokens=8)  # the program rewrote its history
    session = gateway.close(sid)
    traj = build_trajectory(session.calls, reward=1.0, correct=True, eos_ids=gateway.eos_ids, tokenizer=agent.tokenizer)
    assert len(traj.segments) == 2 and traj.segments[0] == 0
    cut = traj.segments[1]
    assert [t.info["segment"] for t in traj.turns] == [0, 0, 1]
    for turn, call in zip(traj.turns, session.calls):  # every generated span is exactly what was sampled
        s, e = turn.token_span
        assert traj.token_ids[s:e] == call.outs[0].token_ids
        assert traj.logprobs[s:e] == call.outs[0].logprobs
    tok = agent.tokenizer
    fresh = tok.encode(
        tok.apply_chat_template(summary, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    assert traj.token_ids[cut : traj.turns[2].token_span[0]] == fresh  # the new segment's prompt, as the model saw it
    assert traj.token_ids[: len(session.calls[1].prompt)] == session.calls[1].prompt  # segment 0 is one sequence
    assert "1 earlier messages kept" in traj.metadata["segment_reasons"][0]
    assert traj.turns[-1].reward == 1.0 and traj.correct is True


def test_thirty_two_concurrent_sessions_share_batches_and_are_recorded_once(agent, gateway):
    widest = []
    step = agent._step

    def watch(batch):  # the real step; only notes how many rows decoded together
        widest.append(len(batch.rows))
        return step(batch)

    agent._step = watch
    try:
        ids = [gateway.open(f"s{i}", seed=i) for i in range(32)]
        results, errors = {}, []

        def one(sid):
            try:
                client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0)
                results[sid] = play_env_through(client, arithmetic(turns=2), seed=int(sid[1:]))
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(sid,)) for sid in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        agent._step = step
    assert not errors
    sessions = [gateway.close(sid) for sid in ids]
    assert all(len(s.calls) == 2 for s in sessions)  # every call recorded once, in its own session
    assert max(widest) == agent.batch_size  # concurrent sessions decoded in shared batches, not one at a time
    trajs = [build_trajectory(s.calls, reward=0.0, correct=None, eos_ids=gateway.eos_ids) for s in sessions]
    assert all(t.num_turns == 2 and t.segments is None for t in trajs)


def test_n_streaming_tools_and_logprobs_are_recorded(agent, gateway):
    sid = gateway.open("extras", seed=1)
    client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key)
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, n=3, max_tokens=6, logprobs=True, tools=tools
    )
    assert len(reply.choices) == 3 and len(reply.choices[0].logprobs.content) >= 1
    pick = reply.choices[2].message
    follow = [
        *messages,
        pick.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}),
        {"role": "user", "content": "more"},
    ]
    chunks = list(client.chat.completions.create(model="tiny", messages=follow, max_tokens=6, stream=True, tools=tools))
    assert chunks[-1].choices[0].finish_reason is not None
    session = gateway.close(sid)
    assert len(session.calls) == 2 and len(session.calls[0].outs) == 3
    traj = build_trajectory(session.calls, reward=0.0, correct=None, eos_ids=gateway.eos_ids)
    first = session.calls[0]
    s, e = traj.turns[0].token_span
    assert traj.token_ids[s:e] == first.outs[2].token_ids  # the choice the program continued is the one kept
    assert traj.segments is None and traj.metadata["gateway"]["unused_choices"] == 2


def test_a_client_that_disconnects_mid_stream_loses_nothing(gateway):
    sid = gateway.open("gone")
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}
    with httpx.stream(
        "POST",
        gateway.base_url(sid) + "/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {gateway.api_key}"},
        timeout=60,
    ) as r:
        next(r.iter_lines())  # read one event, then hang up
    assert len(gateway.close(sid).calls) == 1


def test_sessions_keys_and_malformed_requests_get_openai_errors(gateway):
    key = gateway.api_key
    sid = gateway.open("errs")
    good = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}

    def post(url, body, key=key, headers=None):
        return httpx.post(
            url,
            content=body if isinstance(body, bytes) else json.dumps(body),
            timeout=30,
            headers={"Authorization": f"Bearer {key}", **(headers or {})},
        )

    cases = {
        "wrong key": (post(gateway.base_url(sid) + "/chat/completions", good, key="nope"), 401),
        "no session": (post(gateway.url + "/chat/completions", good), 400),
        "unknown session": (post(gateway.root + "/s/nobody/v1/chat/completions", good), 404),
        "not JSON": (post(gateway.base_url(sid) + "/chat/completions", b"{oops"), 400),
        "not a chat": (post(gateway.base_url(sid) + "/chat/completions", {**good, "messages": "hi"}), 400),
        "bad role": (
            post(
                gateway.base_url(sid) + "/chat/completions", {**good, "messages": [{"role": "robot", "content": "x"}]}
            ),
            400,
        ),
        "too long": (
            post(
                gateway.base_url(sid) + "/chat/completions",
                {**good, "messages": [{"role": "user", "content": "word " * 5000}]},
            ),
            400,
        ),
    }
    for name, (response, status) in cases.items():
        assert response.status_code == status, name
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}, name
    assert cases["too long"][0].json()["error"]["code"] == "context_length_exceeded"
    header = post(gateway.url + "/chat/completions", good, headers={"X-Session-Id": sid})  # the header form works
    assert header.status_code == 200
    gateway.close(sid)
    ended = post(gateway.base_url(sid) + "/chat/completions", good)
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "session_ended"
    with pytest.raises(openai.NotFoundError):
        OpenAI(base_url=gateway.root + "/s/nobody/v1", api_key=key, max_retries=0).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}]
        )
    # an endpoint the gateway does not answer (embeddings) names the ones it does, as the real client shows it
    with pytest.raises(openai.NotFoundError, match=r"POST /v1/chat/completions.*POST /s/<session>/v1/chat/completions"):
        OpenAI(base_url=gateway.base_url(gateway.open("emb")), api_key=key, max_retries=0).embeddings.create(
            model="tiny", input="x"
        )
    wrong_method = httpx.get(gateway.base_url(sid) + "/chat/completions", headers={"Authorization": f"Bearer {key}"})
    assert wrong_method.status_code == 405 and "POST /v1/chat/completions" in wrong_method.json()["error"]["message"]


def test_listening_beyond_loopback_needs_a_key(agent):
    from turnrl.serving.server import AgentServer

    with pytest.raises(ValueError, match="API key"):
        AgentServer(agent, "tiny", host="0.0.0.0", port=0)
    gw = Gateway(agent, "tiny", host="0.0.0.0")  # the gateway always has a key (a random one by default)
    try:
        assert len(gw.api_key) >= 24
    finally:
        gw.httpd.server_close()
        gw.engine.close()


def test_template_drift_is_detected_and_the_sampled_tokens_kept():
    tok = tiny_tokenizer("llama3")  # this template trims message text: " 42 " is rendered as "42"
    history = ChatHistory(tok, {tok.eos_token_id})
    messages = [{"role": "user", "content": "q"}]
    prompt, match = history.prompt(messages, None)
    assert match.how == "fresh" and match.drift is None
    sampled = tok.encode(" 42 ", add_special_tokens=False)
    history.answered(messages, None, prompt, [{"role": "assistant", "content": " 42 "}], [sampled])
    follow = [*messages, {"role": "assistant", "content": " 42 "}, {"role": "user", "content": "sure?"}]
    ids, match = history.prompt(follow, None)
    assert match.how == "extended" and ids[: len(prompt) + len(sampled)] == prompt + sampled
    assert match.drift is not None and match.drift["at"] >= len(prompt)  # the template would have trimmed the reply


# ---- programs ----


def program_ok(base_url, api_key, task):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    reply = client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=4)
    return {"reward": 0.5, "correct": False, "note": reply.choices[0].message.content[:3]}


def program_answer(base_url, api_key, task):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=4)
    return "The answer is \\boxed{12345}."


async def program_async(base_url, api_key, task):
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    await client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=4)
    return 1.0


def program_raises(base_url, api_key, task):
    raise RuntimeError("boom")


def program_hangs(base_url, api_key, task):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=2)
    time.sleep(3)
    return 1.0


def program_none(base_url, api_key, task):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=2)


def program_bool(base_url, api_key, task):
    return True


def program_silent(base_url, api_key, task):
    return 1.0  # a reward, but no call through the gateway: nothing to train


def test_programs_run_and_every_failure_is_an_errored_episode(agent, gateway):
    jobs = [Job(0, 0, 0, s) for s in range(2)]
    env_kwargs = {"level": 1, "split": "train"}
    here = sys.modules[__name__]

    def play(name, timeout=30.0):
        program = Program(function=f"{here.__name__}:{name}")
        return play_programs(
            gateway, program, "turnrl/Arithmetic-v0", env_kwargs, jobs, seed=0, concurrency=2, timeout=timeout
        )

    ok = play("program_ok")
    assert [t.error for t in ok] == [None, None] and [t.total_reward for t in ok] == [0.5, 0.5]
    assert ok[0].group_id == ok[1].group_id and ok[0].correct is False and ok[0].metadata["job"] == jobs[0].key
    graded = play("program_answer")  # a string is the answer: the environment grades it
    assert (
        graded[0].error is None and graded[0].correct is False and "12345" in str(graded[0].turns[-1].info["extracted"])
    )
    assert play("program_async")[0].total_reward == 1.0
    for name, words, timeout in (
        ("program_raises", "raised RuntimeError: boom", 30.0),
        ("program_hangs", "ran past its timeout", 1.0),
        ("program_none", "returned None", 30.0),
        ("program_bool", "returned a bool", 30.0),
        ("program_silent", "made no calls", 30.0),
    ):
        trajs = play(name, timeout)
        assert all(words in (t.error or "") for t in trajs), (name, [t.error for t in trajs])
    time.sleep(2.5)  # the abandoned program's late call is refused (its session ended); the gateway goes on
    assert play("program_ok")[0].error is None


def test_a_command_program_gets_the_task_and_its_last_line_is_the_result(gateway, tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(
        "import json, os\nfrom openai import OpenAI\n"
        "task = json.loads(os.environ['TURNRL_TASK'])\n"
        "c = OpenAI(base_url=os.environ['OPENAI_BASE_URL'], api_key=os.environ['OPENAI_API_KEY'], max_retries=0)\n"
        "c.chat.completions.create(model=task['model'], messages=task['messages'], max_tokens=3)\n"
        "print('working...')\nprint(json.dumps({'reward': 0.25}))\n"
    )
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('bad things', file=sys.stderr)\nsys.exit(3)\n")
    jobs = [Job(0, 0, 1, 0)]
    run = [
        play_programs(
            gateway,
            Program(command=[sys.executable, str(p)]),
            "turnrl/Arithmetic-v0",
            {"level": 1},
            jobs,
            seed=0,
            concurrency=1,
            timeout=60,
        )[0]
        for p in (script, crash)
    ]
    assert run[0].error is None and run[0].total_reward == 0.25 and run[0].num_turns == 1
    assert "exited with status 3" in run[1].error and "bad things" in run[1].error


def test_results_are_parsed_strictly():
    assert parse_outcome(2).reward == 2.0 and parse_outcome("x").answer == "x"
    assert parse_outcome({"answer": "7", "correct": True}).correct is True
    for bad in (
        None,
        True,
        float("nan"),
        [1],
        {"note": 1},
        {"reward": "high"},
        {"answer": 3},
        {"reward": 1, "correct": "y"},
    ):
        assert parse_outcome(bad).error, bad


def test_a_program_that_cannot_be_loaded_says_why():
    with pytest.raises(ProgramError, match="module:function"):
        load_function("no_colon")
    with pytest.raises(ProgramError, match="no module named 'surely_not_a_module'"):
        load_function("surely_not_a_module:run")
    with pytest.raises(ProgramError, match="has no function 'nothing'"):
        load_function(f"{__name__}:nothing")


# ---- a training run ----


def program_trims(base_url, api_key, task):
    """Two append-only calls, then a rewritten history (the old exchange dropped), then the answer."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = list(task["messages"])
    for _ in range(2):
        reply = client.chat.completions.create(model=task["model"], messages=messages, max_tokens=6)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": "Check it once more."},
        ]
    short = [*task["messages"], {"role": "user", "content": "Now give the final answer."}]
    reply = client.chat.completions.create(model=task["model"], messages=short, max_tokens=6)
    return float(len(reply.choices[0].message.content) % 2)  # a reward that varies within groups (a tiny random model
    # never solves the task)


def test_a_training_run_learns_from_program_episodes_with_segments(tmp_path):
    from turnrl.rl.run.trainer import TrainConfig
    from turnrl.storage import read_jsonl

    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        model="tiny",
        env={"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
        algorithm={"name": "grpo"},
        steps=1,
        eval_tasks=2,
        out_dir=str(tmp_path / "run"),
        program={"function": f"{__name__}:program_trims", "concurrency": 8, "timeout": 120},
        rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        optim={"lr": 1e-2, "minibatch_size": 8},
    )
    torch.manual_seed(0)
    with opened(tiny_trainer(cfg, tok)) as trainer:
        before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
        history = trainer.train()
    assert trainer.step == 1 and "eval_success" in history[0] and "eval_success" in history[-1]
    step = history[-1]
    assert step["rollout_episodes"] == 8 and step["error_episodes"] == 0 and step["turns"] == 3
    episodes = read_jsonl(tmp_path / "run" / "train" / "step-1" / "trajectories.jsonl")
    assert len(episodes) == 8 and all(len(t.segments) == 2 for t in episodes)
    assert all(t.metadata["gateway"]["calls"] == 3 for t in episodes)
    assert len({t.total_reward for t in episodes}) > 1
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())  # the update ran
    evals = read_jsonl(tmp_path / "run" / "eval" / "step-1" / "trajectories.jsonl")
    assert len(evals) == 2 and all(t.metadata["gateway"]["calls"] == 3 for t in evals)


@functools.cache
def shared_http():
    """One HTTP client for every call of program_answers_once (thread-safe; no connection kept between calls, as with
    a client per call): an `openai` client of its own builds an SSL context, ~20 ms, most of a step of 32 episodes."""
    return openai.DefaultHttpxClient(limits=httpx.Limits(max_keepalive_connections=0))


def program_answers_once(base_url, api_key, task):
    """The smallest agent: one call, its reply is the answer (graded by the environment)."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=shared_http())
    return (
        client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=4)
        .choices[0]
        .message.content
    )


def test_a_policy_learns_through_the_gateway_as_it_does_natively(tmp_path):
    """The learning smoke test of the gateway path: tests/Upper-v0 (a reply that starts with a capital letter), the
    tiny model and the settings of the native learning test (tests/rl/test_trainer.py), played by a program through
    the gateway; the success rate must rise by the same rule as natively (toy_envs.assert_learns)."""
    from toy_envs import assert_learns

    from turnrl.rl.run.trainer import TrainConfig

    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        algorithm={"name": "grpo"},
        steps=30,
        eval_tasks=8,
        out_dir=str(tmp_path),
        rollout={"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        optim={"lr": 1e-2, "minibatch_size": 16},
        program={"function": f"{__name__}:program_answers_once", "concurrency": 32, "timeout": 60},
    )
    tok = tiny_tokenizer("chatml")
    torch.manual_seed(0)
    history = train_tiny(cfg, tok)
    assert all(h["error_episodes"] == 0 and h["rollout_episodes"] == 32 for h in history if "success" in h)
    assert_learns(history)


def test_program_settings_are_checked():
    from pydantic import ValidationError

    from turnrl.rl.config import TrainConfig

    base = {"env": {"id": "turnrl/Arithmetic-v0"}, "program": {"function": "a:b"}}
    TrainConfig(**base)
    for extra, words in (
        ({"program": {"function": "a:b", "command": "x"}}, "exactly one"),
        ({"program": {}}, "exactly one"),
        ({"placement": "ray"}, "placement=local"),
        ({"program": {"function": "a:b", "host": "0.0.0.0"}}, "set program.api_key"),
        ({"algorithm": {"name": "tppo"}}, "on-policy"),
    ):
        with pytest.raises(ValidationError, match=words):
            TrainConfig(**{**base, **extra})


#: each example agent (examples/NAME.py and NAME.yaml) and the endpoint its model calls go to: its dialect
EXAMPLE_DIALECTS = {
    "openai_agent": "chat",
    "agents_sdk_agent": "chat",
    "agents_sdk_mcp_agent": "chat",
    "agents_sdk_responses_agent": "responses",
    "anthropic_agent": "messages",
}
#: a field every call in a dialect carries, set by the example from the task (its system prompt, in the dialect's place)
SYSTEM_FIELD = {"chat": "messages", "responses": "instructions", "messages": "system"}


def tool_names(body):
    """The names of the tools a request offers, in any dialect (Chat Completions' under ``function``)."""
    return sorted(t.get("function", t)["name"] for t in body.get("tools") or [])


@pytest.mark.parametrize(("example", "dialect"), EXAMPLE_DIALECTS.items())
def test_each_example_agent_trains_one_step_unchanged(example, dialect, tmp_path, monkeypatch):
    """Each example agent trains one step from its config as committed (made small), through the gateway in its own
    dialect only: no errored episode, a finite loss, and the tokens trained are those the policy sampled (the
    learner's log-probabilities of the recorded tokens are the rollout's, and the consistency guard is silent)."""
    from pathlib import Path

    from turnrl.rl.config import load_config
    from turnrl.rl.run.trainer import Trainer
    from turnrl.serving.server import AgentServer

    def spy(handle, bodies):
        def watched(self, body, ctx=None):
            bodies.append(body)
            return handle(self, body, ctx)

        return watched

    seen = {name: [] for name in SYSTEM_FIELD}  # the bodies each endpoint was sent; the real endpoint answers them
    for name, bodies in seen.items():
        monkeypatch.setattr(AgentServer, name, spy(getattr(AgentServer, name), bodies))
    examples = Path(__file__).resolve().parents[2] / "examples"
    monkeypatch.chdir(examples)  # the config names the program as `EXAMPLE:run`, found next to it
    cfg = load_config(
        examples / f"{example}.yaml",
        [
            "model=tiny:chatml",
            "steps=1",
            "eval_tasks=2",
            f"out_dir={tmp_path / 'run'}",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "optim.minibatch_size=4",
            "optim.grad_accum=1",
        ],
    )
    assert cfg.program.function == f"{example}:run"
    with opened(Trainer(cfg)) as trainer:
        history = trainer.train()
    step = history[-1]
    assert step["rollout_episodes"] == 4 and step["error_episodes"] == 0 and "eval_success" in step
    assert torch.isfinite(torch.tensor(step["loss"]))
    assert abs(step["logp_diff"]) < 1e-3 and step["guard_token_mismatch"] == 0  # the tokens the policy sampled
    assert step["guard_violations"] == 0  # no check of the guard fired
    calls = seen.pop(dialect)
    assert len(calls) >= 6 and not any(seen.values())  # 4 episodes and 2 held-out ones, every call in one dialect
    tools = ["get_price", "get_stock", "search_items"] if example == "agents_sdk_mcp_agent" else ["calculator"]
    assert all(tool_names(b) == tools and b.get(SYSTEM_FIELD[dialect]) for b in calls)


def test_the_cli_says_in_one_line_that_a_program_cannot_be_loaded(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from turnrl.cli import app

    cfg = tmp_path / "run.yaml"
    cfg.write_text("model: tiny:chatml\nenv: {id: turnrl/Arithmetic-v0}\nprogram: {function: not_here:run}\n")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["train", str(cfg)])
    # the command's own exit (2, after its one line), not an exception escaping it with a traceback
    assert done.exit_code == 2 and isinstance(done.exception, SystemExit), (done.output, done.exception)
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert any("program.function" in line and "no module named 'not_here'" in line for line in lines), lines
    assert "Traceback" not in done.output


# ---- review findings, kept as tests ----


def test_the_segment_of_the_last_call_comes_last_so_the_reward_ends_the_row():
    from turnrl.agents.base import Completion
    from turnrl.gateway.record import Call

    def call(i, prompt, out):
        return Call(
            i,
            prompt,
            [Completion(text="", token_ids=out, logprobs=[-0.5] * len(out), finish_reason="stop")],
            version=0,
            endpoint="completions",
        )

    # a sub-agent's conversation (call 1) runs between two calls of the main one (calls 0 and 2)
    traj = build_trajectory(
        [call(0, [1, 2], [3]), call(1, [9, 9], [8]), call(2, [1, 2, 3, 4], [5])],
        reward=1.0,
        correct=True,
        eos_ids=set(),
    )
    assert traj.token_ids == [9, 9, 8, 1, 2, 3, 4, 5] and traj.segments == [0, 3]
    rewards = traj.token_rewards()
    assert rewards[-1] == 1.0 and sum(rewards) == 1.0  # on the last token: returns reach every sampled token
    assert traj.turns[-1].info["call"] == 2 and traj.correct is True
    assert traj.metadata["segment_reasons"] == ["the first conversation, continued after another began"]


def test_streamed_logprob_chunks_carry_whole_characters():
    from turnrl.agents.scripted import ScriptedAgent
    from turnrl.serving.server import AgentServer

    tok = tiny_tokenizer("chatml")
    text = "héllo wörld — ok"
    with AgentServer(ScriptedAgent(tok, lambda prompt: text), "scripted") as server:
        client = OpenAI(base_url=server.url, api_key="x")
        chunks = list(
            client.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True, logprobs=True
            )
        )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text


def test_a_session_with_its_own_stream_ignores_the_requests_seed(gateway):
    def sample(sid):
        client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key)
        out = (
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], seed=0, max_tokens=8, temperature=1.0
            )
            .choices[0]
            .message.content
        )
        gateway.close(sid)
        return out

    a, b, a_again = (
        sample(gateway.open("g1", seed=1)),
        sample(gateway.open("g2", seed=2)),
        sample(gateway.open("g3", seed=1)),
    )
    assert a == a_again and a != b  # a group's samples differ even when the program always sends seed=0


def test_a_gateway_without_an_engine_thread_decodes_while_its_caller_serves(agent):
    from concurrent.futures import ThreadPoolExecutor

    gw = Gateway(agent, "tiny", engine_thread=False).start()
    try:
        sids = [gw.open(f"c{i}", seed=i) for i in range(4)]

        def ask(sid):
            client = OpenAI(base_url=gw.base_url(sid), api_key=gw.api_key, max_retries=0)
            return (
                client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": sid}], max_tokens=4)
                .choices[0]
                .message.content
            )

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(ask, sid) for sid in sids]
            gw.engine.serve(futures, timeout=120)  # the decoding happens in this thread, inside serve
            assert all(f.done() and f.exception() is None for f in futures)
        assert all(len(gw.close(sid).calls) == 1 for sid in sids)
    finally:
        gw.stop()
