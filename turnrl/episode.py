"""Play one episode at the text level with any policy function and record it as a :class:`Trajectory`.

This is the text-only loop for demos, tests and scripted agents. The token-exact rollout that training uses
(generation batched over many episodes, token ids and logprobs) lives in ``turnrl.rollout.engine``.

Its namesake :mod:`turnrl.rollout.episode` is the same concept a layer up: an episode in the token-exact rollout
that training uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from turnrl.envs.core import TextEnv
from turnrl.types import Message, Trajectory, Turn

Policy = Callable[[list[Message], TextEnv], str]


def play_episode(
    env: TextEnv,
    policy: Policy,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    max_steps: int = 1000,
) -> Trajectory:
    """Run ``policy`` in ``env`` from ``reset`` to the end of the episode.

    Args:
        env: the environment (unwrapped or wrapped).
        policy: ``(conversation_so_far, env) -> assistant text``.
        seed, options: passed to ``env.reset``.
        max_steps: a safety cap; the trajectory is marked truncated with an error if reached.

    Returns:
        A text-only Trajectory (no token fields). An exception raised by the env or the policy ends the episode;
        it is recorded in ``Trajectory.error`` and what was collected is kept.
    """
    base = cast(TextEnv, env.unwrapped)  # a wrapper's innermost environment: a TextEnv
    obs, info = env.reset(seed=seed, options=options)
    spec = base.spec
    traj = Trajectory(
        env_id=spec.id if spec is not None else type(base).__name__,
        task_id=info.get("task_id"),
        seed=seed,
        prompt=list(obs),
    )
    conversation = list(obs)
    role = info.get("next_role", info.get("role", "policy"))
    for index in range(max_steps):
        try:
            text = policy(list(conversation), base)
            obs, reward, terminated, truncated, step_info = env.step(text)
        except Exception as e:  # keep what was collected, record why it stopped
            traj.error = f"{type(e).__name__}: {e}"
            return traj
        action = Message(role="assistant", content=text)
        traj.turns.append(
            Turn(
                index=index,
                role=step_info.get("role", role),
                action=action,
                observation=list(obs),
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                info=step_info,
            )
        )
        # info["history"]: the environment rewrote the conversation, and obs is all of it (TextEnv.step)
        conversation = list(obs) if step_info.get("history") else [*conversation, action, *obs]
        role = step_info.get("next_role") or "policy"
        if terminated or truncated:
            traj.terminated, traj.truncated = terminated, truncated
            return traj
    traj.truncated = True
    traj.error = f"stopped after max_steps={max_steps} steps"
    return traj
