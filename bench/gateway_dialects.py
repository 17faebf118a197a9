"""The gateway in each dialect: episodes/s of agent programs written against OpenAI's Chat Completions, Anthropic's
Messages and OpenAI's Responses APIs (each with its official client), against Chat Completions, side by side.

    python bench/gateway_dialects.py                     # 16 concurrent episodes, up to 3 turns, 32 new tokens a turn
    python bench/gateway_dialects.py --repeat 2 --model tiny:chatml

Each dialect runs in its own process, one after the other (``--repeat``: alternating), on SmolLM2-135M-Instruct
(fp32, CPU) by default. The programs play multi-turn arithmetic without tools (level 2, a retry after a wrong
answer, so episodes take several turns: plain messages, which every dialect carries alike): the same environment
copy per episode, the whole history sent each call (``previous_response_id`` is not used, so the three send the
same conversation), sampling at temperature 1 from each session's own seeded stream. The gateway converts every
dialect into the same chat form, so all three generate the same tokens when the sessions share the policy's batches
alike: the script checks that (with many concurrent sessions the batches they meet in depend on timing, and a padded
batch's float rounding can flip a sampled token mid-generation: `--episodes 2` is exact), so a ratio is the
dialect's own cost (its client, JSON shape and conversion). Goal (issue 81): each ≥ 0.95× Chat Completions.
The programs, their threads and the figures are bench/gateway.py's (the wall time includes recording the episodes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# bench/gateway.py: the programs in their threads, the measurements in child processes, the figures
from gateway import (
    child_options,
    options,
    play_through_gateway,
    print_runs,
    run_children,
    write_figures,
)

DIALECTS = ("chat", "messages", "responses")


def ask(dialect: str, client: Any, messages: list[dict[str, str]], max_new: int) -> str:
    """One call in ``dialect`` with the whole conversation; the reply's text."""
    if dialect == "chat":
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=max_new, temperature=1.0)
        return reply.choices[0].message.content
    if dialect == "messages":
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        rest = [m for m in messages if m["role"] != "system"]
        reply = client.messages.create(
            model="policy",
            max_tokens=max_new,
            messages=rest,
            **({"system": system} if system else {}),
            extra_body={"temperature": 1.0},
        )
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
    from turnrl.gateway import Gateway
    from turnrl.rollout.engine import Rollout

    def env() -> Any:
        return turnrl.make("turnrl/Arithmetic-v0", level=2, retry=True, max_turns=turns, answer_format="auto")

    torch.manual_seed(0)
    agent = make_agent(model, batch_size=episodes)
    Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=4)).run([env()])  # one-off setup of the first pass
    gateway = Gateway(agent, "policy", max_context=4096).start()

    def connect(sid: str) -> Callable[[list[dict[str, Any]]], str]:
        if dialect == "messages":
            import anthropic

            client = anthropic.Anthropic(
                base_url=gateway.base_url(sid).removesuffix("/v1"), api_key=gateway.api_key, max_retries=0, timeout=600
            )
        else:
            from openai import OpenAI

            client = OpenAI(base_url=gateway.base_url(sid), api_key=gateway.api_key, max_retries=0, timeout=600)
        return lambda messages: ask(dialect, client, messages, max_new)

    trajs, wall = play_through_gateway(gateway, env, [1000 + i for i in range(episodes)], connect, timeout=1200)
    gateway.stop()
    write_figures(trajs, wall, out)


def main() -> None:
    a = options(__doc__, 16, "dialect").parse_args()
    if a.child:
        measure(a.child[0], a.episodes, a.turns, a.max_new, a.model, a.child[1])
        return
    rows = run_children(__file__, DIALECTS, a.repeat, child_options(a), "dialect")
    same = all(rows[d][r]["tokens"] == rows["chat"][r]["tokens"] for d in DIALECTS for r in range(a.repeat))
    print(
        f"{a.episodes} concurrent episodes, up to {a.turns} turns, {a.max_new} new tokens per turn, {a.model}; "
        f"same tokens in every dialect: {same}"
    )
    print_runs(rows, "dialect")
    best = {d: max(x["episodes_s"] for x in runs) for d, runs in rows.items()}
    for dialect in DIALECTS[1:]:
        print(f"{dialect} / chat episodes/s (best of {a.repeat}): {best[dialect] / best['chat']:.2f}x")


if __name__ == "__main__":
    main()
