"""Task sets written for verifiers 0.4's v1 API (a ``verifiers.v1.Taskset`` with its tasks, rewards and harness),
trained by turnrl through its gateway: ``verifiers:NAME`` names one, as it names a classic verifiers environment
(:mod:`turnrl.envs.adapters.verifiers_env`), when the module ``NAME`` exports a ``Taskset`` subclass in its ``__all__``.

In verifiers v1 the task set does not talk to the model: a *harness* runs an agent program (verifiers' ``bash`` or
``null`` chat loops, Codex, Claude Code, or the task set's own) in a runtime, and the program's model calls go
through verifiers' interception server to an OpenAI-compatible endpoint. So a v1 task set trains the way any agent
program does in turnrl — through the gateway, which records every call with its exact tokens:

* the run config names the task set as its environment and :func:`play` as its program::

      env: {id: "verifiers:NAME", kwargs: {split: train}}
      program: {function: "turnrl.envs.adapters.verifiers_v1:play"}

* :class:`VerifiersTasksetEnv` poses the task set's tasks (``reset(options={"index": i})``: its system prompt and
  prompt as the opening messages);
* :func:`play` — the program of each episode — runs verifiers' own ``Env.run_episode`` for that task with the
  gateway session as the model endpoint (verifiers' interception server relays each call to it unchanged), and
  returns the trace's reward (``correct``: the reward reached ``success_at``).

Keyword arguments of ``turnrl.make("verifiers:NAME", ...)`` that this adapter does not take are fields of the task
set's config (its ``TasksetConfig``: ``split``, ``num_train`` …). A task set whose config has a ``split`` field is
split as turnrl's environments are: ``held_out_split`` (``"test"``) is the held-out one. Played without the
program (``step``), an episode is refused with the line above: its harness, not turnrl's rollout, plays it.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.envs.adapters.verifiers_bridge import VerifiersEnvError
from turnrl.envs.adapters.verifiers_v1_run import TaskSet, load_taskset, outcome
from turnrl.envs.core import Obs, StepResult, Task, TextEnv, pick_index
from turnrl.types import Message

PROGRAM = "turnrl.envs.adapters.verifiers_v1:play"
__all__ = ["PROGRAM", "VerifiersTasksetEnv", "make_verifiers_v1_env", "play"]


class VerifiersTasksetEnv(TextEnv):
    """A verifiers v1 task set's tasks as a turnrl environment (see the module docstring).

    Args:
        name: the task set (the module that exports it; verifiers' built-in ones by their id).
        taskset_args: fields of its ``TasksetConfig``.
        harness: the harness that plays it: an id (``"null"``) or a harness config (``{"id": ..., ...}``; without
            ``id``, the task set's default harness with these fields); default: the task set's own, else ``bash``.
        runtime: where the harness runs (verifiers' runtime config); default ``{"type": "subprocess"}``.
        num_tasks: pose the first ``num_tasks`` tasks (required for an infinite task set).
        success_at: the reward from which an episode counts as ``correct``.
        timeout: seconds one episode may take (then it is cancelled and errs); keep it under ``program.timeout``.
        held_out_split: the value of the task set's ``split`` field that is held out (when it has that field).
        search: folders where the task set's module may be (the config's folder; the current folder always).

    Raises:
        VerifiersEnvError: verifiers is missing or not a release whose v1 API turnrl plays, or the task set cannot
            be loaded with these settings.
    """

    fork_mode = None
    fork_refusal = "a verifiers v1 episode runs in its harness's own program, which cannot be copied"

    def __init__(
        self,
        name: str,
        *,
        taskset_args: dict[str, Any] | None = None,
        harness: str | dict[str, Any] | None = None,
        runtime: dict[str, Any] | None = None,
        num_tasks: int | None = None,
        success_at: float = 1.0,
        timeout: float = 300.0,
        held_out_split: str = "test",
        search: Sequence[str | Path] = (),
        render_mode: str | None = None,
    ) -> None:
        if not timeout > 0:
            raise VerifiersEnvError(f"timeout must be positive, got {timeout}")
        if num_tasks is not None and (isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1):
            raise VerifiersEnvError(f"num_tasks must be a positive integer, got {num_tasks!r}")
        super().__init__(max_turns=1, render_mode=render_mode)
        self.name, self.success_at, self.timeout = name, success_at, timeout
        self.taskset: TaskSet = load_taskset(
            name, dict(taskset_args or {}), harness=harness, runtime=runtime, num_tasks=num_tasks, search=search
        )
        self.split = self.taskset.split
        self.held_out_split = held_out_split if self.split is not None else None
        self.tasks = [
            Task(
                id=task_id(name, t),
                prompt=t.data.prompt_text,
                answer=str(getattr(t.data, "answer", "") or ""),
                metadata={"index": i},
            )
            for i, t in enumerate(self.taskset.tasks)
        ]
        self.task: Task | None = None

    def __len__(self) -> int:
        return len(self.tasks)

    def task_at(self, index: int) -> Task | None:
        """Task ``index`` (in the task set's ``load()`` order)."""
        return self.tasks[index]

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        unknown = set(options) - {"index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; {type(self).__name__} accepts 'index'")
        index = pick_index(self, len(self.tasks), options)
        self.task = self.tasks[index]
        vf_task = self.taskset.tasks[index]
        with _posed_lock:  # what play() runs for this task id: the latest environment that posed it
            _posed[self.task.id] = (self.taskset, vf_task, self.success_at, self.timeout)
        return opening(vf_task.data), {"task_id": self.task.id, "index": index, "role": "policy"}

    def _step(self, action: str) -> StepResult:
        raise VerifiersEnvError(
            f"verifiers:{self.name} is a verifiers v1 task set: its harness plays each episode, "
            "and the harness's model calls are trained through turnrl's gateway. Add "
            f"`program: {{function: {PROGRAM}}}` to the run config (the environment poses the "
            "tasks; the program plays them)"
        )


def task_id(name: str, task: Any) -> str:
    """``NAME/KEY``: the task's durable key (verifiers' ``Task.key``; its content hash, shortened, by default)."""
    key = str(task.key)
    return f"{name}/{key[:16] if len(key) == 64 and all(c in '0123456789abcdef' for c in key) else key}"


def opening(data: Any) -> Obs:
    """A v1 task's opening messages: its system prompt, then its prompt (a string, or messages)."""
    out = [Message(role="system", content=data.system_prompt)] if data.system_prompt else []
    if isinstance(data.prompt, str):
        out.append(Message(role="user", content=data.prompt))
    for m in data.prompt if isinstance(data.prompt, list) else []:
        role = getattr(m, "role", None) or m.get("role")
        content = getattr(m, "content", None) if not isinstance(m, dict) else m.get("content")
        text = (
            content
            if isinstance(content, str)
            else "".join(
                getattr(p, "text", None) or (p.get("text", "") if isinstance(p, dict) else "") for p in content or []
            )
        )
        out.append(Message(role=role if role in ("system", "user", "assistant") else "user", content=text))
    return tuple(out)


_posed: dict[str, tuple[TaskSet, Any, float, float]] = {}
_posed_lock = threading.Lock()


def play(base_url: str, api_key: str, task: dict[str, Any]) -> dict[str, Any]:
    """The program of a v1 task set's episodes (``program: {function: turnrl.envs.adapters.verifiers_v1:play}``): runs
    verifiers' ``Env.run_episode`` on the task :class:`VerifiersTasksetEnv` posed as ``task["id"]``, its harness's
    model calls sent to ``base_url`` (the episode's gateway session); returns the trace's reward, ``correct`` and
    metrics.

    Raises:
        VerifiersEnvError: no v1 task set of this process posed the task, or the episode failed (its last error),
            ran past the environment's ``timeout`` or played several agents.
    """
    with _posed_lock:
        posed = _posed.get(str(task.get("id")))
    if posed is None:
        raise VerifiersEnvError(
            f"task {task.get('id')!r} was not posed by a verifiers v1 task set in this process: "
            f"{PROGRAM} plays the tasks of a `verifiers:NAME` environment whose NAME is a v1 "
            "task set"
        )
    taskset, vf_task, success_at, timeout = posed
    episode = taskset.play(vf_task, base_url, api_key, str(task.get("model") or "turnrl-policy"), timeout)
    return outcome(taskset.name, episode, success_at)


def make_verifiers_v1_env(name: str, **kwargs: Any) -> VerifiersTasksetEnv:
    """``verifiers:NAME`` (NAME a v1 task set) with keyword arguments → :class:`VerifiersTasksetEnv` (arguments this
    adapter does not take are fields of the task set's config)."""
    own = set(inspect.signature(VerifiersTasksetEnv.__init__).parameters) - {"self", "name", "taskset_args"}
    taskset_args = dict(kwargs.pop("taskset_args", None) or {})
    taskset_args.update({k: kwargs.pop(k) for k in list(kwargs) if k not in own})
    return VerifiersTasksetEnv(name, taskset_args=taskset_args, **kwargs)
