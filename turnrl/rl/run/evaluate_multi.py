"""Held-out evaluation of an agent in an environment with several agents (``turnrl eval`` on a multi-agent id): the
agent takes one seat, named opponents the others, on starting states of the environment's held-out split; the
report is the share of wins, draws and losses with 95 % Wilson confidence intervals, invalid moves and game length.

Opponents by name: ``perfect`` and ``random`` (tic-tac-toe players that need no model,
:func:`turnrl.envs.multiagent.tictactoe.text_player`), ``self`` (the evaluated agent in every seat), or any agent
spec (``hf:PATH``, ``run:OUT_DIR``, ``openai:URL#MODEL``, …). With ``seat=None`` the agent plays every seat in turn,
so a game that favours the first mover does not favour the agent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnrl.agents.base import Agent, SamplingParams
from turnrl.envs.core import close_all
from turnrl.envs.multiagent import make_multi_agent
from turnrl.envs.multiagent.core import counts_starting_states, split_seed
from turnrl.rollout.multi import MultiAgentRollout
from turnrl.rollout.opponents import make_opponent

OUTCOMES = ("win", "draw", "loss")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a share ``k / n`` (95 % for z = 1.96); (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def evaluate_multi_agent(agent: Agent | Mapping[str, Agent], env_id: str, env_kwargs: dict[str, Any] | None = None, *,
                         opponent: str | Agent = "random", seat: str | None = None, episodes: int = 64,
                         seed: int = 0, params: SamplingParams | None = None, max_context: int = 4096,
                         batch_size: int = 32, out_dir: str | Path | None = None,
                         opponent_label: str | None = None) -> dict[str, Any]:
    """Play ``episodes`` games of ``env_id`` (its held-out split unless ``env_kwargs`` names one) with ``agent`` in
    ``seat`` (every seat in turn when None) and ``opponent`` in the others; return the figures (and write
    ``metrics.json`` and ``items.jsonl`` to ``out_dir``; ``opponent_label`` names an opponent given as an agent).
    ``agent`` may map every seat to its own policy (a run with several): the evaluated seat is played by its policy,
    and with ``opponent="self"`` every seat by its own.

    Raises:
        ValueError: a seat the environment does not have, or a seat ``agent``'s map leaves without a policy.
    """
    kwargs = dict(env_kwargs or {})
    probe = make_multi_agent(env_id, **kwargs)
    if "split" not in kwargs and probe.held_out_split is not None:
        kwargs["split"] = probe.held_out_split
        probe.close()
        probe = make_multi_agent(env_id, **kwargs)  # the held-out split's
    seats = list(probe.possible_agents)
    try:  # the held-out split's starting states
        states = len(probe) or episodes  # type: ignore[arg-type]
    except TypeError:  # an environment that does not count its starting states
        states = episodes
    probe.close()  # the games make their own
    if seat is not None and seat not in seats:
        raise ValueError(f"{env_id} has no seat {seat!r}; its seats: {', '.join(seats)}")
    team = dict(agent) if isinstance(agent, Mapping) else {s: agent for s in seats}
    missing = [s for s in seats if s not in team]
    if missing:
        raise ValueError(f"seat {', '.join(map(repr, missing))} of {env_id} is mapped to no policy")
    other = None if opponent == "self" else (make_opponent(opponent, team[seats[0]].tokenizer, seed)
                                             if isinstance(opponent, str) else opponent)
    params = params or SamplingParams(temperature=0.0, max_new_tokens=64)
    rows: list[dict[str, Any]] = []
    for start in range(0, episodes, batch_size):
        idx = list(range(start, min(start + batch_size, episodes)))
        by_seat: dict[str, list[int]] = {}
        for i in idx:  # the agent's seat of episode i: every seat in turn, and on a second pass over the starting
            # states each one's next seat (so that 2n games of n states play every state from both seats)
            by_seat.setdefault(seat or seats[(i % states + i // states) % len(seats)], []).append(i)
        for mine, games in by_seat.items():
            policies: dict[str, Agent] = {}  # one name per distinct agent, so that its seats' moves batch together
            seat_map = {}
            for s in seats:
                player = team[s] if s == mine or other is None else other
                seat_map[s] = f"agent{id(player)}"
                policies[seat_map[s]] = player
            rollout = MultiAgentRollout(policies, params, max_context=max_context, seats=seat_map)
            envs = [make_multi_agent(env_id, **kwargs) for _ in games]
            try:
                seeded = not counts_starting_states(envs[0])  # played on seeds: the held-out range (split_seed)
                trajs = rollout.run(envs, seeds=[split_seed("test", i) if seeded else seed + i for i in games],
                                    options=[{"index": i} for i in games],
                                    group_ids=[str(i) for i in games],
                                    sample_seeds=[seed * 1_000_003 + i for i in games])
            finally:
                close_all(envs)
            for i, t in zip([g for g in games for _ in seats], trajs):
                if t.metadata["seat"] == mine:
                    rows.append({"index": i, "seat": mine, "outcome": t.metadata["outcome"] or
                                 ("truncated" if t.truncated else "error" if t.error else "none"),
                                 "reward": t.metadata["seat_reward"], "moves": len(t.turns),
                                 "invalid_moves": t.metadata["invalid_moves"], "error": t.error})
    metrics = summarize(rows)
    label = opponent_label or (opponent if isinstance(opponent, str) else type(opponent).__name__)
    metrics.update(env=env_id, env_kwargs=kwargs, opponent=label, seat=seat or "all", episodes=len(rows))
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
        (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return metrics


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The share of every outcome (wins, draws and losses always; a cooperative game's own words, such as
    ``solved``, too) with its 95 % Wilson interval, and per episode: reward, moves, invalid moves."""
    n = len(rows)
    out: dict[str, Any] = {}
    for outcome in [*OUTCOMES, *sorted({r["outcome"] for r in rows} - set(OUTCOMES))]:
        k = sum(r["outcome"] == outcome for r in rows)
        lo, hi = wilson(k, n)
        out[f"{outcome}_rate"], out[f"{outcome}_ci95"] = (k / n if n else 0.0), [round(lo, 4), round(hi, 4)]
    won = sum(r["outcome"] in ("win", "solved") for r in rows)
    out["success_rate"], out["success_ci95"] = (won / n if n else 0.0), [round(x, 4) for x in wilson(won, n)]
    for key in ("reward", "moves", "invalid_moves"):
        out[f"{key}_mean"] = sum(r[key] for r in rows) / n if n else 0.0
    out["errors"] = sum(r["error"] is not None for r in rows)
    return out
