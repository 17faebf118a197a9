"""The OpenAI-compatible backend against a real HTTP server on 127.0.0.1 (turnrl's own, over a tiny model)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.openai import OpenAIAgent, OpenAIError
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rollout.engine import Rollout
from turnrl.serving.server import AgentServer


@pytest.fixture(scope="module")
def served():
    tok = tiny_tokenizer("chatml")
    local = HFAgent(tiny_model(tok), tok)
    with AgentServer(local, "tiny") as server:
        yield local, server


def prompts(tok):
    texts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in ("What is 2 + 2?", "hello there")
    ]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_models_endpoint(served):
    _, server = served
    assert httpx.get(f"{server.url}/models", timeout=5).json()["data"][0]["id"] == "tiny"


def test_greedy_generation_matches_the_local_backend(served):
    local, server = served
    remote = OpenAIAgent(server.url, "tiny", tokenizer=local.tokenizer)
    ps = prompts(local.tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    a, b = remote.generate(ps, params), local.generate(ps, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert all(c.metadata["token_exact"] for c in a)
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5) and x.finish_reason == y.finish_reason
    many = remote.generate(ps, SamplingParams(temperature=1.0, max_new_tokens=6, n=3, seed=0))
    assert [c.prompt_index for c in many] == [0, 0, 0, 1, 1, 1]


def test_rollout_through_http_is_token_exact(served):
    local, server = served
    remote = OpenAIAgent(server.url, "tiny", tokenizer=local.tokenizer)
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    envs = lambda: [turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=2) for _ in range(3)]
    via_http = Rollout(remote, params).run(envs(), seeds=[0, 1, 2])
    direct = Rollout(local, params).run(envs(), seeds=[0, 1, 2])
    assert [t.token_ids for t in via_http] == [t.token_ids for t in direct]
    assert [t.loss_mask for t in via_http] == [t.loss_mask for t in direct]


def test_chat(served):
    local, server = served
    remote = OpenAIAgent(server.url, "tiny")
    out = remote.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.0, max_new_tokens=5))
    ids = local.tokenizer.encode(
        local.tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
        ),
        add_special_tokens=False,
    )
    assert out == [local.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=5))[0].text]


def test_clear_errors(served):
    _local, server = served
    with pytest.raises(OpenAIError, match="returned 404.*model 'other' not found") as e:
        OpenAIAgent(server.url, "other", max_retries=0).chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 404
    with pytest.raises(OpenAIError, match="returned 400.*invalid sampling parameters"):
        OpenAIAgent(server.url, "tiny", max_retries=0).chat(
            [{"role": "user", "content": "x"}], SamplingParams(temperature=3.0).model_copy(update={"n": 0})
        )
    with pytest.raises(ValueError, match="FIRE"):
        OpenAIAgent(server.url, "tiny").generate([[1]], SamplingParams(fire_temperature=5.0))


class Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first `failures` requests, then a fixed completion; can also hang."""

    failures = 2
    hang = False
    seen = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).seen += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if type(self).hang:
            time.sleep(2)
        if type(self).seen <= type(self).failures:
            body, status = b'{"error": {"message": "overloaded"}}', 503
        else:
            body, status = json.dumps({"choices": [{"index": 0, "message": {"content": "ok"}}]}).encode(), 200
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except BrokenPipeError:  # the client timed out and left
            pass


@pytest.fixture
def flaky():
    Flaky.seen, Flaky.failures, Flaky.hang = 0, 2, False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_retries_with_backoff_then_succeeds(flaky):
    agent = OpenAIAgent(flaky, "m", max_retries=3, backoff=0.01)
    assert agent.chat([{"role": "user", "content": "x"}]) == ["ok"] and Flaky.seen == 3


def test_gives_up_after_max_retries(flaky):
    Flaky.failures = 10
    with pytest.raises(OpenAIError, match="returned 503 after 2 attempt\\(s\\): overloaded"):
        OpenAIAgent(flaky, "m", max_retries=1, backoff=0.01).chat([{"role": "user", "content": "x"}])


