"""Anthropic's Messages API (`POST /v1/messages`) on `turnrl serve` and on the training gateway.

Real servers on 127.0.0.1, the official `anthropic` SDK (and `openai` beside it), tiny real models and scripted
agents: replies and streams in the shape the SDK parses, tool use both ways, errors in Anthropic's shape, and on the
gateway the same token-exact recording as chat completions (a native rollout, the same calls through chat
completions, segments), the run's settings, one dialect per session, and nothing lost to a bad call or a hang-up.
"""

import sys

import httpx
import pytest
from api_servers import (  # noqa: F401 — *_fixture: the fixtures agent, gateway and tok, found here by pytest
    CALL,
    FIRST,
    KEY,
    SYSTEM,
    FailsMidway,
    agent_fixture,
    chat_client,
    four_chat_calls,
    gateway_fixture,
    records_the_native_rollout,
    same_episode_both_ways,
    scripted_server,
    settings_gateway,
    sse,
    tok_fixture,
    weather_reply,
)

from turnrl.gateway import Program, build_trajectory
from turnrl.gateway.runner import play_programs
from turnrl.rl.sources.base import Job
from turnrl.serving.anthropic_answers import content_blocks
from turnrl.serving.openai_api import parse_tool_calls
from turnrl.serving.server import AgentServer

anthropic = pytest.importorskip("anthropic", reason="the official SDK is a dev dependency: pip install -e '.[dev]'")
openai = pytest.importorskip("openai", reason="the official client is a dev dependency: pip install -e '.[dev]'")

WEATHER = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


@pytest.fixture(scope="module")
def scripted(tok):
    """`turnrl serve` over a scripted agent, with a key: a tool call when asked about the weather, else text with a
    stop sequence inside."""
    with scripted_server(tok, weather_reply("Hello there. STOP and more")) as (bot, server):
        yield bot, server, anthropic.Anthropic(base_url=root(server), api_key=KEY, max_retries=0, timeout=60)


def root(server):
    """The anthropic SDK's base_url: the server without `/v1` (the SDK adds it)."""
    return server.url.removesuffix("/v1")


def messages_client(gw, sid):
    return anthropic.Anthropic(
        base_url=gw.base_url(sid).removesuffix("/v1"), api_key=gw.api_key, max_retries=0, timeout=120
    )


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


# ---- turnrl serve ----


def test_a_message_holds_the_chat_completions_answer_and_its_usage(agent):
    ask = [{"role": "user", "content": "What is 2 + 2?"}]
    with AgentServer(agent, "tiny") as server:
        client = anthropic.Anthropic(base_url=root(server), api_key="x", max_retries=0)
        reply = client.messages.create(
            model="tiny",
            max_tokens=12,
            system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be right."}],
            messages=ask,
            extra_body={"temperature": 0.0},
        )
        chat = openai.OpenAI(base_url=server.url, api_key="x").chat.completions.create(
            model="tiny",
            max_tokens=12,
            temperature=0.0,
            messages=[{"role": "system", "content": "Be brief.\n\nBe right."}, *ask],
        )
    assert reply.type == "message" and reply.role == "assistant" and reply.model == "tiny"
    assert reply.id.startswith("msg_") and [b.type for b in reply.content] == ["text"]
    assert text_of(reply) == chat.choices[0].message.content  # the same prompt and generation as chat completions
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.usage.output_tokens == chat.usage.completion_tokens
    assert reply.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[chat.choices[0].finish_reason]
    assert reply.stop_sequence is None


