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

Supported: verifiers' classic ``Environment`` API (``SingleTurnEnv``, ``MultiTurnEnv``, ``ToolEnv``,
``StatefulToolEnv`` and their subclasses; verifiers 0.3), scored per rollout. Not supported: rubrics with
group-level reward functions (they score a whole group of rollouts at once; refused when loading), and the ``v1``
task-set API of verifiers 0.4, whose rollouts run an agent program in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from turnrl.envs.core import Obs, StepResult, Task, TextEnv, pick_index
from turnrl.envs.verifiers_bridge import (
    Channel,
    background_loop,
    ended,
    json_object,
    last_user,
    message_key,
    run_rollout,
    set_result,
    text_of,
    watch_rubrics,
)
from turnrl.envs.verifiers_load import INSTALL, VerifiersEnvError, has_eval_dataset, load, rows_of, tool_schemas
from turnrl.template_tools import describe_tools
from turnrl.tools.parsers import HermesParser
from turnrl.types import Message, ToolCall

VERIFIERS_PREFIX = "verifiers:"  # the same as turnrl.envs.registry's
__all__ = ["INSTALL", "VERIFIERS_PREFIX", "VerifiersEnv", "VerifiersEnvError", "make_verifiers_env"]


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
            rubric included); past it the episode fails.
        search: folders where a ``NAME.py`` module may be (the config's folder; the current folder always).

    Raises:
        VerifiersEnvError: verifiers is not installed, the environment is not found or cannot be used.
    """

    def __init__(self, name: str, *, env_args: dict[str, Any] | None = None, split: Literal["train", "test"] = "train",
                 success_at: float = 1.0, max_turns: int | None = None, describe_tools: bool = True,
                 turn_timeout: float = 300.0, search: Sequence[str | Path] = (), render_mode: str | None = None
                 ) -> None:
        if split not in ("train", "test"):
            raise VerifiersEnvError(f"split is 'train' (the environment's dataset) or 'test' (its eval dataset), "
                                    f"got {split!r}")
        if not turn_timeout > 0:
            raise VerifiersEnvError(f"turn_timeout must be positive, got {turn_timeout}")
        self.name, self.env_args = name, dict(env_args or {})
        self.vf_env = load(name, self.env_args, search)
        watch_rubrics()
        self.rows = rows_of(self.vf_env, name, split)
        own = getattr(self.vf_env, "max_turns", None)
        cap = max_turns if max_turns is not None else (own if isinstance(own, int) and own > 0 else 32)
        super().__init__(max_turns=cap, render_mode=render_mode)
        self.split, self.held_out_split = split, "test" if has_eval_dataset(self.vf_env) else None
        self.success_at, self.describe_tools, self.turn_timeout = success_at, describe_tools, turn_timeout
        self.tasks = [Task(id=f"{name}/{split}/{row.get('example_id', i)}", prompt=text_of(last_user(row["prompt"])),
                           answer=str(row.get("answer", "") or ""), metadata={"row": i}) for i, row in
                      enumerate(self.rows)]
        self._tools = tool_schemas(self.vf_env)
        self._parser = HermesParser()
        self._channel: Channel | None = None
        self._future: Any = None
        self._reply: asyncio.Future[dict[str, Any]] | None = None
        self._sent: list[dict[str, Any]] = []  # the last request's messages and the reply it got
        self.task: Task | None = None

    # ---- the TextEnv interface ----

    def __len__(self) -> int:
        return len(self.tasks)

    def task_at(self, index: int) -> Task | None:
        """Task ``index`` (its row of the split)."""
        return self.tasks[index]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The environment's tools (OpenAI's form), as its requests offer them."""
        return list(self._tools)

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        unknown = set(options) - {"index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; {type(self).__name__} accepts 'index'")
        self._stop()
        index = pick_index(self, len(self.tasks), options)
        self.task = self.tasks[index]
        row = self.rows[index]
        loop = background_loop()
        self._channel = channel = Channel(loop)
        rollout_input = {k: row[k] for k in ("prompt", "example_id", "answer", "info", "task") if k in row}
        rollout_input.setdefault("example_id", index)
        self._future = asyncio.run_coroutine_threadsafe(run_rollout(self.vf_env, rollout_input, channel), loop)
        kind, body, reply = self._next("to ask the model for the first turn")
        if kind != "request":
            raise VerifiersEnvError(f"{self.name} ended its rollout before asking the model anything"
                                    f"{ended(body)}")
        self._expect(body, reply)
        messages = list(body.get("messages") or [])
        self._sent = messages
        return self._observation(messages, first=True), {"task_id": self.task.id, "index": index, "role": "policy"}

    def _step(self, action: str) -> StepResult:
        assert self._channel is not None and self._reply is not None
        message = self._assistant(action)
        self._sent = [*self._sent, message]
        reply, self._reply = self._reply, None
        self._channel.loop.call_soon_threadsafe(set_result, reply, message)
        info: dict[str, Any] = {"role": "policy"}
        if message.get("tool_calls"):
            info["tool_calls"] = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                                  for c in message["tool_calls"]]
        kind, body, reply_future = self._next("to answer the turn")
        if kind == "request":
            self._expect(body, reply_future)
            messages = list(body.get("messages") or [])
            sent, self._sent = self._sent, messages
            if [message_key(m) for m in messages[:len(sent)]] == [message_key(m) for m in sent]:
                return self._observation(messages[len(sent):]), 0.0, False, False, info
            info["history"] = True  # the environment rewrote its conversation: all of it, a new segment
            return self._observation(messages, first=True), 0.0, False, False, info
        return self._finish(body, info)

    def close(self) -> None:
        """End a rollout still running (it is cancelled; nothing of it is scored)."""
        self._stop()
        super().close()

    # ---- the rollout ----

    def _next(self, what: str) -> tuple[str, Any, Any]:
        """The rollout's next event, or :class:`VerifiersEnvError` past ``turn_timeout`` (the rollout is then
        cancelled) or when it failed."""
        assert self._channel is not None
        try:
            kind, body, extra = self._channel.events.get(timeout=self.turn_timeout)
        except queue.Empty:
            self._stop()
            raise VerifiersEnvError(f"{self.name} did not go on within turn_timeout={self.turn_timeout:g} s "
                                    f"({what})") from None
        if kind == "error":
            self._stop()
            raise VerifiersEnvError(f"{self.name}'s rollout failed: {body}")
        return kind, body, extra

    def _expect(self, body: dict[str, Any], reply: asyncio.Future[dict[str, Any]]) -> None:
        self._reply = reply
        tools = body.get("tools")
        if tools and not self._tools:
            self._tools = list(tools)

    def _finish(self, output: dict[str, Any], info: dict[str, Any]) -> StepResult:
        assert self._channel is not None
        errors = self._channel.rubric_errors
        self._channel = self._future = None
        if errors:
            raise VerifiersEnvError(f"{self.name}'s rubric failed: {'; '.join(errors)}")
        reward = float(output.get("reward") or 0.0)
        if not math.isfinite(reward):
            raise VerifiersEnvError(f"{self.name}'s rubric gave a reward of {reward}")
        metrics = {k: float(v) for k, v in (output.get("metrics") or {}).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        info.update(correct=reward >= self.success_at, metrics=metrics, stop_condition=output.get("stop_condition"))
        if output.get("error"):  # caught and scored by the environment (e.g. an empty reply): the episode stands
            info["error"] = str(output["error"])
        return (), reward, True, False, info

    def _stop(self) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.get_loop().call_soon_threadsafe(self._reply.cancel)
        if self._future is not None and not self._future.done():
            self._future.cancel()
        self._channel = self._future = self._reply = None

    # ---- messages ----

    def _observation(self, messages: Sequence[dict[str, Any]], first: bool = False) -> Obs:
        """The request's messages as turnrl messages (the tools described in the system message of an opening)."""
        names = {c.get("id"): c.get("function", {}).get("name") for m in self._sent if m.get("role") == "assistant"
                 for c in m.get("tool_calls") or []}
        out = []
        for m in messages:
            role = m.get("role")
            if role == "tool":
                out.append(Message(role="tool", content=text_of(m.get("content")), name=names.get(m.get("tool_call_id"))
                                   or m.get("name"), tool_call_id=m.get("tool_call_id")))
            elif role == "assistant":
                calls = [ToolCall(name=c["function"]["name"], arguments=json_object(c["function"].get("arguments")),
                                  id=c.get("id")) for c in m.get("tool_calls") or []]
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

    def _assistant(self, action: str) -> dict[str, Any]:
        """The policy's text as the assistant message of a chat completion: with ``tool_calls`` parsed from its
        ``<tool_call>`` blocks where the request offered tools (the text around them stays its content)."""
        if not self._tools:
            return {"role": "assistant", "content": action}
        parsed = self._parser.parse(action)
        if not parsed.calls:
            return {"role": "assistant", "content": action}
        calls = [{"id": call.id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                  "function": {"name": call.name, "arguments": json.dumps(call.arguments)}} for call in parsed.calls]
        return {"role": "assistant", "content": action, "tool_calls": calls}


def make_verifiers_env(env_id: str, **kwargs: Any) -> VerifiersEnv:
    """``verifiers:NAME`` with keyword arguments → :class:`VerifiersEnv` (arguments this adapter does not take
    are the environment's ``load_environment`` arguments)."""
    own = {"split", "success_at", "max_turns", "describe_tools", "turn_timeout", "search", "render_mode"}
    env_args = dict(kwargs.pop("env_args", None) or {})
    env_args.update({k: kwargs.pop(k) for k in list(kwargs) if k not in own})
    return VerifiersEnv(env_id[len(VERIFIERS_PREFIX):], env_args=env_args, **kwargs)
