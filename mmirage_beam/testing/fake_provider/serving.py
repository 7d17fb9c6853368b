"""Serving a fake's WSGI app in a daemon thread on a loopback port, and stopping it: the
one way the shared fake (:class:`~mmirage_beam.testing.fake_provider.app.FakeProviderServer`)
and the fakes that live in a provider's package (Vertex AI's) run their werkzeug server."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

__all__ = ["QuietRequestHandler", "serve_in_thread", "stop_serving"]

_LOG = logging.getLogger(__name__)


class QuietRequestHandler(WSGIRequestHandler):
    """Sends Werkzeug's per-request lines to this module's logger at DEBUG (Werkzeug
    prints them on stderr, one per request, unless told otherwise)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Logs the request line at DEBUG."""
        _LOG.debug("%s %r %s %s", self.address_string(), self.requestline, code, size)

    def log(self, type: str, message: str, *args: Any) -> None:
        """Logs Werkzeug's messages (info at DEBUG, others at WARNING)."""
        level = logging.DEBUG if type == "info" else logging.WARNING
        _LOG.log(level, "%s - " + message.rstrip(), self.address_string(), *args)


def serve_in_thread(
    host: str, port: int, app: Callable[..., Any], handler: type[WSGIRequestHandler], name: str
) -> tuple[BaseWSGIServer, threading.Thread]:
    """Bind ``host:port`` (0: a free port) with werkzeug's threaded server and serve
    ``app`` in a daemon thread named ``<name>-<port>`` (polled every 50 ms, so a stop is
    quick); returns ``(server, thread)``.

    Raises:
        OSError: the port cannot be bound.
    """
    server = make_server(host, port, app, threaded=True, request_handler=handler)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name=f"{name}-{server.server_port}",
        daemon=True,
    )
    thread.start()
    return server, thread


def stop_serving(server: Optional[BaseWSGIServer], thread: Optional[threading.Thread]) -> None:
    """Stop ``server`` (None: nothing to stop), close its port and wait up to 5 s for its
    thread."""
    if server is None:
        return
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=5)