def test_stop_sequences_and_max_tokens_set_the_stop_reason(scripted):
    _, _, client = scripted
    ask = [{"role": "user", "content": "hi"}]
    cut = client.messages.create(model="bot", max_tokens=50, messages=ask, stop_sequences=["never", "STOP"])
    assert text_of(cut) == "Hello there. " and cut.stop_reason == "stop_sequence" and cut.stop_sequence == "STOP"
    whole = client.messages.create(model="bot", max_tokens=50, messages=ask)
    assert text_of(whole) == "Hello there. STOP and more" and whole.stop_reason == "end_turn"
    short = client.messages.create(model="bot", max_tokens=3, messages=ask)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3
    with client.messages.stream(model="bot", max_tokens=50, messages=ask, stop_sequences=["STOP"]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(final) == "Hello there. "  # the stop sequence is never sent, not even in pieces
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "STOP"


def test_the_stream_is_the_sdks_event_sequence_and_ends_with_the_same_message(agent):
    ask = [{"role": "user", "content": "Tell me something."}]
    with AgentServer(agent, "tiny") as server:
        client = anthropic.Anthropic(base_url=root(server), api_key="x", max_retries=0)
        once = client.messages.create(model="tiny", max_tokens=16, messages=ask, extra_body={"temperature": 0.0})
        with client.messages.stream(
            model="tiny", max_tokens=16, messages=ask, extra_body={"temperature": 0.0}
        ) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        with httpx.stream(
            "POST",
            server.url + "/messages",
            timeout=60,
            json={"model": "tiny", "max_tokens": 16, "messages": ask, "temperature": 0.0, "stream": True},
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse(r)
    assert len(pieces) > 1 and "".join(pieces) == text_of(final) == text_of(once)
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in once.content]
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == (
        once.stop_reason,
        once.usage.input_tokens,
        once.usage.output_tokens,
    )
    names = [name for name, _ in events]
    assert all(data["type"] == name for name, data in events)
    deltas = len(names) - 5
    assert deltas >= 1 and names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"]["input_tokens"] == once.usage.input_tokens
    assert events[-2][1]["delta"]["stop_reason"] == once.stop_reason
    assert events[-2][1]["usage"]["output_tokens"] == once.usage.output_tokens


def test_a_hermes_tool_call_becomes_a_tool_use_block_and_a_tool_result_reaches_the_prompt(scripted):
    bot, _, client = scripted
    calls, rest = parse_tool_calls(CALL, "toolu_")  # the conversion on a fixed text
    assert rest == "Let me look." and calls[0]["id"].startswith("toolu_")
    assert content_blocks({"content": rest, "tool_calls": calls}) == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": calls[0]["id"], "name": "get_weather", "input": {"city": "Paris"}},
    ]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.messages.create(model="bot", max_tokens=100, messages=ask, tools=WEATHER)
    assert reply.stop_reason == "tool_use" and [b.type for b in reply.content] == ["text", "tool_use"]
    use = reply.content[1]
    assert use.id.startswith("toolu_") and use.name == "get_weather" and use.input == {"city": "Paris"}
    with client.messages.stream(model="bot", max_tokens=100, messages=ask, tools=WEATHER) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == "Let me look." and final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("text", None),
        ("tool_use", {"city": "Paris"}),
    ]
    # the round trip: the assistant's blocks sent back as they came, and the tool's result
    answer = client.messages.create(
        model="bot",
        max_tokens=100,
        tools=WEATHER,
        messages=[
            *ask,
            {"role": "assistant", "content": reply.content},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": [{"type": "text", "text": "18 degrees, sunny"}],
                    }
                ],
            },
        ],
    )
    seen = bot.tokenizer.decode(bot.calls[-1][0])
    assert "18 degrees, sunny" in seen and '"city": "Paris"' in seen and "get_weather" in seen
    assert answer.stop_reason == "end_turn"
    unparsed = client.messages.create(
        model="bot", max_tokens=100, messages=ask, tools=WEATHER, tool_choice={"type": "none"}
    )
    assert unparsed.stop_reason == "end_turn" and text_of(unparsed) == CALL  # "none": the text as it was written