def test_timeout_and_connection_refused(flaky):
    Flaky.hang, Flaky.failures = True, 0
    with pytest.raises(OpenAIError, match="ReadTimeout"):
        OpenAIAgent(flaky, "m", timeout=0.3, max_retries=0).chat([{"role": "user", "content": "x"}])
    with pytest.raises(OpenAIError, match="ConnectError"):
        OpenAIAgent("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.01).chat([{"role": "user", "content": "x"}])


# ---- conformance with the official `openai` client ----

openai = pytest.importorskip("openai", reason="the official client is a dev dependency: pip install -e '.[dev]'")


@pytest.fixture(scope="module")
def client(served):
    _, server = served
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


def ask(text="What is 2 + 2?"):
    return [{"role": "user", "content": text}]


def test_official_client_models_n_and_prompt_lists(client):
    assert [m.id for m in client.models.list().data] == ["tiny"] and client.models.retrieve("tiny").id == "tiny"
    r = client.chat.completions.create(model="tiny", messages=ask(), max_tokens=4, temperature=1.0, n=3, seed=1)
    assert [c.index for c in r.choices] == [0, 1, 2] and r.usage.completion_tokens == 12
    r = client.completions.create(model="tiny", prompt=["What is", "hello"], max_tokens=3, temperature=0, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3] and r.choices[0].text == r.choices[1].text


def test_streaming_gives_the_same_answer_as_a_plain_request(client):
    kw = {"model": "tiny", "messages": ask(), "max_tokens": 10, "temperature": 0}
    plain = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content and len(text) > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == plain.choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 10 and chunks[-1].choices == []
    kw = {"model": "tiny", "prompt": "What is", "max_tokens": 6, "temperature": 0}
    plain = client.completions.create(**kw)
    streamed = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == plain.choices[0].text
    assert len(streamed) == 7  # one chunk per token, then the finish


def test_logprobs_and_top_logprobs_match_the_local_model(served, client):
    local, _ = served
    r = client.chat.completions.create(
        model="tiny", messages=ask(), max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    entries = r.choices[0].logprobs.content
    tok = local.tokenizer
    ids = tok.encode(
        tok.apply_chat_template(ask(), tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    ref = local.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=6))[0]
    assert len(entries) == 6 and [e.token for e in entries] == [tok.decode([t]) for t in ref.token_ids]
    for e, lp in zip(entries, ref.logprobs):
        assert e.logprob == pytest.approx(lp, abs=1e-4)
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-4)  # greedy
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    assert client.chat.completions.create(model="tiny", messages=ask(), max_tokens=2).choices[0].logprobs is None
    r = client.completions.create(model="tiny", prompt="What is", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(
        len(top) <= 2 and max(top.values()) == pytest.approx(v, abs=1e-4)
        for top, v in zip(lp.top_logprobs, lp.token_logprobs)
    )


def test_stop_and_seed(client):
    full = (
        client.chat.completions.create(model="tiny", messages=ask("hello there"), max_tokens=12, temperature=0)
        .choices[0]
        .message.content
    )
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    cut = client.chat.completions.create(
        model="tiny", messages=ask("hello there"), max_tokens=12, temperature=0, stop=[stop]
    ).choices[0]
    assert cut.message.content == full[: full.find(stop)] and cut.finish_reason == "stop"
    draw = lambda seed: (
        client.chat.completions.create(model="tiny", messages=ask(), max_tokens=8, temperature=1.0, seed=seed)
        .choices[0]
        .message.content
    )
    assert draw(7) == draw(7) and draw(7) != draw(8)


@pytest.fixture(scope="module")
def tool_server():
    from turnrl.agents.scripted import ScriptedAgent

    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>'

    def policy(prompt):
        if "<tool_response>" in prompt:
            return "It is 4."
        return f"Let me compute. {call}" if "# Tools" in prompt else "No tools here. STOP and more"

    agent = ScriptedAgent(tiny_tokenizer("qwen_tools"), policy)
    with AgentServer(agent, "scripted") as server:
        yield agent, openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=60)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "arithmetic",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def test_tools_come_back_as_parsed_tool_calls(tool_server):
    agent, client = tool_server
    r = client.chat.completions.create(model="scripted", messages=ask(), tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me compute."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "2 + 2"} and call.id.startswith("call_")
    # the reply goes back with the tool's result; the template renders both
    follow = [
        *ask(),
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "4"},
    ]
    r = client.chat.completions.create(model="scripted", messages=follow, tools=TOOLS)
    assert r.choices[0].message.content == "It is 4." and r.choices[0].message.tool_calls is None
    seen = agent.tokenizer.decode(agent.calls[-1][0])
    assert '"expression": "2 + 2"' in seen and "<tool_response>\n4\n</tool_response>" in seen
    # tool_choice="none": the text stays as written
    r = client.chat.completions.create(model="scripted", messages=ask(), tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content
    # streamed: the same call arrives as a tool_calls delta
    chunks = list(client.chat.completions.create(model="scripted", messages=ask(), tools=TOOLS, stream=True))
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [d.function.name for d in deltas] == ["calculator"] and chunks[-1].choices[0].finish_reason == "tool_calls"
    # stop strings are cut from the text
    r = client.chat.completions.create(model="scripted", messages=ask(), stop=["STOP"])
    assert r.choices[0].message.content == "No tools here. "


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": 1.0}, "presence_penalty"),
        ({"logit_bias": {"5": 10}}, "logit_bias"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "calculator"}}}, "tool_choice"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"extra_body": {"mirostat": 2}}, "mirostat"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages"),
    ],
)
def test_unsupported_requests_are_refused_in_openai_shape(client, kwargs, param):
    body = {"model": "tiny", "messages": ask(), "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**body)
    assert e.value.status_code == 400 and e.value.body["param"] == param and param in e.value.message
    assert set(e.value.body) == {"message", "type", "param", "code"}


def test_other_refusals(client, tool_server):
    with pytest.raises(openai.NotFoundError, match="model 'gpt-4o' not found"):
        client.chat.completions.create(model="gpt-4o", messages=ask())
    with pytest.raises(openai.BadRequestError, match="echo"):
        client.completions.create(model="tiny", prompt="x", echo=True)
    with pytest.raises(openai.BadRequestError, match="no local model"):  # a scripted agent cannot rank alternatives
        tool_server[1].chat.completions.create(model="scripted", messages=ask(), logprobs=True, top_logprobs=2)
    r = tool_server[1].chat.completions.create(model="scripted", messages=ask(), logprobs=True)
    assert len(r.choices[0].logprobs.content) > 0
