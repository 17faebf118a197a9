"""Held-out evaluation of an agent in an environment with several agents (``turnrl eval`` on a multi-agent id): the
agent takes one seat, named opponents the others, on starting states of the environment's held-out split; the
report is the share of wins, draws and losses with 95 % Wilson confidence intervals, invalid moves and game length,
and the share of every score the game records beside its outcome (``item_scores``: the solver–critic game's
``first_correct`` and ``final_correct``), each row of ``items.jsonl`` holding its own in ``scores``.

Opponents by name: ``perfect`` and ``random`` (tic-tac-toe players that need no model,
:func:`turnrl.envs.multiagent.tictactoe.text_player`), ``self`` (the evaluated agent in every seat), or any agent
spec (``hf:PATH``, ``run:OUT_DIR``, ``openai:URL#MODEL``, …). With ``seat=None`` the agent plays every seat in turn,
so a game that favours the first mover does not favour the agent.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnrl.agents.base import Agent, SamplingParams, capabilities_of
from turnrl.envs.core import close_all
from turnrl.envs.multiagent import make_multi_agent
from turnrl.envs.multiagent.core import counts_starting_states, split_seed
from turnrl.rollout.multi import MultiAgentRollout
from turnrl.rollout.opponents import make_opponent
from turnrl.stats import wilson

OUTCOMES = ("win", "draw", "loss")


def evaluate_multi_agent(
    agent: Agent | Mapping[str, Agent],
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    opponent: str | Agent = "random",
    seat: str | None = None,
    episodes: int = 64,
    seed: int = 0,
    params: SamplingParams | None = None,
    max_context: int = 4096,
    batch_size: int = 32,
    out_dir: str | Path | None = None,
    opponent_label: str | None = None,
    not_held_out: str | None = None,
    opponent_checked: bool = False,
    floor: bool | dict[str, Any] = True,
    agent_name: str | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` games of ``env_id`` (its held-out split unless ``env_kwargs`` names one) with ``agent`` in
    ``seat`` (every seat in turn when None) and ``opponent`` in the others; return the figures (and write
    ``metrics.json``, ``items.jsonl`` and ``run.json`` to ``out_dir``, and the floor's to ``out_dir/floor``;
    ``opponent_label`` names an opponent given as an agent). ``agent`` may map every seat to its own policy (a run
    with several): the evaluated seat is played by its policy, and with ``opponent="self"`` every seat by its own.

    Beside the agent's figures: what held out means here (``held_out``, ``held_out_notes``: the opponent is not one
    the run trains against — ``not_held_out`` says why it is, ``opponent_checked`` that the agent's training was
    checked and it is not (a run's own evaluation, ``turnrl eval`` of a ``run:`` agent) — and the starting states
    are ones training cannot reach, where the game says so) and the floor to beat (``floor``: a random *legal* player in the agent's seats, from the
    same states against the same opponent, where the game has one — ``random_player`` — and the opponent is not the
    agent itself; its games in ``out_dir/floor``). ``floor=False`` skips it; a dict (an earlier ``metrics["floor"]``)
    is reused as it is (its games are where it was played: a training run's first evaluation).

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
        states = len(probe) or episodes
    except TypeError:  # an environment that does not count its starting states
        states = episodes
    key_of = getattr(probe, "state_key", None)
    keys = [
        str(key_of(i)) if callable(key_of) else f"{kwargs.get('split', 'state')}:{i}"
        for i in range(min(states, episodes))
    ]
    notes, states_held = _states_held_out(probe)
    random_player = getattr(probe, "random_player", None)
    scores = tuple(getattr(probe, "item_scores", ()))
    probe.close()  # the games make their own
    if seat is not None and seat not in seats:
        raise ValueError(f"{env_id} has no seat {seat!r}; its seats: {', '.join(seats)}")
    team = dict(agent) if isinstance(agent, Mapping) else dict.fromkeys(seats, agent)
    missing = [s for s in seats if s not in team]
    if missing:
        raise ValueError(f"seat {', '.join(map(repr, missing))} of {env_id} is mapped to no policy")
    tokenizer = team[seats[0]].tokenizer
    other = (
        None
        if opponent == "self"
        else (make_opponent(opponent, tokenizer, seed) if isinstance(opponent, str) else opponent)
    )
    params = params or SamplingParams(temperature=0.0, max_new_tokens=64)
    plan = Games(env_id, kwargs, seats, states, keys, seat, episodes, seed, scores)
    play = functools.partial(_play, plan, params, max_context, batch_size)
    rows = play(team, other)
    label = opponent_label or (opponent if isinstance(opponent, str) else type(opponent).__name__)
    metrics = summarize(rows)
    notes.insert(
        0,
        f"opponent: not held out: {not_held_out}"
        if not_held_out
        else (
            f"opponent: {label}, not one the run trains against"
            if opponent_checked
            else f"opponent: {label} (the agent's training opponents are not known here)"
        )
        if label != "self"
        else "opponent: the evaluated agent itself",
    )
    from turnrl.agents.scripted import ScriptedAgent

    seeded = all(capabilities_of(a).seeds for a in team.values())
    model_opponent = other is not None and not isinstance(other, ScriptedAgent)
    notes.append(_games_note(metrics["distinct_games"], len(rows), params.temperature, seeded, model_opponent))
    held = "not held out" if not_held_out or label == "self" else "held out" if states_held else "opponent only"
    settings = {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "opponent": label,
        "seat": seat or "all",
        "episodes": episodes,
        "seed": seed,
        "params": params.model_dump(mode="json"),
        "max_context": max_context,
    }
    metrics.update(
        env=env_id,
        env_kwargs=kwargs,
        opponent=label,
        seat=seat or "all",
        episodes=len(rows),
        distinct_items=len({r["item"] for r in rows}),
        held_out=held,
        held_out_notes=notes,
    )
    floor_rows: list[dict[str, Any]] = []
    if isinstance(floor, dict):
        metrics["floor"] = floor
    elif floor and other is not None and callable(random_player):
        player = ScriptedAgent(tokenizer, random_player(FLOOR_SEED))
        floor_rows = play(dict.fromkeys(seats, player), other)
        metrics["floor"] = {"player": "random legal moves", **summarize(floor_rows), "episodes": len(floor_rows)}
    elif floor:
        metrics["floor"] = {
            "player": None,
            "why": "the opponent is the evaluated agent itself"
            if other is None
            else f"{env_id} has no random legal player (random_player)",
        }
    for key in ("win_rate", "draw_rate", "loss_rate", "success_rate"):
        if key in metrics.get("floor", {}):
            metrics[f"floor_{key}"] = metrics["floor"][key]
    if out_dir is not None:
        _write(Path(out_dir), metrics, rows, {**settings, "agent": agent_name})
        if floor_rows:
            _write(
                Path(out_dir) / "floor",
                {**metrics["floor"], "opponent": label, "held_out": held},
                floor_rows,
                {**settings, "agent": "random legal moves"},
            )
    return metrics


def _games_note(distinct: int, n: int, temperature: float, seeded: bool = True, model_opponent: bool = False) -> str:
    """What the evaluation's games are: sampled (from each game's own seed where the agent takes seeds; a model
    opponent still greedy) or greedy, and how many of them differ (the intervals count every game as one draw, which
    repeated games are not)."""
    how = (
        "greedy"
        if temperature == 0
        else (
            f"sampled at temperature {temperature:g}, each game its own seed"
            if seeded
            else f"sampled at temperature {temperature:g} without seeds "
            "(the agent takes none: another evaluation plays other games)"
        )
    )
    how += "; the opponent (a model) greedy" if temperature > 0 and model_opponent else ""
    if distinct >= n:
        return f"games: {how}; all {n} differ"
    fix = (
        " (greedy play against a fixed player from one starting state repeats a game: sample them with a "
        "temperature — multi_agent.eval_temperature, turnrl eval --temperature)"
        if temperature == 0
        else ""
    )
    return f"games: {how}; only {distinct} of {n} differ, and the intervals count every repeat as a new game{fix}"


FLOOR_SEED = 0x5EED  # the random legal player's stream (the same floor whatever the run's seed)


def _states_held_out(env: Any) -> tuple[list[str], bool]:
    """Notes on the starting states an evaluation plays, and whether they are held out: the game's held-out split
    and, where the game says so (``held_out_states()``), ones no training game can reach."""
    split, held = getattr(env, "split", None), getattr(env, "held_out_split", None)
    if held is None or split != held:
        return [f"starting states: split {split!r}, not the game's held-out split ({held!r})"], False
    ask = getattr(env, "held_out_states", None)
    if not callable(ask):
        return [f"starting states: the {split!r} split (held out as the game declares it)"], True
    found = ask()
    if found.ok:
        return [f"starting states: none reachable from training ({found.rule})"], True
    if found.claimed:
        return [f"starting states: NOT held out, training reaches {len(found.reached)} of them ({found.rule})"], False
    return [f"starting states: not held out ({found.rule})"], False


@dataclass(frozen=True)
class Games:
    """The games an evaluation plays, whoever plays them (the agent, or the floor in its seats): the game and its
    options (the held-out split's), its seats, how many starting states it has and their keys, the evaluated seat
    (None: every seat in turn), how many games from which seed, and the scores the game records beside its outcome."""

    env_id: str
    kwargs: dict[str, Any]
    seats: list[str]
    states: int
    keys: list[str]
    seat: str | None
    episodes: int
    seed: int
    scores: Sequence[str] = ()


def _play(
    plan: Games,
    params: SamplingParams,
    max_context: int,
    batch_size: int,
    team: Mapping[str, Agent],
    other: Agent | None,
) -> list[dict[str, Any]]:
    """The rows of ``plan.episodes`` games: ``team``'s seat against ``other`` in the others (``None``: every seat
    its own policy), sampled with ``params`` within ``max_context`` tokens, ``batch_size`` at once. Each row: the
    starting state's ``index``, ``task_id`` and ``item`` (its key and the seat: what two runs' evaluations pair on),
    the seat, outcome, ``correct`` (won or solved), reward, moves, invalid moves, error, ``game`` (its fingerprint,
    :func:`game_print`); and where the game names ``scores``, each of them as the game recorded it (any seat's infos
    at the end: a cooperative game scores the episode, not the seat), false where the game ended before recording
    it (an error, a cut)."""
    env_id, kwargs, seats, states, keys = plan.env_id, plan.kwargs, plan.seats, plan.states, plan.keys
    seat, episodes, seed, scores = plan.seat, plan.episodes, plan.seed, plan.scores
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
            frozen = (
                {}
                if other is None or any(other is a for a in team.values())
                else {  # the opponent: greedy,
                    f"agent{id(other)}": params.model_copy(update={"temperature": 0.0})
                }
            )  # whatever the agent samples at
            rollout = MultiAgentRollout(policies, params, max_context=max_context, seats=seat_map, policy_params=frozen)
            envs = [make_multi_agent(env_id, **kwargs) for _ in games]
            try:
                seeded = not counts_starting_states(envs[0])  # played on seeds: the held-out range (split_seed),
                where = "validation" if getattr(envs[0], "split", None) == "validation" else "test"  # or validation's
                trajs = rollout.run(
                    envs,
                    seeds=[split_seed(where, i) if seeded else seed + i for i in games],
                    options=[{"index": i} for i in games],
                    group_ids=[str(i) for i in games],
                    sample_seeds=[sample_stream(seed, getattr(envs[0], "split", None), i) for i in games],
                )
            finally:
                close_all(envs)
            scored: dict[int, dict[str, Any]] = {}  # each game's scores, from every seat's view
            for i, t in zip([g for g in games for _ in seats], trajs):
                scored.setdefault(i, {}).update(t.metadata.get("scores") or {})
            for i, t in zip([g for g in games for _ in seats], trajs):
                if t.metadata["seat"] == mine:
                    outcome = t.metadata["outcome"] or ("truncated" if t.truncated else "error" if t.error else "none")
                    rows.append(
                        {
                            "index": i,
                            "task_id": str(i),
                            "item": f"{keys[i % len(keys)]}@{mine}",
                            "seat": mine,
                            "outcome": outcome,
                            "correct": outcome in ("win", "solved"),
                            "reward": t.metadata["seat_reward"],
                            "moves": len(t.turns),
                            "invalid_moves": t.metadata["invalid_moves"],
                            "error": t.error,
                            "game": game_print(t),
                        }
                    )
                    if scores:
                        rows[-1]["scores"] = {k: bool(scored[i].get(k, False)) for k in scores}
    return rows


def sample_stream(seed: int, split: str | None, index: int) -> int:
    """The random stream of game ``index`` of an evaluation on ``split`` by a run of ``seed``: the same at every
    evaluation of the run (two evaluations pair game by game), another on another split (validation games are not
    the test games replayed, even where every game starts from one state) and for another seed."""
    digest = hashlib.sha256(f"{seed}/{split}/{index}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def game_print(trajectory: Any) -> str:
    """A short fingerprint of one seat's game: its whole sequence of tokens (what it was told and what it played),
    or, where the seat never moved (the rollout kept no tokens), what it was told and how the game ended. Two rows
    with one fingerprint are the same game from the same seat — greedy play against a fixed player from one starting
    state repeats itself, and ``distinct_games`` counts what an evaluation really played."""
    text = (
        json.dumps(trajectory.token_ids)
        if trajectory.token_ids is not None
        # (a seat that never moved:
        else json.dumps(
            [
                [m.content for m in trajectory.prompt],
                trajectory.error,
                trajectory.metadata.get("outcome"),
                [[m.content for m in (t.observation or [])] + [t.action.content] for t in trajectory.turns],
            ],
            default=str,
        )
    )  # what it was told, and how its game ended)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _write(out: Path, metrics: dict[str, Any], rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """``metrics.json``, ``items.jsonl`` and ``run.json`` (the protocol ``turnrl compare`` checks) in ``out``."""
    from turnrl.utils import code_version

    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "run.json").write_text(json.dumps({"settings": settings, "code": code_version()}, indent=2, default=str))


def run_not_held_out(agent: str, env_id: str, opponent: str) -> tuple[bool, str | None]:
    """Whether ``opponent`` could be checked against the training of ``agent`` — a training run (``run:OUT_DIR``) of
    ``env_id`` whose config reads — and why it is not held out from it (the run trained against it,
    :meth:`MultiAgentConfig.not_held_out`): ``(True, None)`` held out, ``(True, why)`` not, ``(False, None)``
    unknown (another agent spec, another game, a config that does not read)."""
    import yaml

    from turnrl.rl.config.multi_agent import MultiAgentConfig

    kind, _, rest = agent.partition(":")
    folder = Path(rest.partition("#")[0])
    if kind != "run" or not (folder / "config.yaml").is_file():
        return False, None
    try:
        cfg = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        if (cfg.get("env") or {}).get("id") != env_id:
            return False, None
        ma = MultiAgentConfig(
            **{**(cfg.get("multi_agent") or {}), "eval_opponent": opponent, "eval_not_held_out": False}
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return False, None
    why = ma.not_held_out(env_id, cfg.get("model"), str(folder))
    return True, why.replace("multi_agent.eval_opponent", "--opponent") if why else None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The share of every outcome (wins, draws and losses always; a cooperative game's own words, such as
    ``solved``, too) and of every score the rows hold (``first_correct_rate``: the share of rows whose score
    ``first_correct`` is true) with its 95 % Wilson interval, and per episode: reward, moves, invalid moves."""
    n = len(rows)
    out: dict[str, Any] = {}
    for outcome in [*OUTCOMES, *sorted({r["outcome"] for r in rows} - set(OUTCOMES))]:
        k = sum(r["outcome"] == outcome for r in rows)
        lo, hi = wilson(k, n)
        out[f"{outcome}_rate"], out[f"{outcome}_ci95"] = (k / n if n else 0.0), [round(lo, 4), round(hi, 4)]
    for name in sorted({k for r in rows for k in r.get("scores") or {}}):
        k = sum(bool((r.get("scores") or {}).get(name)) for r in rows)
        out[f"{name}_rate"], out[f"{name}_ci95"] = k / n, [round(x, 4) for x in wilson(k, n)]
    won = sum(r["outcome"] in ("win", "solved") for r in rows)
    out["success_rate"], out["success_ci95"] = (won / n if n else 0.0), [round(x, 4) for x in wilson(won, n)]
    for key in ("reward", "moves", "invalid_moves"):
        out[f"{key}_mean"] = sum(r[key] for r in rows) / n if n else 0.0
    out["errors"] = sum(r["error"] is not None for r in rows)
    out["distinct_games"] = len({(r["seat"], r.get("game") or r["index"]) for r in rows})
    return out
