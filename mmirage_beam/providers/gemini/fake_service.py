"""The Gemini API's fake as the fake's shared core sees it: its name, error shape (a
``google.rpc.Status``), rule refusals, credentials (:class:`GeminiRoutes`); its subclass
with the routes and handlers, :class:`~mmirage_beam.providers.gemini.fake.GeminiFake`, is
registered with
:mod:`mmirage_beam.testing.fake_registry` from this package's ``__init__``; Vertex AI's fake
answers in the same error shape.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from werkzeug.wrappers import Request

from mmirage_beam.providers.gemini import FAKE_ENDPOINT_NAMES
from mmirage_beam.providers.gemini.rules import RULES
from mmirage_beam.testing.fake_provider import lifecycle
from mmirage_beam.testing.fake_provider.routing import RoutedFake
from mmirage_beam.testing.fake_provider.store import Batch
from mmirage_beam.testing.fake_provider.wire import ApiError, ErrorShape, register_error_shape

GEMINI = "gemini"
#: the endpoint names of its calls (``call_counts()``, ``leading_errors.paths``)
ENDPOINT_NAMES = FAKE_ENDPOINT_NAMES
#: google.rpc status names of HTTP codes (Gemini's error shape)
GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class GoogleErrors(ErrorShape):
    """``{"error": {code, message, status}}`` (``status``: the google.rpc name)."""

    missing_route_kind = "NOT_FOUND"
    internal_kind = "INTERNAL"

    def body(self, err: ApiError) -> dict[str, Any]:
        """The google.rpc error object."""
        status = err.error_type if err.error_type.isupper() else None
        return {
            "error": {
                "code": err.status,
                "message": err.message,
                "status": status or GOOGLE_STATUS.get(err.status, "UNKNOWN"),
            }
        }

    def not_found(self, args: Mapping[str, str]) -> ApiError:
        """``NOT_FOUND`` "files/<id> not found." or "batches/<id> not found."."""
        what = (
            f"files/{args['file_id']}" if "file_id" in args else f"batches/{args.get('batch_id')}"
        )
        return ApiError(404, "NOT_FOUND", f"{what} not found.")

    def scripted_kind(self, status: int) -> tuple[str, str | None]:
        """The google.rpc name of ``status``."""
        return GOOGLE_STATUS.get(status, "UNKNOWN"), None


register_error_shape(GEMINI, GoogleErrors())


def google_job_state(batch: Batch, now: float) -> str:
    """The state of a Gemini batch or a Vertex AI batch prediction job at ``now`` (Unix
    seconds), without its prefix (``BATCH_STATE_``, ``JOB_STATE_``): ``PENDING`` for the
    first third of the delay, then ``FAILED`` for a bad input, else ``RUNNING`` until the
    delay has passed, then ``EXPIRED`` or ``CANCELLED`` for a scripted stop, else
    ``SUCCEEDED``; once cancelled, ``CANCELLING`` for a third of the delay, then
    ``CANCELLED`` (Gemini's ``BatchState`` has no ``CANCELLING``: its fake shows
    ``RUNNING``)."""
    d, t0, tc = batch.delay_secs, batch.created, batch.cancel_requested_at
    if tc is not None:
        return "CANCELLED" if now >= tc + d / 3 else "CANCELLING"
    if now < t0 + d / 3:
        return "PENDING"
    if batch.errors is not None:
        return "FAILED"
    if now < t0 + d:
        return "RUNNING"
    return {"expired": "EXPIRED", "cancelled": "CANCELLED"}.get(batch.stop_kind or "", "SUCCEEDED")


#: the states of :func:`google_job_state` in which a job has ended
GOOGLE_ENDED = ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")


def cancel_google_job(batch: Batch, now: float, refusal: ApiError) -> None:
    """Cancel a Gemini batch or a Vertex AI job at ``now`` (Unix seconds)
    (:func:`~mmirage_beam.testing.fake_provider.lifecycle.request_cancel`): raises
    ``refusal`` once it has ended (a state in :data:`GOOGLE_ENDED`)."""
    ended = google_job_state(batch, now) in GOOGLE_ENDED
    lifecycle.request_cancel(batch, now, ended, refusal)


def gemini_model_error(model: str, models: Collection[str]) -> ApiError | None:
    """404 ``NOT_FOUND`` for a model the Gemini API does not serve, else None."""
    if RULES.is_known(model, models):
        return None
    return ApiError(
        404,
        "NOT_FOUND",
        f"models/{model} is not found for API version v1beta, or is not supported for "
        "batchGenerateContent. Call ListModels to see the list of available models and "
        "their supported methods.",
    )


class GeminiRoutes(RoutedFake):
    """The Gemini API's files and batch mode under ``/v1beta``, ``/v1`` and ``/upload``
    (told apart from OpenAI's ``/v1/...`` by :func:`~mmirage_beam.providers.gemini.fake.serves`:
    the ``x-goog-api-key`` header, ``?key=`` or a Gemini-shaped path). The registered
    :class:`~mmirage_beam.providers.gemini.fake.GeminiFake` adds the routes and handlers."""

    provider = GEMINI
    provider_names = (GEMINI,)
    labels = (("Gemini", GEMINI),)
    version_args = ("api_version",)  # v1beta or v1: the same handlers

    def check_auth(self, request: Request) -> None:
        """``x-goog-api-key`` (the SDK) or ``?key=`` (the REST docs); a resumable upload's
        URL is its own credential."""
        if request.headers.get("x-goog-api-key", "").strip() or request.args.get("key"):
            return
        if request.path.startswith("/upload/") and request.args.get("upload_id"):
            return
        raise ApiError(401, "UNAUTHENTICATED", "API key not valid. Please pass a valid key.")
