"""`turnrl envs serve` off loopback: its API key, sessions per client and request sizes, on real servers on 127.0.0.1.

The key is checked on every HTTP route, the `/ws` and `/mcp` WebSockets, before anything runs (an environment that
counts what it is asked to do shows that nothing was); `remote:` ids send it (`remote_api_key`, `$TURNRL_ENV_API_KEY`),
OpenEnv's clients send it from their URL (`http://turnrl:KEY@HOST:PORT/ID`). Off loopback the server refuses to start
without a key: checked on the constructor and the command line, before anything is bound (no test listens anywhere but
127.0.0.1)."""

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from toy_envs import same_words
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import turnrl
import turnrl.tools
from turnrl.envs.core import Task
from turnrl.envs.remote import RemoteEnvError
from turnrl.envs.remote.access import is_loopback
from turnrl.envs.remote.server import EnvServer
from turnrl.envs.tool_env import ToolEnv

REPO = Path(__file__).resolve().parents[2]
KEY = "s3cret-key"
ID = "tests/Guarded-v0"
RAN = {"made": 0, "resets": 0, "adds": 0}  # what the served environment was asked to do


@turnrl.tools.tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    RAN["adds"] += 1
    return a + b


class GuardedEnv(ToolEnv):
    """A toy environment with one tool that counts what it runs."""

    def __init__(self, **kw):
        RAN["made"] += 1
        super().__init__(
            [Task(id=f"t{i}", prompt=f"Say ok ({i}).", answer="ok") for i in range(4)],
            tools=[add],
            verifier=same_words,
            **kw,
        )

    def _reset(self, options):
        RAN["resets"] += 1
        return super()._reset(options)


turnrl.register(ID, f"{__name__}:GuardedEnv")


def ran() -> dict:
    return dict(RAN)


def wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition()


def test_off_loopback_the_server_needs_a_key_before_anything_is_made_or_bound():
    for host in ("0.0.0.0", "192.0.2.7", "::", "envhost.example"):
        with pytest.raises(ValueError, match=r"needs an API key: pass --api-key KEY or set TURNRL_ENV_API_KEY"):
            EnvServer(["tests/Nope-v0"], host=host)  # an unknown id: the key is checked before any id is made
    before = ran()
    off = EnvServer([ID], host="0.0.0.0", port=0, api_key=KEY)  # made, never started: nothing is bound
    assert off.api_key == KEY and ran()["made"] == before["made"] + 1
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):  # on loopback a key is optional
        assert is_loopback(host) and EnvServer([ID], host=host, port=0).api_key is None
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "envhost.example", ""))
    defaults = EnvServer([ID], port=0)
    assert (defaults.quota.per_client, defaults.max_request_bytes, defaults.max_sessions) == (512, 2**24, 1024)


def test_envs_serve_refuses_an_address_off_loopback_without_a_key():
    """The command line: the check runs before the ids are made (an unknown id shows it), so nothing is bound."""
    env = {k: v for k, v in os.environ.items() if k != "TURNRL_ENV_API_KEY"}
    command = [sys.executable, "-m", "turnrl", "envs", "serve", "tests/Nope-v0", "--host", "0.0.0.0", "--port", "0"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "300"})
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "needs an API key: pass --api-key KEY or set TURNRL_ENV_API_KEY" in out, out
    keyed = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "300", "TURNRL_ENV_API_KEY": KEY}
    )  # the variable is the key
    out = keyed.stdout + keyed.stderr
    assert keyed.returncode != 0 and "API key" not in out and "tests/Nope-v0" in out, out


@pytest.fixture
def keyed():
    with EnvServer([ID], port=0, api_key=KEY) as srv:
        yield srv


