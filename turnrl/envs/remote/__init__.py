"""Environments as servers: ``turnrl envs serve ID`` (:class:`turnrl.envs.remote.server.EnvServer`) and
``remote:http://HOST:PORT/ID`` ids (:class:`RemoteEnv`), over OpenEnv's WebSocket protocol
(:mod:`turnrl.envs.remote.protocol`)."""

from turnrl.envs.remote.protocol import REMOTE_PREFIX, RemoteEnvError

__all__ = ["REMOTE_PREFIX", "RemoteEnv", "RemoteEnvError", "make_remote"]


def __getattr__(name: str):  # lazy: websockets is imported when a client is made
    if name in ("RemoteEnv", "make_remote"):
        from turnrl.envs.remote import client

        return getattr(client, name)
    raise AttributeError(name)
