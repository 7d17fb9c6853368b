"""The HTTP server: :class:`FakeProviderServer` binds a loopback port, routes each call
to the OpenAI or Anthropic handlers (after authentication and scripted leading errors),
serves the admin endpoints and offers the in-process helpers tests use."""

from __future__ import annotations

import copy
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler
from werkzeug.wrappers import Request, Response

import mmirage_beam.providers  # noqa: F401 - the built-in providers register their fakes
from mmirage_beam.providers.anthropic.fake import AnthropicApi
from mmirage_beam.providers.gemini import fake as gemini
from mmirage_beam.providers.mistral.fake import MISTRAL, MistralApi
from mmirage_beam.providers.mistral.fake import PREFIX as MISTRAL_PREFIX
from mmirage_beam.providers.openai.fake import OpenAIApi
from mmirage_beam.providers.openai.fake_profile_api import ProfileApi
from mmirage_beam.providers.openai.fake_profiles import PROFILES
from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.scripting import (
    SCRIPT_DEFAULTS,
    SCRIPT_PARSERS,
    parse_delay,
)
from mmirage_beam.testing.fake_provider.serving import serve_in_thread, stop_serving
from mmirage_beam.testing.fake_provider.store import Batch, Store
from mmirage_beam.testing.fake_provider.wire import (
    ANTHROPIC,
    GEMINI,
    OPENAI,
    PROVIDERS,
    ApiError,
    error_response,
    json_response,
    new_id,
    status_error,
)
from mmirage_beam.testing.fake_registry import registered_fakes

__all__ = ["FakeProviderServer"]

_LOG = logging.getLogger("mmirage_beam.testing.fake_provider")


def check_loopback(host: str) -> None:
    """Raises ValueError unless ``host`` is a loopback address or ``localhost``."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"the fake provider binds loopback addresses only, not {host!r}")


class _QuietRequestHandler(WSGIRequestHandler):
    """Sends Werkzeug's per-request lines to this module's logger at DEBUG."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Logs the request line at DEBUG."""
        _LOG.debug("%s %r %s %s", self.address_string(), self.requestline, code, size)

    def log(self, type: str, message: str, *args: Any) -> None:
        """Logs Werkzeug's messages (info at DEBUG, others at WARNING)."""
        level = logging.DEBUG if type == "info" else logging.WARNING
        _LOG.log(level, "%s - " + message.rstrip(), self.address_string(), *args)


def check_provider(provider: str | None) -> None:
    """Raises ValueError unless ``provider`` is one the fake serves (a profile such as
    ``azure-openai`` included) or None."""
    if provider is not None and provider not in PROVIDERS and provider not in PROFILES:
        known = (*PROVIDERS, *PROFILES)
        raise ValueError(f"provider must be one of {known} or None, got {provider!r}")


