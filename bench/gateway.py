"""Gateway overhead: episodes/s of an agent program talking to the policy through the OpenAI-compatible gateway vs
the same episodes played natively by turnrl, side by side.

    python bench/gateway.py                        # 32 concurrent episodes, 3 turns, 32 new tokens per turn
    python bench/gateway.py --episodes 32 --turns 3 --max-new 32 --repeat 2

Both modes run in their own process, one after the other, on SmolLM2-135M-Instruct (fp32, CPU), sampling at
temperature 1 from each episode's own seeded stream, on multi-turn arithmetic with a calculator (retry on a wrong
answer, so episodes take several turns):

* ``native`` — turnrl's rollout with continuous batching (each episode's next turn joins the running batch as soon
  as its environment answered) and per-episode KV caches;
* ``gateway`` — a program per episode, 32 at once in threads, each an `openai` client looping chat completions and
  stepping its own copy of the environment; the gateway records every call and the same HF agent decodes all
  sessions in one continuous batch, in the main thread, as a training run does (``--engine-thread``: in a thread of
  the gateway's own, as a standalone gateway does — every OS thread that runs torch kernels gets its own OpenMP
  team, and two teams on two cores slow each other).

The sessions sample with the streams the native episodes use, so both modes generate the same tokens: the script
checks that, so the ratio is the gateway's own cost (HTTP, JSON, template rendering, the drift check, recording).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def play_through_gateway(
    gateway: Any,
    env: Callable[[], Any],
    seeds: list[int],
    connect: Callable[[str], Callable[[list[dict[str, Any]]], str]],
    timeout: float,
) -> tuple[list[Any], float]:
    """Each seed's episode played by a program in a thread of its own, as a training run plays programs: what a
    user's agent does — its own client (``connect(session) -> ask``, ``ask(messages) -> text``: one call with the
    whole conversation), its own loop over its own copy of the environment. The gateway decodes every session in
    this thread (``engine_thread=False``). Returns the episodes as recorded and the wall time (recording included)."""
    from turnrl.gateway import build_trajectory

    ids = [gateway.open(f"e{i}", seed=s) for i, s in enumerate(seeds)]
    results: dict[str, tuple[float, dict[str, Any]]] = {}

    def program(sid: str, seed: int) -> None:
        ask, e = connect(sid), env()
        obs, _ = e.reset(seed=seed)
        messages = [m.to_chat() for m in obs]
        while True:
            text = ask(messages)
            messages.append({"role": "assistant", "content": text})
            obs, reward, terminated, truncated, info = e.step(text)
            if terminated or truncated:
                results[sid] = (reward, info)
                return
            messages += [m.to_chat() for m in obs]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(seeds)) as pool:
        futures = [pool.submit(program, sid, s) for sid, s in zip(ids, seeds)]
        gateway.engine.serve(futures, timeout=timeout)  # decodes in this thread
        for f in futures:
            f.result()
    trajs = [
        build_trajectory(
            gateway.close(sid).calls,
            reward=results[sid][0],
            correct=results[sid][1].get("correct"),
            eos_ids=gateway.eos_ids,
        )
        for sid in ids
    ]
    return trajs, time.perf_counter() - t0


def write_figures(trajs: list[Any], wall: float, out: str) -> None:
    """A measurement's figures and tokens, to ``out`` (JSON); exits naming the first errors if any episode failed."""
    errors = [t.error for t in trajs if t.error]
    if errors:
        raise SystemExit(f"episodes failed: {errors[:3]}")
    n = len(trajs)
    with open(out, "w") as f:
        json.dump(
            {
                "wall_s": wall,
                "episodes_s": n / wall,
                "turns": sum(t.num_turns for t in trajs) / n,
                "generated": sum(sum(t.loss_mask) for t in trajs),
                "tokens": [t.token_ids for t in trajs],
            },
            f,
        )


def run_children(
    script: str, modes: tuple[str, ...], repeat: int, args: list[str], name: str
) -> dict[str, list[dict[str, Any]]]:
    """Each mode measured by ``script --child MODE OUT`` in a process of its own, one after the other (``repeat``
    rounds, alternating); each mode's figures, run by run."""
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for r in range(repeat):
        for mode in modes:
            out = f"/tmp/turnrl-bench-{name}-{mode}-{r}.json"
            subprocess.run(
                [sys.executable, script, *args, "--child", mode, out],
                check=True,
                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
            )
            with open(out) as f:
                rows[mode].append(json.load(f))
    return rows


