"""Environments written for Prime Intellect's ``verifiers`` library, played as turnrl environments:
``turnrl.make("verifiers:NAME", **args)`` is ``verifiers.load_environment(NAME, **args)`` (the installed environment
module ``NAME``, or a ``NAME.py`` in the config's or the current folder), in every command that takes an id.

A verifiers environment drives its own episodes: its ``run_rollout`` asks a chat-completions client for each model
turn, runs its own parser, tools, stop conditions and history, and scores the finished rollout with its rubric. This
adapter runs that ``run_rollout`` as its authors wrote it, on a background event loop, with an OpenAI client whose
HTTP transport hands each ``/chat/completions`` request to the turnrl episode instead of the network:

* ``reset`` starts the rollout of the task's row (the environment's dataset: ``split="train"``; its eval dataset:
  ``split="test"``, the held-out split); the first request's messages are the opening observation.
* ``step(action)`` answers that request with the policy's text — with ``tool_calls`` parsed from ``<tool_call>``
  blocks when the request offered tools, which are described in the system message as turnrl's tool environments
  describe theirs. The environment's next request's new messages (tool results, feedback) are the observation.
  When ``run_rollout`` returns, the rubric's reward is the step's reward and the episode ends (``correct``: the
  reward reached ``success_at``; the rubric's metrics are the step's ``metrics``).
* A request whose messages do not continue the conversation (the environment trimmed or rewrote its history) is
  the observation whole, with ``info["history"]`` (:class:`~turnrl.envs.core.TextEnv`): the rollout starts a new
  token-exact segment with it.

The tokens are turnrl's: the rollout renders the messages and samples the policy as for any environment, so the
trajectories are token-exact and training, evaluation, the viewer and every placement work unchanged. What the
environment asks of the model (its ``sampling_args``: temperature, max tokens) is the run's to decide, not the
environment's.

Bad input is an answer: a ``verifiers`` that is not installed, an environment that is not found, a rubric whose
reward function raises (an errored episode, counted; the run goes on), an environment that never asks the model or
stops answering (past ``turn_timeout``): each is one :class:`VerifiersEnvError` line.

Supported: verifiers' classic ``Environment`` API (verifiers 0.3; tested with ``SingleTurnEnv``, ``MultiTurnEnv``
and ``ToolEnv`` subclasses, which ``StatefulToolEnv`` and the rest build on), scored per rollout. Not supported:
rubrics with group-level reward functions (they score a whole group of rollouts at once; refused when loading). The
``v1`` task sets of verifiers 0.4, whose harnesses run an agent program of their own, load under the same prefix and
train through the gateway: :mod:`turnrl.envs.adapters.verifiers_v1`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import json
import math
import queue
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from turnrl.envs.adapters.verifiers_bridge import (
    Channel,
    background_loop,
    ended,
    last_user,
    run_rollout,
    set_result,
    text_of,
)
from turnrl.envs.adapters.verifiers_load import (
    INSTALL,
    VerifiersEnvError,
    has_eval_dataset,
    kind_of,
    load,
    rows_of,
    tool_schemas,
)
from turnrl.envs.core import Obs, StepResult, Task, TextEnv, pick_index
from turnrl.envs.registry import EnvAdapter
from turnrl.template_tools import describe_tools
from turnrl.tools.parsers import HermesParser
from turnrl.types import Message, ToolCall, message_key

VERIFIERS_PREFIX = "verifiers:"  # the prefix of ENV_ADAPTERS["verifiers"] (turnrl.envs.registry)
__all__ = ["INSTALL", "VERIFIERS_PREFIX", "VerifiersEnv", "VerifiersEnvError", "make_verifiers_env"]


#: verifiers' errors that the policy's reply causes (an empty reply, a tool call it cannot parse or run, a prompt grown
#: too long): the episode stands, scored by the rubric. Any other (a model or infrastructure error) fails it.
POLICY_ERRORS = frozenset(
    {"EmptyModelResponseError", "OverlongPromptError", "ToolError", "ToolParseError", "ToolCallError"}
)


@dataclass
class _Episode:
    """One episode's rollout: its channel, its future on the background loop, the request waiting for the policy's
    reply, and the messages that request held (then with the reply it got)."""

    channel: Channel
    future: concurrent.futures.Future[None]
    reply: asyncio.Future[dict[str, Any]] | None = None
    sent: list[dict[str, Any]] = field(default_factory=list)


class VerifiersEnv(TextEnv):
    """A verifiers environment as a turnrl environment (see the module docstring).

    Args:
        name: the environment to load (``verifiers.load_environment(name, **env_args)``).
        env_args: its ``load_environment`` arguments.
        split: ``"train"`` (the environment's dataset) or ``"test"`` (its eval dataset, the held-out split).
        success_at: the reward from which an episode counts as ``correct``.
        max_turns: the most model turns of an episode (default: the environment's own ``max_turns`` where it has
            one, else 32); the rollout's own stop conditions usually end it first.
        describe_tools: describe the environment's tools and the ``<tool_call>`` format in the system message (for
            chat templates that do not render tools; off when the template does).
        turn_timeout: seconds the environment may take to ask for the next turn or to finish (its tools and
            rubric included); past it the episode fails. Keep it under the run's ``rollout.env_timeout`` (60 s by
            default), which ends a step that takes longer anyway.
        search: folders where a ``NAME.py`` module may be (the config's folder; the current folder always).

    Raises:
        VerifiersEnvError: verifiers is not installed, the environment is not found or cannot be used.
    """

    fork_mode = None
    fork_refusal = (
        "a verifiers environment keeps an episode's state in the library's own rollout (a coroutine "
        "waiting for the next turn), which cannot be copied"
    )

    def __init__(
        self,
        name: str,
        *,
        env_args: dict[str, Any] | None = None,
        split: Literal["train", "test"] = "train",
        success_at: float = 1.0,
        max_turns: int | None = None,
        describe_tools: bool = True,
        turn_timeout: float = 50.0,
        search: Sequence[str | Path] = (),
        render_mode: str | None = None,
    ) -> None:
        if split not in ("train", "test"):
            raise VerifiersEnvError(
                f"split is 'train' (the environment's dataset) or 'test' (its eval dataset), got {split!r}"
            )
        if not turn_timeout > 0:
            raise VerifiersEnvError(f"turn_timeout must be positive, got {turn_timeout}")
        self.name, self.env_args = name, dict(env_args or {})
        self.vf_env = load(name, self.env_args, search)
        self.rows = rows_of(self.vf_env, name, split)
        own = getattr(self.vf_env, "max_turns", None)
        cap = max_turns if max_turns is not None else (own if isinstance(own, int) and own > 0 else 32)
        super().__init__(max_turns=cap, render_mode=render_mode)
        self.split, self.held_out_split = split, "test" if has_eval_dataset(self.vf_env) else None
        self.success_at, self.describe_tools, self.turn_timeout = success_at, describe_tools, turn_timeout
        self.tasks = [
            Task(
                id=f"{name}/{split}/{row.get('example_id', i)}",
                prompt=text_of(last_user(row["prompt"])),
                answer=str(row.get("answer", "") or ""),
                metadata={"row": i},
            )
            for i, row in enumerate(self.rows)
        ]
        self._tools = tool_schemas(self.vf_env)  # until an episode's first request says which it offers
        self._parser = HermesParser()
        self._episode: _Episode | None = None
        self.task: Task | None = None

    # ---- the TextEnv interface ----

    def __len__(self) -> int:
        return len(self.tasks)

    def task_at(self, index: int) -> Task | None:
        """Task ``index`` (its row of the split)."""
        return self.tasks[index]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools (OpenAI's form) the current episode's requests offer (before any: the environment's own)."""
        return list(self._tools)

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        unknown = set(options) - {"index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; {type(self).__name__} accepts 'index'")
        self._stop(self._episode)
        index = pick_index(self, len(self.tasks), options)
        self.task = self.tasks[index]
        rollout_input = copy.deepcopy(self.rows[index])  # the whole row, as verifiers' own generate passes it
        rollout_input.setdefault("example_id", index)
        loop = background_loop()
        channel = Channel(loop)
        ep = self._episode = _Episode(
            channel, asyncio.run_coroutine_threadsafe(run_rollout(self.vf_env, rollout_input, channel), loop)
        )
        kind, body, reply = self._next(ep, "to ask the model for the first turn")
        if kind != "request":
            self._stop(ep)
            raise VerifiersEnvError(f"{self.name} ended its rollout before asking the model anything{ended(body)}")
        ep.reply, ep.sent = reply, list(body.get("messages") or [])
        self._tools = list(body.get("tools") or [])  # this episode's (verifiers allows tools per row)
        return self._observation(ep, ep.sent, first=True), {"task_id": self.task.id, "index": index, "role": "policy"}

    def _step(self, action: str) -> StepResult:
        ep = self._episode
        assert ep is not None and ep.reply is not None
        message, info = self._assistant(action)
        ep.sent = [*ep.sent, message]
        reply, ep.reply = ep.reply, None
        ep.channel.loop.call_soon_threadsafe(set_result, reply, message)
        kind, body, next_reply = self._next(ep, "to answer the turn")
        if kind != "request":
            return self._finish(ep, body, info)
        ep.reply = next_reply
        messages = list(body.get("messages") or [])
        sent, ep.sent = ep.sent, messages
        if self.turn + 1 >= self.max_turns:  # turnrl's turn limit cuts the episode here: its rollout ends too
            self._stop(ep)
        if [message_key(m) for m in messages[: len(sent)]] == [message_key(m) for m in sent]:
            return self._observation(ep, messages[len(sent) :]), 0.0, False, False, info
        info["history"] = True  # the environment rewrote its conversation: all of it, a new segment
        return self._observation(ep, messages, first=True), 0.0, False, False, info

    def close(self) -> None:
        """End a rollout still running (it is cancelled; nothing of it is scored)."""
        self._stop(self._episode)
        super().close()

    # ---- the rollout ----

    def _next(self, ep: _Episode, what: str) -> tuple[str, Any, Any]:
        """The rollout's next event, or :class:`VerifiersEnvError` past ``turn_timeout`` (the rollout is then
        cancelled) or when it failed."""
        try:
            kind, body, extra = ep.channel.events.get(timeout=self.turn_timeout)
        except queue.Empty:
            self._stop(ep)
            raise VerifiersEnvError(
                f"{self.name} did not go on within turn_timeout={self.turn_timeout:g} s ({what})"
            ) from None
        if kind == "error":
            self._stop(ep)
            raise VerifiersEnvError(f"{self.name}'s rollout failed: {body}")
        return kind, body, extra

    def _finish(self, ep: _Episode, output: dict[str, Any], info: dict[str, Any]) -> StepResult:
        """The rollout's end: its rubric's reward, or :class:`VerifiersEnvError` where the rubric failed or the
        rollout ended on an error that is not the policy's doing."""
        self._stop(ep)
        if ep.channel.rubric_errors:
            raise VerifiersEnvError(f"{self.name}'s rubric failed: {'; '.join(ep.channel.rubric_errors)}")
        error = output.get("error")
        if error:
            kind = error.get("error") if isinstance(error, dict) else type(error).__name__
            message = error.get("message") if isinstance(error, dict) else str(error)
            if kind not in POLICY_ERRORS:
                raise VerifiersEnvError(f"{self.name}'s rollout ended on an error: {kind}: {message}")
            info["error"] = f"{kind}: {message}"  # the policy's doing (an empty reply, a bad tool call): it stands
        reward = float(output.get("reward") or 0.0)
        if not math.isfinite(reward):
            raise VerifiersEnvError(f"{self.name}'s rubric gave a reward of {reward}")
        metrics = {
            k: float(v)
            for k, v in (output.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        info.update(correct=reward >= self.success_at, metrics=metrics, stop_condition=output.get("stop_condition"))
        return (), reward, True, False, info

    def _stop(self, ep: _Episode | None) -> None:
        """Cancel ``ep``'s rollout if it still runs, and forget it if it is the current episode (a step thread that
        outlived its episode touches only its own)."""
        if ep is None:
            return
        if ep.reply is not None and not ep.reply.done():
            ep.channel.loop.call_soon_threadsafe(ep.reply.cancel)
        if not ep.future.done():
            ep.future.cancel()
        if self._episode is ep:
            self._episode = None

    # ---- messages ----

    def _observation(self, ep: _Episode, messages: Sequence[dict[str, Any]], first: bool = False) -> Obs:
        """The request's messages as turnrl messages (the tools described in the system message of an opening)."""
        names = {
            c.get("id"): c.get("function", {}).get("name")
            for m in ep.sent
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        }
        out = []
        for m in messages:
            role = m.get("role")
            if role == "tool":
                out.append(
                    Message(
                        role="tool",
                        content=text_of(m.get("content")),
                        name=names.get(m.get("tool_call_id")) or m.get("name"),
                        tool_call_id=m.get("tool_call_id"),
                    )
                )
            elif role == "assistant":
                calls = [ToolCall.from_openai(c) for c in m.get("tool_calls") or []]
                out.append(Message(role="assistant", content=text_of(m.get("content")), tool_calls=calls or None))
            elif role in ("system", "user"):
                out.append(Message(role=role, content=text_of(m.get("content"))))
            elif role == "developer":
                out.append(Message(role="system", content=text_of(m.get("content"))))
            else:
                raise VerifiersEnvError(f"{self.name} sent a message with role {role!r}, which turnrl cannot render")
        if first and self.describe_tools and self._tools:
            note = describe_tools(self._tools)
            if out and out[0].role == "system":
                out[0] = out[0].model_copy(update={"content": f"{out[0].content}\n\n{note}"})
            else:
                out.insert(0, Message(role="system", content=note))
        return tuple(out)

    def _assistant(self, action: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The policy's text as the assistant message of a chat completion — with ``tool_calls`` parsed from its
        ``<tool_call>`` blocks where the request offered tools (the text around them, without the blocks, is its
        content, as an OpenAI server answers: a history the environment sends back renders each call once; each
        call gets a fresh id) — and the step's ``info`` (the calls, and what could not be parsed)."""
        info: dict[str, Any] = {"role": "policy"}
        if not self._tools:
            return {"role": "assistant", "content": action}, info
        parsed = self._parser.parse(action)
        if parsed.errors:
            info["error"] = "; ".join(parsed.errors)
        if not parsed.calls:
            return {"role": "assistant", "content": action}, info
        calls: list[dict[str, Any]] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in parsed.calls
        ]
        info["tool_calls"] = [
            {"name": c["function"]["name"], "arguments": call.arguments, "id": c["id"]}
            for c, call in zip(calls, parsed.calls)
        ]
        return {"role": "assistant", "content": without_calls(action, self._parser), "tool_calls": calls}, info


CALL_BLOCK = re.compile(r"\s*<tool_call>.*?</tool_call>", re.S)  # HermesParser's blocks, with the space before them


def without_calls(text: str, parser: HermesParser) -> str:
    """``text`` without the ``<tool_call>`` blocks that ``parser`` reads as calls (the message's content once
    ``tool_calls`` carry them); a block it cannot read stays, as the model wrote it."""

    def drop(block: re.Match[str]) -> str:
        parsed = parser.parse(block.group(0))
        return "" if parsed.calls and not parsed.errors else block.group(0)

    return CALL_BLOCK.sub(drop, text).strip()


def make_verifiers_env(env_id: str, **kwargs: Any) -> Any:
    """``verifiers:NAME`` with keyword arguments → :class:`VerifiersEnv` (arguments this adapter does not take
    are the environment's ``load_environment`` arguments), or, where NAME is a verifiers v1 task set,
    :class:`~turnrl.envs.adapters.verifiers_v1.VerifiersTasksetEnv`."""
    name = env_id[len(VERIFIERS_PREFIX) :]
    if kind_of(name, kwargs.get("search", ())) == "v1":
        from turnrl.envs.adapters.verifiers_v1 import make_verifiers_v1_env

        return make_verifiers_v1_env(name, **kwargs)
    own = set(inspect.signature(VerifiersEnv.__init__).parameters) - {"self", "name", "env_args"}
    env_args = dict(kwargs.pop("env_args", None) or {})
    env_args.update({k: kwargs.pop(k) for k in list(kwargs) if k not in own})
    return VerifiersEnv(env_id[len(VERIFIERS_PREFIX) :], env_args=env_args, **kwargs)


def check_verifiers_id(env_id: str, search: Sequence[str | Path] = ()) -> None:
    """``verifiers:NAME``, its module imported from ``search`` where given (an installed one is found by verifiers).

    Raises:
        UnknownEnvironmentError: the id is malformed.
        EnvImportError: the module does not import.
    """
    from turnrl.envs.registry import EnvImportError, UnknownEnvironmentError
    from turnrl.utils import import_from

    name = env_id[len(VERIFIERS_PREFIX) :]
    if not name or ":" in name or "/" in name:
        raise UnknownEnvironmentError(
            f"{env_id!r} is not of the form 'verifiers:NAME' (an environment that "
            "verifiers.load_environment(NAME) loads)"
        )
    if search:
        try:
            import_from(name.replace("-", "_"), search)
        except ModuleNotFoundError as e:
            raise EnvImportError(f"importing the module of {env_id!r} failed: {e}") from e


#: the ``verifiers:`` prefix's adapter (:mod:`turnrl.envs.adapters`)
ADAPTER = EnvAdapter(
    make=make_verifiers_env,
    check=check_verifiers_id,
    entry="turnrl.envs.adapters.verifiers_env:make_verifiers_env",
    usage="verifiers:NAME — an environment written for Prime Intellect's verifiers (extra verifiers)",
)