class FakeProviderServer:
    """Embedded OpenAI + Anthropic batch API fake on one loopback port.

    Use as a context manager (``with FakeProviderServer() as fake:``) or call
    :meth:`start` and :meth:`stop`. All state is in memory. See the package docstring for
    the endpoints, scripting keys, prompt markers and answer rules.

    Args:
        host: loopback address to bind (``127.0.0.1``, ``::1`` or ``localhost``).
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        processing_delay_secs: seconds from creation until a batch has finished; 0
            means finished on the first read after creation.
        clock: returns the current Unix time in seconds; injectable for tests.
        max_batch_file_bytes: the largest ``purpose=batch`` upload accepted, in bytes
            (default 200,000,000 bytes: 200 MB, OpenAI's batch input limit); larger
            uploads get 400 "File is too large.". Tests lower it to avoid uploading 200 MB.
        models: model names served beside those the rule table knows
            (:mod:`mmirage_beam.providers.model_rules`; ``--models`` on the command
            line); any other name is refused as its service refuses it
            (:mod:`~mmirage_beam.testing.fake_provider.rules`).

    Raises:
        ValueError: for a non-loopback host or a negative delay.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        processing_delay_secs: float = 0.0,
        *,
        clock: Callable[[], float] = time.time,
        max_batch_file_bytes: int = limits.OPENAI_MAX_FILE_BYTES,
        models: Iterable[str] = (),
    ) -> None:
        check_loopback(host)
        if isinstance(max_batch_file_bytes, bool) or not isinstance(max_batch_file_bytes, int):
            raise ValueError(f"max_batch_file_bytes must be an int, got {max_batch_file_bytes!r}")
        self._host = host
        self._requested_port = port
        self._store = Store(
            clock,
            parse_delay("processing_delay_secs", processing_delay_secs),
            max_batch_file_bytes,
        )
        self._models = frozenset(models)
        self._store.models = self._models
        self._openai = OpenAIApi(self._store)
        self._anthropic = AnthropicApi(self._store)
        self._gemini = gemini.GeminiApi(self._store)
        self._mistral = MistralApi(self._store)
        self._profiles = [ProfileApi(self._store, profile) for profile in PROFILES.values()]
        # fakes that live in their provider's package (mmirage_beam.testing.fake_registry)
        self._registered = {name: cls(self._store) for name, cls in registered_fakes().items()}
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._url_map = Map(
            [
                Rule("/v1/files", methods=["POST"], endpoint="files_create"),
                Rule("/v1/files", methods=["GET"], endpoint="files_list"),
                Rule("/v1/files/<file_id>", methods=["GET"], endpoint="files_retrieve"),
                Rule("/v1/files/<file_id>", methods=["DELETE"], endpoint="files_delete"),
                Rule("/v1/files/<file_id>/content", methods=["GET"], endpoint="files_content"),
                Rule("/v1/batches", methods=["POST"], endpoint="batches_create"),
                Rule("/v1/batches", methods=["GET"], endpoint="batches_list"),
                Rule("/v1/batches/<batch_id>", methods=["GET"], endpoint="batches_retrieve"),
                Rule("/v1/batches/<batch_id>/cancel", methods=["POST"], endpoint="batches_cancel"),
                Rule(
                    "/v1/messages/count_tokens", methods=["POST"], endpoint="messages_count_tokens"
                ),
                Rule("/v1/messages/batches", methods=["POST"], endpoint="messages_batches_create"),
                Rule("/v1/messages/batches", methods=["GET"], endpoint="messages_batches_list"),
                Rule(
                    "/v1/messages/batches/<batch_id>",
                    methods=["GET"],
                    endpoint="messages_batches_retrieve",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>",
                    methods=["DELETE"],
                    endpoint="messages_batches_delete",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>/cancel",
                    methods=["POST"],
                    endpoint="messages_batches_cancel",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>/results",
                    methods=["GET"],
                    endpoint="messages_batches_results",
                ),
                Rule("/_fake/script", methods=["GET", "POST"], endpoint="admin_script"),
                Rule("/_fake/state", methods=["GET"], endpoint="admin_state"),
                Rule("/_fake/reset", methods=["POST"], endpoint="admin_reset"),
            ],
            strict_slashes=False,
        )
        self._gemini_map = Map(gemini.routes(), strict_slashes=False)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeProviderServer:
        """Binds the port and serves in a daemon thread; returns ``self``."""
        with self._store.lock:
            if self._server is not None:
                return self
            self._server, self._thread = serve_in_thread(
                self._host,
                self._requested_port,
                self._wsgi_app,
                _QuietRequestHandler,
                "fake-provider",
            )
            self._store.results_base_url = self.base_url
        _LOG.info("fake provider listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stops serving and closes the port (idempotent)."""
        with self._store.lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        stop_serving(server, thread)

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port. Raises RuntimeError before :meth:`start`."""
        server = self._server
        if server is None:
            raise RuntimeError("FakeProviderServer is not started")
        return int(server.server_port)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no trailing slash)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``, for ``openai.OpenAI(base_url=...)``."""
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url``, for ``anthropic.Anthropic(base_url=...)``."""
        return self.base_url

    @property
    def gemini_base_url(self) -> str:
        """``base_url``, for ``genai.Client(http_options={"base_url": ...})`` (the SDK
        adds ``v1beta/...`` and ``upload/v1beta/files`` (google-genai 2.x) or ``v1/...``
        (3.x); the fake serves both)."""
        return self.base_url

    @property
    def mistral_base_url(self) -> str:
        """``base_url + "/mistral"``, for ``Mistral(server_url=...)`` (its paths are the
        OpenAI fake's, ``/v1/files``..., so they live under a prefix of their own)."""
        return self.base_url + MISTRAL_PREFIX

    def base_url_for(self, provider: str) -> str:
        """The base URL ``provider``'s SDK takes (``<provider>_base_url``; for an
        OpenAI-compatible profile, ``azure-openai``, ``groq``, ``together``, the openai
        SDK's ``base_url`` under that profile's prefix, e.g. ``.../groq/openai/v1``).

        Raises:
            ValueError: a provider this fake does not serve.
        """
        if provider in PROFILES:  # OpenAI-compatible services: <base>/<prefix>/v1
            return self.base_url + PROFILES[provider].api_prefix
        if provider in self._registered:  # a registered fake's routes: at the root
            return self.base_url
        if provider not in PROVIDERS:
            known = (*PROVIDERS, *PROFILES)
            raise ValueError(f"provider must be one of {known}, got {provider!r}")
        return getattr(self, f"{provider}_base_url")

    # -- in-process helpers ---------------------------------------------------------------

    def submitted_requests(self, provider: str | None = None) -> list[dict[str, Any]]:
        """Every request line accepted into a created batch, in order of receipt.

        Each entry is ``{"provider", "batch_id", "custom_id", "request"}`` where
        ``request`` is the OpenAI input line or the Anthropic ``{custom_id, params}``.
        Lines of OpenAI batches that later fail validation are included when they parsed
        as an object with a ``custom_id``.
        """
        check_provider(provider)
        with self._store.lock:
            return [
                copy.deepcopy(entry)
                for entry in self._store.submitted
                if provider is None or entry["provider"] == provider
            ]

    def create_counts(self) -> dict[str, int]:
        """custom_id -> number of created batches (either provider) that contained it."""
        with self._store.lock:
            return dict(self._store.create_counts)

    def call_counts(self) -> dict[str, int]:
        """Endpoint name -> number of HTTP calls received (including rejected ones)."""
        with self._store.lock:
            return dict(self._store.call_counts)

    def batches(self, provider: str | None = None) -> list[dict[str, Any]]:
        """The current batch objects (as the API shows them now), oldest first."""
        check_provider(provider)
        with self._store.lock:
            now = self._store.clock()
            return [
                self._view(batch, now)
                for batch in self._store.batches.values()
                if not batch.deleted
                and (provider is None or (batch.profile or batch.provider) == provider)
            ]

    def expire_results(self, batch_id: str) -> None:
        """Make an ended batch's results expire now, as the real services do after their
        retention (OpenAI: the output and error files are deleted, ``files.retrieve`` and
        ``files.content`` answer 404 ``No such File object``; Anthropic: the batch stays
        viewable, ``results`` answers 404 ``not_found_error``).

        Raises:
            ValueError: no OpenAI or Anthropic batch has this id.
        """
        with self._store.lock:
            batch = self._store.batches.get(batch_id)
            if batch is None or batch.provider not in ("openai", "anthropic"):
                raise ValueError(f"no OpenAI or Anthropic batch {batch_id!r}")
            now = self._store.clock()
            if batch.provider == "anthropic":
                batch.results_expire_at = now
                return
            for file_id in (batch.output_file_id, batch.error_file_id):
                stored = self._store.files.get(file_id) if file_id else None
                if stored is not None:
                    stored.expires_at = int(now)

    def script(self, **behaviour: Any) -> None:
        """Merges scripting keys into the current script (``None`` restores a default).

        Raises:
            ValueError: for an unknown key or a bad value (nothing is changed then).
        """
        unknown = set(behaviour) - set(SCRIPT_DEFAULTS)
        if unknown:
            raise ValueError(
                f"unknown script keys {sorted(unknown)}; known: {sorted(SCRIPT_DEFAULTS)}"
            )
        parsed = {
            key: SCRIPT_DEFAULTS[key] if value is None else SCRIPT_PARSERS[key](value)
            for key, value in behaviour.items()
        }
        with self._store.lock:
            merged = {**self._store.script, **parsed}
            if (
                merged["expire_after_requests"] is not None
                and merged["cancel_after_requests"] is not None
            ):
                raise ValueError(
                    "script at most one of 'expire_after_requests' and 'cancel_after_requests'"
                )
            self._store.script = merged
        if parsed:
            _LOG.info("fake provider scripted: %s", sorted(parsed))

    def script_view(self) -> dict[str, Any]:
        """The current script as JSON-friendly values (counters show what is left)."""
        with self._store.lock:
            out = {}
            for key, value in self._store.script.items():
                out[key] = value.view() if hasattr(value, "view") else value
            return out

    def admit_models(self, *names: str) -> None:
        """Serves ``names`` too (beside the rule table's models and ``models=``), until
        :meth:`reset`."""
        with self._store.lock:
            self._store.models = self._store.models | frozenset(names)

    def reset(self) -> None:
        """Clears the script and forgets every file, batch, record and counter."""
        with self._store.lock:
            self._store.reset()
            self._store.models = self._models

    def _view(self, batch: Batch, now: float) -> dict[str, Any]:
        """The batch object at time ``now`` (materialising results once it is done)."""
        if batch.provider == GEMINI:
            return self._gemini.view(batch, now)
        if batch.provider == MISTRAL:
            return self._mistral.view(batch, now)
        api = self._openai if batch.provider == OPENAI else self._anthropic
        return api.view(batch, now)

    # -- HTTP plumbing --------------------------------------------------------------------

    def _wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        try:
            response = self._dispatch(request)
        finally:
            request.close()  # closes spooled upload files
        # Every answer carries a request id, as the real services do; the SDKs expose it
        # as ``_request_id`` (OpenAI ``x-request-id``, Anthropic ``request-id``).
        header = "request-id" if request.path.startswith("/v1/messages") else "x-request-id"
        response.headers[header] = new_id("req_")
        return response(environ, start_response)

    @property
    def registered_names(self) -> list[str]:
        """The names of the fakes registered from their provider's package, sorted."""
        return sorted(self._registered)

    def registered_fake(self, name: str) -> Any:
        """The handler of the fake registered as ``name`` (KeyError: none)."""
        return self._registered[name]

    def _dispatch(self, request: Request) -> Response:
        for fake in self._registered.values():
            if fake.claims(request.path):
                return fake.handle(request)
        if request.path.startswith(MISTRAL_PREFIX + "/"):
            return self._mistral.handle(request)
        for profile_api in self._profiles:  # /azure/openai/v1/..., /groq/..., /together/...
            if profile_api.serves(request.path):
                return profile_api.handle(request)
        provider = ANTHROPIC if request.path.startswith("/v1/messages") else OPENAI
        url_map = self._url_map
        if gemini.serves(request):  # /v1beta/..., or a Gemini-shaped /v1/... call
            provider, url_map = GEMINI, self._gemini_map
        adapter = url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
            args.pop("api_version", None)  # Gemini's v1beta or v1: the same handlers
        except HTTPException as exc:
            status = exc.code or 404
            kind = {ANTHROPIC: "not_found_error", GEMINI: "NOT_FOUND"}.get(
                provider, "invalid_request_error"
            )
            return error_response(
                provider,
                ApiError(status, kind, f"{request.method} {request.path}: {exc.name}"),
            )
        if endpoint.startswith("admin_"):
            handler = getattr(self, f"_h_{endpoint}")
        elif endpoint.startswith("messages_"):
            handler = getattr(self._anthropic, endpoint)
        elif endpoint.startswith("gemini_"):
            handler = getattr(self._gemini, endpoint)
        else:
            handler = getattr(self._openai, endpoint)
        if endpoint.startswith("admin_"):
            try:
                return handler(request, **args)
            except ValueError as exc:
                return json_response({"error": str(exc)}, 400)
        with self._store.lock:
            self._store.call_counts[endpoint] = self._store.call_counts.get(endpoint, 0) + 1
        try:
            self._check_auth(provider, request)
            leading = self._store.take_leading_error(endpoint)
            if leading is not None:
                raise status_error(provider, *leading, f"leading error on {endpoint}", args)
            return handler(request, **args)
        except ApiError as err:
            return error_response(provider, err)
        except Exception:  # a bug in the fake: answer 500 rather than drop the connection
            _LOG.exception("fake provider failed on %s %s", request.method, request.path)
            kind = {ANTHROPIC: "api_error", GEMINI: "INTERNAL"}.get(provider, "server_error")
            return error_response(provider, ApiError(500, kind, "Internal error in the fake."))

    @staticmethod
    def _check_auth(provider: str, request: Request) -> None:
        if provider == GEMINI:  # the SDK sends x-goog-api-key (the REST docs: ?key=)
            if request.headers.get("x-goog-api-key", "").strip() or request.args.get("key"):
                return
            if request.path.startswith("/upload/") and request.args.get("upload_id"):
                return  # a resumable upload's URL is its own credential
            raise ApiError(401, "UNAUTHENTICATED", "API key not valid. Please pass a valid key.")
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return
        if provider == ANTHROPIC:
            if request.headers.get("x-api-key", "").strip():
                return
            raise ApiError(401, "authentication_error", "x-api-key header is required")
        raise ApiError(
            401,
            "invalid_request_error",
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        )

    # -- admin endpoints ------------------------------------------------------------------

    def _h_admin_script(self, request: Request) -> Response:
        if request.method == "POST":
            payload = json.loads(request.get_data() or b"{}")
            if not isinstance(payload, dict):
                raise ValueError("the script must be a JSON object")
            self.script(**payload)
        return json_response(self.script_view())

    def _h_admin_state(self, request: Request) -> Response:
        return json_response(
            {
                "submitted_requests": self.submitted_requests(),
                "create_counts": self.create_counts(),
                "call_counts": self.call_counts(),
                "batches": self.batches(),
                "script": self.script_view(),
            }
        )

    def _h_admin_reset(self, request: Request) -> Response:
        self.reset()
        return json_response({"ok": True})
