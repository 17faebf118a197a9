"""Environments as servers: `turnrl envs serve` and `remote:` ids, on real servers on 127.0.0.1.

The same episodes as the local environment, the conformance harness over the wire, many sessions at once, the
faults (a slow step, a server that dies, a malformed answer, a refused URL) each one clear error that ends only its
episode, and OpenEnv both ways (its client on our server, our client on a server built with `openenv-core`)."""

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from local_net import free_port, wait_for_port
from tiny_trainer import train_tiny
from toy_envs import assert_learns, same_words  # importing it registers tests/*

import turnrl
import turnrl.tools
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.core import Task
from turnrl.envs.registry import UnknownEnvironmentError
from turnrl.envs.remote import RemoteEnvError
from turnrl.envs.remote.server import EnvServer
from turnrl.envs.tool_env import ToolEnv
from turnrl.episode import play_episode

REPO = Path(__file__).resolve().parents[2]
ARITH = {"level": 1, "calculator": True, "tool_style": "tags", "max_turns": 2, "answer_format": "auto"}


@pytest.fixture
def server():
    srv = EnvServer(["turnrl/Arithmetic-v0", "tests/Upper-v0", "tests/Slow-v0"], port=0)
    srv.start()
    yield srv
    srv.stop()


def remote(srv, env_id, **kwargs):
    return turnrl.make(f"remote:http://127.0.0.1:{srv.port}/{env_id}", **kwargs)


def oracle(conversation, env):
    return env.oracle_action() or "no idea"


def test_a_remote_episode_is_the_local_one(server):
    local = turnrl.make("turnrl/Arithmetic-v0", **ARITH)
    env = remote(server, "turnrl/Arithmetic-v0", **ARITH)
    assert (len(env), env.max_turns, env.split, env.held_out_split, env.stop) == (
        len(local),
        local.max_turns,
        local.split,
        local.held_out_split,
        local.stop,
    )
    assert env.tool_schemas() == local.tool_schemas() and [t.name for t in env.tools] == ["calculator"]
    assert env.task_at(5) == local.task_at(5)
    for seed in range(3):
        a, b = play_episode(local, oracle, seed=seed), play_episode(env, oracle, seed=seed)
        assert b.error is None and b.prompt == a.prompt and b.task_id == a.task_id
        assert [(t.action, t.observation, t.reward, t.terminated) for t in b.turns] == [
            (t.action, t.observation, t.reward, t.terminated) for t in a.turns
        ]
        assert b.turns[-1].reward == 1.0 and len(b.turns) == 2  # a calculator call, then the answer
    wrong = play_episode(env, lambda c, e: "\\boxed{-1}", seed=0)
    assert wrong.turns[-1].reward == 0.0 and wrong.turns[-1].info["correct"] is False
    env.close()


def test_the_conformance_harness_passes_over_the_wire(server):
    report = check_environment(remote(server, "turnrl/Arithmetic-v0", **ARITH))
    assert report.ok, str(report)
    assert any("calculator" in n and "runs elsewhere" in n for n in report.notes), report.notes
    assert sum(e.tool_calls for e in report.episodes) >= 2  # the oracle's calls ran on the server


def test_held_out_evaluation_makes_the_test_split_on_the_server(server):
    from turnrl.rl.run.evaluate import run_eval_kwargs

    train = remote(server, "turnrl/Arithmetic-v0", level=1)
    kwargs = run_eval_kwargs(train, {"level": 1}, None)
    held = remote(server, "turnrl/Arithmetic-v0", **kwargs)
    assert kwargs["split"] == "test" and held.split == "test" and held.spec.kwargs["split"] == "test"
    assert held.reset(seed=0, options={"index": 0})[1]["task_id"].startswith("arithmetic/test/")


def test_many_sessions_step_at_once(server):
    envs = [remote(server, "tests/Slow-v0") for _ in range(8)]
    for env in envs:
        env.reset(options={"index": 1})  # each step sleeps 0.5 s on the server

    async def all_steps():
        return await asyncio.gather(*(env.astep("Yes") for env in envs))

    t0 = time.perf_counter()
    results = asyncio.run(all_steps())
    assert time.perf_counter() - t0 < 3.0  # one after another would take 4 s
    assert all(r[1] == 1.0 and r[2] for r in results)
    assert len(server.sessions) == 8
    for env in envs:
        env.close()
    deadline = time.time() + 5
    while server.sessions and time.time() < deadline:
        time.sleep(0.05)
    assert not server.sessions  # closed sessions free their environments


