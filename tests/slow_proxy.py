"""A loopback HTTP proxy in front of a test server that answers chosen calls late, or not
at all.

The fake has no knob to delay a create's *answer* while the batch is already made (the
case where an SDK timeout fires after the provider accepted the batch), so tests put
this proxy between the SDK and the fake: the call is forwarded at once (the batch is
created), and its answer is held back ``delay_secs`` for the first ``count`` calls whose
method and path match, or until :meth:`SlowProxy.release` (whichever comes first).

Storage tests (``tests/storage_servers.py``) put it in front of an S3 server, so it also
forwards ``PUT`` and ``HEAD`` (a ``HEAD`` answer keeps the server's ``Content-Length``),
reads chunked request bodies, and can

- hold a call back *before* forwarding it (``delay(..., before=True)``: a slow write,
  which lands late), and
- answer the next ``count`` matching calls itself with an error, never forwarding them
  (:meth:`SlowProxy.fail`: e.g. S3's ``503 SlowDown``), optionally only once a call
  matching ``armed_by`` has been forwarded (e.g. the first receipt written).

Methods are a name (``"PUT"``) or a tuple of names; paths are shell-style patterns
(``fnmatch``: ``"/v1/files*"`` matches every path that starts with ``/v1/files``,
``"*.parts/*.json"`` every receipt part, ``"*"`` all), matched without the query string.
"""

from __future__ import annotations

import fnmatch
import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Union
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}

Methods = Union[str, tuple[str, ...]]


def _matches(pattern: str, path: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


def _method_matches(methods: Methods, method: str) -> bool:
    return method == methods if isinstance(methods, str) else method in methods


@dataclass
class _Failure:
    """Answer ``remaining`` calls with ``status`` (once armed)."""

    methods: Methods
    path: str
    remaining: int
    status: int
    body: bytes
    headers: dict[str, str]
    armed_by: Optional[tuple[Methods, str]]
    armed: bool


class SlowProxy:
    """``with SlowProxy(fake.base_url) as proxy: proxy.delay("POST", "/v1/batches", 2.0)``."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname, parts.port
        self._rules: list[list] = []  # [method(s), path, delay, remaining, before]
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self.delayed = 0
        #: calls answered by :meth:`fail` instead of the server, as "METHOD path"
        self.failed: list[str] = []
        self._released = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> Optional[bytes]:
                if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()  # the CRLF after each chunk
                length = int(self.headers.get("content-length") or 0)
                return self.rfile.read(length) if length else None

            def _any(self) -> None:
                body = self._body()
                path = self.path.split("?", 1)[0]
                failure = proxy._take_failure(self.command, path)
                if failure is not None:
                    self._answer(failure.status, list(failure.headers.items()), failure.body)
                    return
                wait, before = proxy._take(self.command, path)
                if wait and before:
                    proxy._released.wait(wait)
                conn = http.client.HTTPConnection(proxy._host, proxy._port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                proxy._forwarded(self.command, path)
                if wait and not before:
                    proxy._released.wait(wait)
                length = resp.getheader("content-length") if self.command == "HEAD" else None
                self._answer(resp.status, resp.getheaders(), data, length)

            def _answer(
                self, status: int, headers: list, data: bytes, length: Optional[str] = None
            ) -> None:
                try:
                    self.send_response(status)
                    for k, v in headers:
                        if k.lower() not in _HOP:
                            self.send_header(k, v)
                    self.send_header("Content-Length", length or str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    def delay(
        self,
        method: Methods,
        path: str,
        delay_secs: float,
        count: int = 1,
        before: bool = False,
    ) -> None:
        """Hold back the answer of the next ``count`` ``method path`` calls (a ``path``
        ending in ``*`` matches every path that starts with what precedes it; ``before``:
        hold the call itself, so it reaches the server ``delay_secs`` late)."""
        with self._lock:
            self._rules.append([method, path, delay_secs, count, before])

    def fail(
        self,
        method: Methods,
        path: str,
        count: int,
        status: int,
        body: bytes = b"",
        headers: Optional[dict[str, str]] = None,
        armed_by: Optional[tuple[Methods, str]] = None,
    ) -> None:
        """Answer the next ``count`` ``method path`` calls with ``status``, ``headers``
        and ``body`` without forwarding them; with ``armed_by=(method, path)``, only the
        calls after one matching ``armed_by`` was forwarded (and answered)."""
        with self._lock:
            self._failures.append(
                _Failure(
                    method, path, count, status, body, dict(headers or {}), armed_by, not armed_by
                )
            )

    def release(self) -> None:
        """Answer every held call now, and hold or fail no later one (a test that waited
        for a hold to happen ends it as soon as it has seen what it needed)."""
        with self._lock:
            self._rules.clear()
            self._failures.clear()
        self._released.set()

    def _take(self, method: str, path: str) -> tuple[float, bool]:
        with self._lock:
            for rule in self._rules:
                if _method_matches(rule[0], method) and _matches(rule[1], path) and rule[3] > 0:
                    rule[3] -= 1
                    self.delayed += 1
                    return rule[2], rule[4]
        return 0.0, False

    def _take_failure(self, method: str, path: str) -> Optional[_Failure]:
        with self._lock:
            for f in self._failures:
                if (
                    f.armed
                    and f.remaining > 0
                    and _method_matches(f.methods, method)
                    and _matches(f.path, path)
                ):
                    f.remaining -= 1
                    self.failed.append(f"{method} {path}")
                    return f
        return None

    def _forwarded(self, method: str, path: str) -> None:
        with self._lock:
            for f in self._failures:
                if not f.armed and f.armed_by is not None:
                    methods, pattern = f.armed_by
                    f.armed = _method_matches(methods, method) and _matches(pattern, path)

    @property
    def pending_failures(self) -> int:
        """Calls still to be failed by :meth:`fail` (armed or not)."""
        with self._lock:
            return sum(f.remaining for f in self._failures)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> SlowProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
