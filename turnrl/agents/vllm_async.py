"""vLLM's asynchronous engine (``vllm.v1.engine.async_llm.AsyncLLM``) behind the same ``generate`` as
:class:`~turnrl.agents.vllm.VLLMAgent`, for rollout workers whose weights change while requests run.

:meth:`AsyncVLLMAgent.update_weights` loads new weights *in flight*: it pauses the engine's scheduler keeping the
running requests (``pause_generation(mode="keep")``), loads the weights into every engine worker, labels them with
the new version (the engine's weight version) and resumes. Nothing is dropped: a completion that was half-way
through goes on under the new weights, and says which tokens each version sampled (vLLM's per-completion weight
version spans, here :attr:`Completion.token_versions`). The pause clears the KV cache (the running requests are
re-prefilled, prompt and tokens so far, under the new weights): each token after the update is sampled from the
new policy given everything before it, which is what its recorded version and log-probability claim.

The engine runs on an event loop of its own (a daemon thread), so ``generate`` can block one thread while
``update_weights`` comes from another (a Ray actor's second call). Needs a vLLM with ``pause_generation(mode=...)``
and weight version spans (vLLM ≥ 0.32; :func:`supports_inflight_updates` says); an older one gets the plain
:class:`~turnrl.agents.vllm.VLLMAgent`, whose loads wait for the running generation call to finish.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import threading
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from turnrl.agents.base import Capabilities, Completion, SamplingParams
from turnrl.agents.vllm import (
    VLLMAgent,
    _import_vllm,
    _ReloadWeights,
    prefix_caching_kwargs,
    processed_logprobs_kwargs,
    weights_file,
)

T = TypeVar("T")


def supports_inflight_updates() -> bool:
    """Whether the installed vLLM can pause its scheduler keeping the running requests and label each completion's
    tokens with the weight version that sampled them."""
    try:
        from vllm.outputs import CompletionOutput
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        return False
    pause = getattr(AsyncLLM, "pause_generation", None)
    has_mode = pause is not None and "mode" in inspect.signature(pause).parameters
    return has_mode and "weight_versions" in getattr(CompletionOutput, "__dataclass_fields__", {})


def token_versions(spans: Any, length: int) -> list[int] | None:
    """One version per generated token from vLLM's weight version spans (``[(version, start, end)]`` over output
    token indices); None where the engine labelled none. A label that is not an integer is an error: the agent labels
    every load with the integer version it was given."""
    if not spans:
        return None
    out: list[int] = []
    for span in spans:
        if span.start != len(out):
            raise ValueError(f"weight version spans leave a gap at token {len(out)}: {spans}")
        out.extend([int(span.version)] * (span.end - span.start))
    if len(out) != length:
        raise ValueError(f"weight version spans cover {len(out)} tokens, the completion has {length}")
    return out


class AsyncVLLMAgent:
    """Generate with vLLM's ``AsyncLLM`` and take new weights without stopping the requests in flight.

    Args:
        model: a local path or hub name (built-in names such as ``smollm2-135m-instruct`` resolve to the cache).
        dtype: the engine's dtype (``"float32"`` on CPU, ``"bfloat16"`` on GPUs).
        version: the version label of the weights it starts with.
        timeout: seconds any single call into the engine may take before it is abandoned with an error.
        **engine_kwargs: passed to ``vllm.AsyncEngineArgs`` (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``enforce_eager``).
    """

    inflight_updates = True  # a weight load does not wait for the running generation calls

    def __init__(
        self, model: str, *, dtype: str = "auto", version: int = 0, timeout: float = 3600.0, **engine_kwargs: Any
    ) -> None:
        _import_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from turnrl.agents.models import resolve_model_path

        if not supports_inflight_updates():
            raise RuntimeError(
                "this vLLM cannot pause with running requests kept (pause_generation(mode='keep')) "
                "or label tokens with weight versions: use VLLMAgent, or vLLM >= 0.32"
            )
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # weight loads ship a function (as VLLMAgent)
        self.timeout = timeout
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="turnrl-vllm-loop")
        self._thread.start()
        self._load_lock = threading.Lock()  # one weight load at a time
        args = AsyncEngineArgs(
            model=resolve_model_path(model),
            dtype=dtype,
            **{**processed_logprobs_kwargs(), **prefix_caching_kwargs(), **engine_kwargs},
        )

        async def build() -> Any:  # created on the engine's loop: its output handler task lives there
            return AsyncLLM.from_engine_args(args)

        self.llm = self.call(build())
        self.version = version
        self.call(self.llm.update_weight_version(str(version)))
        self.logprobs_mode = str(
            getattr(self.llm.model_config.logprobs_mode, "value", self.llm.model_config.logprobs_mode)
        )
        self.tokenizer = self.llm.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        self.eos_ids = [eos] if eos is not None else []
        self.updates = 0  # weight loads done while requests were running
        self._running = 0  # requests in the engine now (read for ``updates``)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the engine's event loop and wait (at most ``timeout`` seconds, default the agent's)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout=self.timeout if timeout is None else timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"the vLLM engine did not answer within {self.timeout if timeout is None else timeout}s"
            ) from None

    # ---- generation ----

    def _params(self, params: SamplingParams, seed: int | None) -> Any:
        vllm = _import_vllm()
        from vllm.sampling_params import RequestOutputKind

        if params.fire_temperature is not None:
            raise ValueError("the async vLLM agent does not do FIRE sampling (fire_temperature); use VLLMAgent")
        return vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            seed=seed,
            logprobs=0,
            skip_special_tokens=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    async def _one(self, prompt: list[int], sp: Any) -> Any:
        from vllm.inputs import TokensPrompt

        final = None
        self._running += 1
        try:
            async for out in self.llm.generate(TokensPrompt(prompt_token_ids=prompt), sp, f"turnrl-{next(self._ids)}"):
                final = out
        finally:
            self._running -= 1
        if final is None:
            raise RuntimeError("the vLLM engine ended a request without output")
        return final

    async def _many(self, prompts: list[list[int]], sps: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*(self._one(p, sp) for p, sp in zip(prompts, sps))))

    @property
    def capabilities(self) -> Capabilities:
        """Per-prompt seeds, new weights in flight (each token labelled with its version), its end-of-turn ids."""
        return Capabilities(seeds=True, inflight_updates=self.inflight_updates, eos_ids=frozenset(self.eos_ids))

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, seeds: list[int] | None = None
    ) -> list[Completion]:
        """Sample ``params.n`` completions per token prompt (see :class:`~turnrl.agents.base.Agent`); ``seeds`` (one
        per prompt) gives each prompt its own random stream. Each completion carries the version that sampled each
        of its tokens (``token_versions``) and, as ``policy_version``, the version of its first token."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds must have one entry per prompt ({len(prompts)}), got {len(seeds)}")
        sps = [self._params(params, seeds[i] if seeds is not None else params.seed) for i in range(len(prompts))]
        results = self.call(self._many(prompts, sps))
        out = []
        for i, r in enumerate(results):
            for o in sorted(r.outputs, key=lambda o: o.index):
                ids = list(o.token_ids)
                versions = token_versions(o.weight_versions, len(ids))
                cached = getattr(r, "num_cached_tokens", None)
                meta = (
                    {"prompt_tokens": len(prompts[i]), "cached_tokens": cached, "kv": "hit" if cached else "new"}
                    if isinstance(cached, int)
                    else {}
                )
                out.append(
                    Completion(
                        text=self.tokenizer.decode(ids, skip_special_tokens=True),
                        token_ids=ids,
                        logprobs=VLLMAgent._logprobs(o),
                        finish_reason="length" if o.finish_reason == "length" else "stop",
                        prompt_index=i,
                        metadata=meta,
                        policy_version=versions[0] if versions else self.version,
                        token_versions=versions,
                    )
                )
        return out

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """Each token's log-probability given the ones before it (position 0: 0.0) under the current weights."""
        vllm = _import_vllm()
        sp = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        results = self.call(self._many(sequences, [sp] * len(sequences)))
        return [
            [0.0] + [float(step[t].logprob) for t, step in zip(seq[1:], (r.prompt_logprobs or [])[1:])]
            for seq, r in zip(sequences, results)
        ]

    # ---- weights ----

    def update_weights(self, state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]], version: int) -> None:
        """Load ``state_dict`` as ``version`` while requests may be running: pause (running requests kept, KV and
        prefix caches cleared) → load into every engine worker → label the weights ``version`` → resume."""

        async def load(path: str) -> None:
            await self.llm.pause_generation(mode="keep", clear_cache=True)
            try:
                running = self._running
                await self.llm.collective_rpc(_ReloadWeights(path))
                await self.llm.update_weight_version(str(version))
                self.version = version
                self.updates += running > 0
            finally:
                await self.llm.resume_generation()

        with self._load_lock, weights_file(state_dict) as path:
            self.call(load(path))

    def load_weights(self, state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new weights keeping the current version label (as :meth:`VLLMAgent.load_weights`)."""
        self.update_weights(state_dict, self.version)

    def set_version(self, version: int) -> None:
        """Label the weights the engine holds ``version`` (weights that arrived another way, e.g. over NCCL)."""
        self.call(self.llm.update_weight_version(str(version)))
        self.version = version

    def pause(self) -> None:
        """Pause the scheduler keeping the running requests (before weights stream in over another channel)."""
        self.call(self.llm.pause_generation(mode="keep", clear_cache=True))

    def resume(self) -> None:
        self.call(self.llm.resume_generation())

    def close(self) -> None:
        """Shut the engine down and stop its event loop."""
        if self.llm is None:
            return

        async def stop() -> None:
            self.llm.shutdown()
            self.llm = None  # not again from AsyncLLM.__del__ at interpreter exit (its globals are gone by then)

        try:
            self.call(stop(), timeout=60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
