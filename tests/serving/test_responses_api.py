"""OpenAI's Responses API (`POST /v1/responses`) on `turnrl serve` and on the training gateway.

Real servers on 127.0.0.1, the official `openai` client (`client.responses.create` / `.stream`), tiny real models and
scripted agents: responses and streams in the shape the client parses, function calls both ways,
`previous_response_id`, errors in OpenAI's shape, and on the gateway the same token-exact recording as chat
completions (a native rollout, the same calls through chat completions, segments), the run's settings, one dialect per
session, nothing lost to a bad call or a hang-up. (The OpenAI Agents SDK agent on the SDK's default, Responses, model
trains one step through `program:` unchanged in tests/gateway/test_gateway.py, beside the other example agents.)
"""

import json

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

from turnrl.serving.openai_api import parse_tool_calls
from turnrl.serving.responses_answers import output_items
from turnrl.serving.server import AgentServer

openai = pytest.importorskip("openai", reason="the official client is a dev dependency: pip install -e '.[dev]'")

WEATHER = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "strict": True,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


@pytest.fixture(scope="module")
def scripted(tok):
    """`turnrl serve` over a scripted agent, with a key: a tool call when asked about the weather, else text."""
    with scripted_server(tok, weather_reply("Hello there. And more")) as (bot, server):
        yield bot, server, openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=60)


def sent_back(response):
    """A response's output items as the Agents SDK sends them back as input."""
    return [item.model_dump(exclude_unset=True) for item in response.output]


# ---- turnrl serve ----


def test_a_response_holds_the_chat_completions_answer_and_its_usage(agent):
    ask = [{"role": "user", "content": "What is 2 + 2?"}]
    with AgentServer(agent, "tiny") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        reply = client.responses.create(
            model="tiny", instructions="Be brief.", input=ask, max_output_tokens=12, temperature=0.0
        )
        chat = client.chat.completions.create(
            model="tiny", max_tokens=12, temperature=0.0, messages=[{"role": "system", "content": "Be brief."}, *ask]
        )
    assert isinstance(reply, openai.types.responses.Response) and reply.object == "response"
    assert reply.id.startswith("resp_") and reply.model == "tiny" and reply.instructions == "Be brief."
    assert [item.type for item in reply.output] == ["message"] and reply.output[0].id.startswith("msg_")
    assert reply.output_text == chat.choices[0].message.content  # the same prompt and generation as chat
    assert reply.usage.input_tokens == chat.usage.prompt_tokens
    assert reply.usage.output_tokens == chat.usage.completion_tokens
    assert reply.usage.total_tokens == chat.usage.total_tokens
    finish = chat.choices[0].finish_reason
    assert reply.status == {"length": "incomplete", "stop": "completed"}[finish]


