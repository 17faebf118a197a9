"""Small helpers shared across packages."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


def turn_seed(sample_seed: int, turn: int, salt: int = 0) -> int:
    """The seed of turn ``turn`` of an episode whose sample seed is ``sample_seed``: each turn (and each call of a
    gateway session) draws from its own stream, so an episode's tokens do not depend on the rest of the batch.
    ``salt`` keeps streams apart that would otherwise share a turn number (a new context segment, a summary call)."""
    return (sample_seed * 1009 + turn + salt) % 2**62


def row_seed(seed: int, choice: int) -> int:
    """The seed of completion ``choice`` of a generation request that gives ``seed`` (the HF agent's row
    generators): the n completions of one request draw from n streams."""
    return (seed * 1_000_003 + choice) % 2**63


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when the caller is already inside an event loop (via a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class DaemonExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each call on its own daemon thread: a call that never returns (e.g. an environment step cut by its
    timeout) cannot block the end of the event loop or of the process, as a joined thread pool's worker would."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()  # (Executor.submit's signature)

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the awaiting coroutine
                future.set_exception(e)

        threading.Thread(target=work, daemon=True, name="turnrl-daemon-call").start()
        return future


def run_with_daemon_threads(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a new event loop whose default executor (``asyncio.to_thread``) is a
    :class:`DaemonExecutor`, so that blocking calls that hang cannot keep it from ending. Interrupted
    (``KeyboardInterrupt``), it cancels the tasks still running before it raises."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(DaemonExecutor())
    try:
        return loop.run_until_complete(coro)
    except KeyboardInterrupt:  # Ctrl-C: cancel what still runs (as asyncio.run does), so that nothing is left pending
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()

        async def drain() -> None:
            await asyncio.gather(*pending, return_exceptions=True)

        loop.run_until_complete(drain())
        raise
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: parses in several threads at
# once (environments made or stepped concurrently, gateway programs) can fail with "SystemError: AST constructor
# recursion depth mismatch" (python/cpython#106905). Every parse in turnrl takes this lock.
AST_LOCK = threading.Lock()


def parse_python(source: str, **kwargs: Any) -> Any:
    """``ast.parse(source, **kwargs)``, one at a time in the process (see ``AST_LOCK``)."""
    import ast

    with AST_LOCK:
        return ast.parse(source, **kwargs)


def import_from(name: str, search: Sequence[str | Path]) -> ModuleType | None:
    """Import module ``name`` from ``sys.path``, else from the first folder of ``search`` that holds it (that folder
    is appended to ``sys.path``); None when no folder holds it. A module that exists but fails to import raises."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is None or not (name == e.name or name.startswith(e.name + ".")):
            raise  # the module exists; something it imports does not
    top = name.split(".")[0]
    for folder in (Path(p).resolve() for p in search):
        if (folder / f"{top}.py").is_file() or (folder / top).is_dir():
            if str(folder) not in sys.path:
                sys.path.append(str(folder))
            importlib.invalidate_caches()
            return importlib.import_module(name)
    return None


def load_entry(entry: str) -> Any:
    """The object a lazy ``"module:attribute"`` entry names (registries, method tables), imported now.

    Raises:
        ImportError, AttributeError: the module or the attribute does not exist.
    """
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def entry_points_turnrl_first(group: str) -> list[tuple[str, str, str]]:
    """``(name, "module:attr", distribution)`` of every entry point installed packages declare under ``group``,
    turnrl's own first, so that a registry filling itself with ``setdefault`` lets no other package take a name
    turnrl holds; ``distribution`` is the declaring package's name and version (``"an unnamed distribution"`` when
    its metadata says none). The one reader of entry points: the plug-in registries (:mod:`turnrl.plugins`) and the
    environment ids (:mod:`turnrl.envs.registry`) call it."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=group), key=lambda ep: not ep.value.startswith("turnrl."))
    return [
        (ep.name, ep.value, f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "an unnamed distribution")
        for ep in found
    ]


def code_version(timeout: float = 5.0) -> dict[str, Any]:
    """Which turnrl produced a figure: ``{"turnrl": version, "commit": sha or None, "dirty": bool or None}`` — the
    commit and whether the work tree had uncommitted changes where turnrl runs from a git checkout (``git`` asked
    with a ``timeout``), None otherwise (an installed wheel)."""
    import importlib.metadata
    import subprocess

    try:
        version = importlib.metadata.version("turnrl")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        version = None
    root = Path(__file__).resolve().parent.parent
    out: dict[str, Any] = {"turnrl": version, "commit": None, "dirty": None}
    if not (root / ".git").exists():
        return out
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=timeout, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return out
    out.update(commit=sha or None, dirty=bool(status.strip()))
    return out


class Shared:
    """A mixin for objects that every copy of their owner shares: ``copy.deepcopy`` returns the object itself.
    For what holds no episode state — read-only task lists, search indexes, stateless tools, sandbox pools, parsers —
    so that forking an environment (:mod:`turnrl.envs.fork`, a deep copy of its state) copies its episode and not its
    data. An object that changes during an episode must not be Shared."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self