def print_runs(rows: dict[str, list[dict[str, Any]]], label: str) -> None:
    """The table of every run: wall time, episodes/s, turns per episode, generated tokens."""
    width = max(len(label), *(len(mode) for mode in rows)) + 1
    print(f"{label:{width}} {'run':>3} {'wall s':>8} {'episodes/s':>11} {'turns/ep':>9} {'generated':>10}")
    for mode, runs in rows.items():
        for r, x in enumerate(runs):
            print(
                f"{mode:{width}} {r:>3} {x['wall_s']:>8.1f} {x['episodes_s']:>11.3f} {x['turns']:>9.2f} "
                f"{x['generated']:>10}"
            )


def measure(
    mode: str, episodes: int, turns: int, max_new: int, model: str, out: str, engine_thread: bool = False
) -> None:
    """One measurement (in a child process): play the episodes, write the figures and tokens to ``out``."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    import turnrl
    from turnrl.agents import SamplingParams
    from turnrl.agents.hf import HFAgent
    from turnrl.rollout.engine import Rollout

    def env():
        return turnrl.make(
            "turnrl/Arithmetic-v0", level=2, calculator=True, retry=True, max_turns=turns, answer_format="auto"
        )

    torch.manual_seed(0)
    agent = HFAgent.from_pretrained(model, batch_size=episodes, kv_cache_mb=4096)
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new)
    Rollout(agent, params.model_copy(update={"max_new_tokens": 4})).run([env()])  # one-off setup of the first pass
    seeds = [1000 + i for i in range(episodes)]
    if mode == "native":
        t0 = time.perf_counter()
        trajs = Rollout(agent, params, continuous=True).run(
            [env() for _ in range(episodes)], seeds=seeds, sample_seeds=seeds
        )
        wall = time.perf_counter() - t0
    else:
        from openai import OpenAI

        from turnrl.gateway import Gateway

        gateway = Gateway(agent, "policy", max_context=4096, engine_thread=engine_thread).start()

        def connect(sid: str) -> Callable[[list[dict[str, Any]]], str]:
            client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0)
            return lambda messages: (
                client.chat.completions.create(model="policy", messages=messages, max_tokens=max_new, temperature=1.0)
                .choices[0]
                .message.content
            )

        trajs, wall = play_through_gateway(gateway, env, seeds, connect, timeout=600)
        gateway.stop()
    write_figures(trajs, wall, out)


def options(doc: str, episodes: int, mode: str) -> argparse.ArgumentParser:
    """The options of a gateway bench: its episodes, turns, new tokens a turn, rounds, model, and ``--child MODE
    OUT`` (a measurement, in the child process :func:`run_children` starts)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=episodes)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1, help=f"runs of each {mode} (alternating)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--child", nargs=2, metavar=(mode.upper(), "OUT"), help=argparse.SUPPRESS)
    return ap


def child_options(a: argparse.Namespace) -> list[str]:
    """The options of :func:`options` as parsed, for a child process."""
    return ["--episodes", str(a.episodes), "--turns", str(a.turns), "--max-new", str(a.max_new), "--model", a.model]


def main() -> None:
    ap = options(__doc__, 32, "mode")
    ap.add_argument("--engine-thread", action="store_true", help="decode in the gateway's own thread")
    a = ap.parse_args()
    if a.child:
        measure(a.child[0], a.episodes, a.turns, a.max_new, a.model, a.child[1], a.engine_thread)
        return
    rows = run_children(
        __file__,
        ("native", "gateway"),
        a.repeat,
        [*child_options(a), *(["--engine-thread"] if a.engine_thread else [])],
        "gateway",
    )
    same = all(n["tokens"] == g["tokens"] for n, g in zip(rows["native"], rows["gateway"]))
    print(
        f"{a.episodes} concurrent episodes, up to {a.turns} turns, {a.max_new} new tokens per turn; "
        f"same tokens in both modes: {same}"
    )
    print_runs(rows, "mode")
    best = {m: max(x["episodes_s"] for x in runs) for m, runs in rows.items()}
    print(f"gateway / native episodes/s (best of {a.repeat}): {best['gateway'] / best['native']:.2f}x")


if __name__ == "__main__":
    main()
