"""Loading an environment written for Prime Intellect's ``verifiers`` (``verifiers:NAME`` ids,
:mod:`turnrl.envs.adapters.verifiers_env`): ``verifiers.load_environment(NAME, **args)`` once per process, its dataset's
rows, its tools in OpenAI's form, and what this adapter refuses.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from turnrl.envs.adapters.verifiers_bridge import VerifiersEnvError, watch_reward_functions

INSTALL = "pip install 'turnrl[verifiers]'"


_cache: dict[str, Any] = {}
_cache_lock = threading.Lock()


#: the verifiers releases whose classic ``Environment`` API this adapter plays (0.4 ships only its v1 task sets)
SUPPORTED = "verifiers 0.3's classic environments (pip install 'verifiers==0.3.1'; scripts/setup.sh installs it)"
#: what a verifiers 0.4 environment plays instead (turnrl.envs.adapters.verifiers_v1)
V1_NOTE = (
    "; verifiers 0.4 ships only v1 task sets, which turnrl plays too (a module exporting a verifiers.v1 "
    "Taskset); one Python environment holds one verifiers release"
)


def _version(vf: Any) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verifiers")
    except PackageNotFoundError:
        return str(getattr(vf, "__version__", "of unknown version"))


def check_version(name: str, vf: Any) -> None:
    """Refuse, naming the version and the fix, a verifiers without the classic API's ``load_environment`` (instead of
    an ``AttributeError`` deep in a rollout).

    Raises:
        VerifiersEnvError: the installed verifiers has no ``load_environment``.
    """
    if not callable(getattr(vf, "load_environment", None)):
        raise VerifiersEnvError(
            f"verifiers:{name}: the installed verifiers {_version(vf)} has no load_environment "
            f"(its classic environments); turnrl plays {SUPPORTED}{V1_NOTE}"
        )


def kind_of(name: str, search: Sequence[str | Path] = ()) -> str:
    """What ``verifiers:NAME`` names: ``"classic"`` (a module with ``load_environment()``, verifiers 0.3) or
    ``"v1"`` (a module exporting a ``verifiers.v1.Taskset`` subclass, or one of verifiers' built-in task sets).
    A module that is not found is the installed release's kind (its loader says so in its own words).

    Raises:
        VerifiersEnvError: verifiers is not installed, the module fails to import (a classic environment under
            verifiers 0.4: the version and the fix), or it is neither kind.
    """
    try:
        import verifiers as vf
    except ImportError as e:
        raise VerifiersEnvError(
            f"verifiers:{name} needs the verifiers package: {INSTALL} (classic environments) or "
            f"pip install 'turnrl[verifiers-v1]' (v1 task sets) ({e})"
        ) from None
    classic = callable(getattr(vf, "load_environment", None))
    for folder in [*(str(Path(f).resolve()) for f in search), str(Path.cwd())]:
        if folder not in sys.path:
            sys.path.append(folder)
    module_name = name.replace("-", "_")
    if not classic:  # verifiers 0.4: its built-in task sets (harbor, textarena …) by their ids too
        with contextlib.suppress(ImportError, ValueError):
            if importlib.util.find_spec(f"verifiers.v1.tasksets.{module_name.lower()}"):
                return "v1"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            return "classic" if classic else "v1"
        raise VerifiersEnvError(f"verifiers:{name}: importing {module_name} failed: {e}") from None
    except Exception as e:  # the module's own code: one line (a classic one under 0.4: the fix)
        if not classic and isinstance(e, AttributeError) and "'verifiers'" in str(e):
            check_version(name, vf)
        raise VerifiersEnvError(f"verifiers:{name}: importing {module_name} raised {type(e).__name__}: {e}") from None
    if callable(getattr(module, "load_environment", None)):
        return "classic"
    taskset = getattr(sys.modules.get("verifiers.v1.taskset"), "Taskset", None)
    names = getattr(module, "__all__", None) or list(vars(module))
    if taskset is not None and any(
        isinstance(obj := getattr(module, n, None), type) and issubclass(obj, taskset) and obj is not taskset
        for n in names
    ):
        return "v1"
    raise VerifiersEnvError(
        f"verifiers:{name}: module {module_name} has neither a load_environment() (a classic "
        "verifiers environment) nor a verifiers.v1 Taskset subclass in its __all__ (a v1 task set)"
    )


def load(name: str, env_args: dict[str, Any], search: Sequence[str | Path] = ()) -> Any:
    """``verifiers.load_environment(name, **env_args)``, once per process for the same name and arguments (the
    object serves many rollouts at once; its datasets are built once).

    Raises:
        VerifiersEnvError: verifiers is not installed (the pip line), the environment is not found, or it is not
            one this adapter can play.
    """
    try:
        import verifiers as vf
    except ImportError as e:
        raise VerifiersEnvError(f"verifiers:{name} needs the verifiers package: {INSTALL} ({e})") from None
    check_version(name, vf)
    try:
        key = json.dumps([name, env_args], sort_keys=True, default=repr)
    except TypeError:
        key = repr([name, sorted(env_args.items())])
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        for folder in [*(str(Path(f).resolve()) for f in search), str(Path.cwd())]:
            if folder not in sys.path:
                sys.path.append(folder)
        module = name.replace("-", "_").split("/")[-1]  # the module verifiers imports for the name
        restore = _quiet_datasets()
        try:
            with _own_signals():
                env = vf.load_environment(name, **env_args)
        except Exception as e:  # verifiers wraps the cause; say it in one line
            cause = e.__cause__ or e
            if isinstance(cause, ModuleNotFoundError) and cause.name == module:
                raise VerifiersEnvError(
                    f"verifiers:{name}: no environment module {module!r}: install its package "
                    f"(pip install {name}; `prime env install OWNER/{name}` for one on Prime's "
                    f"Environments Hub) or put {module}.py with a load_environment() in the "
                    "config's or the current folder"
                ) from None
            raise VerifiersEnvError(
                f"verifiers:{name}: load_environment({_args(env_args)}) failed: {type(cause).__name__}: {cause}"
            ) from None
        finally:
            restore()
        if not callable(getattr(env, "run_rollout", None)):
            raise VerifiersEnvError(
                f"verifiers:{name}: load_environment() returned {type(env).__name__}, not a "
                "verifiers Environment (the classic API: SingleTurnEnv, MultiTurnEnv, ToolEnv…)"
                f"; verifiers {_version(vf)} is installed, turnrl plays {SUPPORTED}"
            )
        rubric = getattr(env, "rubric", None)
        if rubric is not None and getattr(rubric, "has_group_rewards", False):
            raise VerifiersEnvError(
                f"verifiers:{name}: its rubric has group-level reward functions, which score a "
                "whole group of rollouts at once; turnrl scores each episode on its own"
            )
        if rubric is not None:
            watch_reward_functions(rubric)
        _cache[key] = env
        return env


@contextlib.contextmanager
def _own_signals() -> Iterator[None]:
    """Keep the process's SIGINT and SIGTERM handlers while an environment is made: verifiers' ``Environment``
    installs its own (tear down, then exit), which would replace ``turnrl eval``'s (write what finished, then stop)
    and cannot be installed at all off the main thread (the environment server makes environments in threads)."""
    signals = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        real = signal.signal
        signal.signal = lambda signum, handler: signal.getsignal(signum)  # type: ignore[assignment]  # a no-op stand-in
        try:
            yield
        finally:
            signal.signal = real
        return
    saved = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _args(env_args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in env_args.items())


def has_eval_dataset(vf_env: Any) -> bool:
    """Whether the environment has an eval dataset (its held-out split)."""
    return getattr(vf_env, "eval_dataset", None) is not None or getattr(vf_env, "eval_dataset_source", None) is not None


_rows: dict[tuple[int, str], list[dict[str, Any]]] = {}


def rows_of(vf_env: Any, name: str, split: str) -> list[dict[str, Any]]:
    """The split's rows (``get_dataset()`` or ``get_eval_dataset()``), as dicts; read once per loaded environment
    (a training run makes an environment per episode). Treat them as read-only.

    Raises:
        VerifiersEnvError: the split has no dataset or no rows.
    """
    key = (id(vf_env), split)
    if key in _rows:
        return _rows[key]
    if split == "test" and not has_eval_dataset(vf_env):
        raise VerifiersEnvError(
            f"verifiers:{name} has no eval dataset, so no held-out split (split='test'); "
            "give its load_environment an eval dataset, or evaluate on split='train'"
        )
    restore = _quiet_datasets()
    try:
        dataset = vf_env.get_eval_dataset() if split == "test" else vf_env.get_dataset()
    except ValueError as e:
        raise VerifiersEnvError(f"verifiers:{name} has no {split} dataset: {e}") from None
    finally:
        restore()
    rows = [dict(row) for row in dataset]
    if not rows:
        raise VerifiersEnvError(f"verifiers:{name}'s {split} dataset has no rows")
    if not all("prompt" in row for row in rows):
        raise VerifiersEnvError(f"verifiers:{name}'s {split} rows have no 'prompt' column")
    _rows[key] = rows
    return rows


def tool_schemas(vf_env: Any) -> list[dict[str, Any]]:
    """The environment's tools (its ``tool_defs``: verifiers' own ``Tool`` objects or OpenAI-form dicts) in OpenAI's
    form, as its requests offer them to the model."""
    out = []
    for tool in getattr(vf_env, "tool_defs", None) or []:
        if isinstance(tool, dict):
            out.append(tool if "function" in tool else {"type": "function", "function": tool})
            continue
        function = {
            "name": tool.name,
            "description": getattr(tool, "description", "") or "",
            "parameters": dict(getattr(tool, "parameters", None) or {"type": "object", "properties": {}}),
        }
        out.append({"type": "function", "function": function})
    return out


def _quiet_datasets() -> Any:
    """Turn off the datasets library's progress bars while an environment builds its rows; returns how to put them
    back (a no-op where datasets is not installed or they were off)."""
    try:
        from datasets.utils import logging as ds_logging
    except ImportError:
        return lambda: None
    if not ds_logging.is_progress_bar_enabled():
        return lambda: None
    ds_logging.disable_progress_bar()
    return ds_logging.enable_progress_bar
