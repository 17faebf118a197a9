"""How a verifiers rollout and a turnrl episode meet (:mod:`turnrl.envs.adapters.verifiers_env`): verifiers' own
``run_rollout`` runs on a background event loop and asks an OpenAI client for each model turn; that client's HTTP
transport hands each ``/chat/completions`` request to the episode's :class:`Channel` instead of the network, and
the environment answers it with the policy's message.

Also here: the watch that tells an episode its rubric's reward function raised (verifiers logs it and scores 0), and
the messages' conversions between the two sides.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import queue
import threading
import time
import uuid
from typing import Any


class VerifiersEnvError(RuntimeError):
    """A verifiers environment cannot be loaded or one of its episodes failed; the message says why."""


MODEL = "turnrl-policy"  # the model name the environment's client asks for (the run's policy answers)

# ---- the background loop every rollout of this process runs on ----

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's one event loop for verifiers rollouts (a daemon thread, started on first use): an
    environment object shared by several turnrl environments keeps its async resources on one loop."""
    global _loop
    with _loop_lock:
        if _loop is None or not _loop.is_running():
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=run, name="turnrl-verifiers-loop", daemon=True).start()
            if not started.wait(30):
                raise VerifiersEnvError("the verifiers event loop did not start within 30 s")
            _loop = loop
        return _loop


# ---- one episode's channel between the rollout (background loop) and the environment (caller's thread) ----

_current: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("turnrl_verifiers_episode", default=None)


class Channel:
    """What one rollout tells its environment: each model request (its body and the future its reply sets), then
    its end (the rollout's output) or its failure; and the reward functions that failed while it was scored."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        self.rubric_errors: list[str] = []

    async def ask(self, body: dict[str, Any]) -> dict[str, Any]:
        """A model request: hand it to the environment and wait for the policy's message."""
        reply: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.events.put(("request", body, reply))
        return await reply


def watch_reward_functions(rubric: Any) -> None:
    """Wrap each reward function of ``rubric`` (and of the rubrics a ``RubricGroup`` holds) so that one that raises
    is recorded on the episode being scored, then raises on: verifiers still logs it and scores it 0 as its authors
    expect, and the episode counts as errored whatever the logging settings. Each function keeps its name and
    signature (verifiers passes each only the arguments it names)."""
    for sub in getattr(rubric, "rubrics", None) or []:
        watch_reward_functions(sub)
    funcs = getattr(rubric, "funcs", None)
    if isinstance(funcs, list):
        funcs[:] = [f if getattr(f, "_turnrl_watched", False) else _watched(f) for f in funcs]


def _watched(func: Any) -> Any:
    name = getattr(func, "__name__", repr(func))

    def record(e: Exception) -> None:
        channel = _current.get()
        if channel is not None:
            channel.rubric_errors.append(f"reward function {name} raised {type(e).__name__}: {e}")

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def watched_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await func(*args, **kwargs)
            except Exception as e:
                record(e)
                raise

        wrapper: Any = watched_async
    else:

        @functools.wraps(func)
        def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except Exception as e:
                record(e)
                raise

        wrapper = watched
    wrapper._turnrl_watched = True
    return wrapper


class _Transport:
    """An httpx transport that answers the OpenAI client's ``POST …/chat/completions`` from the episode's channel
    (any other path: a 404 in OpenAI's error shape)."""

    def __init__(self, channel: Channel) -> None:
        import httpx

        self.httpx, self.channel = httpx, channel

    async def handle_async_request(self, request: Any) -> Any:
        httpx = self.httpx
        if request.method != "POST" or not request.url.path.rstrip("/").endswith("/chat/completions"):
            error = {
                "message": f"the turnrl policy answers POST /chat/completions only, not {request.method} "
                f"{request.url.path}",
                "type": "invalid_request_error",
            }
            return httpx.Response(404, json={"error": error})
        body = json.loads(await request.aread() or b"{}")
        message = await self.channel.ask(body)
        calls = message.get("tool_calls") or []
        completion = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        return httpx.Response(200, json=completion)

    async def aclose(self) -> None:
        """Nothing to release."""


async def run_rollout(vf_env: Any, rollout_input: dict[str, Any], channel: Channel) -> None:
    """The environment's own ``run_rollout`` (its loop, scoring and output) for one episode, its model calls
    answered through ``channel``; its end (``"done"`` with the output) or failure (``"error"``) told there too."""
    _current.set(channel)
    vf_client = client(channel)
    try:
        output = await vf_env.run_rollout(rollout_input, vf_client, MODEL, {})
    except asyncio.CancelledError:
        raise
    except BaseException as e:  # the episode's failure, told to its environment
        channel.events.put(("error", f"{type(e).__name__}: {e}", None))
    else:
        channel.events.put(("done", output, None))
    finally:
        try:
            await vf_client.close()
        except Exception:  # closing an in-process client holds nothing
            pass


def client(channel: Channel) -> Any:
    """verifiers' chat-completions client over an OpenAI client whose requests go to ``channel``."""
    import httpx
    import openai
    import verifiers as vf

    transport = _Transport(channel)
    http = httpx.AsyncClient(transport=transport, timeout=None)  # type: ignore[arg-type]  # duck-typed transport
    return vf.OpenAIChatCompletionsClient(
        openai.AsyncOpenAI(
            base_url="http://turnrl-policy.invalid/v1",
            api_key="turnrl",
            http_client=http,  # openai takes an httpx client too (its types name httpx2's)
            max_retries=0,
        )
    )


# ---- messages between the two sides ----


def text_of(content: Any) -> str:
    """A message's content as text (the text parts of a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content)


def set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def last_user(prompt: Any) -> Any:
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1].get("content") if users else ""


def ended(output: Any) -> str:
    if isinstance(output, dict) and output.get("error"):
        return f" (its error: {output['error']})"
    return ""
