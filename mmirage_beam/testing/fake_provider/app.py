"""The HTTP server: :class:`FakeProviderServer` binds a loopback port, serves the admin
endpoints, hands every other call to the provider fake that claims it (each registered
with :mod:`mmirage_beam.testing.fake_registry` from its provider's package) and offers
the in-process helpers tests use. It names no provider."""

from __future__ import annotations

import copy
import ipaddress
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.scripting import (
    SCRIPT_DEFAULTS,
    SCRIPT_PARSERS,
    parse_delay,
)
from mmirage_beam.testing.fake_provider.serving import ThreadServed
from mmirage_beam.testing.fake_provider.store import Batch, Store, StoreCounts
from mmirage_beam.testing.fake_provider.wire import json_response, new_id
from mmirage_beam.testing.fake_registry import fallback_names, registered_fakes

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


def provider_names(name: str, fake: Any) -> tuple[str, ...]:
    """The provider names a registered fake answers for (its ``provider_names``, else
    its registered ``name``)."""
    return tuple(getattr(fake, "provider_names", ()) or (name,))


class FakeProviderServer(ThreadServed, StoreCounts):
    """Embedded fake of the providers' batch APIs on one loopback port: every fake
    registered with :mod:`mmirage_beam.testing.fake_registry` (the built-ins register
    theirs from their packages) answers the calls it claims.

    Use as a context manager (``with FakeProviderServer() as fake:``) or call
    :meth:`start` and :meth:`stop`. All state is in memory. See the package docstring for
    the endpoints, scripting keys, prompt markers and answer rules.

    Args:
        host: loopback address to bind (``127.0.0.1``, ``::1`` or ``localhost``).
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        processing_delay_secs: seconds from creation until a batch has finished; 0
            means finished on the first read after creation.
        clock: returns the current Unix time in seconds; injectable for tests.
        max_batch_file_bytes: the largest batch input upload accepted, in bytes
            (default :data:`~mmirage_beam.testing.fake_provider.limits.MAX_BATCH_FILE_BYTES`,
            200 MB); larger uploads get 400 "File is too large.". Tests lower it to avoid
            uploading 200 MB.
        models: model names served beside those the rule table knows
            (:mod:`mmirage_beam.providers.model_rules`; ``--models`` on the command
            line); any other name is refused as its service refuses it (each provider's
            ``fake_service.py``).

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
        max_batch_file_bytes: int = limits.MAX_BATCH_FILE_BYTES,
        models: Iterable[str] = (),
    ) -> None:
        check_loopback(host)
        if isinstance(max_batch_file_bytes, bool) or not isinstance(max_batch_file_bytes, int):
            raise ValueError(f"max_batch_file_bytes must be an int, got {max_batch_file_bytes!r}")
        self._store = Store(
            clock,
            parse_delay("processing_delay_secs", processing_delay_secs),
            max_batch_file_bytes,
        )
        super().__init__(host, port, self._store.lock, "fake-provider")
        self._models = frozenset(models)
        self._store.models = self._models
        # every registered fake, in rank order; the fallback is asked last
        self._registered = {name: cls(self._store) for name, cls in registered_fakes().items()}
        fallback = fallback_names()
        self._claim_order = [f for n, f in self._registered.items() if n not in fallback] + [
            f for n, f in self._registered.items() if n in fallback
        ]
        self._by_provider: dict[str, Any] = {}
        for name, fake in self._registered.items():
            for provider in provider_names(name, fake):
                self._by_provider.setdefault(provider, fake)
        self._admin_map = Map(
            [
                Rule("/_fake/script", methods=["GET", "POST"], endpoint="admin_script"),
                Rule("/_fake/state", methods=["GET"], endpoint="admin_state"),
                Rule("/_fake/reset", methods=["POST"], endpoint="admin_reset"),
            ],
            strict_slashes=False,
        )

    # -- lifecycle: ThreadServed's start, stop, with, port and base_url -------------------

    def _started(self) -> None:
        self._store.results_base_url = self.base_url
        _LOG.info("fake provider listening on %s", self.base_url)

    def __getattr__(self, name: str) -> str:
        # ``fake.<provider>_base_url`` (``openai_base_url``, ``mistral_base_url``...): the
        # base URL that provider's SDK takes, as base_url_for(<provider>) gives it.
        if name.endswith("_base_url") and not name.startswith("_"):
            provider = name[: -len("_base_url")]
            if provider in self.__dict__.get("_by_provider", {}):
                return self.base_url_for(provider)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def base_url_for(self, provider: str) -> str:
        """The base URL ``provider``'s SDK takes: its fake's ``base_url(root, provider)``
        (e.g. ``.../v1`` for the openai SDK, ``.../groq/openai/v1`` for the groq profile),
        else the server's root.

        Raises:
            ValueError: a provider this fake does not serve.
        """
        fake = self._by_provider.get(provider)
        if fake is None:
            known = tuple(self._by_provider)
            raise ValueError(f"provider must be one of {known}, got {provider!r}")
        if hasattr(fake, "base_url"):
            return fake.base_url(self.base_url, provider)
        return self.base_url

    def check_provider(self, provider: str | None) -> None:
        """Raises ValueError unless ``provider`` is one the fake serves or None."""
        if provider is not None and provider not in self._by_provider:
            known = tuple(self._by_provider)
            raise ValueError(f"provider must be one of {known} or None, got {provider!r}")

    # -- in-process helpers ---------------------------------------------------------------

    def submitted_requests(self, provider: str | None = None) -> list[dict[str, Any]]:
        """Every request line accepted into a created batch, in order of receipt.

        Each entry is ``{"provider", "batch_id", "custom_id", "request"}`` where
        ``request`` is the request as the provider's batch holds it (an input file's line,
        a ``{custom_id, params}`` request...). Lines of batches that later fail
        validation are included when they parsed as an object with a ``custom_id``.
        """
        self.check_provider(provider)
        with self._store.lock:
            return [
                copy.deepcopy(entry)
                for entry in self._store.submitted
                if provider is None or entry["provider"] == provider
            ]

    def batches(self, provider: str | None = None) -> list[dict[str, Any]]:
        """The current batch objects (as the API shows them now), oldest first."""
        self.check_provider(provider)
        with self._store.lock:
            now = self._store.clock()
            views = (
                self._view(batch, now)
                for batch in self._store.batches.values()
                if not batch.deleted
                and (provider is None or (batch.profile or batch.provider) == provider)
            )
            return [view for view in views if view is not None]

    def expire_results(self, batch_id: str) -> None:
        """Make an ended batch's results expire now, as the real services do after their
        retention (the fake of the batch's provider says how: its ``expire_results``).

        Raises:
            ValueError: no batch has this id, or its provider's fake cannot expire results.
        """
        with self._store.lock:
            batch = self._store.batches.get(batch_id)
            now = self._store.clock()
            for fake in self._registered.values():
                expire = getattr(fake, "expire_results", None)
                if batch is not None and expire is not None and expire(batch, now):
                    return
            raise ValueError(f"no batch {batch_id!r} whose results can expire")

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

    def _view(self, batch: Batch, now: float) -> dict[str, Any] | None:
        """The batch object at time ``now`` (materialising results once it is done), from
        the fake of its provider (None: no fake shows it)."""
        for fake in self._registered.values():
            view = getattr(fake, "batch_view", None)
            shown = view(batch, now) if view is not None else None
            if shown is not None:
                return shown
        return None

    # -- HTTP plumbing --------------------------------------------------------------------

    def _wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        try:
            response = self._dispatch(request)
        finally:
            request.close()  # closes spooled upload files
        # Every answer carries a request id, as the real services do; the SDKs expose it
        # as ``_request_id``. A fake that names its own header sets it; else x-request-id.
        if "request-id" not in response.headers:
            response.headers["x-request-id"] = new_id("req_")
        return response(environ, start_response)

    def labels(self, name: str | None = None) -> list[tuple[str, str]]:
        """``(label, provider name)`` of the start-up line, of every registered fake in
        rank order (or of fake ``name``)."""
        out: list[tuple[str, str]] = []
        for fake_name, fake in self._registered.items():
            if name is None or fake_name == name:
                out.extend(getattr(fake, "labels", ()) or ())
        return out

    @property
    def registered_names(self) -> list[str]:
        """The names of the fakes registered from their provider's package, sorted."""
        return sorted(self._registered)

    def registered_fake(self, name: str) -> Any:
        """The handler of the fake registered as ``name`` (KeyError: none)."""
        return self._registered[name]

    def _dispatch(self, request: Request) -> Response:
        if request.path.startswith("/_fake/"):
            try:
                endpoint, args = self._admin_map.bind_to_environ(request.environ).match()
            except HTTPException:
                pass  # not an admin path: the fakes answer (the fallback's 404)
            else:
                try:
                    return getattr(self, f"_h_{endpoint}")(request, **args)
                except ValueError as exc:
                    return json_response({"error": str(exc)}, 400)
        for fake in self._claim_order:
            if fake.claims(request):
                return fake.handle(request)
        return json_response(
            {"error": {"message": f"{request.method} {request.path}: Not Found"}}, 404
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
