"""Environment classes written for TRL's ``GRPOTrainer(environment_factory=...)``, played as turnrl environments
without a line changed: ``turnrl.make("trl:my_envs:WordleEnv", data="rows.jsonl", reward="my_envs:reward_func")``.

TRL's contract, which the class keeps:

* ``__init__(self)`` takes no arguments; one instance plays one episode at a time (made with the environment).
* ``reset(self, **row)`` receives a data row's columns as keyword arguments and returns the first observation (text,
  appended to the row's last user message) or None.
* Every public method other than ``reset`` is a tool the model may call: its typed arguments and the ``Args:`` of its
  docstring make the tool's schema. A tool that raises (TRL's way to say "invalid move" or "game over") answers the
  model with the error text, and the episode goes on.
* Reward functions ``fn(environments, prompts, completions, **columns) -> list[float | None]`` read the instances'
  state once the episode ends (several are summed, weighted by ``reward_weights``; None — "not mine" — counts 0).

The episode: the row's ``prompt`` (a string or chat messages) plus the observation ``reset`` returned; each model
turn with tool calls runs them and shows their results; the first turn without one ends the episode, and the reward
functions give its reward. An episode that reaches ``max_turns`` while still calling tools is rewarded the same way
(the rewards read the environment's state, as TRL's do) and ends truncated.

Rows are tasks, in order: a ``.jsonl``/``.json``/``.parquet`` file (a relative path: from the current folder, else
from the class's module's folder) or a list of dicts; task ``i`` is row ``i``
(its id: the row's ``id`` column, else ``row-i``). ``test_data`` gives held-out rows: ``split="test"`` plays them,
and ``turnrl eval`` and training's held-out evaluation pick that split by themselves.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from turnrl.envs.core import Obs, StepResult, Task
from turnrl.envs.registry import EnvAdapter
from turnrl.envs.tool_env import ToolEnv
from turnrl.tools.base import Tool, ToolOutput
from turnrl.tools.parsers import ParseResult
from turnrl.types import Message
from turnrl.verifiers.base import Verdict

TRL_PREFIX = "trl:"  # the prefix of ENV_ADAPTERS["trl"] (turnrl.envs.registry)


def row_problem(row: dict[str, Any]) -> str:
    """The canonical form of a TRL dataset row: the whole row but its id (a class's prompt may be the same for every
    row, its problem in the other columns: a secret number, a target), as sorted JSON."""
    import json

    return "trl:" + json.dumps({k: v for k, v in row.items() if k != "id"}, sort_keys=True, default=str)


class TRLEnvError(ValueError):
    """A TRL environment class, its rows or its reward functions cannot be used; the message says why."""


def load_object(spec: Any, what: str) -> Any:
    """``"module.path:name"`` → that object (imported); an object as is.

    Raises:
        TRLEnvError: not of that form, the module does not import, or it has no such name.
    """
    if not isinstance(spec, str):
        return spec
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise TRLEnvError(f"{what} {spec!r} is not of the form 'module.path:Name'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the import's own failure, said in one line
        raise TRLEnvError(f"{what} {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}") from e
    try:
        return getattr(module, name)
    except AttributeError:
        raise TRLEnvError(f"{what} {spec!r}: module {module_name!r} has no {name!r}") from None


def read_rows(data: Any, beside: Path | None = None) -> list[dict[str, Any]]:
    """The rows of ``data``: a list of dicts, or a ``.jsonl``, ``.json`` or ``.parquet`` file of them (a relative
    path from the current folder, else from ``beside``: the folder of the class's module, where its config usually
    is too).

    Raises:
        TRLEnvError: no such file, another format, or rows that are not objects with a ``prompt``.
    """
    if isinstance(data, (str, Path)):
        path = Path(data)
        if not path.is_file() and beside is not None and not path.is_absolute() and (beside / path).is_file():
            path = beside / path
        if not path.is_file():
            where = f" (nor in {beside})" if beside is not None and not path.is_absolute() else ""
            raise TRLEnvError(f"no data file {path}{where} (rows of a TRL environment: .jsonl, .json or .parquet)")
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        elif path.suffix == ".json":
            rows = json.loads(path.read_text())
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            raise TRLEnvError(f"{path}: rows are read from .jsonl, .json or .parquet files")
    elif hasattr(data, "to_list"):  # a datasets.Dataset
        rows = list(data.to_list())
    else:
        rows = list(data)
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict) or "prompt" not in r), None)
    if bad is not None:
        raise TRLEnvError(
            f"row {bad} has no 'prompt' column (each row is an object with a prompt: text or chat "
            "messages, and any other columns reset() takes)"
        )
    if not rows:
        raise TRLEnvError("the data holds no rows")
    return rows


def class_tools(instance: Any) -> list[Tool]:
    """The tools of a TRL environment instance: its public methods other than ``reset``, bound to it.

    Raises:
        TRLEnvError: a public method cannot be a tool (an argument without a type annotation, ``*args``).
    """
    tools = []
    for name in sorted(dir(type(instance))):  # TRL's rule: the instance's public bound methods, reset excepted
        if name.startswith("_") or name == "reset" or isinstance(inspect.getattr_static(instance, name), property):
            continue
        if not inspect.ismethod(getattr(instance, name)):  # static methods, callable attributes: not tools
            continue
        try:
            tools.append(Tool(getattr(instance, name), name=name))
        except Exception as e:  # say which method and why
            raise TRLEnvError(
                f"{type(instance).__name__}.{name} cannot be a tool: {e} (TRL exposes every public "
                "method; give it typed arguments and an Args: docstring, or make it private with _)"
            ) from e
    return tools


class TRLClassEnv(ToolEnv):
    """A TRL environment class as a turnrl environment (see the module docstring).

    Args:
        env_class: the class, or ``"module.path:ClassName"``.
        data: the training rows (a file or a list of dicts), each with a ``prompt``.
        reward: the reward function(s): callables or ``"module.path:function"``, one or a list.
        reward_weights: a weight per reward function (default 1 each).
        test_data: held-out rows (``split="test"``).
        split: ``"train"`` (``data``) or ``"test"`` (``test_data``).
        success_at: the reward from which an episode counts as a success (``success`` in reports).
        tool_style, system_prompt, max_turns, describe_tools, render_mode: as :class:`ToolEnv`.

    Raises:
        TRLEnvError: the class, a reward function or the rows cannot be used (said before any episode).
    """

    def __init__(
        self,
        env_class: Any,
        data: Any,
        reward: Any,
        *,
        reward_weights: Sequence[float] | None = None,
        test_data: Any = None,
        split: Literal["train", "test"] = "train",
        success_at: float = 1.0,
        tool_style: str = "hermes",
        system_prompt: str | None = None,
        max_turns: int = 4,
        describe_tools: bool = True,
        render_mode: str | None = None,
    ) -> None:
        cls = load_object(env_class, "the environment class")
        if not inspect.isclass(cls):
            raise TRLEnvError(f"{env_class!r} is not a class (TRL's environment_factory takes the class)")
        if not callable(getattr(cls, "reset", None)):
            raise TRLEnvError(f"{cls.__name__} has no reset(self, **row) method: TRL starts each episode with it")
        try:
            self.instance: Any = cls()  # the user's class: TRL's protocol is duck-typed (reset(**row), tools)
        except TypeError as e:
            raise TRLEnvError(f"{cls.__name__}() failed: {e} (TRL makes the class with no arguments)") from e
        funcs = reward if isinstance(reward, (list, tuple)) else [reward]
        self.reward_funcs: list[Callable[..., Any]] = [load_object(f, "the reward function") for f in funcs]
        if not self.reward_funcs or not all(callable(f) for f in self.reward_funcs):
            raise TRLEnvError(
                "reward: one or more functions (environments, prompts, completions, **columns) -> list of floats"
            )
        self.reward_weights = list(reward_weights) if reward_weights is not None else [1.0] * len(self.reward_funcs)
        if len(self.reward_weights) != len(self.reward_funcs):
            raise TRLEnvError(
                f"{len(self.reward_weights)} reward_weights for {len(self.reward_funcs)} reward functions"
            )
        if split not in ("train", "test"):
            raise TRLEnvError(f"split is 'train' (data) or 'test' (test_data), got {split!r}")
        if split == "test" and test_data is None:
            raise TRLEnvError("split='test' needs test_data: the held-out rows")
        try:
            beside: Path | None = Path(inspect.getfile(cls)).parent
        except (TypeError, OSError):  # a class defined where no file is (an interactive session)
            beside = None
        self.rows = read_rows(test_data if split == "test" else data, beside)
        self.split, self.success_at = split, success_at
        self.held_out_split = "test" if test_data is not None else None
        tasks = [
            Task(
                id=str(r.get("id", f"row-{i}")),
                prompt=_text(r["prompt"]),
                answer=str(r.get("answer", "")),
                metadata={"row": i, "canonical": row_problem(r)},
            )
            for i, r in enumerate(self.rows)
        ]
        super().__init__(
            tasks,
            class_tools(self.instance),
            self._verdict,
            tool_style=tool_style,
            system_prompt=system_prompt,
            max_turns=max_turns,
            describe_tools=describe_tools,
            render_mode=render_mode,
        )
        self.row: dict[str, Any] = {}
        self.prompt: list[dict[str, Any]] = []
        self.completion: list[dict[str, Any]] = []

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        _, info = super()._reset(options)
        assert self.task is not None
        self.row = self.rows[self.task.metadata["row"]] if "row" in self.task.metadata else {"prompt": self.task.prompt}
        first = self.instance.reset(**self.row)
        messages = _messages(self.row["prompt"])
        if first is not None:
            head = messages[-1].get("content") or ""
            messages[-1] = {**messages[-1], "content": f"{head}\n\n{first}" if head else str(first)}
        self.prompt, self.completion = messages, []
        shown = list(messages)
        if (tools := self.system_message()) is not None:  # how to call the tools, where the template does not say
            if shown[0]["role"] == "system":
                shown[0] = {**shown[0], "content": f"{shown[0]['content']}\n\n{tools}"}
            else:
                shown.insert(0, {"role": "system", "content": tools})
        return tuple(Message(role=m["role"], content=m["content"]) for m in shown), info

    def _metrics(self, response: str) -> dict[str, float]:
        """None here: the reward functions run once per episode, in :meth:`_verdict` (a cut episode's too)."""
        return {}

    def _tool_step(self, parsed: ParseResult, outputs: Sequence[ToolOutput]) -> StepResult:
        obs, reward, terminated, truncated, info = super()._tool_step(parsed, outputs)
        self.completion += [{"role": "tool", "name": m.name, "content": m.content} for m in obs]
        if truncated:  # the turn limit cut it: rewarded from the environment's state, as TRL rewards every episode
            verdict = self._verdict("", "")
            info.update(correct=verdict.correct, metrics=dict(verdict.details))
            reward = verdict.score
        return obs, reward, terminated, truncated, info

    def _parse(self, action: str) -> ParseResult:
        self.completion.append({"role": "assistant", "content": action})
        return super()._parse(action)

    def _verdict(self, response: str, reference: str) -> Verdict:
        """The reward functions' weighted sum on this episode (the verifier :class:`ToolEnv` calls)."""
        columns = {k: [v] for k, v in self.row.items() if k not in ("prompt", "completion")}
        total, parts = 0.0, {}
        for fn, weight in zip(self.reward_funcs, self.reward_weights):
            name = getattr(fn, "__name__", type(fn).__name__)
            try:
                values = fn(
                    environments=[self.instance], prompts=[self.prompt], completions=[list(self.completion)], **columns
                )
            except Exception as e:  # the episode fails with the reward function's error
                raise RuntimeError(f"the reward function {name} raised {type(e).__name__}: {e}") from e
            value = values[0] if isinstance(values, (list, tuple)) and values else values
            number = 0.0
            if value is not None:
                try:
                    number = float(value)  # a float, a numpy scalar, a 0-d tensor
                except (TypeError, ValueError):
                    number = math.nan
                if isinstance(value, bool) or not math.isfinite(number):
                    raise RuntimeError(
                        f"the reward function {name} returned {values!r}: a list with one finite "
                        "number (or None) per environment"
                    )
            parts[name] = number
            total += weight * number
        return Verdict(correct=total >= self.success_at, score=total, extracted=response or None, details=parts)

    def close(self) -> None:
        """Close the instance too, where it has a ``close`` that takes no arguments (a client of a server, for
        instance); best effort: a failing one does not stop the rest of a run's cleanup."""
        closer = getattr(self.instance, "close", None)
        try:
            if callable(closer) and not [
                p
                for p in inspect.signature(closer).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]:
                closer()
        except Exception:  # closing is best effort
            pass
        super().close()


def _messages(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


def _text(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(_messages(prompt)[-1].get("content", ""))


def make_trl_env(env_id: str, **kwargs: Any) -> TRLClassEnv:
    """``trl:module.path:ClassName`` with keyword arguments → :class:`TRLClassEnv`."""
    return TRLClassEnv(env_id[len(TRL_PREFIX) :], **kwargs)


def check_trl_id(env_id: str, search: Sequence[str | Path] = ()) -> None:
    """``trl:module.path:ClassName``, the class's module imported from ``search`` where given (the config's or the
    current folder; its reward functions' module too).

    Raises:
        UnknownEnvironmentError: the id is malformed.
        EnvImportError: the module does not import.
    """
    from turnrl.envs.registry import EnvImportError, UnknownEnvironmentError, import_module_from

    if env_id.count(":") != 2:
        raise UnknownEnvironmentError(
            f"{env_id!r} is not of the form 'trl:module.path:ClassName' (a class written for TRL's environment_factory)"
        )
    if search:
        try:
            import_module_from(env_id.split(":")[1], search)
        except ModuleNotFoundError as e:
            raise EnvImportError(f"importing {env_id.split(':')[1]!r} failed: {e}") from e


#: the ``trl:`` prefix's adapter (:mod:`turnrl.envs.adapters`)
ADAPTER = EnvAdapter(
    make=make_trl_env,
    check=check_trl_id,
    entry="turnrl.envs.adapters.trl:make_trl_env",
    usage="trl:MODULE:CLASS — a class written for TRL's environment_factory",
    modules=lambda env_id: [env_id.split(":")[1]] if env_id.count(":") == 2 else [],
)
