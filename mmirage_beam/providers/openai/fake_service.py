"""OpenAI's fake as the fake's shared core sees it: its name, limits, error shape,
lifecycle phases, rule refusals, routes and credentials, and the two classes registered
with :mod:`mmirage_beam.testing.fake_registry` (from this package's ``__init__``):
:class:`~mmirage_beam.providers.openai.fake.OpenAIFake` (:class:`OpenAIRoutes` with the
handlers: the Files + Batches API, the fallback of the shared port: it answers what no
other fake claims) and :class:`~mmirage_beam.providers.openai.fake_profile_api.CompatibleFake`
(the OpenAI-compatible services, :mod:`~mmirage_beam.providers.openai.fake_profiles`).

The handlers are :mod:`~mmirage_beam.providers.openai.fake`'s; the endpoints, lifecycle
and markers are described in the docstring of :mod:`mmirage_beam.testing.fake_provider`
and in ``docs/fake-provider.md``.

Sources of the limits: OpenAI Batch API guide and API reference
(https://platform.openai.com/docs/guides/batch,
https://platform.openai.com/docs/api-reference/batch).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from werkzeug.routing import Rule
from werkzeug.wrappers import Request

from mmirage_beam.providers.openai import FAKE_ENDPOINT_NAMES
from mmirage_beam.providers.openai.fake_bodies import HttpFailure, oa_error
from mmirage_beam.providers.openai.rules import RULES
from mmirage_beam.testing.fake_provider import lifecycle, limits
from mmirage_beam.testing.fake_provider.routing import RoutedFake, route_rules
from mmirage_beam.testing.fake_provider.store import Batch
from mmirage_beam.testing.fake_provider.wire import ApiError, ErrorShape, register_error_shape

OPENAI = "openai"
#: the endpoint names of its calls (``call_counts()``, ``leading_errors.paths``)
ENDPOINT_NAMES = FAKE_ENDPOINT_NAMES

# The batch ``endpoint`` enum of the OpenAPI spec (CreateBatchRequest.endpoint).
OPENAI_ENDPOINTS = (
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
)
# Accepted at batch create, but every line gets a 400 ``unsupported_endpoint`` result: the
# fake does not fabricate image, video or moderation bodies.
OPENAI_UNFAKED_ENDPOINTS = (
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
)
OPENAI_MAX_LINES = 50_000
# "The file can contain up to 50,000 requests, and can be up to 200 MB in size" (Batch
# guide); a larger upload is refused with 400 "File is too large.".
OPENAI_MAX_FILE_BYTES = limits.MAX_BATCH_FILE_BYTES  # 200 MB, as the adapter reads it
# Files API: "Individual files can be up to 512 MB" (files create reference).
OPENAI_MAX_UPLOAD_BYTES = 512 * 1024 * 1024
# Batch input and output files expire 30 days after creation by default; a batch's
# ``output_expires_after.seconds`` is 3600..2592000 (CreateBatchRequest in the spec).
OPENAI_BATCH_FILE_LIFETIME_SECS = 30 * 24 * 60 * 60
OPENAI_OUTPUT_EXPIRES_MIN_SECS = 3600
OPENAI_OUTPUT_EXPIRES_MAX_SECS = 2_592_000
OPENAI_MAX_METADATA_PAIRS = 16
OPENAI_MAX_METADATA_KEY_CHARS = 64
OPENAI_MAX_METADATA_VALUE_CHARS = 512
OPENAI_BATCH_LIST_MAX_LIMIT = 100
OPENAI_FILE_LIST_MAX_LIMIT = 10_000
OPENAI_FILE_PURPOSES = frozenset(
    {"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}
)


class OpenAIErrors(ErrorShape):
    """``{"error": {message, type, param, code}}``; 404s "No batch found with id '...'."
    and "No such File object: ..."; 429 ``rate_limit_exceeded``."""

    def not_found(self, args: Mapping[str, str]) -> ApiError:
        """OpenAI's 404 for the file or batch of the URL."""
        if "file_id" in args:
            return ApiError(404, "invalid_request_error", f"No such File object: {args['file_id']}")
        return ApiError(
            404, "invalid_request_error", f"No batch found with id '{args.get('batch_id', '')}'."
        )

    def unknown_batch(self, batch_id: str) -> ApiError:
        """The 404 of ``batches.retrieve`` for an unknown id (``param: "id"``)."""
        return ApiError(
            404, "invalid_request_error", f"No batch found with id '{batch_id}'.", param="id"
        )

    def scripted_kind(self, status: int) -> tuple[str, str | None]:
        """``requests``/``rate_limit_exceeded`` for 429, ``server_error`` for 5xx."""
        kind = {429: "requests"}.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        return kind, {429: "rate_limit_exceeded", 503: "service_unavailable"}.get(status)


register_error_shape(OPENAI, OpenAIErrors())
# validating for D/3 before the requests run
lifecycle.register_processing_start(OPENAI, lambda d: d / 3)

OPENAI_TERMINAL = ("completed", "failed", "expired", "cancelled")
#: the Files and Batches routes below a base URL (``/v1`` on the shared port, a
#: compatible profile's own root, :mod:`.fake_profile_api`): ``{path: {method: handler}}``
FILES_AND_BATCHES = {
    "/files": {"POST": "files_create", "GET": "files_list"},
    "/files/<file_id>": {"GET": "files_retrieve", "DELETE": "files_delete"},
    "/files/<file_id>/content": {"GET": "files_content"},
    "/batches": {"POST": "batches_create", "GET": "batches_list"},
    "/batches/<batch_id>": {"GET": "batches_retrieve"},
    "/batches/<batch_id>/cancel": {"POST": "batches_cancel"},
}


