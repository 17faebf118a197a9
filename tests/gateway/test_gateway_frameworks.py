"""Agents written with an agent framework train unchanged: examples/agents_sdk_agent.py (the OpenAI Agents SDK,
`openai-agents`) played through a real gateway on 127.0.0.1 — by a tiny real model, by a scripted policy that
drives the SDK's whole tool loop (tests/gateway/test_gateway.py trains it one step from examples/agents_sdk_agent.yaml).

Nothing may leave the machine: the SDK's tracing uploads to OpenAI by default, so every socket the tests open is
checked to be a loopback one.
"""

import ipaddress
import json
import re
import socket
from pathlib import Path

import pytest

from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.gateway import Gateway, Program
from turnrl.gateway.runner import play_programs
from turnrl.rl.sources.base import Job
from turnrl.serving.openai_api import CHAT_PARAMS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROGRAM = "agents_sdk_agent:run"
ENV = "turnrl/Arithmetic-v0"


@pytest.fixture
def loopback_only(monkeypatch):
    """Record every host looked up and address connected to; the test fails if any is not a loopback one."""
    seen = []
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(sock, address):
        seen.append(address)
        return connect(sock, address)

    def guarded_getaddrinfo(host, *args, **kwargs):
        seen.append((host,))
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    yield seen

    def local(address):
        host = address[0] if isinstance(address, tuple) else address
        if host in ("localhost", None) or isinstance(host, bytes):
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    outside = [a for a in seen if not isinstance(a, str) and not local(a)]  # a str is a Unix socket's path
    assert not outside, f"the program reached beyond this machine: {outside}"
    assert seen, "the guard saw no connection at all"


def watch(gateway, endpoint="chat"):
    """Keep every request body the gateway's ``endpoint`` (``chat``, ``messages``, ``responses``) is sent and every
    session it closes (as recorded); the real endpoint answers."""
    bodies, sessions = [], []
    handle, close = getattr(gateway, endpoint), gateway.close

    def seen(body, ctx=None):
        bodies.append(body)
        return handle(body, ctx)

    def close_seen(sid, **kwargs):
        sessions.append(close(sid, **kwargs))
        return sessions[-1]

    setattr(gateway, endpoint, seen)
    gateway.close = close_seen
    return bodies, sessions


def tool_names(tools):
    return sorted(t["function"]["name"] for t in tools or [])


def test_the_agents_sdk_example_is_recorded_with_a_tiny_model(loopback_only):
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=4, kv_cache_mb=64)
    gateway = Gateway(agent, "tiny", max_new_tokens=16, max_context=4096).start()
    bodies, sessions = watch(gateway)
    jobs = [Job(0, 0, task, 0) for task in range(4)]
    try:
        trajs = play_programs(
            gateway,
            Program(function=PROGRAM, search=[EXAMPLES]),
            ENV,
            {"level": 1},
            jobs,
            seed=0,
            concurrency=4,
            timeout=120,
        )
    finally:
        gateway.stop()

    assert len(trajs) == 4
    for traj in trajs:
        assert traj.error is None, traj.error
        assert traj.num_turns >= 1 and traj.metadata["gateway"]["calls"] >= 1
        assert traj.token_ids and len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs)
        assert sum(traj.loss_mask) >= traj.num_turns  # every call's sampled tokens are trained on
        assert isinstance(traj.metadata.get("answer"), str) and traj.correct is not None  # graded by the env
    by_job = {s.id.rsplit("-", 1)[0]: s for s in sessions}  # a session's id is its job's key and a suffix
    assert [len(by_job[t.metadata["job"]].calls) for t in trajs] == [t.metadata["gateway"]["calls"] for t in trajs]

    # what the SDK sent: its own calculator schema on every call, and only parameters the gateway accepts
    assert len(bodies) == sum(t.metadata["gateway"]["calls"] for t in trajs)
    for body in bodies:
        assert set(body) <= CHAT_PARAMS and body["model"] == "tiny", sorted(body)
        assert tool_names(body.get("tools")) == ["calculator"]
        schema = body["tools"][0]["function"]["parameters"]
        assert schema["properties"]["expression"]["type"] == "string" and schema["required"] == ["expression"]

    # what the gateway recorded: the tool schema each prompt was rendered with, and the SDK's messages
    for session in sessions:
        assert session.history.states and all(
            tool_names(json.loads(state.tools)) == ["calculator"] for state in session.history.states
        )
        first = session.calls[0]
        assert first.endpoint == "chat" and [m["role"] for m in first.messages] == ["system", "user"]
        assert "Solve the problem step by step" in first.messages[0]["content"]  # the task's system prompt ...
        assert "calculator" in first.messages[0]["content"]  # ... and the agent's instructions, as one message
        assert re.match(r"What is \d+ [-+*/] \d+\?", first.messages[1]["content"])
        prompt = tok.decode(first.prompt)
        assert first.messages[1]["content"] in prompt and "<|im_start|>assistant" in prompt