def test_max_output_tokens_answers_an_incomplete_response(scripted):
    _, server, client = scripted
    short = client.responses.create(model="bot", input="hi", max_output_tokens=3)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"
    assert short.usage.output_tokens == 3 and short.output[0].status == "incomplete" and short.output_text
    whole = client.responses.create(model="bot", input="hi", max_output_tokens=50)
    assert whole.status == "completed" and whole.incomplete_details is None
    assert whole.output_text == "Hello there. And more"
    with httpx.stream(
        "POST",
        server.url + "/responses",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
        json={"model": "bot", "input": "hi", "max_output_tokens": 3, "stream": True},
    ) as r:
        events = sse(r)
    assert events[-1][0] == "response.incomplete"  # as OpenAI ends such a stream
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_the_stream_is_the_clients_event_sequence_and_ends_with_the_same_response(agent):
    ask = "Tell me something."
    with AgentServer(agent, "tiny") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
        once = client.responses.create(model="tiny", input=ask, max_output_tokens=16, temperature=0.0)
        with client.responses.stream(model="tiny", input=ask, max_output_tokens=16, temperature=0.0) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        with httpx.stream(
            "POST",
            server.url + "/responses",
            timeout=60,
            json={"model": "tiny", "input": ask, "max_output_tokens": 16, "temperature": 0.0, "stream": True},
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse(r)
    final = stream.get_final_response() if once.status == "completed" else None
    assert len(deltas) > 1 and "".join(deltas) == once.output_text
    if final is not None:
        assert final.output_text == once.output_text and final.usage.output_tokens == once.usage.output_tokens
    names = [name for name, _ in events]
    assert all(data["type"] == name for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    n = names.count("response.output_text.delta")
    end = "response.completed" if once.status == "completed" else "response.incomplete"
    assert n >= 1 and names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * n,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        end,
    ]
    last = events[-1][1]["response"]
    assert last["id"] == events[0][1]["response"]["id"] and last["usage"]["output_tokens"] == once.usage.output_tokens
    assert last["output"][0]["content"][0]["text"] == once.output_text == events[-4][1]["text"]


def test_a_hermes_tool_call_becomes_a_function_call_and_its_output_reaches_the_prompt(scripted):
    bot, _, client = scripted
    calls, rest = parse_tool_calls(CALL)  # the conversion on a fixed text
    items = output_items({"content": rest, "tool_calls": calls}, "msg_1", True)
    assert [i["type"] for i in items] == ["message", "function_call"]
    assert items[0]["content"][0]["text"] == "Let me look."
    assert items[1]["call_id"] == calls[0]["id"] and items[1]["name"] == "get_weather"
    assert json.loads(items[1]["arguments"]) == {"city": "Paris"} and items[1]["id"].startswith("fc_")
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.responses.create(model="bot", input=ask, tools=WEATHER)
    assert [item.type for item in reply.output] == ["message", "function_call"] and reply.status == "completed"
    call = reply.output[1]
    assert call.call_id.startswith("call_") and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and reply.output_text == "Let me look."
    with client.responses.stream(model="bot", input=ask, tools=WEATHER) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert kinds[-1] == "response.completed" and final.output_text == "Let me look."
    assert [(i.type, getattr(i, "name", None)) for i in final.output] == [
        ("message", None),
        ("function_call", "get_weather"),
    ]
    # the round trip: the output items sent back as the SDK sends them, then the tool's output
    answer = client.responses.create(
        model="bot",
        tools=WEATHER,
        input=[
            *ask,
            *sent_back(reply),
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": [{"type": "input_text", "text": "18 degrees, sunny"}],
            },
        ],
    )
    seen = bot.tokenizer.decode(bot.calls[-1][0])
    assert "18 degrees, sunny" in seen and '"city": "Paris"' in seen and "Let me look." in seen
    assert answer.output_text == "Hello there. And more" and [i.type for i in answer.output] == ["message"]
    unparsed = client.responses.create(model="bot", input=ask, tools=WEATHER, tool_choice="none")
    assert unparsed.output_text == CALL  # "none": the text as it was written


def test_previous_response_id_continues_the_stored_conversation(scripted):
    bot, _, client = scripted
    first = client.responses.create(
        model="bot", instructions="Be brief.", tools=WEATHER, input="What is the weather in Paris?"
    )
    call = first.output[1]
    nxt = client.responses.create(
        model="bot",
        previous_response_id=first.id,
        instructions="Be kind.",
        tools=WEATHER,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees"}],
    )
    seen = bot.tokenizer.decode(bot.calls[-1][0])
    assert "What is the weather in Paris?" in seen and "Let me look." in seen and "18 degrees" in seen
    assert "Be kind." in seen and "Be brief." not in seen  # as OpenAI: instructions are not carried over
    assert nxt.previous_response_id == first.id and nxt.output_text == "Hello there. And more"
    third = client.responses.create(model="bot", previous_response_id=nxt.id, input="Thanks!")
    seen = bot.tokenizer.decode(bot.calls[-1][0])
    assert seen.index("18 degrees") < seen.index("Hello there. And more") < seen.index("Thanks!")
    assert third.status == "completed"
    with pytest.raises(openai.BadRequestError, match="No tool output found") as e:  # a call left unanswered
        client.responses.create(model="bot", previous_response_id=first.id, input="and?")
    assert e.value.body["param"] == "input[0]"  # the message that came before the output
    with pytest.raises(openai.NotFoundError, match="resp_nope") as e:
        client.responses.create(model="bot", previous_response_id="resp_nope", input="hi")
    assert e.value.body["param"] == "previous_response_id" and e.value.body["code"] == "previous_response_not_found"
    unstored = client.responses.create(model="bot", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="bot", previous_response_id=unstored.id, input="hi")


