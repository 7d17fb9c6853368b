"""The dashboard's HTTP server: a Werkzeug WSGI app serving the page and its JSON views.

Routes (every body JSON, UTF-8):

- ``GET /``, ``GET /static/<name>``: the page (``static/index.html``, ``app.js``,
  ``app.css``), shipped in the package.
- ``GET /api/meta``: ``{configs: [{index, path, provider, model}], lookup, refresh_ms}``.
- ``GET /api/runs``: :func:`mmirage_beam.ui.data.runs_view`.
- ``GET /api/runs/<config>/<run_id>``: :func:`~mmirage_beam.ui.data.run_view`.
- ``GET /api/runs/<config>/<run_id>/failures[?type=T]``:
  :func:`~mmirage_beam.ui.data.failures_view`.
- ``GET /api/spend``: :func:`~mmirage_beam.ui.data.spend_view`.
- ``POST /api/runs/<config>/<run_id>/cancel``: what ``mmirage cancel --yes`` does
  (:func:`mmirage_beam.run.cancel.plan_cancel`, :func:`~mmirage_beam.run.cancel.cancel_batches`).
- ``POST /api/runs/<config>/<run_id>/resubmit`` (body ``{"only": "retryable"|"all"}``):
  what ``mmirage resubmit --run-id`` does
  (:class:`mmirage_beam.commands.resubmit.ResubmitCommand`, on the DirectRunner).

Security: the server listens on 127.0.0.1 only. A request whose ``Host`` is not
``127.0.0.1:<port>`` or ``localhost:<port>`` (DNS rebinding), or whose ``Origin`` (when
sent) is not ``http://`` one of those, is refused with 403. Views need no token; an
action needs the per-launch token (``secrets.token_urlsafe``) as ``Authorization:
Bearer <token>`` or ``X-Mmirage-Token: <token>``, else 401: the token is the consent
``mmirage cancel`` asks for on its terminal.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import threading
import traceback
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from mmirage_beam.errors import MmirageError
from mmirage_beam.ui import data
from mmirage_beam.ui.data import Source

__all__ = ["Dashboard", "DashboardServer", "new_token"]

_LOG = logging.getLogger(__name__)

#: the only address the dashboard listens on
HOST = "127.0.0.1"
STATIC = Path(__file__).resolve().parent / "static"
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def new_token() -> str:
    """A fresh per-launch token: 32 random bytes, URL-safe base64 (``secrets``)."""
    return secrets.token_urlsafe(32)


def _json(value: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(value, ensure_ascii=False, default=str),
        status=status,
        mimetype="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


class Dashboard:
    """The WSGI app.

    Args:
        sources: the configs shown (:class:`~mmirage_beam.ui.data.Source`).
        token: the per-launch token actions need.
        port: the port it is served on (the ``Host``/``Origin`` it accepts name it);
            set by :class:`DashboardServer` once bound.
        lookup: look batches up at their providers (False: ``--no-lookup``).
        refresh_secs: how often the page refreshes a run whose batches are in flight.
    """

    def __init__(
        self,
        sources: Sequence[Source],
        token: str,
        port: int = 0,
        lookup: bool = True,
        refresh_secs: float = 5.0,
    ) -> None:
        self.sources = list(sources)
        self.token = token
        self.port = port
        self.lookup = lookup
        self.refresh_secs = refresh_secs
        self._actions = threading.Lock()  # one cancel / resubmit at a time
        #: the last 100 requests refused for their Host or Origin: ``(method, path, reason)``
        self.refused: deque[tuple[str, str, str]] = deque(maxlen=100)
        self._urls = Map(
            [
                Rule("/", endpoint="index", methods=["GET"]),
                Rule("/static/<name>", endpoint="static", methods=["GET"]),
                Rule("/api/meta", endpoint="meta", methods=["GET"]),
                Rule("/api/runs", endpoint="runs", methods=["GET"]),
                Rule("/api/spend", endpoint="spend", methods=["GET"]),
                Rule("/api/runs/<int:config>/<run_id>", endpoint="run", methods=["GET"]),
                Rule(
                    "/api/runs/<int:config>/<run_id>/failures",
                    endpoint="failures",
                    methods=["GET"],
                ),
                Rule("/api/runs/<int:config>/<run_id>/cancel", endpoint="cancel", methods=["POST"]),
                Rule(
                    "/api/runs/<int:config>/<run_id>/resubmit",
                    endpoint="resubmit",
                    methods=["POST"],
                ),
            ]
        )

    # -- checks ---------------------------------------------------------------------
    def own_origins(self) -> set[str]:
        """The ``host:port`` values this server answers to."""
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def refusal(self, request: Request) -> Optional[Response]:
        """403 for a foreign ``Host`` or ``Origin``; None when the request may proceed."""
        host = request.headers.get("Host", "")
        if host not in self.own_origins():
            return _error(403, f"refused: Host {host!r} is not this dashboard")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.own_origins()}:
            return _error(403, f"refused: Origin {origin!r} is not this dashboard")
        if request.method == "POST" and request.headers.get("Sec-Fetch-Site") == "cross-site":
            return _error(403, "refused: a cross-site request")
        return None

    def authorized(self, request: Request) -> bool:
        """The request carries the launch token (compared in constant time)."""
        given = request.headers.get("X-Mmirage-Token")
        auth = request.headers.get("Authorization", "")
        if given is None and auth.startswith("Bearer "):
            given = auth[len("Bearer ") :]
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    # -- WSGI -------------------------------------------------------------------------
    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        request = Request(environ)
        response = self.refusal(request)
        if response is not None:
            reason = json.loads(response.get_data())["error"]
            self.refused.append((request.method, request.path, reason))
            _LOG.warning("%s %s %s", request.method, request.path, reason)
        else:
            response = self.dispatch(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        # the page's own files only; style attributes (progress bars) are set by app.js
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        )
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        """The response to an accepted request (errors as JSON ``{"error": str}``)."""
        try:
            endpoint, args = self._urls.bind_to_environ(request.environ).match()
            if request.method == "POST" and not self.authorized(request):
                return _error(401, "this action needs the token `mmirage ui` printed")
            return getattr(self, f"on_{endpoint}")(request, **args)
        except HTTPException as exc:
            return _error(exc.code or 500, exc.description or exc.name)
        except KeyError as exc:
            return _error(404, f"no such run: {exc.args[0] if exc.args else ''}")
        except MmirageError as exc:
            return _error(400, str(exc))
        except Exception as exc:  # a view must answer, not drop the connection
            traceback.print_exc()
            return _error(500, f"{type(exc).__name__}: {exc}")

    def _source(self, config: int) -> Source:
        if not 0 <= config < len(self.sources):
            raise NotFound(f"no config #{config}")
        return self.sources[config]

    # -- endpoints --------------------------------------------------------------------
    def on_index(self, request: Request) -> Response:
        return self.on_static(request, "index.html")

    def on_static(self, request: Request, name: str) -> Response:
        path = STATIC / name
        if path.suffix not in _TYPES or path.parent != STATIC or not path.is_file():
            raise NotFound(name)
        return Response(path.read_bytes(), mimetype=_TYPES[path.suffix])

    def on_meta(self, request: Request) -> Response:
        configs = [
            {"index": s.index, "path": s.label, "provider": s.provider, "model": s.model}
            for s in self.sources
        ]
        return _json(
            {
                "configs": configs,
                "lookup": self.lookup,
                "refresh_ms": int(self.refresh_secs * 1000),
            }
        )

    def on_runs(self, request: Request) -> Response:
        return _json(data.runs_view(self.sources, lookup=self.lookup))

    def on_spend(self, request: Request) -> Response:
        return _json(data.spend_view(self.sources))

    def on_run(self, request: Request, config: int, run_id: str) -> Response:
        view = data.run_view(self._source(config), run_id, lookup=self.lookup)
        return _json(view | {"refresh_ms": int(self.refresh_secs * 1000)})

    def on_failures(self, request: Request, config: int, run_id: str) -> Response:
        kind = request.args.get("type") or None
        return _json(data.failures_view(self._source(config), run_id, kind))

    def on_cancel(self, request: Request, config: int, run_id: str) -> Response:
        from mmirage_beam.run.cancel import cancel_batches, plan_cancel

        source = self._source(config)
        with self._actions:
            plan, checker = plan_cancel(source.config, run_id)
            try:
                done = cancel_batches(source.base, plan, checker) if plan.to_cancel else []
            finally:
                checker.close()
        return _json(
            {
                "runs": plan.runs,
                "already": len(plan.already),
                "ended": plan.ended,
                "batches": [d.to_json() for d in done],
                "refused": sum(1 for d in done if d.error),
            }
        )

    def on_resubmit(self, request: Request, config: int, run_id: str) -> Response:
        from mmirage_beam.commands.resubmit import ResubmitCommand

        body = request.get_json(silent=True) or {}
        only = body.get("only", "retryable")
        if only not in ("retryable", "all"):
            return _error(400, f"only: must be 'retryable' or 'all', got {only!r}")
        source = self._source(config)
        if source.state is not None:
            return _error(
                400,
                f"resubmit reads the source rows with the config of that state: run "
                f"mmirage ui with the --config that submitted the runs in {source.state}",
            )
        with self._actions:
            outcome = ResubmitCommand(source.path, run_id=run_id, only=only).run([], False)
        return _json(
            {
                "exit_code": outcome.exit_code,
                "new_run_id": outcome.new_run_id,
                "receipts": dict(outcome.receipts),
            },
            200 if outcome.exit_code in (0, 1) else 500,
        )


class _QuietRequestHandler(WSGIRequestHandler):
    """Werkzeug's per-request lines go to this module's logger at DEBUG (the terminal
    shows the token and the URL, not every refresh)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Logs the request line at DEBUG."""
        _LOG.debug("%r %s %s", self.requestline, code, size)

    def log(self, type: str, message: str, *args: Any) -> None:
        """Logs Werkzeug's messages (info at DEBUG, others at WARNING)."""
        level = logging.DEBUG if type == "info" else logging.WARNING
        _LOG.log(level, message.rstrip(), *args)


class DashboardServer:
    """The dashboard served on ``127.0.0.1:<port>`` by a Werkzeug threaded server in a
    background thread (``with DashboardServer(...) as s: s.url``).

    Args:
        app: the app (its ``port`` is set once bound).
        port: the port; 0: a free one.

    Raises:
        OSError: the port is taken.
    """

    def __init__(self, app: Dashboard, port: int = 0) -> None:
        self.app = app
        if port:  # taken: say it once (Werkzeug prints its own lines, then exits)
            import socket

            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((HOST, port))
                except OSError:
                    raise OSError(f"port {port} is in use") from None
        try:
            self._server: BaseWSGIServer = make_server(
                HOST, port, app, threaded=True, request_handler=_QuietRequestHandler
            )
        except SystemExit:  # Werkzeug exits (1) when the port is in use, after saying so
            raise OSError(f"port {port} is in use") from None
        self.port = self._server.server_port
        app.port = self.port
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> DashboardServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="mmirage-ui",
            daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> DashboardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
