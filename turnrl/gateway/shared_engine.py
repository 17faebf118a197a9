"""One agent serving generation requests from many threads (the gateway's HTTP handlers) in shared batches.

With an agent that decodes requests as they come (``agenerate_one``, the HF agent: continuous batching) an event
loop decodes and every request joins the running batch at its next decode step. The loop runs in the engine's own
thread, or — ``own_thread=False`` — in the thread that calls :meth:`Engine.serve` while it waits for its programs:
a training run decodes in the thread that also updates the weights, so that no decode step overlaps an optimizer
step and one OpenMP thread team does all the model's work (every OS thread that runs torch kernels gets its own team,
and on a small machine two teams slow each other by half). Any other agent (vLLM, an HTTP backend, a scripted one)
gets the requests that arrived within a few milliseconds of each other in one ``generate`` call, from a thread of
its own. Every wait has a timeout; a failed generation fails only the requests that were in it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import queue
import random
import threading
from typing import Any

from turnrl.agents.base import Completion, SamplingParams, capabilities_of


class Engine:
    """Serve ``generate`` calls of many threads with ``agent`` (see the module docstring).

    Args:
        agent: the policy (its ``agenerate_one`` is used where it has one, else ``generate``).
        timeout: seconds a request may wait for its completions before it fails.
        window: seconds the batching agent path waits for more requests to share a ``generate`` call.
        own_thread: decode in the engine's own thread (False: only while a caller runs :meth:`serve`).
    """

    def __init__(self, agent: Any, *, timeout: float = 600.0, window: float = 0.01, own_thread: bool = True) -> None:
        self.agent, self.timeout, self.window = agent, timeout, window
        self.capabilities = capabilities_of(agent)
        self.streaming = self.capabilities.join_batch
        self.reports_tokens = self.streaming and self.capabilities.join_batch_on_token
        self._closed = False
        self._thread: threading.Thread | None = None
        threads = _torch_threads()
        if self.streaming:
            self._loop = asyncio.new_event_loop()
            if own_thread:
                self._thread = threading.Thread(
                    target=self._run_loop, args=(threads,), daemon=True, name="turnrl-gateway-engine"
                )
        else:
            # requests, and None: stop
            self._queue: queue.Queue[tuple[list[int], SamplingParams, int | None, cf.Future] | None] = queue.Queue()
            self._seeds = self.capabilities.seeds
            self._thread = threading.Thread(
                target=self._run_batches, args=(threads,), daemon=True, name="turnrl-gateway-engine"
            )
        if self._thread is not None:
            self._thread.start()

    def serve(self, futures: list[cf.Future], timeout: float | None = None) -> None:
        """Wait until ``futures`` (programs running in other threads) are done — decoding their requests in this
        thread when the engine has no thread of its own — or ``timeout`` seconds have passed."""
        if self._thread is not None or not self.streaming:
            cf.wait(futures, timeout=timeout)
            return

        async def done() -> None:
            await asyncio.wait([asyncio.wrap_future(f, loop=self._loop) for f in futures], timeout=timeout)

        if futures:
            self._loop.run_until_complete(done())

    def generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        seed: int | None = None,
        session: str | None = None,
        on_token: Any = None,
    ) -> list[Completion]:
        """``params.n`` completions of ``prompt``; choice ``j`` samples from its own stream of ``seed`` (where the
        agent takes seeds). ``session`` names the KV cache to reuse (one completion only). ``on_token(choice,
        token_id, logprob, top)`` hears each token as it is sampled, where the agent decodes requests as they come
        (it runs in the engine's loop and must not raise)."""
        if self._closed:
            raise RuntimeError("the gateway's engine is closed")
        one = params.model_copy(update={"n": 1})
        futures = [
            self._submit(prompt, one, seed, j, session if params.n == 1 else None, on_token) for j in range(params.n)
        ]
        _done, pending = cf.wait(futures, timeout=self.timeout)
        for f in pending:
            f.cancel()
        if pending:
            raise TimeoutError(f"generation took longer than {self.timeout:g}s")
        return [f.result() for f in futures]

    def release(self, session: str) -> None:
        """Free a finished session's KV cache (in the engine's thread, where the cache is used)."""
        if self.streaming and self.capabilities.sessions and not self._closed:
            self._loop.call_soon_threadsafe(self.agent.release, [session])

    def close(self) -> None:
        """Stop the engine's thread (requests still waiting fail)."""
        if self._closed:
            return
        self._closed = True
        if self.streaming and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        elif self.streaming:  # nothing runs the loop: fail what waits in it, then close it
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()
        else:
            self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)

    # ---- the two paths ----

    def _submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int | None,
        choice: int,
        session: str | None,
        on_token: Any = None,
    ) -> cf.Future:
        if self.streaming:
            extra = {"on_token": on_token} if on_token is not None and self.reports_tokens else {}
            if choice:
                extra["choice"] = choice
            coro = self.agent.agenerate_one(prompt, params, seed=seed, session=session, **extra)
            return asyncio.run_coroutine_threadsafe(coro, self._loop)
        future: cf.Future = cf.Future()
        self._queue.put((prompt, params, None if seed is None else (seed + choice * 7919) % 2**62, future))
        return future

    def _run_loop(self, threads: int) -> None:
        _set_torch_threads(threads)
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _run_batches(self, threads: int) -> None:
        _set_torch_threads(threads)
        while True:
            first = self._queue.get()
            if first is None:
                return
            items = [first]
            deadline = threading.Event()
            deadline.wait(self.window)  # let concurrent requests arrive
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                items.append(item)
            groups: dict[str, list[tuple[list[int], SamplingParams, int | None, cf.Future]]] = {}
            for item in items:
                if item[3].set_running_or_notify_cancel():
                    groups.setdefault(item[1].model_dump_json(exclude={"seed"}), []).append(item)
            for group in groups.values():
                self._generate_group(group)

    def _generate_group(self, group: list[tuple[list[int], SamplingParams, int | None, cf.Future]]) -> None:
        params = group[0][1]
        try:
            kwargs = {}
            if self._seeds:
                kwargs["seeds"] = [s if s is not None else random.getrandbits(61) for _, _, s, _ in group]
            outs = self.agent.generate([p for p, *_ in group], params, **kwargs)
        except Exception as e:  # every request of the group learns why
            for *_, f in group:
                f.set_exception(e)
            return
        for (*_, f), c in zip(group, outs):
            f.set_result(c)


def _torch_threads() -> int:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:  # pragma: no cover — torch is a dependency
        return 1


def _set_torch_threads(n: int) -> None:
    """A new thread's OpenMP pool starts from OMP_NUM_THREADS, not from the main thread's setting."""
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:  # pragma: no cover
        pass