def tool_then_answer(prompt: str) -> str:
    """A scripted policy that uses the calculator as the agent offers it, then answers with the tool's result."""
    assert '"name": "calculator"' in prompt  # the agent's schema, in the template
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, flags=re.DOTALL)
    if results:
        return f"The answer is {results[-1]}."
    question = re.findall(r"What is (.+?)\?", prompt)[-1]
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{question}"}}}}</tool_call>'


def sdk_tool_then_answer(prompt: str) -> str:
    assert '"strict": true' in prompt  # the Agents SDK's own schema for its function tool
    return tool_then_answer(prompt)


def always_a_tool(prompt: str) -> str:
    return 'Let me check. <tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1"}}</tool_call>'


def play(program, policy, tasks, endpoint="chat"):
    """Level-1 arithmetic tasks played by an example program through a gateway over a scripted policy (a template
    that renders the tool schema into the prompt): the episodes, the bodies ``endpoint`` was sent, the sessions."""
    gateway = Gateway(ScriptedAgent(tiny_tokenizer("qwen_tools"), policy), "tiny", max_context=8192).start()
    bodies, sessions = watch(gateway, endpoint)
    try:
        trajs = play_programs(
            gateway,
            Program(function=program, search=[EXAMPLES]),
            ENV,
            {"level": 1, "answer_format": "auto"},
            [Job(0, 0, t, 0) for t in tasks],
            seed=0,
            concurrency=2,
            timeout=120,
        )
    finally:
        gateway.stop()
    return trajs, bodies, sessions


def assert_one_tool_round_trip(trajs, sessions, endpoint):
    """Each episode: a calculator call, its result sent back, the answer it made right — two calls of ``endpoint``,
    one token sequence, the second prompt holding the first call's sampled tokens exactly; returns the sessions'
    (call, result) messages in chat form."""
    by_job = {s.id.rsplit("-", 1)[0]: s for s in sessions}
    exchanges = []
    for traj in trajs:
        session = by_job[traj.metadata["job"]]
        assert traj.error is None and traj.correct is True and traj.total_reward == 1.0  # the agent ran the tool
        assert traj.num_turns == 2 and traj.segments is None  # the agent replays its history: one token sequence
        assert [c.match.how for c in session.calls] == ["fresh", "extended"]
        assert [c.endpoint for c in session.calls] == [endpoint] * 2
        first, second = session.calls
        assert (
            second.prompt[: len(first.prompt) + len(first.outs[0].token_ids)] == first.prompt + first.outs[0].token_ids
        )  # the second prompt holds the sampled call tokens exactly
        call, result = second.messages[-2:]
        assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "calculator"
        assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
        assert traj.metadata["answer"] == f"The answer is {result['content']}."
        for turn, c in zip(traj.turns, session.calls):
            s, e = turn.token_span
            assert traj.token_ids[s:e] == c.outs[0].token_ids and all(traj.loss_mask[s:e])
        exchanges.append((call, result))
    return exchanges


def test_the_sdk_runs_its_tool_loop_through_the_gateway_token_exactly(loopback_only):
    trajs, bodies, sessions = play(PROGRAM, sdk_tool_then_answer, [0, 1])
    assert_one_tool_round_trip(trajs, sessions, "chat")
    assert all(set(b) == {"model", "messages", "tools", "max_tokens"} for b in bodies), [sorted(b) for b in bodies]

    # a model that never stops calling tools: the SDK stops at MAX_TURNS and the example returns its last text
    trajs, _, sessions = play(PROGRAM, always_a_tool, [2])
    assert trajs[0].error is None and trajs[0].num_turns == 4 and len(sessions[0].calls) == 4
    assert trajs[0].metadata["answer"] == "Let me check." and trajs[0].correct is False


