"""The ``turnrl envs serve`` command (registered in :mod:`turnrl.cli.commands`): environments served as OpenEnv
serves them (:class:`turnrl.envs.remote.server.EnvServer`), with ``turnrl serve``'s rule for keys: anything but a
loopback address needs ``--api-key`` (or ``$TURNRL_ENV_API_KEY``), checked before anything is made or bound."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from turnrl.cli.shared import ImportOption, KwOption, console, fail, parse_kwargs


def envs_serve(
    env_ids: Annotated[
        list[str],
        typer.Argument(
            help="the ids to serve, e.g. turnrl/GSM8K-v0 (the first is also served at /ws, for OpenEnv clients)"
        ),
    ],
    kw: KwOption = None,
    host: Annotated[
        str,
        typer.Option(
            help="the address to listen on; 0.0.0.0 for every interface (anything but a "
            "loopback address needs --api-key)"
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="the port (0: any free port)")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="TURNRL_ENV_API_KEY", help="the key every request must send (Authorization: Bearer KEY)"),
    ] = None,
    max_sessions: Annotated[
        int,
        typer.Option(
            help="sessions (connections, each with its own environment) open at "
            "once; a trainer holds one per episode of a step"
        ),
    ] = 1024,
    max_sessions_per_client: Annotated[int, typer.Option(help="sessions one client address holds at once")] = 512,
    max_request_bytes: Annotated[int, typer.Option(help="the largest HTTP body or WebSocket message")] = 2**24,
    step_timeout: Annotated[
        float, typer.Option(help="seconds a reset or step may take; past it the session ends with a TIMEOUT error")
    ] = 120.0,
    idle_timeout: Annotated[
        float, typer.Option(help="seconds a session may wait for its next message before it is closed")
    ] = 600.0,
    imports: ImportOption = None,
) -> None:
    """Serve environments as OpenEnv servers do: WebSocket sessions at /ID/ws (clients name them
    remote:http://HOST:PORT/ID in any command or config; OpenEnv clients connect to http://HOST:PORT/ID), plain HTTP
    POST /ID/reset and /ID/step, the tools over MCP at /ID/mcp, and GET /health, /ID/metadata, /ID/schema. With
    --api-key (required off loopback) every request must carry the key."""
    from turnrl.envs.registry import (
        EnvImportError,
        InvalidEnvKwargs,
        UnknownEnvironmentError,
    )
    from turnrl.envs.remote.server import EnvServer

    try:
        server = EnvServer(
            env_ids,
            kwargs=parse_kwargs(kw),
            host=host,
            port=port,
            max_sessions=max_sessions,
            step_timeout=step_timeout,
            idle_timeout=idle_timeout,
            api_key=api_key,
            max_sessions_per_client=max_sessions_per_client,
            max_request_bytes=max_request_bytes,
        )
    except (UnknownEnvironmentError, InvalidEnvKwargs, EnvImportError, ValueError, TypeError, FileNotFoundError) as e:
        fail(str(e))
    try:
        server.start()
    except OSError as e:
        fail(str(e))
    for env_id, url in server.urls().items():
        console.print(f"serving {env_id} at remote:{url}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"health: http://{host}:{server.port}/health · stop with Ctrl-C", markup=False, highlight=False)
    if server.api_key:
        console.print(
            "every request must carry the API key: Authorization: Bearer KEY (remote: ids send "
            "$TURNRL_ENV_API_KEY; OpenEnv clients: http://turnrl:KEY@HOST:PORT/ID)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    try:
        while server.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        server.stop()
