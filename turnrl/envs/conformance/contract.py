"""The conformance harness: ``check_environment(env)`` makes the environment contract executable.

It runs Gymnasium's ``check_env``; calls every tool with arguments generated from its JSON schema (and with wrong
types, a missing and an extra argument); checks that the verifier returns a ``Verdict``; then plays scripted
episodes — a random agent, an always-wrong agent and, where the environment can give one, an oracle agent, which
must use the tools when the environment has any — and reports every failure with a message naming the likely
cause. It never stops at the first failure. Failures are what breaks an episode or a run (``turnrl envs check`` exits
1); warnings are what the model or the user can live with but should know (no held-out split; a tool that answers a
schema-valid but meaningless argument with a plain ``ValueError``, which the model reads as the error's text).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

from turnrl.envs.conformance.report import CheckReport, EpisodeLog
from turnrl.envs.conformance.tool_checks import check_tools, check_verifier
from turnrl.envs.core import ResetNeeded, TextEnv

__all__ = ["CheckReport", "EpisodeLog", "check_environment"]

Agent = Callable[[TextEnv], str]


def _random_agent(env: TextEnv) -> str:
    return env.action_space.sample()


def _wrong_agent(env: TextEnv) -> str:
    return env.wrong_action()


def _oracle_agent(env: TextEnv) -> str:
    action = env.oracle_action()
    if action is None:
        raise LookupError("no oracle action")
    return action


def _check_step_values(report: CheckReport, where: str, env: TextEnv, result: Any) -> None:
    if not (isinstance(result, tuple) and len(result) == 5):
        report.failures.append(f"{where}: step must return (obs, reward, terminated, truncated, info), got {result!r}")
        return
    obs, reward, terminated, truncated, info = result
    if obs not in env.observation_space:
        report.failures.append(f"{where}: observation {obs!r} is not in the observation space (a tuple of Message)")
    if not isinstance(reward, float) or not math.isfinite(reward):
        report.failures.append(f"{where}: reward must be a finite float, got {reward!r}")
    if type(terminated) is not bool or type(truncated) is not bool:
        report.failures.append(f"{where}: terminated/truncated must be bool, got {terminated!r}/{truncated!r}")
    if not isinstance(info, dict):
        report.failures.append(f"{where}: info must be a dict, got {type(info).__name__}")
        return
    try:
        json.dumps(info)
    except (TypeError, ValueError) as e:
        report.failures.append(f"{where}: info is not JSON-serializable ({e}); trajectories must store it")


def run_episode(env: TextEnv, agent: Agent, name: str, seed: int, report: CheckReport, max_steps: int) -> EpisodeLog:
    """Play one episode with ``agent``, recording failures of the step contract in ``report``."""
    log = EpisodeLog(agent=name)
    try:
        return _play(env, agent, name, seed, report, max_steps, log)
    except Exception as e:  # a crash is a failure to report, not the end of the check
        report.failures.append(f"{name} agent, step {log.steps}: raised {type(e).__name__}: {e}")
        return log


def _play(
    env: TextEnv, agent: Agent, name: str, seed: int, report: CheckReport, max_steps: int, log: EpisodeLog
) -> EpisodeLog:
    env.reset(seed=seed)
    for _ in range(max_steps):
        result = env.step(agent(env))
        _check_step_values(report, f"{name} agent, step {log.steps}", env, result)
        _, reward, terminated, truncated, info = result
        log.steps += 1
        log.rewards.append(float(reward))
        log.correct.append(info.get("correct") if isinstance(info, dict) else None)
        calls = (info.get("tool_calls") or []) if isinstance(info, dict) else []
        log.tool_calls += len(calls)
        if calls and info.get("error"):
            log.tool_errors.append(f"step {log.steps - 1}: {info['error']}")
        if terminated or truncated:
            log.terminated, log.truncated = bool(terminated), bool(truncated)
            break
    else:
        report.failures.append(f"{name} agent: the episode did not end within {max_steps} steps")
        return log
    limit = getattr(env, "max_turns", None)
    if limit is not None and log.steps > limit:
        report.failures.append(f"{name} agent: {log.steps} steps exceed max_turns={limit}")
    try:
        env.step("one more turn")
        report.failures.append(f"{name} agent: step() after the end of the episode did not raise ResetNeeded")
    except ResetNeeded:
        pass
    return log


def _gymnasium_check(env: TextEnv, report: CheckReport) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_env(env, skip_render_check=True, skip_close_check=True)
        except Exception as e:  # report, keep checking
            report.failures.append(f"gymnasium check_env: {type(e).__name__}: {e}")
    for w in caught:
        if issubclass(w.category, UserWarning):
            report.failures.append(f"gymnasium check_env warned: {w.message}")


def _check_reset(env: TextEnv, seed: int, report: CheckReport) -> None:
    """Reset is deterministic under a seed, opens with the user's prompt, and step() rejects non-text."""
    obs1, _ = env.reset(seed=seed)
    obs2, _ = env.reset(seed=seed)
    if obs1 != obs2:
        report.failures.append("reset(seed=s) twice gave different observations: seed the env's np_random only")
    if not obs1 or obs1[-1].role != "user":
        report.failures.append("reset must return the opening messages, ending with the user's prompt")
    try:
        env.reset(seed=seed)
        env.step(123)  # type: ignore[arg-type]  # the check: a non-string action is refused
        report.failures.append("step(123) did not raise TypeError for a non-string action")
    except TypeError:
        pass


