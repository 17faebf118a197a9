"""The base class of every turnrl environment: a Gymnasium ``Env`` whose actions are text.

The docstrings here are the specification (docs/concepts.md §1). Its namesake for games of several agents is
:mod:`turnrl.envs.multiagent.core` (``MultiAgentTextEnv``, a PettingZoo ``AECEnv`` whose observations are the same
messages): the same concept — an environment whose actions are text — with one agent here, several there.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnrl.envs.spaces import MessagesSpace, TextSpace
from turnrl.tools.base import Tool
from turnrl.types import Message, Trajectory

Obs = tuple[Message, ...]
StepResult = tuple[Obs, float, bool, bool, dict[str, Any]]


class ResetNeeded(RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended (terminated or truncated)."""


class Task(BaseModel):
    """One problem an environment can pose: an id, the prompt text, the reference answer, and metadata.

    A task given without an ``id`` gets one made from its prompt and answer (``task-`` and 12 hex digits), so the
    same task always has the same id.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    prompt: str
    answer: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _content_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("id") is None and isinstance(data.get("prompt"), str):
            digest = hashlib.sha256(f"{data['prompt']}\0{data.get('answer', '')}".encode()).hexdigest()[:12]
            data = {**data, "id": f"task-{digest}"}
        return data


@runtime_checkable
class TaskSource(Protocol):
    """A finite, indexable collection of tasks (a list of :class:`Task` is one)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Task: ...