def test_the_store_keeps_the_last_responses():
    from turnrl.serving.openai_api import APIError
    from turnrl.serving.responses_requests import ResponseStore

    store = ResponseStore(limit=2)
    for i in range(3):
        store.put(f"resp_{i}", [{"role": "user", "content": str(i)}])
    assert store.get("resp_2") == [{"role": "user", "content": "2"}] and store.get("resp_1")
    with pytest.raises(APIError, match="the last 2 stored responses") as e:
        store.get("resp_0")  # evicted
    assert e.value.status == 404


def test_bad_requests_get_openai_errors_naming_the_parameter(scripted):
    _, server, client = scripted
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "cold"}
    bad = {  # what is sent -> (param, words the message must hold)
        "an unknown field": ({"frobnicate": 1}, "frobnicate", "Unknown parameter"),
        "forced tool choice": ({"tools": WEATHER, "tool_choice": "required"}, "tool_choice", "force a tool call"),
        "a named tool": (
            {"tools": WEATHER, "tool_choice": {"type": "function", "name": "get_weather"}},
            "tool_choice",
            "force a tool call",
        ),
        "an item of no known type": ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "reasoning"),
        "an image": (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "input_image",
        ),
        "an unknown item field": (
            {"input": [{"role": "user", "content": "x", "colour": 1}]},
            "input[0].colour",
            "Unknown parameter",
        ),
        "a bad role": ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "role"),
        "an output for no call": (
            {"input": [{"role": "user", "content": "hi"}, output]},
            "input[1].call_id",
            "No tool call found",
        ),
        "a call left unanswered": (
            {"input": [{"role": "user", "content": "hi"}, call, {"role": "user", "content": "and?"}]},
            "input[2]",
            "No tool output",
        ),
        "arguments not JSON": ({"input": [{**call, "arguments": "{city"}, output]}, "input[0].arguments", "not JSON"),
        "a call without a name": ({"input": [{**call, "name": ""}, output]}, "input[0].name", "non-empty"),
        "a built-in tool": ({"tools": [{"type": "web_search"}]}, "tools[0].type", "only function tools"),
        "reasoning effort": ({"reasoning": {"effort": "high"}}, "reasoning", "no reasoning effort"),
        "structured output": ({"text": {"format": {"type": "json_object"}}}, "text.format", "structured"),
        "automatic truncation": ({"truncation": "auto"}, "truncation", "refused, not cut"),
        "one call at most": ({"tools": WEATHER, "parallel_tool_calls": False}, "parallel_tool_calls", "at most one"),
        "extra output data": ({"include": ["message.output_text.logprobs"]}, "include", "no extra output"),
        "a server conversation": ({"conversation": "conv_1"}, "conversation", "no server-side conversations"),
        "a bad max_output_tokens": ({"max_output_tokens": 0}, "max_output_tokens", "at least 1"),
        "an empty input": ({"input": []}, "input", "non-empty"),
    }
    for name, (body, param, words) in bad.items():
        with pytest.raises(openai.BadRequestError) as e:
            client.post("/responses", body={"model": "bot", "input": "hi", **body}, cast_to=object)
        assert e.value.status_code == 400, name
        assert set(e.value.body) == {"message", "type", "param", "code"}, name  # OpenAI's error shape
        assert e.value.body["param"] == param and words in e.value.body["message"], (name, e.value.body)
    ok = client.responses.create(
        model="bot",
        input=[{"role": "user", "content": "hi"}, call, output],  # well formed
        metadata={"run": "1"},
        user="u1",
        store=True,
        parallel_tool_calls=True,
        reasoning={"effort": None},
        text={"format": {"type": "text"}},
        truncation="disabled",
    )
    assert ok.status == "completed" and ok.metadata == {"run": "1"}
    with pytest.raises(openai.AuthenticationError, match="Bearer"):
        openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).responses.create(model="bot", input="hi")
    wrong_method = httpx.get(server.url + "/responses", headers={"Authorization": f"Bearer {KEY}"})
    assert wrong_method.status_code == 405 and "POST /v1/responses" in wrong_method.json()["error"]["message"]


