"""`turnrl serve` streams tokens while they are generated, and renders tools for every chat template.

Real servers on 127.0.0.1, the official `openai` client, tiny models and the built-in SmolLM2 tokenizer.
"""

import json
import threading
import time
from typing import ClassVar

import httpx
import pytest

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.serving.server import AgentServer
from turnrl.serving.streaming import TextStream
from turnrl.template_tools import fit_to_template, template_support

openai = pytest.importorskip("openai", reason="the official client is a dev dependency: pip install -e '.[dev]'")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def ask(text="What is 2 + 2?"):
    return [{"role": "user", "content": text}]


class TimedServer(AgentServer):
    """Records when each generated token was sampled (the server's side of the timing test)."""

    runs: ClassVar[list] = []  # the token times of every generation

    def generate(self, prompt_ids, params, ctx=None, on_token=None):
        self.token_times = times = []
        self.runs.append(times)

        def timed(*args):
            times.append(time.monotonic())
            if on_token is not None:
                on_token(*args)

        return super().generate(prompt_ids, params, ctx, timed)


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok, hidden=64, layers=4), tok)
    with TimedServer(agent, "tiny") as server:
        yield agent, server, openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60)


def test_the_first_chunk_arrives_before_the_last_token_is_generated(tiny):
    _, server, client = tiny
    arrived = []
    stream = client.chat.completions.create(
        model="tiny", messages=ask(), max_tokens=300, temperature=1.0, seed=1, stream=True
    )
    text = ""
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrived.append(time.monotonic())
            text += chunk.choices[0].delta.content
    assert len(server.token_times) > 50 and len(arrived) > 10
    last_token = server.token_times[-1]
    assert arrived[0] < last_token, "the first chunk came after the whole generation"
    # the chunks are spread over the generation, not sent in one burst at its end
    assert sum(t < last_token for t in arrived) > len(arrived) // 2
    plain = client.chat.completions.create(model="tiny", messages=ask(), max_tokens=300, temperature=1.0, seed=1)
    assert text == plain.choices[0].message.content


class GatedAgent(ScriptedAgent):
    """A scripted agent that reports its first token, then waits until the test lets it go on."""

    def __init__(self, tokenizer, reply):
        super().__init__(tokenizer, lambda _prompt: reply)
        self.go, self.finished = threading.Event(), threading.Event()

    def generate(self, prompts, params, *, on_token=None):
        def gated(i, t, lp, top):
            on_token(i, t, lp, top)
            assert self.go.wait(timeout=30), "the test never released the generation"

        try:
            return super().generate(prompts, params, on_token=gated if on_token else None)
        finally:
            self.finished.set()


def test_a_chunk_is_sent_while_the_generation_is_still_running():
    agent = GatedAgent(tiny_tokenizer("chatml"), "Hello there, streaming world.")
    with AgentServer(agent, "gated") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        stream = client.chat.completions.create(model="gated", messages=ask(), stream=True)
        pieces = []
        for chunk in stream:
            delta = chunk.choices[0].delta.content if chunk.choices else None
            if delta:
                pieces.append(delta)
                if len(pieces) == 1:
                    assert not agent.finished.is_set()  # the agent is blocked after its first token
                    agent.go.set()
        assert "".join(pieces) == "Hello there, streaming world." and len(pieces) > 1


def test_stop_strings_and_tool_calls_never_leak_into_streamed_content():
    reply = 'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    agent = ScriptedAgent(tiny_tokenizer("chatml"), lambda p: reply if "calculator" in p else "one two STOP three")
    with AgentServer(agent, "s") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        chunks = list(client.chat.completions.create(model="s", messages=ask(), tools=TOOLS, stream=True))
        content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert "".join(content).strip() == "Let me compute." and not any("<" in c for c in content)
        calls = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
        assert [json.loads(d.function.arguments) for d in calls] == [{"expression": "2+2"}]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        chunks = list(client.chat.completions.create(model="s", messages=ask(), stop=["STOP"], stream=True))
        content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert "".join(content) == "one two " and not any("S" in c for c in content)


