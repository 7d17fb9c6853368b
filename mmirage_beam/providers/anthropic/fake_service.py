"""Anthropic's fake as the fake's shared core sees it: its name, limits, error shape,
lifecycle phases, rule refusals, routes and credentials, and :class:`AnthropicFake`,
:class:`AnthropicRoutes`, whose subclass in :mod:`~mmirage_beam.providers.anthropic.fake`
(with the handlers) is registered with :mod:`mmirage_beam.testing.fake_registry` from
this package's ``__init__``.

Sources of the limits: Anthropic Message Batches docs
(https://docs.anthropic.com/en/docs/build-with-claude/batch-processing).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from werkzeug.routing import Rule
from werkzeug.wrappers import Request

from mmirage_beam.providers.anthropic import FAKE_ENDPOINT_NAMES
from mmirage_beam.providers.anthropic.rules import RULES
from mmirage_beam.testing.fake_provider.routing import RoutedFake, route_rules
from mmirage_beam.testing.fake_provider.store import Batch
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    ErrorShape,
    new_id,
    register_error_shape,
)

ANTHROPIC = "anthropic"
#: the endpoint names of its calls (``call_counts()``, ``leading_errors.paths``)
ENDPOINT_NAMES = FAKE_ENDPOINT_NAMES
#: Anthropic keeps a batch's results 29 days after its creation ("Results are kept 29
#: days"); then the batch can still be viewed but its results are no longer available
ANTHROPIC_RESULTS_LIFETIME_SECS = 29 * 24 * 60 * 60
ANTHROPIC_MAX_REQUESTS = 100_000
ANTHROPIC_MAX_BODY_BYTES = 256 * 1024 * 1024  # 256 MiB
ANTHROPIC_LIST_MAX_LIMIT = 1_000
ANTHROPIC_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # 5 MiB per image, decoded
ANTHROPIC_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


class AnthropicErrors(ErrorShape):
    """``{"type": "error", "error": {type, message}, "request_id"}``."""

    missing_route_kind = "not_found_error"
    internal_kind = "api_error"

    def body(self, err: ApiError) -> dict[str, Any]:
        """Anthropic's error object."""
        return {
            "type": "error",
            "error": {"type": err.error_type, "message": err.message},
            "request_id": new_id("req_"),
        }

    def not_found(self, args: Mapping[str, str]) -> ApiError:
        """``not_found_error`` "Message batch <id> not found."."""
        what = args.get("batch_id", "")
        return ApiError(404, "not_found_error", f"Message batch {what} not found.")

    def scripted_kind(self, status: int) -> tuple[str, str | None]:
        """``rate_limit_error`` (429), ``overloaded_error`` (529), ``timeout_error`` (504),
        ``api_error`` (other 5xx)."""
        kind = {429: "rate_limit_error", 529: "overloaded_error", 504: "timeout_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return kind, None


register_error_shape(ANTHROPIC, AnthropicErrors())


def anthropic_phase(batch: Batch, now: float) -> dict[str, Any]:
    """Anthropic ``processing_status``, ``cancel_initiated_at`` and ``ended_at`` at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    end = t0 + d
    out: dict[str, Any] = {"cancel_initiated_at": None, "ended_at": None}
    tc = batch.cancel_requested_at
    if tc is not None:
        out["cancel_initiated_at"] = tc
        end = tc + d / 3
        status = "canceling"
    elif batch.stop_kind == "cancelled":
        initiated = t0 + 2 * d / 3
        out["cancel_initiated_at"] = initiated if now >= initiated else None
        status = "canceling" if now >= initiated else "in_progress"
    else:
        status = "in_progress"
    if now >= end:
        status, out["ended_at"] = "ended", end
    out["processing_status"] = status
    return out


def anthropic_problem(params: Mapping[str, Any], models: Collection[str]) -> tuple[str, str] | None:
    """(error type, message) of the first rule a Message Batches request's ``params``
    break, or None."""
    model = params["model"]
    if not RULES.is_known(model, models):
        return "not_found_error", f"model: {model}"
    keys = RULES.request_keys("/v1/messages")
    unknown = [k for k in params if k not in keys]
    if unknown:
        return "invalid_request_error", f"{unknown[0]}: Extra inputs are not permitted"
    if params.get("stream"):
        # batch_create_params.Request.params is MessageCreateParamsNonStreaming.
        return "invalid_request_error", "stream: streaming is not supported in message batches"
    for refusal in RULES.refusals(model, params):
        return "invalid_request_error", refusal.message
    return None


class AnthropicRoutes(RoutedFake):
    """The Message Batches API and ``count_tokens`` under ``/v1/messages`` (the
    registered :class:`~mmirage_beam.providers.anthropic.fake.AnthropicFake` adds the
    handlers)."""

    provider = ANTHROPIC
    provider_names = (ANTHROPIC,)
    labels = (("Anthropic", ANTHROPIC),)
    request_id_header = "request-id"

    def rules(self) -> list[Rule]:
        """The Message Batches and count_tokens routes."""
        return route_rules(
            {
                "/count_tokens": {"POST": "messages_count_tokens"},
                "/batches": {"POST": "messages_batches_create", "GET": "messages_batches_list"},
                "/batches/<batch_id>": {
                    "GET": "messages_batches_retrieve",
                    "DELETE": "messages_batches_delete",
                },
                "/batches/<batch_id>/cancel": {"POST": "messages_batches_cancel"},
                "/batches/<batch_id>/results": {"GET": "messages_batches_results"},
            },
            prefix="/v1/messages",
        )

    def claims(self, request: Request) -> bool:
        """``/v1/messages`` and below."""
        return request.path.startswith("/v1/messages")

    def check_auth(self, request: Request) -> None:
        """``x-api-key`` or a Bearer key, else 401 ``authentication_error``."""
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return
        if request.headers.get("x-api-key", "").strip():
            return
        raise ApiError(401, "authentication_error", "x-api-key header is required")

    def expire_results(self, batch: Batch, now: float) -> bool:
        """The batch stays viewable; ``results`` answers 404 ``not_found_error``."""
        if batch.provider != ANTHROPIC:
            return False
        batch.results_expire_at = now
        return True
