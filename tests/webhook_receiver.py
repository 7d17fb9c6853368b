"""A local webhook receiver for the notification tests: Werkzeug on 127.0.0.1, in a
thread. It checks each POST's ``X-Mmirage-Signature`` against the raw body and
timestamp (the check docs/notifications.md gives receivers), answers 500 to the first
``fail_first`` deliveries (or 302 to ``redirect_to`` to each), and keeps every request
it saw::

    with WebhookReceiver(secret="s3cret", fail_first=1) as hook:
        ... hook.url ...
        hook.accepted  # the bodies it answered 200 to, parsed
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response


@dataclass
class Seen:
    """One POST: its headers, raw body, the signature verdict and the answer given."""

    headers: dict[str, str]
    body: bytes
    signature_ok: Optional[bool]
    answered: int
    json: Any = field(default=None)


class WebhookReceiver:
    """``url`` takes POSTs; ``seen`` lists every one, ``accepted`` the bodies answered 200."""

    def __init__(
        self, secret: Optional[str] = None, fail_first: int = 0, redirect_to: Optional[str] = None
    ) -> None:
        self.secret = secret
        self.fail_first = fail_first
        self.redirect_to = redirect_to
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}/hooks/mmirage"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)

    def _verify(self, request: Request, body: bytes) -> Optional[bool]:
        if self.secret is None:
            return None
        ts = request.headers.get("X-Mmirage-Timestamp", "")
        got = request.headers.get("X-Mmirage-Signature", "")
        want = (
            "sha256="
            + hmac.new(self.secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        )
        return hmac.compare_digest(got, want)

    def _app(self, environ: dict, start_response: Any) -> Any:
        request = Request(environ)
        body = request.get_data()
        ok = self._verify(request, body)
        with self._lock:
            if self.redirect_to is not None:
                code = 302
            elif ok is False:
                code = 401
            elif self.fail_first > 0:
                self.fail_first -= 1
                code = 500
            else:
                code = 200
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
            self.seen.append(Seen(dict(request.headers), body, ok, code, parsed))
        response = Response("ok" if code == 200 else "no", status=code)
        if code == 302:
            response.headers["Location"] = self.redirect_to
        return response(environ, start_response)

    @property
    def accepted(self) -> list[Any]:
        """The parsed bodies answered 200, in order."""
        with self._lock:
            return [s.json for s in self.seen if s.answered == 200]