def test_every_http_route_needs_the_key_and_runs_nothing_without_it(keyed):
    base = f"http://127.0.0.1:{keyed.port}"
    url = f"{base}/{ID}"
    requests = [
        ("GET", f"{base}/", None),
        ("GET", f"{base}/health", None),
        ("GET", f"{url}/health", None),
        ("GET", f"{url}/metadata", None),
        ("GET", f"{url}/schema", None),
        ("GET", f"{url}/state", None),
        ("GET", f"{url}/ws", None),
        ("POST", f"{base}/reset", {"seed": 1}),
        ("POST", f"{url}/reset", {"seed": 1}),
        ("POST", f"{url}/step", {"action": {"message": "ok"}, "seed": 1}),
        (
            "POST",
            f"{url}/mcp",
            {
                "jsonrpc": "2.0",
                "method": "tools/call",
                "id": 1,
                "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
            },
        ),
        ("POST", f"{url}/mcp", {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 2}),
        ("GET", f"{base}/not/served", None),
    ]
    wrong = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {KEY}x"},
        {"Authorization": "Basic " + base64.b64encode(b"turnrl:wrong").decode()},
        {"Authorization": KEY},
        {"X-Api-Key": KEY},
    ]
    before = ran()
    for method, where, body in requests:
        for headers in wrong:
            answer = httpx.request(method, where, json=body, headers=headers)
            assert answer.status_code == 401, (method, where, headers, answer.text)
            assert answer.json()["code"] == "UNAUTHORIZED" and "Authorization: Bearer KEY" in answer.json()["error"]
            assert answer.headers["www-authenticate"].startswith("Bearer")
    assert ran() == before and keyed.served_sessions == 0 and keyed.mcp.sessions == {}  # nothing ran
    expected = [200, 200, 200, 200, 200, 200, 426, 200, 200, 200, 200, 200, 404]
    for (method, where, body), status in zip(requests, expected, strict=True):
        answer = httpx.request(method, where, json=body, headers={"Authorization": f"Bearer {KEY}"})
        assert answer.status_code == status, (method, where, answer.text)
    graded = httpx.post(f"{url}/step", json={"action": {"message": "ok"}, "seed": 1}, auth=("turnrl", KEY))
    assert graded.status_code == 200 and graded.json()["reward"] == 1.0  # Basic credentials: the password is the key
    assert ran()["resets"] == before["resets"] + 4 and ran()["adds"] == before["adds"] + 1