def test_bad_requests_get_anthropic_errors(scripted):
    _, server, client = scripted
    ask = [{"role": "user", "content": "hi"}]
    use = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold"}]}
    bad = {  # what is sent -> words the message must hold
        "no max_tokens": ({"messages": ask}, "max_tokens: Field required"),
        "an image": ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "'image'"),
        "a block without a type": ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "`type`"),
        "a text block without text": (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "content.0.text: Field required",
        ),
        "an unknown field": ({"messages": ask, "frobnicate": 1}, "frobnicate: Extra inputs are not permitted"),
        "an unknown block field": (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "colour": 1}]}]},
            "colour",
        ),
        "a system role": ({"messages": [{"role": "system", "content": "x"}]}, "role of user or assistant"),
        "forced tool use": ({"messages": ask, "tools": WEATHER, "tool_choice": {"type": "any"}}, "force a tool"),
        "a named tool": (
            {"messages": ask, "tools": WEATHER, "tool_choice": {"type": "tool", "name": "get_weather"}},
            "force a tool",
        ),
        "one call at most": (
            {"messages": ask, "tools": WEATHER, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
            "at most one tool call",
        ),
        "a server tool": (
            {"messages": ask, "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
            "server tools",
        ),
        "a tool without a schema": ({"messages": ask, "tools": [{"name": "t"}]}, "input_schema"),
        "thinking": ({"messages": ask, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        "too hot": ({"messages": ask, "temperature": 1.5}, "temperature"),
        "a result for no call": (
            {"messages": [*ask, {"role": "assistant", "content": "ok"}, result]},
            "unexpected `tool_use_id`",
        ),
        "a call left unanswered": (
            {"messages": [*ask, use, {"role": "user", "content": "and?"}]},
            "without tool_result",
        ),
        "tool input not an object": (
            {"messages": [*ask, {"role": "assistant", "content": [{**use["content"][0], "input": "Oslo"}]}, result]},
            "input: must be an object",
        ),
        "a bad tool result": (
            {
                "messages": [
                    *ask,
                    use,
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_1",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    },
                ]
            },
            "only text blocks",
        ),
        "prefill": ({"messages": [*ask, {"role": "assistant", "content": "The answer is"}]}, "prefill"),
    }
    for name, (body, words) in bad.items():
        with pytest.raises(anthropic.BadRequestError) as e:
            client.post(
                "/v1/messages",
                body={"model": "bot", "max_tokens": 5, **body} if name != "no max_tokens" else {"model": "bot", **body},
                cast_to=object,
            )
        assert e.value.status_code == 400, name
        assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error", name
        assert words in e.value.body["error"]["message"], (name, e.value.body)
    ok = client.messages.create(
        model="bot",
        max_tokens=5,
        messages=[*ask, use, result],  # the same, well formed
        metadata={"user_id": "u1"},
        extra_body={"service_tier": "auto"},
    )  # ignored fields
    assert ok.type == "message"
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=root(server), api_key="wrong", max_retries=0).messages.create(
            model="bot", max_tokens=5, messages=ask
        )
    assert e.value.body["error"]["type"] == "authentication_error" and "x-api-key" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError, match="model 'claude-x' not found"):
        client.messages.create(model="claude-x", max_tokens=5, messages=ask)
    body = {"model": "bot", "max_tokens": 2, "messages": ask}
    for headers in (
        {"x-api-key": KEY, "anthropic-version": "2023-06-01"},  # the key as the anthropic SDK <2 sends it
        {"Authorization": f"Bearer {KEY}"},
    ):  # and as 2.x (and OpenAI's clients) send it
        keyed = httpx.post(server.url + "/messages", json=body, headers=headers)
        assert keyed.status_code == 200 and keyed.json()["type"] == "message", headers
    chat = httpx.post(server.url + "/chat/completions", json={**body, "max_tokens": 2}, headers={"x-api-key": KEY})
    assert chat.status_code == 401 and set(chat.json()["error"]) == {"message", "type", "param", "code"}  # OpenAI's
    wrong_method = httpx.get(server.url + "/messages", headers={"x-api-key": KEY})
    assert wrong_method.status_code == 405 and wrong_method.json()["type"] == "error"
    assert "POST /v1/messages" in wrong_method.json()["error"]["message"]


def test_a_failure_mid_stream_is_an_anthropic_error_event(tok):
    with AgentServer(FailsMidway(tok, lambda prompt: ""), "bot") as server:
        client = anthropic.Anthropic(base_url=root(server), api_key="x", max_retries=0)
        with pytest.raises(anthropic.APIStatusError, match="the policy fell over") as e:
            with client.messages.stream(model="bot", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s:
                s.get_final_message()
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "api_error"


# ---- the gateway ----


def play_env_through_messages(client, env, seed, max_tokens=12):
    """A program that plays a turnrl environment by hand through the anthropic SDK (append-only history)."""
    obs, _ = env.reset(seed=seed)
    chat = [m.to_chat() for m in obs]
    system = [{"type": "text", "text": m["content"]} for m in chat if m["role"] == "system"]
    messages = [m for m in chat if m["role"] != "system"]
    while True:
        reply = client.messages.create(model="tiny", system=system, messages=messages, max_tokens=max_tokens)
        messages.append({"role": "assistant", "content": reply.content})  # the blocks as they came
        obs, reward, terminated, truncated, info = env.step(text_of(reply))
        if terminated or truncated:
            return reward, info
        messages += [m.to_chat() for m in obs]


def test_a_messages_session_records_the_native_rollout_token_for_token(agent, gateway):
    records_the_native_rollout(
        agent,
        gateway,
        "messages",
        lambda sid, env, seed: play_env_through_messages(messages_client(gateway, sid), env, seed),
    )


def test_messages_and_chat_completions_record_the_same_episode_tool_results_and_segments_included(agent, gateway):
    """The same four calls in both dialects, same seed: an exchange, its continuation, then a rewritten history that
    carries a tool call and its result (a new segment), and its continuation."""
    chat_tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in WEATHER
    ]
    use = {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {"city": "Rome"}}

    def in_messages(sid):
        client = messages_client(gateway, sid)
        ask = lambda msgs: client.messages.create(
            model="tiny", max_tokens=8, system=SYSTEM, tools=WEATHER, messages=msgs
        )
        history = [FIRST]
        r1 = ask(history)
        history += [{"role": "assistant", "content": r1.content}, {"role": "user", "content": "And in Oslo?"}]
        r2 = ask(history)
        rewritten = [
            FIRST,
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": "21 degrees, clear"}],
            },
        ]
        r3 = ask(rewritten)
        r4 = ask([*rewritten, {"role": "assistant", "content": r3.content}, {"role": "user", "content": "So?"}])
        return [text_of(r) for r in (r1, r2, r3, r4)]

    m, _ = same_episode_both_ways(
        gateway,
        agent,
        [
            ("as-messages", in_messages),
            ("as-chat", lambda sid: four_chat_calls(chat_client(gateway, sid), chat_tools, "toolu_7")),
        ],
    )
    assert m.turns[0].info["segment"] == 0 and m.turns[2].info["segment"] == 1


