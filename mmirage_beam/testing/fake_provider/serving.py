"""Serving a fake's WSGI app in a daemon thread on a loopback port, and stopping it: the
one way the shared fake (:class:`~mmirage_beam.testing.fake_provider.app.FakeProviderServer`)
and the fakes that live in a provider's package (Vertex AI's) run their werkzeug server,
and their one life cycle (:class:`ThreadServed`: start, stop, ``with``, port, base URL)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional, TypeVar

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

__all__ = ["QuietRequestHandler", "ThreadServed", "serve_in_thread", "stop_serving"]

_LOG = logging.getLogger(__name__)
_Served = TypeVar("_Served", bound="ThreadServed")


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


class ThreadServed:
    """The life cycle of a fake that serves its own WSGI app (:meth:`_wsgi_app`) on a
    loopback port in a daemon thread: :meth:`start` / :meth:`stop` (or ``with``),
    :attr:`port` and :attr:`base_url`. A subclass calls ``__init__`` and defines
    :meth:`_wsgi_app`; :meth:`_started` is its hook for what to do once bound.

    Args:
        host: the address to bind (``127.0.0.1``, ``::1``, ``localhost``).
        port: the TCP port; 0 picks a free one (read it back from :attr:`port`).
        lock: the lock that guards the fake's state; start and stop hold it.
        thread_name: the serving thread's name, before ``-<port>``.
    """

    def __init__(self, host: str, port: int, lock: Any, thread_name: str) -> None:
        self._host = host
        self._requested_port = port
        self._serving_lock = lock
        self._thread_name = thread_name
        self._server: Optional[BaseWSGIServer] = None
        self._thread: Optional[threading.Thread] = None

    def _wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        raise NotImplementedError

    def _started(self) -> None:
        """Called once the port is bound, holding the lock (nothing by default)."""

    def start(self: _Served) -> _Served:
        """Binds the port and serves in a daemon thread; returns ``self``.

        Raises:
            OSError: the port cannot be bound.
        """
        with self._serving_lock:
            if self._server is not None:
                return self
            self._server, self._thread = serve_in_thread(
                self._host,
                self._requested_port,
                self._wsgi_app,
                QuietRequestHandler,
                self._thread_name,
            )
            self._started()
        return self

    def stop(self) -> None:
        """Stops serving and closes the port (idempotent)."""
        with self._serving_lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        stop_serving(server, thread)

    def __enter__(self: _Served) -> _Served:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port.

        Raises:
            RuntimeError: before :meth:`start` (``<class name> is not started``).
        """
        server = self._server
        if server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return int(server.server_port)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no trailing slash; an IPv6 host in brackets).

        Raises:
            RuntimeError: before :meth:`start`.
        """
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"
