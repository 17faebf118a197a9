"""Conformance checks of a multi-agent text environment (``turnrl envs check ID`` for a multi-agent id): the
agent–environment cycle as PettingZoo defines it, with text actions and messages as observations, and the turnrl
rules on top — bad input is an answer, not a crash; every game ends; starting states are reproducible.

PettingZoo's own ``api_test`` assumes array observations, so the cycle's rules are checked here: agents named and
spaced; ``reset`` fills ``agents``, ``rewards``, ``terminations``, ``truncations`` and ``infos`` for every agent and
selects one of them; ``observe`` gives a tuple of messages; ``last`` matches the dicts; rewards are finite numbers;
a finished agent takes its dead step (``None``) and leaves ``agents``; the same seed and index give the same first
observations. A game that says whether its held-out starting states are held out (``held_out_states()``, as
tic-tac-toe does) is asked too (:func:`check_held_out_states`): a held-out state a training game can reach fails.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnrl.envs.conformance.report import CheckReport, EpisodeLog
from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.types import Message

#: replies a policy may send: empty, markup, an absurdly long one, unicode
BAD_REPLIES = ("", "<tool_call>{not json", "x" * 20_000, "🙂 ünïcode ∑", "None", "[" * 50)


def _observations(env: MultiAgentTextEnv) -> dict[str, tuple[Message, ...]]:
    return {agent: env.observe(agent) for agent in env.agents}


def check_multi_agent_environment(
    env: MultiAgentTextEnv, *, episodes: int = 3, max_moves: int = 400, seed: int = 0
) -> CheckReport:
    """Play ``episodes`` games with random and malformed replies and check the rules above.

    Args:
        env: the environment (it is reset and played here).
        episodes: games to play; the first replies with malformed text only, the others mix random text and
            malformed text.
        max_moves: moves after which a game that has not ended is a failure.
        seed: seeds the resets and the random replies.
    """
    report = CheckReport(type(env).__name__)
    if not isinstance(env, MultiAgentTextEnv):
        report.failures.append(f"{type(env).__name__} is not a MultiAgentTextEnv")
        return report
    agents = list(env.possible_agents)
    if not agents or len(set(agents)) != len(agents) or not all(isinstance(a, str) for a in agents):
        report.failures.append(f"possible_agents must be distinct names (str), got {agents!r}")
        return report
    try:
        env.reset(seed=seed, options={"index": 0})
        first = _observations(env)
        env.reset(seed=seed, options={"index": 0})
        if _observations(env) != first:
            report.failures.append("reset(seed, options={'index': 0}) twice gave different first observations")
    except Exception as e:  # the report says what broke
        report.failures.append(f"reset raised {type(e).__name__}: {e}")
        return report
    rng = np.random.default_rng(seed)
    for n in range(episodes):
        log = EpisodeLog(agent="malformed" if n == 0 else "random")
        report.episodes.append(log)
        try:
            _play(env, rng, log, report, malformed_only=n == 0, max_moves=max_moves, seed=seed + n, index=n)
        except Exception as e:
            report.failures.append(f"episode {n}: the environment raised {type(e).__name__}: {e}")
    check_held_out_states(env, report)
    return report


def check_held_out_states(env: Any, report: CheckReport) -> None:
    """Add to ``report`` what ``env.held_out_states()`` says (a game without it: nothing): a failure where the game
    claims held-out starting states and a training game can reach some of them (symmetric positions count as one);
    a note with its rule where they are held out, or where the game holds none out (held out by the opponent only)."""
    ask = getattr(env, "held_out_states", None)
    if not callable(ask):
        return
    try:
        states = ask()
    except Exception as e:  # the report says what broke
        report.failures.append(f"held_out_states() raised {type(e).__name__}: {e}")
        return
    reached = list(states.reached)
    if states.claimed and reached:
        report.failures.append(
            f"{len(reached)} held-out starting state(s) can be reached by a training game, e.g. "
            f"{', '.join(map(repr, reached[:3]))} ({states.rule})"
        )
    elif states.claimed:
        report.notes.append(f"held-out starting states: none reachable from training ({states.rule})")
    else:
        report.notes.append(f"no held-out starting states: {states.rule}")


def _play(
    env: MultiAgentTextEnv,
    rng: np.random.Generator,
    log: EpisodeLog,
    report: CheckReport,
    *,
    malformed_only: bool,
    max_moves: int,
    seed: int,
    index: int,
) -> None:
    env.reset(seed=seed, options={"index": index})
    problems = _cycle_problems(env)
    for problem in problems:
        report.failures.append(f"after reset: {problem}")
    seen_done: set[str] = set()
    totals = dict.fromkeys(env.possible_agents, 0.0)
    ends: dict[str, str] = {}
    for agent in env.agent_iter(max_iter=max_moves * 2 + len(env.possible_agents)):
        observation, reward, termination, truncation, info = env.last()
        if not isinstance(observation, tuple) or not all(isinstance(m, Message) for m in observation):
            report.failures.append(f"observe({agent!r}) gave {type(observation).__name__}, not a tuple of Message")
        if not isinstance(reward, (int, float)) or not math.isfinite(reward):
            report.failures.append(f"{agent}'s reward is {reward!r}, not a finite number")
        log.rewards.append(float(reward) if isinstance(reward, (int, float)) else math.nan)
        totals[agent] += float(reward) if isinstance(reward, (int, float)) else 0.0
        if termination or truncation:
            seen_done.add(agent)
            ends[agent] = (
                f"{info.get('outcome', 'truncated' if truncation else 'ended')}, reward {totals[agent]:g}, "
                f"{info.get('invalid_moves', 0)} invalid"
            )
            log.terminated, log.truncated = log.terminated or termination, log.truncated or truncation
            env.step(None)
            if agent in env.agents:
                report.failures.append(f"{agent} stayed in agents after its dead step")
            continue
        if log.steps >= max_moves:
            report.failures.append(f"the game did not end within {max_moves} moves")
            return
        reply = (
            BAD_REPLIES[int(rng.integers(len(BAD_REPLIES)))]
            if malformed_only or rng.random() < 0.3
            else env.action_space(agent).sample()
        )
        env.step(reply)
        log.steps += 1
    if env.agents:
        report.failures.append(
            f"the game did not end within {max_moves} moves (agents still in play: {', '.join(env.agents)})"
        )
    report.notes.append(f"episode {index} ({log.agent} replies): " + "; ".join(f"{a}: {e}" for a, e in ends.items()))
    missing = set(env.possible_agents) - seen_done
    if missing:
        report.warnings.append(f"agents never reported as finished: {', '.join(sorted(missing))}")


def _cycle_problems(env: MultiAgentTextEnv) -> list[str]:
    out = []
    if sorted(env.agents) != sorted(env.possible_agents):
        out.append(f"agents {env.agents} are not possible_agents {env.possible_agents}")
    for name in ("rewards", "_cumulative_rewards", "terminations", "truncations", "infos"):
        table: Any = getattr(env, name, None)
        if not isinstance(table, dict) or set(table) != set(env.agents):
            out.append(f"{name} does not hold every agent")
    if env.agent_selection not in env.agents:
        out.append(f"agent_selection {env.agent_selection!r} is not an agent")
    return out