def test_text_stream_holds_half_characters_and_partial_stop_strings():
    tok = tiny_tokenizer("chatml")
    text = "héllo 😀 wörld ST"
    ids = tok.encode(text, add_special_tokens=False)
    s = TextStream(tok, ("STOP",))
    sent = []
    for t in ids:
        for j in s.push(t, 0.0):
            sent.append(s.pieces[j])
    assert all("\ufffd" not in p for p in sent)
    assert "".join(sent) == "héllo 😀 wörld "  # "ST" may begin "STOP": held back
    assert s.safe_length("abc STO") == 4 and s.safe_length("abc STOP more") == 4 and s.safe_length("abc") == 3


def test_a_closed_stream_stops_its_generation(tiny):
    _, server, client = tiny
    with httpx.stream(
        "POST",
        f"{server.url}/chat/completions",
        timeout=30,
        json={"model": "tiny", "messages": ask(), "max_tokens": 4000, "temperature": 1.0, "stream": True},
    ) as r:
        for line in r.iter_lines():
            if '"content": "' in line and '"content": ""' not in line:
                break  # the client goes away after its first piece of text
    start = time.monotonic()
    r = client.chat.completions.create(model="tiny", messages=ask(), max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert time.monotonic() - start < 20  # the 4000-token generation did not hold the model to its end
    assert len(server.runs[-1]) == 3 and len(server.runs[-2]) < 4000


def test_top_logprobs_hold_the_chosen_tokens_logprob_exactly(tiny):
    _, _, client = tiny
    for stream in (False, True):
        r = client.chat.completions.create(
            model="tiny",
            messages=ask(),
            max_tokens=8,
            temperature=0.7,
            seed=1,
            logprobs=True,
            top_logprobs=5,
            stream=stream,
        )
        entries = (
            [e for c in r for e in (c.choices[0].logprobs.content if c.choices and c.choices[0].logprobs else [])]
            if stream
            else r.choices[0].logprobs.content
        )
        assert len(entries) == 8
        for e in entries:
            if e.token == "\ufffd":
                continue  # part of a character: several tokens share this name
            same = [a.logprob for a in e.top_logprobs if a.token == e.token]
            assert same == [] or same[0] == e.logprob  # the same number, not one within 1e-5
        assert any(e.top_logprobs and e.top_logprobs[0].token == e.token for e in entries)


# ---- tools on every chat template ----


def test_template_support_is_probed_per_template():
    from transformers import AutoTokenizer

    from turnrl.agents.models import resolve_model_path

    smol = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    assert template_support(smol) == template_support(tiny_tokenizer("chatml"))
    s = template_support(smol)
    assert not s.tools and not s.tool_calls and s.tool_role  # SmolLM2's template ignores tools and tool calls
    assert template_support(tiny_tokenizer("qwen_tools")).complete


def test_fit_to_template_writes_tools_calls_and_results_into_the_messages():
    from turnrl.template_tools import TemplateSupport

    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "2"},
    ]
    out, tools = fit_to_template(messages, TOOLS, TemplateSupport(tools=False, tool_calls=False, tool_role=False))
    assert tools is None and out[0]["content"].startswith("Be brief.\n\nYou can call these tools:")
    assert "calculator: Evaluate arithmetic." in out[0]["content"] and "<tool_call>" in out[0]["content"]
    assert out[2] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>',
    }
    assert out[3] == {"role": "user", "content": '<tool_response name="calculator">\n2\n</tool_response>'}
    assert messages[2]["tool_calls"] == [call]  # the request itself is left alone
    same, tools = fit_to_template(messages, TOOLS, TemplateSupport(True, True, True))
    assert same == messages and tools == TOOLS


