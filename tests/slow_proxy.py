"""A loopback HTTP proxy in front of the fake provider that answers chosen calls late.

The fake has no knob to delay a create's *answer* while the batch is already made (the
case where an SDK timeout fires after the provider accepted the batch), so tests put
this proxy between the SDK and the fake: the call is forwarded at once (the batch is
created), and its answer is held back ``delay_secs`` for the first ``count`` calls whose
method and path match, or until :meth:`SlowProxy.release` (whichever comes first).
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def _matches(pattern: str, path: str) -> bool:
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


class SlowProxy:
    """``with SlowProxy(fake.base_url) as proxy: proxy.delay("POST", "/v1/batches", 2.0)``."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname, parts.port
        self._rules: list[list] = []  # [method, path, delay, remaining]
        self._lock = threading.Lock()
        self.delayed = 0
        self._released = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(proxy._host, proxy._port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                wait = proxy._take(self.command, self.path.split("?", 1)[0])
                if wait:
                    proxy._released.wait(wait)
                try:
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in _HOP:
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    def delay(self, method: str, path: str, delay_secs: float, count: int = 1) -> None:
        """Hold back the answer of the next ``count`` ``method path`` calls (a ``path``
        ending in ``*`` matches every path that starts with what precedes it)."""
        with self._lock:
            self._rules.append([method, path, delay_secs, count])

    def release(self) -> None:
        """Answer every held call now, and hold no later one (a test that waited for a
        hold to happen ends it as soon as it has seen what it needed)."""
        with self._lock:
            self._rules.clear()
        self._released.set()

    def _take(self, method: str, path: str) -> float:
        with self._lock:
            for rule in self._rules:
                if rule[0] == method and _matches(rule[1], path) and rule[3] > 0:
                    rule[3] -= 1
                    self.delayed += 1
                    return rule[2]
        return 0.0

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
