"""The gateway in each dialect: episodes/s of agent programs written against OpenAI's Chat Completions, Anthropic's
Messages and OpenAI's Responses APIs (each with its official client), against Chat Completions, side by side.

    python bench/gateway_dialects.py                     # 16 concurrent episodes, up to 3 turns, 32 new tokens a turn
    python bench/gateway_dialects.py --repeat 2 --model tiny

Each dialect runs in its own process, one after the other (``--repeat``: alternating), on SmolLM2-135M-Instruct
(fp32, CPU) by default. The programs play multi-turn arithmetic without tools (level 2, a retry after a wrong
answer, so episodes take several turns: plain messages, which every dialect carries alike): the same environment
copy per episode, the whole history sent each call (``previous_response_id`` is not used, so the three send the
same conversation), sampling at temperature 1 from each session's own seeded stream. The gateway converts every
dialect into the same chat form, so all three generate the same tokens when the sessions share the policy's batches
alike: the script checks that (with many concurrent sessions the batches they meet in depend on timing, and a padded
batch's float rounding can flip a sampled token mid-generation: `--episodes 2` is exact), so a ratio is the
dialect's own cost (its client, JSON shape and conversion). Goal (issue 81): each ≥ 0.95× Chat Completions.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

DIALECTS = ("chat", "messages", "responses")


def ask(dialect: str, client: Any, messages: list[dict[str, str]], max_new: int) -> str:
    """One call in ``dialect`` with the whole conversation; the reply's text."""
    if dialect == "chat":
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_new, temperature=1.0)
        return reply.choices[0].message.content
    if dialect == "messages":
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        rest = [m for m in messages if m["role"] != "system"]
        reply = client.messages.create(model="policy", max_tokens=max_new, messages=rest,
                                       **({"system": system} if system else {}), extra_body={"temperature": 1.0})
        return "".join(b.text for b in reply.content if b.type == "text")
    reply = client.responses.create(model="policy", input=messages, max_output_tokens=max_new, temperature=1.0)
    return reply.output_text


def measure(dialect: str, episodes: int, turns: int, max_new: int, model: str, out: str) -> None:
    """One measurement (in a child process): play the episodes through the gateway, write figures and tokens."""
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    import turnrl
    from turnrl.agents import SamplingParams, make_agent
    from turnrl.gateway import Gateway, build_trajectory
    from turnrl.rollout.engine import Rollout

    def env() -> Any:
        return turnrl.make("turnrl/Arithmetic-v0", level=2, retry=True, max_turns=turns, answer_format="auto")

    torch.manual_seed(0)
    agent = make_agent(model, batch_size=episodes)
    Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=4)).run([env()])  # one-off setup of the first pass
    gateway = Gateway(agent, "policy", max_context=4096).start()
    seeds = [1000 + i for i in range(episodes)]
    ids = [gateway.open(f"e{i}", seed=s) for i, s in enumerate(seeds)]
    results: dict[str, float] = {}

    def client_for(sid: str) -> Any:
        if dialect == "messages":
            import anthropic

            return anthropic.Anthropic(base_url=gateway.base_url(sid).removesuffix("/v1"), api_key=gateway.api_key,
                                       max_retries=0, timeout=600)
        from openai import OpenAI

        return OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0, timeout=600)

    def program(sid: str, seed: int) -> None:  # what a user's agent does: its own loop, its own environment
        client, e = client_for(sid), env()
        obs, _ = e.reset(seed=seed)
        messages = [m.to_chat() for m in obs]
        while True:
            text = ask(dialect, client, messages, max_new)
            messages.append({"role": "assistant", "content": text})
            obs, reward, terminated, truncated, _ = e.step(text)
            if terminated or truncated:
                results[sid] = reward
                return
            messages += [m.to_chat() for m in obs]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=episodes) as pool:
        futures = [pool.submit(program, sid, s) for sid, s in zip(ids, seeds)]
        gateway.engine.serve(futures, timeout=1200)  # decodes in this thread, as a training run does
        for f in futures:
            f.result()
    wall = time.perf_counter() - t0
    trajs = [build_trajectory(gateway.close(sid).calls, reward=results[sid], correct=None,
                              eos_ids=gateway.eos_ids) for sid in ids]
    gateway.stop()
    errors = [t.error for t in trajs if t.error]
    if errors:
        raise SystemExit(f"episodes failed: {errors[:3]}")
    with open(out, "w") as f:
        json.dump({"wall_s": wall, "episodes_s": episodes / wall, "turns": sum(t.num_turns for t in trajs) / episodes,
                   "generated": sum(sum(t.loss_mask) for t in trajs), "tokens": [t.token_ids for t in trajs]}, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each dialect (alternating)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--child", nargs=2, metavar=("DIALECT", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        measure(a.child[0], a.episodes, a.turns, a.max_new, a.model, a.child[1])
        return
    rows: dict[str, list[dict[str, Any]]] = {d: [] for d in DIALECTS}
    for r in range(a.repeat):
        for dialect in DIALECTS:
            out = f"/tmp/turnrl-bench-dialect-{dialect}-{r}.json"
            subprocess.run([sys.executable, __file__, "--episodes", str(a.episodes), "--turns", str(a.turns),
                            "--max-new", str(a.max_new), "--model", a.model, "--child", dialect, out], check=True,
                           env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            with open(out) as f:
                rows[dialect].append(json.load(f))
    same = all(rows[d][r]["tokens"] == rows["chat"][r]["tokens"] for d in DIALECTS for r in range(a.repeat))
    print(f"{a.episodes} concurrent episodes, up to {a.turns} turns, {a.max_new} new tokens per turn, {a.model}; "
          f"same tokens in every dialect: {same}")
    print(f"{'dialect':10} {'run':>3} {'wall s':>8} {'episodes/s':>11} {'turns/ep':>9} {'generated':>10}")
    for dialect, runs in rows.items():
        for r, x in enumerate(runs):
            print(f"{dialect:10} {r:>3} {x['wall_s']:>8.1f} {x['episodes_s']:>11.3f} {x['turns']:>9.2f} "
                  f"{x['generated']:>10}")
    best = {d: max(x["episodes_s"] for x in runs) for d, runs in rows.items()}
    for dialect in DIALECTS[1:]:
        print(f"{dialect} / chat episodes/s (best of {a.repeat}): {best[dialect] / best['chat']:.2f}x")


if __name__ == "__main__":
    main()