def check_environment(
    env: gym.Env, *, seed: int = 0, episodes: int = 2, max_steps: int = 64, call_tools: bool = True
) -> CheckReport:
    """Check that ``env`` honours the turnrl environment contract; return a report (never raises for failures).

    Runs Gymnasium's ``check_env``; checks reset determinism and type errors; calls each tool with generated
    arguments (``call_tools=False`` skips this for tools with side effects) and checks the verifier's return type;
    then plays ``episodes`` episodes each with a random agent and an always-wrong agent (no correct answer, total
    reward ≤ 0), and, if ``env.oracle_action()`` gives one, with the oracle agent (the last answer correct, total
    reward > 0, its tool calls succeed, and at least one tool call when the env has tools).
    """
    base = env.unwrapped
    name = base.spec.id if base.spec is not None else type(base).__name__
    report = CheckReport(env_name=name)
    if not isinstance(base, TextEnv):
        report.failures.append(f"{type(base).__name__} does not derive from turnrl.envs.TextEnv")
        return report
    if base.held_out_split is None:
        report.warnings.append(
            "no held-out split (held_out_split is None): `turnrl eval` and a training run's held-out evaluation then "
            "score tasks the policy may have trained on; give __init__ a `split` argument that picks the tasks and set "
            '`self.split, self.held_out_split = split, "test"` (as turnrl/envs/builtin/arithmetic.py does)'
        )
    _gymnasium_check(base, report)
    for check in (_check_reset, *((check_tools,) if call_tools else ()), check_verifier):
        try:
            check(base, seed, report)
        except Exception as e:
            report.failures.append(f"{check.__name__.strip('_')} raised {type(e).__name__}: {e}")
    for i in range(episodes):
        report.episodes.append(run_episode(base, _random_agent, "random", seed + i, report, max_steps))
        wrong = run_episode(base, _wrong_agent, "wrong", seed + i, report, max_steps)
        report.episodes.append(wrong)
        if any(c is True for c in wrong.correct) or wrong.total_reward > 0:
            report.failures.append(
                f"wrong agent (episode {i}) was rewarded: correct={wrong.correct}, rewards={wrong.rewards}"
            )
    try:
        base.reset(seed=seed)
        has_oracle = base.oracle_action() is not None
    except Exception as e:
        report.failures.append(f"reset/oracle_action raised {type(e).__name__}: {e}")
        return report
    if not has_oracle:
        report.notes.append("no oracle agent: oracle_action() returned None")
        return report
    _check_oracle(base, seed, episodes, max_steps, report)
    return report


def _check_oracle(env: TextEnv, seed: int, episodes: int, max_steps: int, report: CheckReport) -> None:
    oracles = [run_episode(env, _oracle_agent, "oracle", seed + i, report, max_steps) for i in range(episodes)]
    report.episodes += oracles
    for i, oracle in enumerate(oracles):
        answered = [c for c in oracle.correct if c is not None]
        if not answered or answered[-1] is not True or oracle.total_reward <= 0:
            report.failures.append(
                f"oracle agent (episode {i}) did not succeed: correct={oracle.correct}, rewards={oracle.rewards}"
            )
        for error in oracle.tool_errors:
            report.failures.append(f"oracle agent (episode {i}), {error} — the oracle's own tool call failed")
    names = [getattr(t, "name", repr(t)) for t in env.tools]
    if names and not any(o.tool_calls for o in oracles):
        report.failures.append(
            f"the oracle never called a tool although the env offers {', '.join(names)}: make oracle_action() use "
            "them (in a ToolEnv, override oracle_calls(task) to return the ToolCalls that solve the task), so that "
            "this check sees the tools work inside an episode"
        )