def test_a_dropped_environment_ends_its_session_at_once(server):
    env = remote(server, "turnrl/Arithmetic-v0", **ARITH)  # with tools: they must not keep it alive
    env.reset(seed=0)
    assert len(server.sessions) == 1
    del env  # no close(), no garbage collection: reference counting alone
    deadline = time.time() + 5
    while server.sessions and time.time() < deadline:
        time.sleep(0.05)
    assert not server.sessions


def test_a_session_the_server_closed_while_idle_is_reopened_at_the_next_reset():
    with EnvServer(["tests/Upper-v0"], port=0, idle_timeout=0.3) as srv:
        env = remote(srv, "tests/Upper-v0")
        env.reset(seed=0)
        assert env.step("Yes")[1] == 1.0
        time.sleep(0.8)  # the server closes the idle session
        env.reset(seed=1)  # a new session, without an error
        assert env.step("Yes")[1] == 1.0 and srv.served_sessions == 2


def test_one_session_too_many_is_refused_clearly():
    with EnvServer(["tests/Upper-v0"], port=0, max_sessions=2) as srv:
        keep = [remote(srv, "tests/Upper-v0") for _ in range(2)]
        with pytest.raises(RemoteEnvError, match=r"at capacity .* within 1 s .*max_sessions"):
            remote(srv, "tests/Upper-v0", remote_connect_timeout=1)
        threading.Timer(0.5, keep[0].close).start()
        remote(srv, "tests/Upper-v0", remote_connect_timeout=10).reset(seed=0)  # waits for the freed place


def test_a_step_past_the_server_timeout_ends_that_episode_only():
    with EnvServer(["tests/Slow-v0"], port=0, step_timeout=0.5) as srv:
        env = remote(srv, "tests/Slow-v0")
        traj = play_episode(env, lambda c, e: "Yes", options={"index": 3})  # 1.5 s to grade
        assert traj.error and "took longer than 0.5 s" in traj.error and "TIMEOUT" in traj.error
        assert traj.prompt  # what was collected is kept
        again = play_episode(env, lambda c, e: "Yes", options={"index": 0})  # a new session
        assert again.error is None and again.turns[-1].reward == 1.0


def test_the_client_timeout_cuts_a_slow_answer():
    with EnvServer(["tests/Slow-v0"], port=0) as srv:
        env = remote(srv, "tests/Slow-v0", remote_timeout=0.4)
        env.reset(options={"index": 3})
        with pytest.raises(RemoteEnvError, match=r"did not answer the step 0 within 0.4 s \(remote_timeout\)"):
            env.step("Yes")
        env.reset(options={"index": 0})
        assert env.step("Yes")[1] == 1.0


def test_a_server_that_dies_mid_episode_fails_that_episode_and_the_next_reset_recovers():
    port = free_port()
    srv = EnvServer(["tests/Upper-v0"], port=port).__enter__()
    env = turnrl.make(f"remote:http://127.0.0.1:{port}/tests/Upper-v0")
    env.reset(seed=0)
    srv.stop()
    with pytest.raises(RemoteEnvError, match="closed the session|cannot reach"):
        env.step("Yes")
    with pytest.raises(RemoteEnvError, match="cannot reach"):  # still down: one clear line
        env.reset(seed=1)
    with EnvServer(["tests/Upper-v0"], port=port):  # back: the run goes on
        env.reset(seed=2)
        assert env.step("Yes")[1] == 1.0


