"""The ``remote:`` prefix's environment adapter (:mod:`turnrl.envs.adapters`): ``remote:http://HOST:PORT/ENV_ID``
names an environment a ``turnrl envs serve`` (or OpenEnv) server plays."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turnrl.envs.registry import EnvAdapter
from turnrl.envs.remote.protocol import split_remote_id


def check(env_id: str, search: Sequence[str | Path] = ()) -> None:
    """A well-formed ``remote:`` id (nothing is contacted yet).

    Raises:
        UnknownEnvironmentError: the id is malformed (the message shows the form).
    """
    from turnrl.envs.registry import UnknownEnvironmentError

    try:
        split_remote_id(env_id)
    except ValueError as e:
        raise UnknownEnvironmentError(str(e)) from None


def make(env_id: str, **kwargs: Any) -> Any:
    """A client of the server's environment (its spec comes from the server)."""
    from turnrl.envs.remote.client import make_remote

    return make_remote(env_id, **kwargs)


ADAPTER = EnvAdapter(
    make=make,
    check=check,
    sets_spec=False,
    entry="turnrl.envs.remote.client:make_remote",
    usage="remote:http://HOST:PORT/ID — an environment a server runs (turnrl envs serve, OpenEnv)",
)