class TextEnv(gym.Env[Obs, str]):
    """A multi-turn text environment.

    Call order: ``reset`` → ``step`` … until ``terminated or truncated`` → ``reset`` again. Stepping before the
    first reset or after the end raises :class:`ResetNeeded`; a non-string action raises ``TypeError``.

    ``reset(seed=None, options=None) -> (obs, info)``
        Starts an episode. ``obs`` is a tuple of the opening messages (system and/or user). With ``seed`` the
        episode is reproducible. Subclasses define which ``options`` they accept (e.g. ``{"index": i}`` to pick
        a task, ``{"task": Task | dict}`` to pose a given one); unknown options raise ``ValueError``.

    ``step(action: str) -> (obs, reward, terminated, truncated, info)``
        ``action`` is the assistant message's text. ``obs`` is the tuple of *new* messages the environment adds
        (tool results, feedback, the next instruction); it may be empty on the last step. ``reward`` is this
        turn's reward (a finite float). ``terminated`` means the task is finished (an answer was graded and
        nothing more is expected); ``truncated`` means an outside limit (``max_turns``) cut the episode before
        it finished. ``info`` is a new JSON-serializable dict each call with at least ``turn`` (0-based index
        of the step), and where they apply ``correct`` (bool, on graded turns), ``tool_calls`` (the parsed
        calls), ``error`` (what went wrong with the action, for the log) and ``role`` (who acted: "policy"
        unless the environment defines roles). An environment that rewrites the conversation itself (one that
        manages its own context) sets ``history`` true: ``obs`` is then the whole conversation the next turn sees,
        opening messages included, and the caller continues from it alone (the rollout starts a new segment).

    ``async astep(action)``
        Same contract as ``step``; environments that wait on I/O override ``_astep`` so the rollout can step
        many at once. The default runs ``step`` in a worker thread.

    Subclasses implement ``_reset(options) -> (obs, info)`` and ``_step(action) -> StepResult`` (and optionally
    ``async _astep``), and never handle ordering, types or the turn cap themselves: this class does. The
    conversation history belongs to the caller; the environment keeps only what it needs to grade.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012 — gymnasium's convention

    #: The data split this instance poses (``"train"``, ``"test"``, ``"dev"`` …), or None where the environment has
    #: no notion of one. Subclasses with splits set it in ``__init__``.
    split: str | None = None
    #: The split that is held out from training (``turnrl eval`` and the trainer's held-out evaluation use it unless
    #: told otherwise), or None where there is none.
    held_out_split: str | None = None
    #: A split for choices — a step, a learning rate, a recipe — distinct from :attr:`held_out_split`, so that choosing
    #: never reads the test split (a training run's ``eval_every`` watches it with ``eval_split: validation``); None
    #: where the environment has none.
    validation_split: str | None = None
    #: The split a training run on this environment reads (``"train"``, HotPotQA's ``"dev-train"``), so that
    #: ``turnrl envs check`` compares it with the held-out and validation splits even when the environment was made
    #: with another; None where it has none (a test set).
    train_split: str | None = None
    #: Keyword arguments this environment is evaluated with unless the caller names them (e.g. PAG's
    #: ``{"mode": "eval"}``: revise whenever the verdict is not "correct"); each is also an attribute of the env.
    evaluation_options: dict[str, Any] = {}  # noqa: RUF012 — read-only
    #: Strings that end the agent's turn as soon as it writes one (the rollout adds them to its sampling
    #: parameters; the completion keeps the string), e.g. SWiRL's ``("</math_exp>", "</answer>")`` so that a turn
    #: is one tool call or one answer.
    stop: tuple[str, ...] = ()
    #: How :func:`turnrl.envs.fork.fork` copies an episode in progress: ``"copy"`` deep-copies this environment,
    #: sharing what is marked :class:`~turnrl.utils.Shared`; ``"replay"`` (opt-in, deterministic environments) makes a
    #: new one from its spec and replays the reset and the actions so far; None: it cannot fork (:attr:`fork_refusal`
    #: says why). An environment that knows how to copy itself defines a ``fork()`` method instead, which
    #: :func:`~turnrl.envs.fork.fork` calls.
    fork_mode: str | None = "copy"
    #: Why an environment with ``fork_mode = None`` cannot fork (said when a tree rollout is refused).
    fork_refusal: str = ""

    def __init__(self, *, max_turns: int = 1, render_mode: str | None = None) -> None:
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = MessagesSpace()
        self.action_space = TextSpace()
        self._turn = 0
        self._started = False
        self._finished = False
        self._transcript: list[tuple[str, str]] = []

    # ---- what subclasses provide ----

    @property
    def tools(self) -> Sequence[Tool]:
        """The tools the agent may call; their schemas go into the chat template."""
        return ()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style JSON schemas of :attr:`tools`."""
        return [t.schema() for t in self.tools]

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> StepResult:
        raise NotImplementedError

    async def _astep(self, action: str) -> StepResult:
        return await asyncio.to_thread(self._step, action)

    def summarize_episodes(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """Figures of this environment's own making over finished episodes (training steps and ``turnrl eval``
        report them beside the generic ones); none by default. Example: the self-verification environments report
        Acc@turn1, Acc@final and the verifier's accuracy."""
        return {}

    def report_lines(self, metrics: dict[str, Any]) -> list[str]:
        """Markdown lines that head an evaluation report (``turnrl eval``'s ``report.md``), read from the
        evaluation's ``metrics`` (its generic figures and those :meth:`summarize_episodes` gave); none by default.
        Example: the self-verification environments lead with the verifier's balanced accuracy."""
        return []

    def unanswered_metrics(self) -> dict[str, float]:
        """The figures (``info["metrics"]``) of the current episode were it to end now without an answer, for an
        episode the caller cuts before the environment ends it (the rollout's context is full, or its turn limit
        came first): each finished episode then counts in the report's ``mean_*`` figures, with what it earned so far.
        None by default (``{}``). Example: the search environments give F1 0 and the supporting articles retrieved
        so far. Pure: it does not advance the episode."""
        return {}

    def task_at(self, index: int) -> Task | None:
        """The task ``reset(options={"index": index})`` poses (its prompt and reference answer), when the environment
        has such a list; None by default. A training run's generative judge (``reward:``) reads the question and the
        reference from here."""
        return None

    def oracle_action(self) -> str | None:
        """An action that solves the current state, when the environment knows one (tests, demos); else None."""
        return None

    def wrong_action(self) -> str:
        """An action that is certainly not a right answer (used by the conformance harness)."""
        return "I don't know."

    @property
    def unwrapped(self) -> TextEnv:
        """This environment (Gymnasium's ``unwrapped``: a wrapper's innermost environment), typed as a TextEnv."""
        return self

    @property
    def turn(self) -> int:
        """How many steps the current episode has taken."""
        return self._turn

    # ---- the Gymnasium API ----

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """Start an episode (see the class docstring)."""
        if self.fork_mode == "replay":  # what a replay needs: the seed, or the random state it continues from
            state = None if seed is not None else copy.deepcopy(self.np_random.bit_generator.state)
            # (seed, random state, options, the actions since)
            self._fork_record: tuple[int | None, Any, dict[str, Any] | None, list[str]] = (
                seed,
                state,
                copy.deepcopy(options),
                [],
            )
        super().reset(seed=seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        obs, info = self._reset(dict(options or {}))
        self._turn = 0
        self._started, self._finished = True, False
        self._transcript = [(m.role, m.content) for m in obs]
        return tuple(obs), info

    def _begin_step(self, action: Any) -> None:
        if not isinstance(action, str):
            raise TypeError(f"the action must be the assistant message as a str, got {type(action).__name__}")
        if not self._started:
            raise ResetNeeded("call reset() before step()")
        if self._finished:
            raise ResetNeeded("the episode has ended (terminated or truncated); call reset() to start a new one")

    def _end_step(self, action: str, result: StepResult) -> StepResult:
        obs, reward, terminated, truncated, info = result
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"{type(self).__name__} produced a non-finite reward {reward}")
        info = dict(info)
        info.setdefault("turn", self._turn)
        self._turn += 1
        terminated, truncated = bool(terminated), bool(truncated)
        if not (terminated or truncated) and self._turn >= self.max_turns:
            truncated = True
        self._finished = terminated or truncated
        if self.fork_mode == "replay":
            self._fork_record[3].append(action)
        self._transcript.append(("assistant", action))
        self._transcript.extend((m.role, m.content) for m in obs)
        return tuple(obs), reward, terminated, truncated, info

    def step(self, action: str) -> StepResult:
        """Take one agent turn (see the class docstring)."""
        self._begin_step(action)
        return self._end_step(action, self._step(action))

    async def astep(self, action: str) -> StepResult:
        """Async :meth:`step` for rollouts that step many environments concurrently."""
        self._begin_step(action)
        return self._end_step(action, await self._astep(action))

    def render(self) -> str | None:
        """With ``render_mode="ansi"``, the episode so far as text."""
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{role}] {content}" for role, content in self._transcript)


def pick_index(env: gym.Env, n: int, options: dict[str, Any]) -> int:
    """The task index for ``reset``: ``options["index"]`` if given (validated), else drawn from ``env.np_random``."""
    if n <= 0:
        raise ValueError(f"{type(env).__name__} has no tasks")
    if "index" in options:
        index = options["index"]
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
            raise ValueError(f"options['index'] must be an integer in [0, {n}), got {index!r}")
        return index
    return int(env.np_random.integers(n))


def close_all(envs: Sequence[Any]) -> None:
    """Close every environment of ``envs`` (None entries are skipped), each best effort: one that fails to close
    does not keep the others open. Whoever makes an environment closes it — a ``remote:`` environment's session on
    its server ends only then."""
    for env in envs:
        if env is None:
            continue
        try:
            env.close()
        except Exception:  # closing is best effort
            pass