def test_serve_describes_tools_a_template_would_drop():
    tok = tiny_tokenizer("chatml")  # a plain ChatML template, like SmolLM2's: no tools, no tool calls
    reply = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    agent = ScriptedAgent(tok, lambda p: "It is 42." if "42" in p.split("<|im_start|>")[-2] else reply)
    with AgentServer(agent, "s") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        r = client.chat.completions.create(model="s", messages=ask("What is 6*7?"), tools=TOOLS)
        seen = tok.decode(agent.calls[-1][0])
        assert "calculator: Evaluate arithmetic." in seen and "<tool_call>" in seen  # the model is told
        (call,) = r.choices[0].message.tool_calls
        follow = [
            *ask("What is 6*7?"),
            r.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "42"},
        ]
        r = client.chat.completions.create(model="s", messages=follow, tools=TOOLS)
        seen = tok.decode(agent.calls[-1][0])
        assert '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>' in seen
        assert r.choices[0].message.content == "It is 42."
        # without tools the prompt is the template's own rendering
        client.chat.completions.create(model="s", messages=ask())
        plain = tok.apply_chat_template(ask(), tokenize=False, add_generation_prompt=True)
        assert agent.calls[-1][0] == tok.encode(plain, add_special_tokens=False)


def test_a_template_that_renders_tools_gets_them_unchanged():
    tok = tiny_tokenizer("qwen_tools")
    agent = ScriptedAgent(tok, lambda p: "ok")
    with AgentServer(agent, "q") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        client.chat.completions.create(model="q", messages=ask(), tools=TOOLS)
    want = tok.apply_chat_template(ask(), tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert agent.calls[-1][0] == tok.encode(want, add_special_tokens=False)


def test_sampling_params_top_logprobs_from_the_hf_agent():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok)
    ids = tok.encode("hello", add_special_tokens=False)
    (c,) = agent.generate([ids], SamplingParams(temperature=1.0, max_new_tokens=6, seed=0, top_logprobs=3))
    assert len(c.top_logprobs) == len(c.token_ids) == 6 and all(len(row) == 3 for row in c.top_logprobs)
    for t, lp, row in zip(c.token_ids, c.logprobs, c.top_logprobs):
        assert [v for _, v in row] == sorted((v for _, v in row), reverse=True)
        assert all(v == lp for a, v in row if a == t)
    heard = []
    (d,) = agent.generate(
        [ids], SamplingParams(temperature=1.0, max_new_tokens=6, seed=0), on_token=lambda *a: heard.append(a)
    )
    assert d.top_logprobs is None and [(t, lp) for _, t, lp, _ in heard] == list(zip(c.token_ids, c.logprobs))


def test_turnrl_serve_with_the_builtin_model_streams_and_sees_tools(tmp_path, sigint_raises):
    """The issue's own scenario: `turnrl serve --agent smollm2-135m-instruct`, the official client, tools, stream; the
    server listens on 127.0.0.1 and serves the model under the name `--name` gives (its /v1/models and its plain
    completions too: the command's one test that starts it as a process)."""
    import os
    import re
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "turnrl", "serve", "--agent", "smollm2-135m-instruct", "--name", "smol", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if (m := re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)) or not line:
                break
        assert m, "".join(lines)
        note = proc.stdout.readline()
        assert "does not render tools" in note and "<tool_call>" in note
        client = openai.OpenAI(base_url=m.group(1), api_key="x", max_retries=0, timeout=120)
        model = "smol"
        assert [entry.id for entry in client.models.list()] == [model]
        plain = client.completions.create(model=model, prompt="hi", max_tokens=3, temperature=0)
        assert plain.choices[0].finish_reason in ("length", "stop") and plain.usage.completion_tokens <= 3
        bare = client.chat.completions.create(model=model, messages=ask(), max_tokens=1)
        tooled = client.chat.completions.create(model=model, messages=ask(), max_tokens=1, tools=TOOLS)
        assert tooled.usage.prompt_tokens > bare.usage.prompt_tokens + 30  # the schema reached the model
        arrived = []
        for chunk in client.chat.completions.create(
            model=model, messages=ask("Count from 1 to 30."), max_tokens=48, temperature=0, stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                arrived.append(time.monotonic())
        assert len(arrived) > 10 and arrived[-1] - arrived[0] > 0.3  # spread over the generation, not one burst
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_a_stream_that_fails_before_its_first_token_gets_an_http_error():
    from turnrl.gateway.server import Gateway

    tok = tiny_tokenizer("chatml")
    with Gateway(HFAgent(tiny_model(tok), tok), "tiny", max_context=8) as gateway:
        sid = gateway.open("long")
        client = openai.OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0, timeout=30)
        with pytest.raises(openai.BadRequestError, match="maximum context length is 8") as e:
            list(client.chat.completions.create(model="tiny", messages=ask(), stream=True))
        assert e.value.status_code == 400 and e.value.body["code"] == "context_length_exceeded"


