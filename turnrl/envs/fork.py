"""Forking an environment mid-episode: a second environment in the same state, so that an episode can branch at a
turn boundary (tree rollouts, docs/algorithms.md §14) — each branch continues from the shared history with its own
actions.

The contract (:func:`fork`): stepped with the same actions, the fork returns the same observations, rewards,
terminations, truncations and infos as the original would, and stepping one never changes the other.

How an environment forks is its class's :attr:`~turnrl.envs.core.TextEnv.fork_mode`:

``"copy"`` (the default)
    A deep copy of the environment (``copy.deepcopy``): every attribute is copied — the episode's state with it —
    except objects marked :class:`~turnrl.utils.Shared` (read-only task lists, search indexes, stateless tools,
    sandbox pools, parsers and verifiers), which the fork shares. An environment whose state cannot be copied (a
    lock, a socket, an open file) is refused with the attribute's name.
``"replay"`` (opt-in, for deterministic environments whose state cannot be copied)
    A new environment made from the same spec (``turnrl.make(id, **kwargs)``), reset with the same seed, random
    state and options, then stepped with the episode's actions so far. It costs the episode again (every tool call
    re-run) and is exact only if the environment is deterministic given those; it needs an environment made by
    ``turnrl.make`` (its ``spec``).
None
    Cannot fork; :attr:`~turnrl.envs.core.TextEnv.fork_refusal` says why (a remote environment's state lives on its
    server; a verifiers environment keeps it in the library's rollout).

Environments made of environments (a mixture) fork by copying, members and all; they list their members in a
``fork_parts()`` method, and :func:`fork_refusal` refuses the whole where a member cannot fork or forks only its own
way (by replay or its own ``fork()``), which a copy of the whole would bypass.

Tools: a tool whose calls change state somewhere (``Tool.stateful``: an MCP server's tools, a remote environment's)
cannot be copied with the environment; such an environment is refused unless it forks itself (defines a ``fork()``
method returning the copy, which :func:`fork` calls instead).
"""

from __future__ import annotations

import copy
from typing import Any


class ForkError(RuntimeError):
    """The environment cannot be forked (the message names the environment and why)."""


def fork_refusal(env: Any) -> str | None:
    """Why ``env`` cannot be forked, or None when it can (checked before a tree rollout starts, so that a run is
    refused before a model loads)."""
    base = getattr(env, "unwrapped", env)
    name = type(base).__name__
    spec = getattr(base, "spec", None)
    label = f"{name} ({spec.id})" if spec is not None and getattr(spec, "id", None) else name
    if _forks_itself(base):
        return None
    mode = getattr(base, "fork_mode", None)
    if mode is None:
        why = getattr(base, "fork_refusal", "") or "its class sets fork_mode = None"
        return f"{label} cannot be forked: {why}"
    if mode not in ("copy", "replay"):
        return f"{label} has fork_mode {mode!r}; expected 'copy', 'replay' or None"
    tools = _tools(base)
    closing = [t.name for t in tools if _closes_over(getattr(t, "fn", None), base)]
    closing += [k for k, v in vars(base).items() if _closes_over(v, base)]
    if closing and mode == "copy":
        return (
            f"{label} cannot be forked by copying: {', '.join(map(repr, closing))} close(s) over the environment "
            "(a function defined inside it that reads `self` keeps reading the original after a copy); make each "
            "a bound method (tool(self.method), verifier=self.method), which a copy rebinds"
        )
    stateful = [t.name for t in tools if getattr(t, "stateful", False)]
    if stateful and mode == "copy":
        return (
            f"{label} cannot be forked: its tool(s) {', '.join(stateful)} keep state outside the environment "
            "(an MCP or remote server), which a copy would share; give the environment its own fork()"
        )
    if mode == "replay" and (spec is None or not getattr(spec, "id", None)):
        return f"{label} forks by replay, which makes a new one from its spec; make it with turnrl.make(id, ...)"
    return _parts_refusal(base, label) if mode == "copy" else None


def _parts_refusal(base: Any, label: str) -> str | None:
    """Why an environment that copies its member environments (``fork_parts()``) cannot fork, or None."""
    parts = getattr(type(base), "fork_parts", None)
    for part in parts(base) if callable(parts) else ():
        inner = getattr(part, "unwrapped", part)
        why = fork_refusal(part)
        if why is not None:
            return f"{label} cannot be forked: its member {why}"
        own = "its own fork()" if _forks_itself(inner) else "replay" if inner.fork_mode == "replay" else None
        if own is not None:
            return (
                f"{label} forks by copying its members, and its member {type(inner).__name__} forks by {own}, "
                "which a copy would bypass"
            )
    return None


def _forks_itself(base: Any) -> bool:
    """Whether ``base``'s class defines its own ``fork()`` (looked up on the class: a mixture hands unknown
    attributes to its current member, whose ``fork`` would fork the member alone)."""
    return callable(getattr(type(base), "fork", None))


def fork(env: Any) -> Any:
    """A new environment in ``env``'s state, mid-episode or between episodes (see the module docstring); the
    caller closes it.

    Raises:
        ForkError: ``env`` cannot be forked (:func:`fork_refusal`), or its state cannot be copied.
    """
    base = getattr(env, "unwrapped", env)
    if _forks_itself(base):
        return base.fork()
    why = fork_refusal(env)
    if why is not None:
        raise ForkError(why)
    if base.fork_mode == "replay":
        return _replay(base)
    try:
        return copy.deepcopy(env)
    except (TypeError, AttributeError, copy.Error) as e:
        raise ForkError(
            f"{type(base).__name__} cannot be forked by copying its state: {_culprit(base) or e}. Mark "
            "objects that hold no episode state turnrl.utils.Shared, set fork_mode = 'replay' on a "
            "deterministic environment, or give it its own fork()"
        ) from e


def _tools(base: Any) -> list[Any]:
    try:
        return list(base.tools)
    except Exception:  # an environment whose tools need an episode: none to check
        return []


def _closes_over(fn: Any, obj: Any) -> bool:
    """Whether ``fn`` is a plain function whose closure holds ``obj`` (not a bound method: a copy rebinds those)."""
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            if cell.cell_contents is obj:
                return True
        except ValueError:  # an empty cell
            continue
    return False


def _culprit(base: Any) -> str | None:
    """The first attribute of ``base`` that cannot be deep-copied, named with its type."""
    for key, value in vars(base).items():
        try:
            copy.deepcopy(value)
        except Exception:  # looking for the one that fails
            return f"its attribute {key!r} holds a {type(value).__name__} that cannot be copied"
    return None


def _replay(base: Any) -> Any:
    """A new environment made from ``base``'s spec, reset and stepped as ``base`` was."""
    from turnrl.envs.registry import make

    record = getattr(base, "_fork_record", None)
    new = make(base.spec.id, **dict(base.spec.kwargs or {}))
    if record is None:  # never reset: a fresh one is the same
        return new
    seed, rng_state, options, actions = record
    if rng_state is not None:
        new.unwrapped.np_random.bit_generator.state = rng_state
    new.reset(seed=seed, options=copy.deepcopy(options))
    for action in actions:
        new.step(action)
    return new
