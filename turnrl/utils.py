"""Small helpers shared across packages."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when the caller is already inside an event loop (via a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def load_entry(entry: str) -> Any:
    """The object a lazy ``"module:attribute"`` entry names (registries, method tables), imported now.

    Raises:
        ImportError, AttributeError: the module or the attribute does not exist.
    """
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)