def streamed_message(chunks):
    """What a client rebuilds from a chat stream: the content and the tool calls."""
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [
        {"id": d.id, "type": "function", "function": {"name": d.function.name, "arguments": d.function.arguments}}
        for c in chunks
        if c.choices
        for d in (c.choices[0].delta.tool_calls or [])
    ]
    return content, calls


@pytest.mark.parametrize(
    "reply",
    [
        'I\'ll check.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>',
        '\n<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>\nDone  ',
        '  Sure <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call> then more',
    ],
)
def test_a_streamed_tool_turn_rebuilds_the_message_a_plain_request_returns(reply):
    agent = ScriptedAgent(tiny_tokenizer("chatml"), lambda _p: reply)
    with AgentServer(agent, "s") as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        plain = client.chat.completions.create(model="s", messages=ask(), tools=TOOLS).choices[0].message
        for logprobs in (False, True):
            chunks = list(
                client.chat.completions.create(model="s", messages=ask(), tools=TOOLS, stream=True, logprobs=logprobs)
            )
            content, calls = streamed_message(chunks)
            assert content == (plain.content or "") and "<tool" not in content
            assert [c["function"]["arguments"] for c in calls] == [c.function.arguments for c in plain.tool_calls]


def test_a_streamed_tool_turn_extends_the_gateways_token_exact_history():
    from turnrl.gateway.server import Gateway

    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>'
    agent = ScriptedAgent(
        tiny_tokenizer("chatml"),
        lambda p: "It is 4." if "<tool_response" in p or "\n4<" in p else f"Let me see.\n{call}",
    )
    with Gateway(agent, "s") as gateway:
        sid = gateway.open("t")
        client = openai.OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0, timeout=30)
        chunks = list(client.chat.completions.create(model="s", messages=ask(), tools=TOOLS, stream=True))
        content, calls = streamed_message(chunks)
        follow = [
            *ask(),
            {"role": "assistant", "content": content, "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "4"},
        ]
        list(client.chat.completions.create(model="s", messages=follow, tools=TOOLS, stream=True))
        session = gateway.close(sid)
    assert [c.match.how for c in session.calls] == ["fresh", "extended"]


def test_templates_without_a_system_role_or_a_tool_role_get_tools_in_the_first_user_turn():
    from turnrl.template_tools import TemplateSupport

    tok = tiny_tokenizer("chatml")
    tok.chat_template = (  # Gemma-like: no system role, strict alternation
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
        "{{ '<start>' + m['role'] + '\n' + m['content'] + '<end>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start>assistant\n' }}{% endif %}"
    )
    support = template_support(tok)
    assert support == TemplateSupport(tools=False, tool_calls=False, tool_role=False, system_role=False)
    two_calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "calculator", "arguments": "{}"}} for i in range(2)
    ]
    messages = [
        *ask(),
        {"role": "assistant", "content": "", "tool_calls": two_calls},
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    out, tools = fit_to_template(messages, TOOLS, support)
    assert [m["role"] for m in out] == ["user", "assistant", "user"] and tools is None
    assert out[0]["content"].startswith("You can call these tools:") and out[0]["content"].endswith("What is 2 + 2?")
    assert out[2]["content"] == "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
    agent = ScriptedAgent(tok, lambda p: "ok")
    with AgentServer(agent, "g") as server:  # renders, where it used to be a 400 or tools silently dropped
        client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)
        assert client.chat.completions.create(model="g", messages=messages, tools=TOOLS).choices[0].message.content
    assert "calculator" in tok.decode(agent.calls[-1][0])
