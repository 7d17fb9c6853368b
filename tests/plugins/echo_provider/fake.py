"""The fake of provider ``echo``: ``POST /echo/jobs`` ``{"requests": [{"custom_id",
"prompt"}]}`` creates a job whose answers are the shared deterministic answers, ``GET
/echo/jobs/<id>`` reads it; the ``x-echo-key`` header is required; errors are
``{"fault": {"status", "reason"}}``. Everything provider-specific is here: routes, the
header that tells it apart, the error shape, the lifecycle phase names."""

from __future__ import annotations

from typing import Any

from werkzeug.routing import Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.testing.fake_provider import lifecycle
from mmirage_beam.testing.fake_provider.answers import make_answer
from mmirage_beam.testing.fake_provider.routing import RoutedFake
from mmirage_beam.testing.fake_provider.store import Batch, Item, Store
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    ErrorShape,
    json_payload,
    json_response,
    register_error_shape,
)
from tests.plugins.echo_provider import PROVIDER


class EchoErrors(ErrorShape):
    """``{"fault": {"status", "reason"}}``."""

    missing_route_kind = "no_such_route"
    internal_kind = "fault"

    def body(self, err: ApiError) -> dict[str, Any]:
        """The fault object."""
        return {"fault": {"status": err.status, "reason": err.message}}

    def scripted_kind(self, status: int) -> tuple[str, str | None]:
        """One kind for every scripted status."""
        return "scripted", None


register_error_shape(PROVIDER, EchoErrors())


class EchoApi:
    """The two handlers, over the shared store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def echo_jobs_create(self, request: Request) -> Response:
        """Creates a job of the request's prompts."""
        payload = json_payload(request)
        with self.store.lock:
            now = self.store.clock()
            batch = self.store.new_batch(PROVIDER, "echo_", now)
            for entry in payload.get("requests", []):
                self.store.record(batch, entry["custom_id"], entry)
                answer = make_answer(entry["prompt"], 0, "text", None)
                line = {"custom_id": entry["custom_id"], "text": answer.text}
                batch.items.append(Item(entry["custom_id"], line, True))
            return json_response(self.view(batch, now), 200)

    def echo_jobs_get(self, request: Request, job_id: str) -> Response:
        """Reads a job (404 in the fault shape when unknown)."""
        with self.store.lock:
            batch = self.store.get_batch(PROVIDER, job_id)
            return json_response(self.view(batch, self.store.clock()))

    def view(self, batch: Batch, now: float) -> dict[str, Any]:
        """The job object: ``running`` until the delay has passed, then ``done``."""
        done = lifecycle.processed(batch, now) == len(batch.items)
        return {"id": batch.id, "state": "done" if done else "running"}


class EchoFake(RoutedFake):
    """Registered with ``mmirage_beam.testing.fake_registry`` by :func:`register`."""

    provider = PROVIDER
    provider_names = (PROVIDER,)
    labels = (("Echo", PROVIDER),)
    url_prefix = "/echo"

    def rules(self) -> list[Rule]:
        """Its routes."""
        return [
            Rule("/echo/jobs", methods=["POST"], endpoint="echo_jobs_create"),
            Rule("/echo/jobs/<job_id>", methods=["GET"], endpoint="echo_jobs_get"),
        ]

    def make_api(self, store: Store) -> Any:
        """:class:`EchoApi`."""
        return EchoApi(store)

    def claims(self, request: Request) -> bool:
        """``/echo/...``."""
        return request.path.startswith("/echo/")

    def check_auth(self, request: Request) -> None:
        """The ``x-echo-key`` header."""
        if not request.headers.get("x-echo-key", "").strip():
            raise ApiError(401, "unauthenticated", "x-echo-key is required")
