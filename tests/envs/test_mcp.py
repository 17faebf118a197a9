"""Tools from MCP servers (the official `mcp` SDK), on real servers: stdio subprocesses and streamable HTTP on
127.0.0.1. Schemas, calls, errors and timeouts map onto turnrl's tool contract; the example environment whose tools
come from an MCP server passes the conformance harness and trains from its config."""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from local_net import free_port, wait_for_port

import turnrl
from turnrl.envs.conformance.contract import check_environment
from turnrl.tools.mcp import MCPServer, MCPServerError, close_all, mcp_tools

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INVENTORY = [sys.executable, str(EXAMPLES / "inventory_mcp_server.py")]


def write_server(tmp_path, body: str, name: str = "server.py") -> list[str]:
    path = tmp_path / name
    path.write_text(
        "from mcp.server.mcpserver import MCPServer\nserver = MCPServer('t')\n"
        + textwrap.dedent(body)
        + "\nserver.run()\n"
    )
    return [sys.executable, str(path)]


def test_stdio_tools_keep_the_tool_contract():
    tools = {t.name: t for t in mcp_tools(INVENTORY, timeout=20)}
    assert list(tools) == ["search_items", "get_stock", "get_price"]
    schema = tools["get_stock"].schema()["function"]
    assert schema["parameters"]["required"] == ["sku"] and "warehouse" in schema["parameters"]["properties"]
    assert "per warehouse" in schema["description"]
    found = tools["search_items"](query="red widget")
    assert found.ok and '"name": "red widget"' in found.content
    sku = found.content.split('"sku": "')[1].split('"')[0]
    stock = tools["get_stock"](sku=sku)
    assert stock.ok and '"total"' in stock.content
    # the model's mistakes: each an error message it can read, never an exception
    for args, says in [
        ({"sku": "SKU-1"}, "unknown sku 'SKU-1'; search_items finds"),
        ({"sku": sku, "warehouse": "west"}, "unknown warehouse"),
        ({}, "'sku' is a required property"),
        ({"sku": 5}, "5 is not of type 'string'"),
        ({"sku": sku, "colour": "red"}, "unexpected argument(s) colour; it takes sku, warehouse"),
    ]:
        out = tools["get_stock"](**args)
        assert not out.ok and out.content.startswith("Error") and says in out.content, (args, out)


def test_a_tag_style_call_maps_its_text_onto_the_one_argument():
    from turnrl.types import ToolCall

    price = {t.name: t for t in mcp_tools(INVENTORY)}["get_price"]
    out = price.invoke(ToolCall(name="get_price", raw="SKU-100"))
    assert out.ok and float(out.content) > 0