def test_a_failure_mid_stream_is_an_error_event_and_a_failed_response(tok):
    with AgentServer(FailsMidway(tok, lambda prompt: ""), "bot") as server:
        with httpx.stream(
            "POST", server.url + "/responses", json={"model": "bot", "input": "x", "stream": True}, timeout=60
        ) as r:
            events = sse(r)
    assert [name for name, _ in events][-2:] == ["error", "response.failed"]
    assert "the policy fell over" in events[-2][1]["message"]
    assert events[-1][1]["response"]["status"] == "failed"


# ---- the gateway ----


def play_env_through_responses(client, env, seed, chain, max_tokens=12):
    """A program that plays a turnrl environment by hand through `client.responses` — sending the whole history as
    input, or (``chain``) only what is new with `previous_response_id`."""
    obs, _ = env.reset(seed=seed)
    chat = [m.to_chat() for m in obs]
    instructions = "\n\n".join(m["content"] for m in chat if m["role"] == "system") or None
    history = [m for m in chat if m["role"] != "system"]
    new, previous = list(history), None
    while True:
        reply = client.responses.create(
            model="tiny",
            instructions=instructions,
            max_output_tokens=max_tokens,
            input=new if chain else history,
            previous_response_id=previous,
        )
        history += sent_back(reply)
        obs, reward, terminated, truncated, info = env.step(reply.output_text)
        if terminated or truncated:
            return reward, info
        new, previous = [m.to_chat() for m in obs], reply.id if chain else None
        history += new


@pytest.mark.parametrize("chain", [False, True], ids=["whole-history", "previous_response_id"])
def test_a_responses_session_records_the_native_rollout_token_for_token(agent, gateway, chain):
    session = records_the_native_rollout(
        agent,
        gateway,
        "responses",
        lambda sid, env, seed: play_env_through_responses(chat_client(gateway, sid), env, seed, chain),
    )
    assert len(session.responses.items) == 0  # dropped with the session