def test_websocket_sessions_need_the_key(keyed, monkeypatch):
    monkeypatch.delenv("TURNRL_ENV_API_KEY", raising=False)
    before = ran()
    for path in (f"/{ID}/ws", "/ws", f"/{ID}/mcp", "/mcp"):
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                connect(f"ws://127.0.0.1:{keyed.port}{path}", additional_headers=headers, open_timeout=5)
            assert refused.value.response.status_code == 401, path
            assert json.loads(refused.value.response.body)["code"] == "UNAUTHORIZED"
    url = f"remote:http://127.0.0.1:{keyed.port}/{ID}"
    with pytest.raises(RemoteEnvError, match=r"HTTP 401.*TURNRL_ENV_API_KEY or its remote_api_key"):
        turnrl.make(url)
    with pytest.raises(RemoteEnvError, match="HTTP 401"):
        turnrl.make(url, remote_api_key="wrong")
    assert ran() == before and keyed.served_sessions == 0
    with connect(f"ws://127.0.0.1:{keyed.port}/{ID}/ws", additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
    env = turnrl.make(url, remote_api_key=KEY)  # the keyword argument ...
    env.reset(seed=2)
    assert env.step("ok")[1] == 1.0 and "remote_api_key" not in env.spec.kwargs
    env.close()
    monkeypatch.setenv("TURNRL_ENV_API_KEY", KEY)  # ... or the environment variable
    env = turnrl.make(url)
    env.reset(seed=1)
    assert env.step("ok")[1] == 1.0
    env.close()
    with pytest.raises(RemoteEnvError, match="HTTP 401"):  # the keyword argument wins over the variable
        turnrl.make(url, remote_api_key="wrong")


def test_odd_methods_paths_and_subprotocols_need_the_key_too(keyed):
    """The guard sits in front of the router: HEAD, OPTIONS, a trailing slash, a percent-encoded path, a path no
    route serves and a WebSocket asking for a subprotocol are all answered 401 without the key."""
    base = f"http://127.0.0.1:{keyed.port}"
    before = ran()
    for method, path in [
        ("HEAD", "/health"),
        ("OPTIONS", "/health"),
        ("GET", "/health/"),
        ("GET", "/%68ealth"),
        ("POST", f"/{ID}/reset/"),
        ("POST", f"/{ID.replace('/', '%2F')}/reset"),
        ("PUT", "/reset"),
        ("GET", f"/{ID}/../health"),
    ]:
        answer = httpx.request(method, f"{base}{path}", json=None if method in ("HEAD", "OPTIONS") else {"seed": 1})
        assert answer.status_code == 401, (method, path, answer.status_code)
    for path, protocols in [("/ws/", None), ("/%77s", None), ("/no/such/ws", None), ("/ws", ["openenv", "turnrl"])]:
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{keyed.port}{path}", subprotocols=protocols, open_timeout=5)
        assert refused.value.response.status_code == 401, path
    assert ran() == before and keyed.served_sessions == 0
    assert httpx.head(f"{base}/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200  # (as GET)


def test_a_key_in_a_remote_url_is_sent_and_never_echoed(keyed, monkeypatch):
    """`remote:http://turnrl:KEY@HOST:PORT/ID` works (Basic), and no error of the client prints the key."""
    monkeypatch.delenv("TURNRL_ENV_API_KEY", raising=False)
    env = turnrl.make(f"remote:http://turnrl:{KEY}@127.0.0.1:{keyed.port}/{ID}")
    env.reset(seed=2)
    assert env.step("ok")[1] == 1.0
    env.close()
    wrong = "wr0ng-k3y-in-the-url"
    with pytest.raises(RemoteEnvError, match="HTTP 401") as refused:
        turnrl.make(f"remote:http://turnrl:{wrong}@127.0.0.1:{keyed.port}/{ID}")
    assert wrong not in str(refused.value) and "turnrl:***@127.0.0.1" in str(refused.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(RemoteEnvError, match="cannot reach") as unreachable:
        turnrl.make(f"remote:http://turnrl:{KEY}@127.0.0.1:{free}/{ID}", remote_connect_timeout=1)
    assert KEY not in str(unreachable.value) and ":***@" in str(unreachable.value)
    with pytest.raises(Exception, match="port must be a number") as malformed:
        turnrl.make(f"remote:http://turnrl:{KEY}@127.0.0.1:port/{ID}")
    assert KEY not in str(malformed.value)


def test_openenv_clients_send_the_key_in_their_url(keyed):
    from openenv.core.generic_client import GenericEnvClient
    from openenv.core.mcp_client import MCPToolClient

    plain, with_key = (f"http://{who}127.0.0.1:{keyed.port}/{ID}" for who in ("", f"turnrl:{KEY}@"))
    with GenericEnvClient(base_url=with_key).sync() as client:
        assert client.reset(seed=3).observation["messages"][-1]["content"].startswith("Say ok")
        assert client.step({"message": "ok"}).reward == 1.0
    before = ran()
    with pytest.raises(ConnectionError, match="401"), GenericEnvClient(base_url=plain).sync() as client:
        client.reset()

    async def use(url, production):
        client = MCPToolClient(base_url=url)
        client.use_production_mode = production
        try:
            return [t.name for t in await client.list_tools()], await client.call_tool("add", a=2, b=3)
        finally:
            await client.close()

    for production in (True, False):
        with pytest.raises(Exception, match="401"):
            asyncio.run(use(plain, production))
    assert ran() == before
    for production in (True, False):
        names, result = asyncio.run(use(with_key, production))
        assert names == ["add"] and str(result) == "5", production
    assert ran()["adds"] == before["adds"] + 2


def test_sessions_per_client_are_bounded_and_given_back():
    with EnvServer([ID], port=0, max_sessions_per_client=2) as srv:
        url = f"http://127.0.0.1:{srv.port}/{ID}"
        held = [turnrl.make(f"remote:{url}") for _ in range(2)]  # each holds a session from 127.0.0.1
        assert srv.quota.held == {"127.0.0.1": 2}
        with pytest.raises(
            RemoteEnvError,
            match=r"this client \(127\.0\.0\.1\) holds 2 sessions already "
            r"\(max_sessions_per_client\)",
        ):
            turnrl.make(f"remote:{url}", remote_connect_timeout=0.5)
        before = ran()
        busy = httpx.post(f"{url}/reset", json={"seed": 0})
        assert busy.status_code == 429 and busy.json()["code"] == "CAPACITY_REACHED"
        assert "max_sessions_per_client" in busy.json()["error"]
        rpc = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}).json()
        assert "max_sessions_per_client" in rpc["error"]["message"] and srv.mcp.sessions == {}
        assert ran()["resets"] == before["resets"]
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))  # another client address
        assert other.post(f"{url}/reset", json={"seed": 0}).status_code == 200
        sid = other.post(f"{url}/mcp", json={"jsonrpc": "2.0", "method": "openenv/session/create", "id": 2}).json()
        assert srv.quota.held == {"127.0.0.1": 2, "127.0.0.2": 1}
        other.post(
            f"{url}/mcp",
            json={
                "jsonrpc": "2.0",
                "method": "openenv/session/close",
                "id": 3,
                "params": {"session_id": sid["result"]["session_id"]},
            },
        )
        other.close()
        held.pop().close()  # a session given back is free again
        wait_until(lambda: srv.quota.held == {"127.0.0.1": 1})
        again = turnrl.make(f"remote:{url}")
        again.reset(seed=0)
        for env in (again, *held):
            env.close()
        wait_until(lambda: srv.quota.held == {} and srv.open_sessions == 0)