def test_the_anthropic_sdk_example_runs_its_tool_use_loop_through_the_gateway_token_exactly(loopback_only, monkeypatch):
    """examples/anthropic_agent.py: `tool_use` blocks out, `tool_result` blocks back, until the reply ends its turn."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from calculator_tool import HINT, calculator

    trajs, bodies, sessions = play("anthropic_agent:run", tool_then_answer, [0, 1], endpoint="messages")
    assert_one_tool_round_trip(trajs, sessions, "messages")
    assert all(set(b) == {"model", "system", "messages", "tools", "max_tokens"} for b in bodies)
    assert all(b["system"].endswith(HINT) for b in bodies)  # the task's system prompt, then the agent's own hint
    answers = [b for b in bodies if len(b["messages"]) == 3]  # the second call of each episode
    assert len(answers) == 2 and len(bodies) == 4
    for body in answers:
        use, [result] = body["messages"][1]["content"][-1], body["messages"][2]["content"]
        assert use["type"] == "tool_use" and use["name"] == "calculator" and set(use["input"]) == {"expression"}
        assert result == {"type": "tool_result", "tool_use_id": use["id"], "content": result["content"]}
        assert result["content"] == calculator(use["input"]["expression"])  # the tool's own answer went back

    # a model that never stops calling tools: the loop stops at MAX_TURNS and the example returns its last text
    trajs, bodies, sessions = play("anthropic_agent:run", always_a_tool, [2], endpoint="messages")
    assert trajs[0].error is None and trajs[0].num_turns == 4 and len(sessions[0].calls) == 4
    assert trajs[0].metadata["answer"] == "Let me check." and trajs[0].correct is False
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5, 7]  # each tool_use answered, the history appended to


def inventory_tools_then_answer(prompt: str) -> str:
    """A scripted policy for the inventory tasks that uses the MCP tools the SDK offers: the item's sku by name,
    then its stock or price, then the answer."""
    for name in ("search_items", "get_stock", "get_price"):
        assert f'"name": "{name}"' in prompt  # the environment's tools, listed by the gateway's MCP server
    results = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, flags=re.DOTALL)
    stock = re.findall(r"How many (.+?)s are in stock", prompt)
    cost = re.findall(r"What do (\d+) (.+?)s cost", prompt)
    name = stock[-1] if stock else cost[-1][1]
    if not results:
        return f'<tool_call>{{"name": "search_items", "arguments": {{"query": "{name}"}}}}</tool_call>'
    if len(results) == 1:
        sku = json.loads(results[0])[0]["sku"]
        tool = "get_stock" if stock else "get_price"
        return f'<tool_call>{{"name": "{tool}", "arguments": {{"sku": "{sku}"}}}}</tool_call>'
    value = json.loads(results[-1])
    answer = value["total"] if stock else f"{int(cost[-1][0]) * value:.2f}"
    return f"<answer>{answer}</answer>"


def test_an_sdk_agent_with_mcp_tools_trains_on_an_environments_tools_through_the_gateway(loopback_only, monkeypatch):
    """program.mcp_tools: the example agent asks the gateway's MCP server for its tools (the inventory environment's,
    which come from the inventory MCP service) and the SDK calls them; every call is recorded on its episode, and
    the answers the tools made possible are graded correct."""
    from turnrl.gateway.tools import ToolServer

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import inventory_env  # noqa: F401 — registers examples/Inventory-v0

    tok = tiny_tokenizer("qwen_tools")
    gateway = Gateway(ScriptedAgent(tok, inventory_tools_then_answer), "tiny", max_context=8192).start()
    tools = ToolServer(api_key=gateway.api_key).start()
    try:
        trajs = play_programs(
            gateway,
            Program(function="agents_sdk_mcp_agent:run", search=[EXAMPLES]),
            "inventory_env:examples/Inventory-v0",
            {},
            [Job(0, 0, t, 0) for t in (0, 1, 2, 3)],
            seed=0,
            concurrency=2,
            timeout=120,
            tools=tools,
        )
        assert tools._envs == {}  # every episode's tools were detached when it ended
    finally:
        tools.stop()
        gateway.stop()
    for traj in trajs:
        assert traj.error is None and traj.correct is True and traj.total_reward == 1.0, traj.error
        calls = traj.metadata["mcp_calls"]
        assert next(c["name"] for c in calls) == "search_items" and len(calls) == 2 and all(c["ok"] for c in calls)
        assert calls[1]["name"] == ("get_stock" if traj.task_id.endswith("/stock") else "get_price")
        assert traj.num_turns == 3


def test_the_examples_calculator_answers_every_bad_expression_with_an_error(monkeypatch):
    """examples/calculator_tool.py, the tool every example agent runs: arithmetic, or a message the model can read —
    never an exception, which would end the episode as an error."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from calculator_tool import calculator

    assert [calculator(e) for e in ("(3 + 4) * 2", "7 / 2", "-2", "2.0 * 3")] == ["14", "3.5", "-2", "6"]
    for bad in ("True + 1", "__import__('os')", "x + 1", "1 / 0", "9" * 400 + " * 10", "2 +", "", None):
        assert calculator(bad).startswith("error: "), bad