def test_responses_and_chat_completions_record_the_same_episode_tool_outputs_and_segments_included(agent, gateway):
    """The same four calls in both dialects, same seed: an exchange, its continuation (by previous_response_id), then
    a rewritten history that carries a function call and its output (a new segment), and its continuation."""
    chat_tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]},
        }
        for t in WEATHER
    ]
    call = {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": '{"city": "Rome"}'}

    def in_responses(sid):
        client = chat_client(gateway, sid)
        ask = lambda items, prev=None: client.responses.create(
            model="tiny",
            max_output_tokens=8,
            instructions=SYSTEM,
            tools=WEATHER,
            input=items,
            previous_response_id=prev,
        )
        r1 = ask([FIRST])
        r2 = ask([{"role": "user", "content": "And in Oslo?"}], r1.id)
        rewritten = [
            FIRST,
            {"role": "assistant", "content": "Checking."},
            call,
            {"type": "function_call_output", "call_id": "call_7", "output": "21 degrees, clear"},
        ]
        r3 = ask(rewritten)
        r4 = ask([*rewritten, *sent_back(r3), {"role": "user", "content": "So?"}])
        return [r.output_text for r in (r1, r2, r3, r4)]

    same_episode_both_ways(
        gateway,
        agent,
        [
            ("as-responses", in_responses),
            ("as-chat", lambda sid: four_chat_calls(chat_client(gateway, sid), chat_tools, "call_7")),
        ],
    )


def test_the_runs_settings_govern_a_responses_call(agent):
    with settings_gateway(agent) as (gw, sid):
        client = chat_client(gw, sid)
        a, b = (
            client.responses.create(model="tiny", input="Say something.", max_output_tokens=50, temperature=1.0)
            for _ in range(2)
        )
        assert a.output_text == b.output_text  # greedy, the run's setting, whatever the request asked
        assert a.usage.output_tokens <= 3 and (a.status == "incomplete") == (a.usage.output_tokens == 3)
        with pytest.raises(openai.BadRequestError, match="maximum context length is 64") as e:
            client.responses.create(model="tiny", input="word " * 80, max_output_tokens=5)
        assert e.value.body["code"] == "context_length_exceeded"


def test_one_session_speaks_one_dialect(gateway):
    ask = [{"role": "user", "content": "hi"}]
    sid = gateway.open("chat-first")
    client = chat_client(gateway, sid)
    client.chat.completions.create(model="tiny", messages=ask, max_tokens=4)
    with pytest.raises(openai.ConflictError) as e:
        client.responses.create(model="tiny", input=ask, max_output_tokens=4)
    said = e.value.body["message"]
    assert "OpenAI's Chat Completions API" in said and "OpenAI's Responses API" in said and "mix" in said
    assert len(gateway.close(sid).calls) == 1

    sid = gateway.open("responses-first")
    client = chat_client(gateway, sid)
    reply = client.responses.create(model="tiny", input=ask, max_output_tokens=4)
    with pytest.raises(openai.ConflictError, match="Responses API.*Chat Completions API"):
        client.chat.completions.create(model="tiny", messages=ask, max_tokens=4)
    messages = httpx.post(
        gateway.base_url(sid) + "/messages",
        headers={"x-api-key": gateway.api_key},
        json={"model": "tiny", "max_tokens": 4, "messages": ask},
    )
    assert messages.status_code == 409 and "Anthropic's Messages API" in messages.json()["error"]["message"]
    client.responses.create(model="tiny", previous_response_id=reply.id, input="more", max_output_tokens=4)
    session = gateway.close(sid)
    assert [c.endpoint for c in session.calls] == ["responses", "responses"]
    assert session.calls[1].match.how == "extended"


def test_a_bad_call_or_a_hang_up_leaves_a_responses_session_whole(gateway):
    sid = gateway.open("sturdy", seed=2)
    client = chat_client(gateway, sid)
    reply = client.responses.create(model="tiny", input="hi", max_output_tokens=6)
    with pytest.raises(openai.BadRequestError, match="No tool call found"):
        client.responses.create(
            model="tiny",
            previous_response_id=reply.id,
            max_output_tokens=6,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        )
    body = {"model": "tiny", "max_output_tokens": 8, "stream": True, "previous_response_id": reply.id, "input": "go"}
    with httpx.stream(
        "POST",
        gateway.base_url(sid) + "/responses",
        json=body,
        timeout=60,
        headers={"Authorization": f"Bearer {gateway.api_key}"},
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(lines)
        hung_up = json.loads(next(lines)[6:])["response"]["id"]  # read response.created, then hang up
    again = client.responses.create(model="tiny", previous_response_id=reply.id, input="ok", max_output_tokens=6)
    assert again.status in ("completed", "incomplete")
    gone_on = client.responses.create(model="tiny", previous_response_id=hung_up, input="on", max_output_tokens=6)
    assert gone_on.output  # the hung-up response ran to its end and was kept: it can be continued
    session = gateway.close(sid)
    assert len(session.calls) == 4
    assert [c.match.how for c in session.calls] == ["fresh", "extended", "extended", "extended"]
    last = session.calls[3].prompt  # continues the hung-up call's sampled tokens (the others' do not fit)
    assert (
        sum(
            last[: len(c.prompt) + len(c.outs[0].token_ids)] == c.prompt + c.outs[0].token_ids
            for c in session.calls[1:3]
        )
        == 1
    )
