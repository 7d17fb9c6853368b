"""The shared request plumbing of a provider's fake: a table of werkzeug routes, then
the call count, authentication, scripted leading errors and the provider's error shape.

A provider's fake (registered with :mod:`mmirage_beam.testing.fake_registry`) subclasses
:class:`RoutedFake`: it names its ``provider`` (the error shape registered with
:func:`~mmirage_beam.testing.fake_provider.wire.register_error_shape`), its ``rules``
(werkzeug ``Rule`` objects whose endpoints are method names of its ``api`` object), what it
``claims`` and how it checks credentials (``check_auth``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.testing.fake_provider.store import Batch, Store
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    error_response,
    error_shape,
    new_id,
    status_error,
)

__all__ = ["RoutedFake", "route_rules"]

_LOG = logging.getLogger("mmirage_beam.testing.fake_provider")


def route_rules(table: Mapping[str, Mapping[str, str]], prefix: str = "") -> list[Rule]:
    """New werkzeug rules of a route table ``{path: {HTTP method: endpoint}}``, one rule
    per path and method in the table's order, each path behind ``prefix`` (a rule binds
    to one map: one list per map)."""
    return [
        Rule(prefix + path, methods=[method], endpoint=endpoint)
        for path, endpoints in table.items()
        for method, endpoint in endpoints.items()
    ]


class RoutedFake:
    """A provider's fake served from a route table (see the module docstring).

    Subclasses set ``provider`` and ``rules`` and override :meth:`claims`,
    :meth:`check_auth` and :meth:`make_api`; ``request_id_header`` names the header that
    carries each answer's request id, as the service's SDK reads it."""

    provider: ClassVar[str] = ""
    #: the names ``batches(provider)`` and ``base_url_for(provider)`` accept for it
    provider_names: ClassVar[tuple[str, ...]] = ()
    #: ``(label, provider name)`` pairs of the start-up line
    labels: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: URL arguments that only pick a version of the same handler (dropped before the call)
    version_args: ClassVar[tuple[str, ...]] = ()
    request_id_header: ClassVar[str] = "x-request-id"
    #: the path under the server's root where its SDK's base URL points ("" = the root)
    url_prefix: ClassVar[str] = ""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.api = self.make_api(store)
        self._map = Map(list(self.rules()), strict_slashes=False)

    # -- what a subclass says -------------------------------------------------------------

    def rules(self) -> Sequence[Rule]:
        """The route table: endpoints are method names of :attr:`api`."""
        raise NotImplementedError

    def make_api(self, store: Store) -> Any:
        """The object whose methods answer the endpoints."""
        raise NotImplementedError

    def claims(self, request: Request) -> bool:
        """Whether ``request`` is this provider's."""
        raise NotImplementedError

    def check_auth(self, request: Request) -> None:
        """Raises :class:`ApiError` (401) unless the request carries a credential."""

    # -- what the core calls --------------------------------------------------------------

    def base_url(self, root: str, provider: str) -> str:
        """The base URL ``provider``'s SDK takes, ``root`` being the server's."""
        return root + self.url_prefix

    def batch_view(self, batch: Batch, now: float) -> dict[str, Any] | None:
        """The API object of ``batch`` at ``now`` when it is this provider's, else None."""
        if batch.provider != self.provider or not hasattr(self.api, "view"):
            return None
        return self.api.view(batch, now)

    def handle(self, request: Request) -> Response:
        """Answers a request :meth:`claims` accepted."""
        response = self._answer(request)
        response.headers[self.request_id_header] = new_id("req_")
        return response

    def _answer(self, request: Request) -> Response:
        adapter = self._map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
        except HTTPException as exc:
            status = exc.code or 404
            kind = error_shape(self.provider).missing_route_kind
            return error_response(
                self.provider,
                ApiError(status, kind, f"{request.method} {request.path}: {exc.name}"),
            )
        for name in self.version_args:
            args.pop(name, None)
        with self.store.lock:
            self.store.call_counts[endpoint] = self.store.call_counts.get(endpoint, 0) + 1
        try:
            self.check_auth(request)
            leading = self.store.take_leading_error(endpoint)
            if leading is not None:
                raise status_error(self.provider, *leading, f"leading error on {endpoint}", args)
            return getattr(self.api, endpoint)(request, **args)
        except ApiError as err:
            return error_response(self.provider, err)
        except Exception:  # a bug in the fake: answer 500 rather than drop the connection
            _LOG.exception("fake provider failed on %s %s", request.method, request.path)
            kind = error_shape(self.provider).internal_kind
            return error_response(self.provider, ApiError(500, kind, "Internal error in the fake."))