def _fake_server(answers):
    """A WebSocket server that answers each message with the next of ``answers`` (raw text)."""
    from websockets.sync.server import serve

    def handler(conn):
        for answer in answers:
            conn.recv(timeout=10)
            conn.send(answer)

    srv = serve(handler, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.socket.getsockname()[1]


SPEC = json.dumps({"type": "spec", "data": {"protocol": "turnrl-env/1", "env_id": "x/Y-v0", "max_turns": 2}})
RESET = json.dumps({"type": "observation", "data": {"observation": {"messages": [{"role": "user", "content": "Hi"}]}}})


@pytest.mark.parametrize(
    "answer,message",
    [
        ("not json at all", "malformed message"),
        (json.dumps({"type": "observation", "data": {"observation": {"messages": "nope"}}}), "malformed observation"),
        (
            json.dumps(
                {"type": "observation", "data": {"observation": {"messages": [{"role": "wizard", "content": "x"}]}}}
            ),
            "malformed observation",
        ),
        (json.dumps({"type": "observation", "data": {"observation": {"messages": []}, "reward": "NaN"}}), "non-finite"),
    ],
)
def test_a_malformed_answer_is_one_clear_error(answer, message):
    srv, port = _fake_server([SPEC, RESET, answer])  # the step's answer is malformed
    try:
        env = turnrl.make(f"remote:http://127.0.0.1:{port}/x/Y-v0")
        traj = play_episode(env, lambda c, e: "hi")
        assert traj.error and message in traj.error and f"127.0.0.1:{port}" in traj.error
        assert traj.prompt[0].content == "Hi"  # what came before is kept
        with pytest.raises(RemoteEnvError, match=message):  # at reset too
            _, port2 = _fake_server([SPEC, answer])
            turnrl.make(f"remote:http://127.0.0.1:{port2}/x/Y-v0").reset()
    finally:
        srv.shutdown()


def test_bad_remote_ids_and_arguments_are_refused_before_anything_runs(server):
    port = free_port()
    with pytest.raises(RemoteEnvError, match=r"cannot reach .*Is a server running there\? .*turnrl envs serve"):
        turnrl.make(f"remote:http://127.0.0.1:{port}/tests/Upper-v0", remote_connect_timeout=2)
    with pytest.raises(RemoteEnvError, match=r"HTTP 404.*serves turnrl/Arithmetic-v0, tests/Upper-v0"):
        remote(server, "tests/Nope-v0")
    with pytest.raises(
        RemoteEnvError,
        match="could not make the environment: .*does not accept the keyword argument 'levle'. Did you mean 'level'",
    ):
        remote(server, "turnrl/Arithmetic-v0", levle=2)
    with pytest.raises(UnknownEnvironmentError, match="remote:http://HOST:PORT"):
        turnrl.make("remote:ftp://127.0.0.1/x")
    with pytest.raises(ValueError, match="already|remote: id cannot be served"):
        EnvServer([f"remote:http://127.0.0.1:{server.port}/tests/Upper-v0"], port=0)
    with pytest.raises(UnknownEnvironmentError):
        EnvServer(["tests/Nope-v0"], port=0)


def test_http_endpoints_answer_like_openenv(server):
    import httpx

    base = f"http://127.0.0.1:{server.port}"
    assert httpx.get(f"{base}/health").json()["status"] == "healthy"
    assert httpx.get(f"{base}/").json()["environments"][0] == "turnrl/Arithmetic-v0"
    assert httpx.get(f"{base}/tests/Upper-v0/metadata").json()["name"] == "tests/Upper-v0"
    assert httpx.get(f"{base}/schema").json()["action"]["required"] == ["message"]
    assert httpx.get(f"{base}/nowhere").status_code == 404


def test_plain_http_reset_and_step_are_answered_as_openenv_documents_them(server):
    """`POST /reset` and `POST /step` over plain HTTP (OpenEnv's simulation mode, a user's first requests.post): a
    one-turn task played and graded, and every other request a JSON answer that says what to do instead."""
    import httpx

    base = f"http://127.0.0.1:{server.port}/turnrl/Arithmetic-v0"
    local = turnrl.make("turnrl/Arithmetic-v0")
    obs, _ = local.reset(seed=7)
    first = httpx.post(f"{base}/reset", json={"seed": 7}).json()
    assert first["reward"] is None and first["done"] is False
    assert first["observation"]["messages"][-1]["content"] == obs[-1].content  # the same task as a local reset
    right, wrong = local.oracle_action(), "\\boxed{-1}"
    for action, reward in ((right, 1.0), (wrong, 0.0)):
        answer = httpx.post(f"{base}/step", json={"action": {"message": action}, "seed": 7, "request_id": "r1"})
        assert answer.status_code == 200 and answer.json()["reward"] == reward and answer.json()["done"] is True
    # the first id is served without its prefix too; a turn that does not end the episode says where to go on
    root = f"http://127.0.0.1:{server.port}"
    assert httpx.post(f"{root}/reset", json={"seed": 7}).json() == first
    long = f"http://127.0.0.1:{server.port}/tests/Upper-v0"
    refusals = {
        ("POST", f"{base}/step", '{"action": {"message": "4"}}'): (409, "NO_SESSION", "needs the seed"),
        ("GET", f"{base}/reset", None): (405, "METHOD_NOT_ALLOWED", "it takes POST"),
        ("PUT", f"{base}/step", "{}"): (405, "METHOD_NOT_ALLOWED", "it takes POST"),
        ("POST", f"{base}/reset", "not json"): (422, "VALIDATION_ERROR", "not JSON"),
        ("POST", f"{base}/reset", "[1, 2]"): (422, "VALIDATION_ERROR", "a JSON object"),
        ("POST", f"{base}/reset", '{"seed": "seven"}'): (422, "VALIDATION_ERROR", "seed is an integer"),
        ("POST", f"{base}/reset", '{"speed": 1}'): (422, "VALIDATION_ERROR", "unknown reset fields"),
        ("POST", f"{base}/step", '{"action": "4", "seed": 1}'): (422, "VALIDATION_ERROR", "action"),
        ("POST", f"{root}/nowhere/reset", "{}"): (404, "NOT_FOUND", "turnrl/Arithmetic-v0"),
        ("GET", f"{base}/ws", None): (426, "UPGRADE_REQUIRED", "WebSocket"),
        ("DELETE", f"{long}/state", None): (405, "METHOD_NOT_ALLOWED", "GET"),
    }
    for (method, url, body), (status, code, words) in refusals.items():
        answer = httpx.request(method, url, content=body)
        assert (answer.status_code, answer.json()["code"]) == (status, code), (method, url, answer.text)
        assert words in answer.json()["error"], answer.text
    state = httpx.get(f"{long}/state").json()
    assert state["step_count"] == 0 and state["episode_id"] is None and state["env_id"] == "tests/Upper-v0"
    assert httpx.get(f"{root}/health").json()["sessions"] == 0  # nothing held after plain HTTP calls
    assert httpx.get(f"{long}/health").json()["status"] == "healthy"  # under an id's URL too (OpenEnv's clients)
    local.close()


@turnrl.tools.tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


class AddEnv(ToolEnv):
    """A toy environment with one tool (served to MCP clients)."""

    def __init__(self, **kw):
        super().__init__([Task(id="a0", prompt="What is 2 + 3?", answer="5")], tools=[add], verifier=same_words, **kw)


turnrl.register("tests/Add-v0", f"{__name__}:AddEnv")


def test_an_openenv_mcp_client_calls_the_tools_over_http_and_websocket():
    """OpenEnv's MCPToolClient, both ways it talks: `/mcp` JSON-RPC with a session (production mode) and
    list_tools/call_tool actions over `/ws`; and the JSON-RPC errors."""
    import httpx
    from openenv.core.mcp_client import MCPToolClient

    async def use(url, production):
        client = MCPToolClient(base_url=url)
        client.use_production_mode = production
        try:
            tools = await client.list_tools()
            return [t.name for t in tools], await client.call_tool("add", a=2, b=3)
        finally:
            await client.close()

    with EnvServer(["tests/Add-v0"], port=0) as srv:
        url = f"http://127.0.0.1:{srv.port}/tests/Add-v0"
        for production in (True, False):
            names, result = asyncio.run(use(url, production))
            assert names == ["add"] and str(result) == "5", (production, names, result)
        deadline = time.monotonic() + 10  # the client closed its sessions (the server notices a closed socket soon)
        while (srv.mcp.sessions or srv.sessions) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.mcp.sessions == {} and srv.sessions == set()
        rpc = f"{url}/mcp"
        listed = httpx.post(rpc, json={"jsonrpc": "2.0", "method": "tools/list", "id": 1}).json()
        assert listed["result"]["tools"][0]["input_schema"]["required"] == ["a", "b"]  # no session: a one-off
        errors = {
            "not json": -32700,
            '{"id": 2}': -32600,
            '{"jsonrpc": "2.0", "method": "resources/list", "id": 3}': -32601,
            '{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "add", "session_id": "gone"}, "id": 4}': -32602,
            '{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "add", "arguments": [1]}, "id": 5}': -32602,
        }
        for body, code in errors.items():
            assert httpx.post(rpc, content=body).json()["error"]["code"] == code, body
        bad = httpx.post(
            rpc,
            json={
                "jsonrpc": "2.0",
                "method": "tools/call",
                "id": 6,
                "params": {"name": "add", "arguments": {"a": "x", "b": 1}},
            },
        ).json()
        assert bad["result"]["isError"] is True  # the tool's own refusal is its result, as MCP says


def test_an_openenv_client_plays_a_turnrl_environment(server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=f"http://127.0.0.1:{server.port}/turnrl/Arithmetic-v0").sync() as client:
        first = client.reset(seed=4)
        question = first.observation["messages"][-1]["content"]
        a, b = map(int, re.search(r"What is (\d+) \+ (\d+)", question).groups())
        result = client.step({"message": f"\\boxed{{{a + b}}}"})
        assert result.done and result.reward == 1.0 and result.observation["info"]["correct"] is True
        assert client.state()["finished"] is True
    with GenericEnvClient(base_url=f"http://127.0.0.1:{server.port}").sync() as client:  # /ws: the first id
        assert "What is" in client.reset(seed=0).observation["messages"][-1]["content"]


# Prepended to the OpenEnv template's server/app.py: keeps the HTTPEnvServer that create_app builds, so that the
# test can read its own count of open sessions (`active_sessions`) at /test/sessions, and counts the sessions made
# and those that ended properly (the client's `close` message, or a WebSocket close frame).
SESSION_COUNTER = """import openenv.core.env_server.http_server as _h
SERVERS, COUNTS = [], {"created": 0, "closed": 0}
_register, _create = _h.HTTPEnvServer.register_routes, _h.HTTPEnvServer._create_session
def _keep(self, *args, **kwargs):
    SERVERS.append(self)
    return _register(self, *args, **kwargs)
async def _count(self, *args, **kwargs):
    COUNTS["created"] += 1
    return await _create(self, *args, **kwargs)
class _Close(_h.WSCloseMessage):
    def __init__(self, **data):
        COUNTS["closed"] += 1
        super().__init__(**data)
_h.HTTPEnvServer.register_routes, _h.HTTPEnvServer._create_session, _h.WSCloseMessage = _keep, _count, _Close
import starlette.websockets as _w
_receive = _w.WebSocket.receive_text
async def _frames(self):
    try:
        return await _receive(self)
    except _w.WebSocketDisconnect as e:
        COUNTS["closed"] += e.code in (1000, 1001)  # a close frame; 1006: the socket dropped without one
        raise
_w.WebSocket.receive_text = _frames
"""


def unclosed_sessions(url, settle=10.0):
    """The OpenEnv server's sessions that are open or ended without a close (the client's ``close`` message or a close
    frame: a socket shut by garbage collection sends neither), once its count of open ones stops falling (a dropped
    socket is noticed asynchronously)."""
    import httpx

    deadline = time.monotonic() + settle
    while True:
        n = httpx.get(f"{url}/test/sessions", timeout=10).json()
        if n["open"] == 0 or time.monotonic() > deadline:
            return {"open": n["open"], "ended without close": n["created"] - n["closed"] - n["open"]}
        time.sleep(0.1)


@pytest.fixture
def openenv_server(tmp_path):
    """The environment `openenv init` makes (openenv-core's template: it echoes the message, reward 0.1 per
    character), served by uvicorn on 127.0.0.1."""
    openenv = Path(sys.executable).with_name("openenv")
    subprocess.run(
        [str(openenv), "init", "echo_probe", "--output-dir", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    app = tmp_path / "echo_probe" / "server" / "app.py"  # the template's own knob: one session at a time by default
    text = app.read_text().replace("max_concurrent_envs=1,", "max_concurrent_envs=16,")
    app.write_text(
        SESSION_COUNTER + text + "\n\n@app.get('/test/sessions')\ndef _sessions():\n"
        "    return {'open': SERVERS[0].active_sessions, **COUNTS}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path / "echo_probe",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def test_turnrl_plays_and_evaluates_an_openenv_environment(openenv_server, tmp_path):
    env = turnrl.make(f"remote:{openenv_server}", max_turns=2)
    assert env.openenv and env.spec.id == "remote/EchoProbeEnvironment-v0"
    traj = play_episode(env, lambda c, e: "hello")
    assert traj.error is None and "Echo Probe environment ready" in traj.prompt[0].content
    assert [t.reward for t in traj.turns] == pytest.approx([0.5, 0.5]) and traj.truncated  # max_turns, client side
    assert '"echoed_message": "hello"' in traj.turns[0].observation[0].content
    assert env.reset(options={"index": 7})[1]["task_id"] == "EchoProbeEnvironment-v0/seed/7"
    env.close()
    assert unclosed_sessions(openenv_server) == {"open": 0, "ended without close": 0}
    with pytest.raises(RemoteEnvError, match=r"is an OpenEnv server, .* takes no keyword arguments \(split given\)"):
        turnrl.make(f"remote:{openenv_server}", split="test")
    # the commands in this process (`turnrl envs serve` and `turnrl train` as processes: the test below)
    from typer.testing import CliRunner

    from turnrl.cli import app

    out, cli = tmp_path / "eval", CliRunner()
    opts = ["--agent", "tiny:chatml", "--limit", "3", "--max-new-tokens", "4", "--out", str(out)]
    result = cli.invoke(app, ["eval", "--env", f"remote:{openenv_server}", *opts], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    rows = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and [r["task_id"] for r in rows] == [f"EchoProbeEnvironment-v0/seed/{i}" for i in range(3)]
    # every environment the evaluation opened (its probes too) it closed with a close message
    assert unclosed_sessions(openenv_server) == {"open": 0, "ended without close": 0}
    cli.invoke(app, ["envs", "check", f"remote:{openenv_server}"])  # whatever it finds, it closes what it opened
    assert unclosed_sessions(openenv_server) == {"open": 0, "ended without close": 0}
    config = tmp_path / "openenv.yaml"  # and trains on it: GRPO groups share their task (the same reset seed)
    config.write_text(
        f"model: tiny:chatml\nenv:\n  id: remote:{openenv_server}\nrollout:\n  prompts_per_step: 2\n"
        f"  group_size: 2\n  max_new_tokens: 4\noptim:\n  minibatch_size: 4\nsteps: 2\neval_tasks: 2\n"
        f"out_dir: {tmp_path / 'run'}\n"
    )
    result = cli.invoke(app, ["train", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3 and steps[1]["rollout_episodes"] == 4 and steps[1]["reward_mean"] > 0
    # and so did training (its probes, its episodes, its held-out evaluations)
    assert unclosed_sessions(openenv_server) == {"open": 0, "ended without close": 0}


def test_training_through_a_remote_environment_learns(server, tmp_path, one_thread):
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.trainer import TrainConfig

    cfg = TrainConfig(
        model="tiny",
        env={"id": f"remote:http://127.0.0.1:{server.port}/tests/Upper-v0"},
        algorithm={"name": "grpo"},
        rollout={"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        optim={"lr": 1e-2, "minibatch_size": 16},
        steps=30,
        eval_tasks=8,
        out_dir=str(tmp_path),
    )
    tok = tiny_tokenizer("chatml")
    history = train_tiny(cfg, tok)
    assert_learns(history)
    assert server.served_sessions >= 2  # the training and the held-out environments


def test_envs_serve_and_train_from_the_command_line(tmp_path):
    """`turnrl envs serve` as a subprocess on a free port, `turnrl train` on its remote: id in a process that does
    not have the environment (only the server does), and `turnrl eval` of an id the server does not serve (in this
    process: the refusal is the server's)."""
    from typer.testing import CliRunner

    from turnrl.cli import app

    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    serve = subprocess.Popen(
        [sys.executable, "-m", "turnrl", "envs", "serve", "tests/Upper-v0", "--port", "0", "--import", "toy_envs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = serve.stdout.readline()
        found = re.search(r"serving tests/Upper-v0 at (remote:http://127\.0\.0\.1:\d+/tests/Upper-v0)", line)
        assert found, line + serve.stdout.read(2000)
        config = tmp_path / "remote.yaml"
        config.write_text(
            f"model: tiny:chatml\nenv:\n  id: {found[1]}\nalgorithm:\n  name: grpo\nrollout:\n"
            "  prompts_per_step: 2\n  group_size: 2\n  max_new_tokens: 4\noptim:\n  minibatch_size: 4\n"
            f"steps: 2\neval_tasks: 2\nout_dir: {tmp_path / 'run'}\n"
        )
        result = subprocess.run(
            [sys.executable, "-m", "turnrl", "train", str(config)], capture_output=True, text=True, timeout=300, env=env
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3
        bad_id = found[1].replace("Upper", "Uper")
        bad = CliRunner().invoke(app, ["eval", "--env", bad_id, "--agent", "tiny:chatml", "--limit", "1"])
        assert bad.exit_code == 2 and "HTTP 404" in bad.output, (bad.output[-3000:], bad.exception)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