def test_request_sizes_are_bounded(monkeypatch):
    monkeypatch.delenv("TURNRL_ENV_API_KEY", raising=False)
    with EnvServer([ID], port=0, max_request_bytes=4096) as srv:
        url = f"http://127.0.0.1:{srv.port}/{ID}"
        big = {"seed": 0, "episode_id": "x" * 5000, "action": {"message": "ok"}}
        before = ran()
        for where in ("reset", "step", "mcp"):
            answer = httpx.post(f"{url}/{where}", json=big)
            assert answer.status_code == 413 and answer.json()["code"] == "REQUEST_TOO_LARGE", answer.text
            assert "at most 4096 bytes per request (max_request_bytes" in answer.json()["error"]

        def chunks():  # no Content-Length: the server stops reading at the limit
            yield b'{"seed": 0, "episode_id": "'
            for _ in range(10):
                yield b"x" * 1000
            yield b'"}'

        answer = httpx.post(f"{url}/reset", content=chunks())
        assert answer.status_code == 413 and answer.json()["code"] == "REQUEST_TOO_LARGE", answer.text
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:  # a gigabyte announced, none sent:
            raw.sendall(f"POST /{ID}/reset HTTP/1.1\r\nHost: x\r\nContent-Length: {10**9}\r\n\r\n".encode())
            assert raw.recv(100).startswith(b"HTTP/1.1 413")  # refused at once, from its Content-Length
        assert ran() == before and srv.served_sessions == 0
        assert httpx.post(f"{url}/reset", json={"seed": 0, "episode_id": "x" * 3000}).status_code == 200
        env = turnrl.make(f"remote:{url}")
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError, match=r"1009.*larger than the server takes: its max_request_bytes"):
            env.step("x" * 5000)
        env.close()
        with connect(f"ws://127.0.0.1:{srv.port}/{ID}/mcp") as ws:
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 1, "pad": "x" * 5000}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1009
        wait_until(lambda: srv.quota.held == {})


def test_a_session_is_given_back_on_every_way_it_ends():
    """A client's sessions count until they end, however they end: the TCP connection dropped mid-session, idle past
    idle_timeout, a step cut at step_timeout (over /ws and over HTTP), an HTTP client gone while its step runs."""
    with EnvServer(["tests/Hanging-v0"], port=0, max_sessions_per_client=4, step_timeout=0.5, idle_timeout=1.0) as srv:
        free = lambda: srv.quota.held == {} and srv.open_sessions == 0
        ws_url, http = f"ws://127.0.0.1:{srv.port}/ws", f"http://127.0.0.1:{srv.port}"
        reset = json.dumps({"type": "reset", "data": {"options": {"index": 0}}})  # task t0: its step never returns
        for ending in ("dropped", "idle", "step timeout"):
            ws = connect(ws_url)
            ws.send(reset)
            assert json.loads(ws.recv(timeout=10))["type"] == "observation" and srv.quota.held == {"127.0.0.1": 1}
            if ending == "dropped":
                ws.socket.close()  # no closing handshake
            elif ending == "idle":
                assert "idle" in json.loads(ws.recv(timeout=10))["data"]["message"]
            else:
                ws.send(json.dumps({"type": "step", "data": {"message": "ok"}}))
                assert json.loads(ws.recv(timeout=10))["data"]["code"] == "TIMEOUT"
            wait_until(free)
            ws.close()
        hung = httpx.post(f"{http}/step", json={"seed": 0, "options": {"index": 0}, "action": {"message": "ok"}})
        assert hung.status_code == 504 and free()
        body = json.dumps({"seed": 0, "options": {"index": 0}, "action": {"message": "ok"}}).encode()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:  # gone while its step runs
            raw.sendall(
                b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            wait_until(lambda: srv.quota.held == {"127.0.0.1": 1})
        wait_until(free)
