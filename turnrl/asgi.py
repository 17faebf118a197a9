"""An ASGI application served by uvicorn on a socket bound here, in a thread of this process or in this one.

The environment server (``turnrl envs serve``) and the gateway's MCP tool server both serve this way: the socket is
bound before the server starts, so a port of 0 picks a free port that :attr:`ListeningApp.port` then names, and a
port already taken is an :class:`OSError` that says where, raised by :meth:`ListeningApp.bind` rather than logged
by a thread nobody watches.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any


class ListeningApp:
    """``app`` served by uvicorn on ``host:port``.

    Args:
        app: the ASGI application.
        host, port: where to listen (port 0: any free port; :attr:`port` says which once bound).
        name: the thread's name, and what the errors call the server ("the environment server").
        config: more ``uvicorn.Config`` arguments (``lifespan``, WebSocket limits, ``timeout_graceful_shutdown``…).
    """

    def __init__(self, app: Any, host: str, port: int, *, name: str, **config: Any) -> None:
        self.app, self.host, self.port, self.name = app, host, port, name
        self.config = {"log_config": None, "log_level": "warning", "access_log": False, **config}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the server started with :meth:`start` still serves."""
        return self._thread is not None and self._thread.is_alive()

    def bind(self) -> socket.socket:
        """Bind and listen on ``host:port`` (sets :attr:`port`); the server that will serve it is made here too.

        Raises:
            OSError: the address cannot be bound, naming it.
        """
        import uvicorn

        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise OSError(f"{self.name} cannot listen on {self.host}:{self.port}: {e}") from e
        sock.listen(2048)
        sock.set_inheritable(True)
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, **self.config))
        return sock

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C) or :meth:`stop`."""
        sock = self.bind()
        with contextlib.suppress(KeyboardInterrupt):
            self._server.run(sockets=[sock])

    def start(self, timeout: float = 30.0) -> int:
        """Serve in a daemon thread; returns the port once the server listens.

        Raises:
            OSError: the address cannot be bound, or the server did not start within ``timeout`` seconds.
        """
        sock = self.bind()
        server = self._server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=self.name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"{self.name} did not start on {self.host}:{self.port} within {timeout:g} s")
            time.sleep(0.01)
        return self.port

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit (open connections get ``timeout_graceful_shutdown``) and wait for its thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
