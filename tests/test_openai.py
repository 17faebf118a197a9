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
from turnrl.agents.server import AgentServer
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.rollout import Rollout


@pytest.fixture(scope="module")
def served():
    tok = tiny_tokenizer("chatml")
    local = HFAgent(tiny_model(tok), tok)
    with AgentServer(local, "tiny") as server:
        yield local, server


def prompts(tok):
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
             for q in ("What is 2 + 2?", "hello there")]
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
    envs = lambda: [turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=2) for _ in range(3)]  # noqa: E731
    via_http = Rollout(remote, params).run(envs(), seeds=[0, 1, 2])
    direct = Rollout(local, params).run(envs(), seeds=[0, 1, 2])
    assert [t.token_ids for t in via_http] == [t.token_ids for t in direct]
    assert [t.loss_mask for t in via_http] == [t.loss_mask for t in direct]


def test_chat(served):
    local, server = served
    remote = OpenAIAgent(server.url, "tiny")
    out = remote.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.0, max_new_tokens=5))
    ids = local.tokenizer.encode(local.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                                     add_generation_prompt=True), add_special_tokens=False)
    assert out == [local.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=5))[0].text]


def test_clear_errors(served):
    local, server = served
    with pytest.raises(OpenAIError, match="returned 404.*model 'other' not found") as e:
        OpenAIAgent(server.url, "other", max_retries=0).chat([{"role": "user", "content": "hi"}])
    assert e.value.status == 404
    with pytest.raises(OpenAIError, match="returned 400.*invalid sampling parameters"):
        OpenAIAgent(server.url, "tiny", max_retries=0).chat([{"role": "user", "content": "x"}],
                                                             SamplingParams(temperature=3.0).model_copy(update={"n": 0}))
    with pytest.raises(ValueError, match="FIRE"):
        OpenAIAgent(server.url, "tiny").generate([[1]], SamplingParams(fire_temperature=5.0))


class Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first `failures` requests, then a fixed completion; can also hang."""

    failures = 2
    hang = False
    seen = 0

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
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
