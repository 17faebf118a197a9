"""A WSGI application served by werkzeug in a background thread, quietly, and stopped at once (the agent server and
the gateway, the episode viewer)."""

from __future__ import annotations

import threading
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

#: how often the serving loop looks for :func:`stop`'s request (werkzeug's default, 0.5 s, was each stop's wait)
POLL_INTERVAL = 0.05


class _QuietHandler(WSGIRequestHandler):
    """Werkzeug's handler without a log line per request (errors are still logged)."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


def quiet_server(host: str, port: int, app: Any) -> BaseWSGIServer:
    """A threaded werkzeug server for ``app`` bound to ``host:port`` (port 0 picks a free one), not yet serving."""
    return make_server(host, port, app, threaded=True, request_handler=_QuietHandler)


def serve_in_thread(httpd: BaseWSGIServer, name: str | None = None) -> threading.Thread:
    """Serve ``httpd`` in a daemon thread (started); :func:`stop` ends it within :data:`POLL_INTERVAL` seconds."""
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, name=name, daemon=True
    )
    thread.start()
    return thread


def stop(httpd: BaseWSGIServer) -> None:
    """Stop serving and release the port."""
    httpd.shutdown()
    httpd.server_close()