def test_streamable_http_server(tmp_path):
    port = free_port()
    proc = subprocess.Popen([*INVENTORY, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        tools = {t.name: t for t in mcp_tools(f"http://127.0.0.1:{port}/mcp", prefix="inv_")}
        assert list(tools) == ["inv_search_items", "inv_get_stock", "inv_get_price"]
        assert (
            tools["inv_get_price"](sku="SKU-100").content
            == {t.name: t for t in mcp_tools(INVENTORY)}["get_price"](sku="SKU-100").content
        )
        proc.terminate()
        proc.wait(timeout=30)
        gone = tools["inv_get_price"](sku="SKU-100")  # the server went away: an error message, not a crash
        assert not gone.ok and gone.content.startswith("Error")
    finally:
        proc.kill()


def test_a_slow_tool_times_out_and_the_next_call_works(tmp_path):
    cmd = write_server(
        tmp_path,
        """
        import time

        @server.tool()
        def wait(seconds: float) -> str:
            '''Sleep, then say so.'''
            time.sleep(seconds)
            return f"slept {seconds}"
    """,
    )
    (wait,) = mcp_tools(cmd, timeout=1)
    out = wait(seconds=3)
    assert not out.ok and out.content == "Error: wait did not answer within 1 s"
    assert wait(seconds=0).content == "slept 0.0"


def test_a_crashed_server_is_an_error_message_then_restarts(tmp_path):
    cmd = write_server(
        tmp_path,
        """
        import os

        @server.tool()
        def die() -> str:
            '''Exit the server process.'''
            os._exit(1)

        @server.tool()
        def ping() -> str:
            '''Answer pong.'''
            return "pong"
    """,
    )
    tools = {t.name: t for t in mcp_tools(cmd, timeout=5)}
    out = tools["die"]()
    assert not out.ok and out.content.startswith("Error")
    deadline = time.time() + 10
    while time.time() < deadline and not tools["ping"]().ok:  # the connection notices, then a new one starts
        time.sleep(0.2)
    assert tools["ping"]().content == "pong"


def test_servers_that_cannot_serve_are_one_clear_error(tmp_path):
    with pytest.raises(MCPServerError, match="did not start: .*FileNotFoundError|did not start"):
        mcp_tools(["/no/such/mcp-server"], startup_timeout=10)
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('missing API key for the inventory', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(MCPServerError, match="did not start.*its stderr ends: missing API key for the inventory"):
        mcp_tools([sys.executable, str(crash)], startup_timeout=10)
    with pytest.raises(MCPServerError, match="lists no tools"):
        mcp_tools(write_server(tmp_path, "", "empty.py"))
    with pytest.raises(MCPServerError, match="has no tool get_weather; it lists get_price, get_stock, search_items"):
        mcp_tools(MCPServer(command=tuple(INVENTORY), include=("get_weather",)))
    with pytest.raises(ValueError, match="two MCP tools are named 'search_items'; give one server a prefix"):
        mcp_tools(INVENTORY, [*INVENTORY, "--again"])
    with pytest.raises(ValueError, match="either a command .* or a url"):
        MCPServer()
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n")
    t0 = time.time()
    with pytest.raises(MCPServerError, match=r"did not answer within 2 s \(startup_timeout\)"):
        mcp_tools([sys.executable, str(hang)], startup_timeout=2)
    assert time.time() - t0 < 20


def test_the_example_environment_passes_the_conformance_harness(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    env = turnrl.make("inventory_env:examples/Inventory-v0")
    report = check_environment(env)
    assert report.ok, str(report)
    oracle = [e for e in report.episodes if e.agent == "oracle"]
    assert oracle and all(e.tool_calls == 2 and e.correct[-1] for e in oracle)
    assert sum("runs elsewhere" in n for n in report.notes) == 3
    held = turnrl.make("inventory_env:examples/Inventory-v0", split="test")
    assert not {t.metadata["sku"] for t in env.tasks} & {t.metadata["sku"] for t in held.tasks}


def test_the_example_trains_from_its_config(tmp_path, monkeypatch):
    """`turnrl train inventory.yaml` from examples/ (in this process; its MCP server is a process of its own)."""
    from typer.testing import CliRunner

    from turnrl.cli import app

    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(
        app,
        [
            "train",
            "inventory.yaml",
            "model=tiny:chatml",
            "steps=2",
            "eval_tasks=2",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "optim.minibatch_size=4",
            "optim.grad_accum=1",
            f"out_dir={tmp_path / 'run'}",
        ],
    )
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3


def test_gateway_tool_server_serves_each_sessions_environment_tools():
    """program.mcp_tools' server, read by turnrl's own MCP client: the episode's tools with their schemas, calls
    through the environment's toolbox (its errors as MCP tool errors), a slow call cut, every call recorded; a
    session that is not open is a 404 and a missing key a 401."""
    from turnrl.envs import Task, ToolEnv
    from turnrl.gateway.tools import ToolServer
    from turnrl.tools import tool
    from turnrl.verifiers.base import Verdict

    @tool
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: what to look up.
        """
        if key == "slow":
            time.sleep(3)
        if key == "boom":
            raise RuntimeError("the lookup service is down")
        return {"a": "alpha", "b": "beta"}.get(key, "unknown key")

    env = ToolEnv(
        [Task(id="t", prompt="What is a?", answer="alpha")],
        tools=[lookup],
        verifier=lambda text, ref: Verdict(correct=ref in text, score=float(ref in text)),
    )
    env.reset(options={"index": 0})
    server = ToolServer(api_key="k3y", call_timeout=1.0).start()
    try:
        url = server.attach("ep-1", env)
        assert url == f"http://127.0.0.1:{server.port}/s/ep-1/mcp"
        tools = mcp_tools({"url": url, "headers": {"Authorization": "Bearer k3y"}}, timeout=10)
        assert [t.name for t in tools] == ["lookup"]
        assert tools[0].schema()["function"]["parameters"] == lookup.schema()["function"]["parameters"]
        assert tools[0](key="a").content == "alpha"
        boom = tools[0](key="boom")
        assert not boom.ok and "the lookup service is down" in boom.content
        t0 = time.monotonic()
        slow = tools[0](key="slow")
        assert not slow.ok and "timed out after 1s" in slow.content and time.monotonic() - t0 < 2.5
        calls = server.detach("ep-1")
        assert [(c["name"], c["arguments"], c["ok"]) for c in calls] == [
            ("lookup", {"key": "a"}, True),
            ("lookup", {"key": "boom"}, False),
            ("lookup", {"key": "slow"}, False),
        ]
        assert "Error" in tools[0](key="a").content  # the episode is over: its URL is gone ...
        close_all()
        with pytest.raises(MCPServerError, match="Not Found"):  # ... for a new connection too
            mcp_tools({"url": url, "headers": {"Authorization": "Bearer k3y"}}, timeout=5)
        server.attach("ep-2", env)
        with pytest.raises(MCPServerError, match="refused the connection"):
            mcp_tools(server.url("ep-2"), timeout=5)
        with pytest.raises(ValueError, match="a session id may hold"):
            server.attach("../x", env)
        # an environment that holds its tools without a toolbox of its own (a mixture, a remote env), and one
        # without tools
        mix = turnrl.make("turnrl/Mixture-v0", envs=[{"id": "turnrl/Arithmetic-v0", "kwargs": {"calculator": True}}])
        mix.reset(seed=0)
        none = turnrl.make("turnrl/Arithmetic-v0")
        none.reset(seed=0)
        headers = {"Authorization": "Bearer k3y"}
        calculator = mcp_tools({"url": server.attach("mix", mix), "headers": headers}, timeout=10)
        assert [t.name for t in calculator] == ["calculator"] and calculator[0](expression="6 * 7").content == "42"
        with pytest.raises(MCPServerError, match="lists no tools"):
            mcp_tools({"url": server.attach("none", none), "headers": headers}, timeout=10)
    finally:
        server.stop()


def test_an_environment_with_mcp_tools_cannot_be_forked_for_a_tree(monkeypatch):
    """An MCP server may keep state between calls, which a copied environment would share: a tree rollout refuses
    the environment (turnrl/envs/fork.py) before a model loads, naming the tools."""
    from turnrl.envs.fork import ForkError, fork, fork_refusal

    monkeypatch.syspath_prepend(str(EXAMPLES))
    env = turnrl.make("inventory_env:examples/Inventory-v0")
    try:
        env.reset(seed=0)
        why = fork_refusal(env)
        assert why is not None and "search_items, get_stock, get_price keep state outside the environment" in why
        with pytest.raises(ForkError, match="give the environment its own fork"):
            fork(env)
    finally:
        env.close()
