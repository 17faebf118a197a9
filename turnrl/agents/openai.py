"""The OpenAI-compatible backend: any server speaking ``/v1/completions`` and ``/v1/chat/completions``.

Async over httpx, with timeouts, retries with exponential backoff (connection errors, 408/409/429 and 5xx), and
errors that say what the server answered. Token-level ``generate`` sends token-id prompts and asks for the
sampled tokens' logprobs; with vLLM's ``return_tokens_as_token_ids`` the generated ids are exact. A server that
returns only token strings gets them re-encoded with the tokenizer, and the completion is marked
``metadata["token_exact"] = False``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

from turnrl.agents.base import Capabilities, Completion, FinishReason, SamplingParams
from turnrl.utils import run_sync

_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIError(RuntimeError):
    """The server refused or failed a request; ``status`` is its HTTP status (None for transport errors)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenAIAgent:
    """Generate through an OpenAI-compatible HTTP server.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model's name.
        tokenizer: the model's tokenizer (needed for token-level rollouts: chat templates, decoding).
        api_key: sent as a bearer token; default ``$OPENAI_API_KEY`` (none if unset).
        timeout: seconds per request.
        max_retries: retries after the first attempt for retryable failures.
        backoff: the first retry's delay in seconds; doubles each retry.
        concurrency: requests in flight at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        tokenizer: Any = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        concurrency: int = 8,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout, self.max_retries, self.backoff, self.concurrency = timeout, max_retries, backoff, concurrency
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_ids = [eos] if eos is not None else []

    async def _post(self, client: httpx.AsyncClient, route: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{route}"
        delay = self.backoff
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = await client.post(url, json=body)
            except httpx.TransportError as e:
                if last:
                    raise OpenAIError(
                        f"POST {url} failed after {attempt + 1} attempt(s): {type(e).__name__}: {e}"
                    ) from e
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json()
                    except ValueError as e:
                        raise OpenAIError(f"POST {url}: the response is not JSON: {resp.text[:200]}", 200) from e
                if resp.status_code not in _RETRY_STATUS or last:
                    raise OpenAIError(
                        f"POST {url} returned {resp.status_code} after {attempt + 1} attempt(s): {_error_text(resp)}",
                        resp.status_code,
                    )
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(timeout=self.timeout, headers=headers)

    # ---- token level ----

    @property
    def capabilities(self) -> Capabilities:
        """A batch without blocking the event loop (:meth:`agenerate`), and its end-of-turn ids."""
        return Capabilities(async_batch=True, eos_ids=frozenset(self.eos_ids))

    async def agenerate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Async :meth:`generate`."""
        if params.fire_temperature is not None:
            raise ValueError("FIRE sampling is not available through the OpenAI API; use the hf or vllm backend")
        sem = asyncio.Semaphore(self.concurrency)
        async with self._client() as client:

            async def one(i: int, prompt: list[int]) -> list[Completion]:
                body = {
                    "model": self.model,
                    "prompt": prompt,
                    "max_tokens": params.max_new_tokens,
                    "temperature": params.temperature,
                    "top_p": params.top_p,
                    "n": params.n,
                    "logprobs": 0,
                    "return_tokens_as_token_ids": True,
                    "skip_special_tokens": False,
                }
                if params.top_k:
                    body["top_k"] = params.top_k
                if params.stop:
                    body["stop"] = list(params.stop)
                if params.seed is not None:
                    body["seed"] = params.seed + i
                async with sem:
                    data = await self._post(client, "/completions", body)
                return [self._completion(c, i) for c in sorted(data["choices"], key=lambda c: c.get("index", 0))]

            groups = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        return [c for g in groups for c in g]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` completions per token prompt (see :class:`~turnrl.agents.base.Agent`)."""
        return run_sync(self.agenerate(prompts, params))

    def _completion(self, choice: dict[str, Any], index: int) -> Completion:
        text = choice.get("text", "")
        lp = choice.get("logprobs") or {}
        tokens, logprobs = lp.get("tokens") or [], lp.get("token_logprobs") or []
        exact = bool(tokens) and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens)
        if exact:
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        elif self.tokenizer is not None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            logprobs = [0.0] * len(ids) if len(logprobs) != len(ids) else logprobs
        else:
            raise OpenAIError("the server returned no token ids and no tokenizer was given to re-encode the text")
        if exact and self.tokenizer is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        return Completion(
            text=text,
            token_ids=ids,
            logprobs=[float(x or 0.0) for x in logprobs],
            finish_reason=finish,
            prompt_index=index,
            metadata={"token_exact": exact},
        )

    # ---- chat level (evaluation, judges) ----

    async def achat(self, messages: list[dict[str, Any]], params: SamplingParams | None = None) -> list[str]:
        """Chat completion texts (``params.n`` of them) for one conversation."""
        params = params or SamplingParams(temperature=0.0)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        async with self._client() as client:
            data = await self._post(client, "/chat/completions", body)
        return [c["message"]["content"] or "" for c in sorted(data["choices"], key=lambda c: c.get("index", 0))]

    def chat(self, messages: list[dict[str, Any]], params: SamplingParams | None = None) -> list[str]:
        """Sync :meth:`achat`."""
        return run_sync(self.achat(messages, params))


def _error_text(resp: httpx.Response) -> str:
    try:
        data = resp.json()
        return str(data.get("error", {}).get("message") or data)[:300]
    except ValueError:
        return resp.text[:300]
