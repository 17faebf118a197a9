"""Issue 79, first piece: an environment forked mid-episode continues exactly as the original would, and the two
never touch each other (turnrl/envs/fork.py). Every built-in environment is played by a script; a fresh environment
playing the whole script is the reference both must match."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import turnrl
from turnrl.envs.core import TextEnv
from turnrl.envs.fork import ForkError, fork, fork_refusal
from turnrl.envs.registry import BUILTIN_ENVS
from turnrl.tools.base import tool

#: kwargs that make an environment multi-turn where it can be (a tool, or a retry after a wrong answer)
KWARGS: dict[str, dict[str, Any]] = {
    "turnrl/Arithmetic-v0": {"level": 2, "retry": True, "max_turns": 3},
    "turnrl/GSM8K-v0": {"split": "test", "calculator": True},
    "turnrl/MATH500-v0": {"retry": True, "max_turns": 3},
    "turnrl/HumanEval-v0": {"python": True, "max_turns": 3},
    "turnrl/Functions-v0": {"python": True, "max_turns": 3},
    "turnrl/HotPotQA-v0": {"split": "dev-test"},
    "turnrl/Mixture-v0": {
        "envs": [
            {"id": "turnrl/Arithmetic-v0", "name": "l1", "kwargs": {"level": 1, "retry": True}},
            {"id": "turnrl/Arithmetic-v0", "name": "l2", "kwargs": {"level": 2, "retry": True}},
        ]
    },
}
PY_CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(6 * 7)"}}</tool_call>'
FIRST = {"turnrl/Functions-v0": PY_CALL, "turnrl/HumanEval-v0": PY_CALL}  # a first turn that does not end the episode
SINGLE_TURN: set[str] = set()  # environments the script cannot play for two turns (forked right after the reset)
VOLATILE = ("duration", "time", "elapsed", "seconds")  # wall-clock figures in infos: not part of the state


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items() if not any(w in k for w in VOLATILE)}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "model_dump"):
        return _clean(x.model_dump())
    return x


def _step(env: Any, action: str) -> Any:
    return _clean(env.step(action))


def _script(env_id: str, kwargs: dict[str, Any], index: int, turns: int = 4) -> list[str]:
    """Actions for one episode: a wrong answer first where the environment lets one continue (retry), else its
    oracle's actions (a tool call first where it has tools), until the episode ends."""
    env = turnrl.make(env_id, **kwargs)
    try:
        env.reset(seed=0, options={"index": index})
        actions: list[str] = []
        for t in range(turns):
            base = env.unwrapped
            use_wrong = t == 0 and (not base.tools or getattr(base, "retry", False))
            action = (
                FIRST[env_id]
                if t == 0 and env_id in FIRST
                else base.wrong_action()
                if use_wrong
                else base.oracle_action() or base.wrong_action()
            )
            actions.append(action)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        return actions
    finally:
        env.close()


def _reference(env_id: str, kwargs: dict[str, Any], index: int, actions: list[str]) -> tuple[Any, list[Any]]:
    env = turnrl.make(env_id, **kwargs)
    try:
        start = _clean(env.reset(seed=0, options={"index": index}))
        return start, [_step(env, a) for a in actions]
    finally:
        env.close()


@pytest.mark.parametrize("env_id", sorted(BUILTIN_ENVS))
def test_every_built_in_environment_forks_mid_episode_and_continues_as_the_original(env_id, data_dir):
    kwargs = KWARGS.get(env_id, {})
    index = 1
    actions = _script(env_id, kwargs, index)
    start, expected = _reference(env_id, kwargs, index, actions)
    at = 1 if len(actions) >= 2 else 0  # fork after the first turn where the episode has a second
    assert at == 1 or env_id in SINGLE_TURN, f"{env_id}: the script plays one turn ({actions})"
    original = turnrl.make(env_id, **kwargs)
    assert fork_refusal(original) is None
    assert _clean(original.reset(seed=0, options={"index": index})) == start
    assert [_step(original, a) for a in actions[:at]] == expected[:at]
    first, second = fork(original), fork(original)
    try:
        assert first is not original and first.unwrapped is not original.unwrapped
        # the fork plays the rest first; the original then plays it as if nothing happened; then the second fork
        assert [_step(first, a) for a in actions[at:]] == expected[at:], f"{env_id}: the fork diverged"
        assert [_step(original, a) for a in actions[at:]] == expected[at:], f"{env_id}: the fork changed the original"
        assert [_step(second, a) for a in actions[at:]] == expected[at:], f"{env_id}: the original changed the fork"
        assert first.unwrapped.turn == original.unwrapped.turn == len(actions)
    finally:
        for env in (first, second, original):
            env.close()


def test_a_fork_is_an_episode_apart_after_both_reset(data_dir):
    env = turnrl.make("turnrl/Arithmetic-v0")
    env.reset(seed=3, options={"index": 5})
    other = fork(env)
    assert other.reset(seed=4, options={"index": 9})[0] != env.unwrapped._transcript[0]
    assert env.unwrapped.task.id != other.unwrapped.task.id  # resetting the fork left the original's task