def is_terminal(batch: Batch, now: float) -> bool:
    """Whether an OpenAI batch has reached a terminal status at ``now``."""
    return openai_phase(batch, now)["status"] in OPENAI_TERMINAL


def openai_phase(batch: Batch, now: float) -> dict[str, Any]:
    """OpenAI ``status`` and the ``*_at`` timestamps (Unix seconds or None) at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    v_end, ip_end, end = t0 + d / 3, t0 + 2 * d / 3, t0 + d
    out: dict[str, Any] = dict.fromkeys(
        (
            "in_progress_at",
            "finalizing_at",
            "completed_at",
            "failed_at",
            "expired_at",
            "cancelling_at",
            "cancelled_at",
        )
    )
    tc = batch.cancel_requested_at
    if tc is not None:
        out["in_progress_at"] = v_end if tc >= v_end and batch.errors is None else None
        out["finalizing_at"] = ip_end if tc >= ip_end and batch.errors is None else None
        out["cancelling_at"] = tc
        if now < tc + d / 3:
            out["status"] = "cancelling"
        else:
            out["status"] = "cancelled"
            out["cancelled_at"] = tc + d / 3
    elif now < v_end:
        out["status"] = "validating"
    elif batch.errors is not None:
        out["status"], out["failed_at"] = "failed", v_end
    else:
        out["in_progress_at"] = v_end
        if now < ip_end:
            out["status"] = "in_progress"
        elif batch.stop_kind == "cancelled":
            out["cancelling_at"] = ip_end
            if now < end:
                out["status"] = "cancelling"
            else:
                out["status"], out["cancelled_at"] = "cancelled", end
        elif batch.stop_kind == "overrun":  # Azure: an overrunning job is not expired
            out["status"] = "in_progress"
        elif batch.stop_kind == "expired":
            if now < end:
                out["status"] = "in_progress"
            else:
                out["status"], out["expired_at"] = "expired", end
        else:
            out["finalizing_at"] = ip_end
            if now < end:
                out["status"] = "finalizing"
            else:
                out["status"], out["completed_at"] = "completed", end
    return out


_UNRECOGNIZED_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def openai_failure(
    endpoint: str, body: Mapping[str, Any], models: Collection[str]
) -> HttpFailure | None:
    """The first rule an OpenAI batch line's ``body`` breaks, as the API's failure."""
    model = body["model"]
    if not RULES.is_known(model, models):
        return oa_error(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )
    keys = RULES.request_keys(endpoint)
    unknown = [k for k in body if keys and k not in keys]
    if unknown:
        if endpoint in _UNRECOGNIZED_ENDPOINTS:
            return oa_error(400, f"Unrecognized request argument supplied: {unknown[0]}")
        return oa_error(
            400, f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter"
        )
    if body.get("stream"):
        return oa_error(
            400,
            "Streaming is not supported in batch requests: 'stream' must be false or absent.",
            param="stream",
            code="invalid_value",
        )
    for refusal in RULES.refusals(model, body):
        return oa_error(400, refusal.message, param=refusal.key, code=refusal.code)
    dimensions = body.get("dimensions")
    if endpoint == "/v1/embeddings" and dimensions is not None:
        if model == "text-embedding-ada-002":
            return oa_error(400, "This model does not support specifying dimensions.")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            return oa_error(
                400,
                f"Invalid 'dimensions': integer below minimum value. Expected a value >= 1, "
                f"but got {dimensions} instead.",
                param="dimensions",
                code="integer_below_min_value",
            )
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128):
        return oa_error(
            400, f"Invalid 'n': must be an integer from 1 to 128, got {n!r}.", param="n"
        )
    return None


def check_bearer(request: Request) -> None:
    """401 in OpenAI's shape unless ``Authorization: Bearer <non-empty key>``."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return
    raise ApiError(
        401,
        "invalid_request_error",
        "You didn't provide an API key. You need to provide your API key in an "
        "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
    )


class OpenAIRoutes(RoutedFake):
    """The Files + Batches API under ``/v1`` (registered with ``fallback=True``: every
    path no other fake claims is answered here, a 404 in OpenAI's shape if unknown). The
    registered :class:`~mmirage_beam.providers.openai.fake.OpenAIFake` adds the handlers."""

    provider = OPENAI
    provider_names = (OPENAI,)
    labels = (("OpenAI", OPENAI),)
    url_prefix = "/v1"

    def rules(self) -> list[Rule]:
        """The Files and Batches routes (:data:`FILES_AND_BATCHES`) under ``/v1``."""
        return route_rules(FILES_AND_BATCHES, prefix="/v1")

    def claims(self, request: Request) -> bool:
        """Everything the other fakes leave (it is the fallback)."""
        return True

    def check_auth(self, request: Request) -> None:
        """A Bearer key."""
        check_bearer(request)

    def expire_results(self, batch: Batch, now: float) -> bool:
        """Deletes an OpenAI batch's output and error files (404 ``No such File object``
        afterwards), as the service does after their retention."""
        if batch.provider != OPENAI:
            return False
        for file_id in (batch.output_file_id, batch.error_file_id):
            stored = self.store.files.get(file_id) if file_id else None
            if stored is not None:
                stored.expires_at = int(now)
        return True