def test_the_runs_settings_govern_a_messages_call(agent):
    with settings_gateway(agent) as (gw, sid):
        client = messages_client(gw, sid)
        ask = [{"role": "user", "content": "Say something."}]
        a, b = (
            client.messages.create(model="tiny", max_tokens=50, messages=ask, extra_body={"temperature": 1.0})
            for _ in range(2)
        )
        assert text_of(a) == text_of(b)  # greedy, the run's setting, whatever the request asked
        assert a.usage.output_tokens <= 3 and (a.stop_reason == "max_tokens") == (a.usage.output_tokens == 3)
        with pytest.raises(anthropic.BadRequestError, match="maximum context length is 64") as e:
            client.messages.create(model="tiny", max_tokens=5, messages=[{"role": "user", "content": "word " * 80}])
        assert e.value.body["error"]["type"] == "invalid_request_error"


def test_one_session_speaks_one_dialect_and_keeps_what_it_recorded(gateway):
    ask = [{"role": "user", "content": "hi"}]
    sid = gateway.open("openai-first")
    chat, messages = chat_client(gateway, sid), messages_client(gateway, sid)
    first = chat.chat.completions.create(model="tiny", messages=ask, max_tokens=4).choices[0].message.content
    with pytest.raises(anthropic.ConflictError) as e:
        messages.messages.create(model="tiny", max_tokens=4, messages=ask)
    said = e.value.body["error"]["message"]
    assert "OpenAI's Chat Completions API" in said and "Anthropic's Messages API" in said and "mix" in said
    chat.chat.completions.create(
        model="tiny",
        max_tokens=4,
        messages=[*ask, {"role": "assistant", "content": first}, {"role": "user", "content": "more"}],
    )
    session = gateway.close(sid)
    assert len(session.calls) == 2 and session.calls[1].match.how == "extended"

    sid = gateway.open("anthropic-first")
    chat, messages = chat_client(gateway, sid), messages_client(gateway, sid)
    reply = messages.messages.create(model="tiny", max_tokens=4, messages=ask)
    with pytest.raises(openai.ConflictError, match="Anthropic's Messages API.*OpenAI's Chat Completions API"):
        chat.chat.completions.create(model="tiny", messages=ask, max_tokens=4)
    with pytest.raises(openai.ConflictError):
        chat.completions.create(model="tiny", prompt="hi", max_tokens=4)
    messages.messages.create(
        model="tiny",
        max_tokens=4,
        messages=[*ask, {"role": "assistant", "content": reply.content}, {"role": "user", "content": "more"}],
    )
    session = gateway.close(sid)
    assert [c.endpoint for c in session.calls] == ["messages", "messages"]
    assert session.calls[1].match.how == "extended"