def test_forks_share_read_only_data_and_copy_the_episode(data_dir):
    env = turnrl.make("turnrl/HotPotQA-v0", split="dev-test")
    env.reset(seed=0, options={"index": 0})
    env.step(env.unwrapped.oracle_action())
    other = fork(env).unwrapped
    base = env.unwrapped
    assert other.tasks is base.tasks and other._index is base._index  # shared: read-only
    assert other._queries == base._queries and other._queries is not base._queries  # copied: the episode
    assert other.toolbox.tools["search"].fn.__self__ is other  # the fork's tools act on the fork


class _Counter(TextEnv):
    """Counts its steps; rewards the count. Optionally holds a lock (not copyable) or a closure over itself."""

    def __init__(self, lock: bool = False, closure: bool = False, max_turns: int = 5) -> None:
        super().__init__(max_turns=max_turns)
        self.n = 0
        self.lock = threading.Lock() if lock else None
        if closure:
            env = self
            self.peek = lambda: env.n

    def _reset(self, options: dict[str, Any]) -> Any:
        self.n = int(options.get("start", self.np_random.integers(100)))
        return (), {}

    def _step(self, action: str) -> Any:
        self.n += len(action)
        return (), float(self.n), False, False, {}


class _ReplayCounter(_Counter):
    fork_mode = "replay"


def test_state_that_cannot_be_copied_is_refused_naming_the_attribute():
    env = _Counter(lock=True)
    env.reset(seed=0)
    with pytest.raises(ForkError, match="'lock' holds a lock"):
        fork(env)


def test_a_closure_over_the_environment_is_refused_before_a_copy_would_read_the_original():
    env = _Counter(closure=True)
    assert "'peek' close(s) over the environment" in fork_refusal(env)
    with pytest.raises(ForkError, match="bound method"):
        fork(env)


def test_fork_by_replay_remakes_the_environment_and_replays_its_actions():
    turnrl.register("tests/ReplayCounter-v0", _ReplayCounter, lock=True)
    env = turnrl.make("tests/ReplayCounter-v0")
    env.reset()  # no seed: the replay continues from the random state the reset drew from
    env.step("ab")
    env.step("abc")
    other = fork(env)
    assert other.unwrapped is not env.unwrapped and other.unwrapped.lock is not env.unwrapped.lock
    assert other.unwrapped.n == env.unwrapped.n and other.unwrapped.turn == 2
    assert other.step("x")[1] == env.step("x")[1]
    plain = _ReplayCounter()
    plain.reset(seed=0)
    assert "make it with turnrl.make" in fork_refusal(plain)


def test_environments_whose_state_lives_elsewhere_are_refused_with_the_reason():
    from turnrl.envs.adapters.verifiers_env import VerifiersEnv
    from turnrl.envs.remote.client import RemoteEnv

    for cls, why in ((RemoteEnv, "lives in a session on the server"), (VerifiersEnv, "the library's own rollout")):
        env = cls.__new__(cls)  # (no server or library needed to ask)
        assert why in fork_refusal(env)

    def remember(x: str) -> str:
        """Remember x.

        Args:
            x: what to remember.
        """
        return x

    class StatefulTool(TextEnv):
        @property
        def tools(self):
            t = tool(remember)
            t.stateful = True
            return [t]

    assert "its tool(s) remember keep state outside the environment" in fork_refusal(StatefulTool())


def test_a_mixture_is_refused_when_a_member_cannot_be_copied_with_it():
    """A mixture forks by copying its members: one that cannot fork, or that forks only by replay or by its own
    fork() (which a copy would bypass), makes the whole mixture refuse, naming the member."""
    from turnrl.envs.builtin.arithmetic import ArithmeticEnv

    class NoFork(ArithmeticEnv):
        fork_mode = None
        fork_refusal = "its state lives elsewhere"

    class Replayed(ArithmeticEnv):
        fork_mode = "replay"

    class OwnFork(ArithmeticEnv):
        def fork(self) -> OwnFork:
            raise AssertionError("a mixture's fork must not hand the member's own fork() the whole episode")

    arith = {"id": "turnrl/Arithmetic-v0", "name": "plain", "kwargs": {"level": 1}}
    for cls, why in (
        (NoFork, "its member NoFork (tests/MixtureMemberNoFork-v0) cannot be forked: its state lives elsewhere"),
        (Replayed, "its member Replayed forks by replay, which a copy would bypass"),
        (OwnFork, "its member OwnFork forks by its own fork(), which a copy would bypass"),
    ):
        env_id = f"tests/MixtureMember{cls.__name__}-v0"
        turnrl.register(env_id, cls)
        mixture = turnrl.make("turnrl/Mixture-v0", envs=[arith, {"id": env_id, "name": "odd"}])
        try:
            mixture.reset(seed=0, options={"index": 0})  # the current member is the plain one: the odd one refuses
            assert why in fork_refusal(mixture)
            with pytest.raises(ForkError, match="cannot be forked|which a copy would bypass"):
                fork(mixture)
        finally:
            mixture.close()
    plain = turnrl.make("turnrl/Mixture-v0", envs=[arith, {**arith, "name": "again"}])
    assert fork_refusal(plain) is None
    plain.close()