def test_a_bad_call_or_a_hang_up_leaves_a_messages_session_whole(gateway):
    ask = [{"role": "user", "content": "hi"}]
    sid = gateway.open("sturdy", seed=2)
    client = messages_client(gateway, sid)
    reply = client.messages.create(model="tiny", max_tokens=6, messages=ask)
    follow = [*ask, {"role": "assistant", "content": reply.content}]
    with pytest.raises(anthropic.BadRequestError, match="tool_use_id"):
        client.messages.create(
            model="tiny",
            max_tokens=6,
            messages=[
                *follow,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]},
            ],
        )
    sent = [*ask, {"role": "assistant", "content": [b.model_dump() for b in reply.content]}]  # as the SDK sends them
    body = {"model": "tiny", "max_tokens": 8, "stream": True, "messages": [*sent, {"role": "user", "content": "go"}]}
    with httpx.stream(
        "POST", gateway.base_url(sid) + "/messages", json=body, timeout=60, headers={"x-api-key": gateway.api_key}
    ) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # read the first line, then hang up
    again = client.messages.create(model="tiny", max_tokens=6, messages=[*follow, {"role": "user", "content": "ok"}])
    assert again.type == "message"
    session = gateway.close(sid)
    assert len(session.calls) == 3 and [c.match.how for c in session.calls] == ["fresh", "extended", "extended"]
    traj = build_trajectory(session.calls, reward=0.0, correct=None, eos_ids=gateway.eos_ids)
    assert traj.num_turns == 3 and traj.segments == [
        0,
        len(session.calls[1].prompt) + len(session.calls[1].outs[0].token_ids),
    ]  # the hung-up branch and the later one: both continue the first reply


def test_a_command_program_finds_the_gateway_in_the_anthropic_sdks_variables(gateway, tmp_path):
    script = tmp_path / "claude_agent.py"
    script.write_text(
        "import json, os\nimport anthropic\n"
        "task = json.loads(os.environ['TURNRL_TASK'])\n"
        "client = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY\n"
        "msgs = [m for m in task['messages'] if m['role'] != 'system']\n"
        "reply = client.messages.create(model=task['model'], max_tokens=3, messages=msgs)\n"
        "print(json.dumps({'reward': 0.5}))\n"
    )
    traj = play_programs(
        gateway,
        Program(command=[sys.executable, str(script)]),
        "turnrl/Arithmetic-v0",
        {"level": 1},
        [Job(0, 0, 1, 0)],
        seed=0,
        concurrency=1,
        timeout=60,
    )[0]
    assert traj.error is None and traj.total_reward == 0.5 and traj.num_turns == 1
