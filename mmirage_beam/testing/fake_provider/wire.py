"""HTTP helpers shared by both providers: provider names, ids, the providers' error
shapes (:class:`ApiError`), JSON responses, and query/body parsing."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request, Response

OPENAI = "openai"
ANTHROPIC = "anthropic"
GEMINI = "gemini"
MISTRAL = "mistral"
PROVIDERS = (OPENAI, ANTHROPIC, GEMINI, MISTRAL)
#: google.rpc status names of HTTP codes (Gemini's error shape)
_GOOGLE_STATUS = {
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


def new_id(prefix: str) -> str:
    """``prefix`` + 24 random hex digits."""
    return prefix + uuid.uuid4().hex[:24]


class ApiError(Exception):
    """An HTTP error answered in the calling provider's error shape."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON response with ``status`` and extra ``headers``."""
    return Response(
        json.dumps(body), status=status, headers=dict(headers or {}), mimetype="application/json"
    )


def error_response(provider: str, err: ApiError) -> Response:
    """``err`` in the provider's error shape (OpenAI ``{error}``, Anthropic ``{type, error}``,
    Gemini ``{error: {code, message, status}}``)."""
    if provider == GEMINI:
        status = err.error_type if err.error_type.isupper() else None
        body = {
            "error": {
                "code": err.status,
                "message": err.message,
                "status": status or _GOOGLE_STATUS.get(err.status, "UNKNOWN"),
            }
        }
        return json_response(body, err.status, err.headers)
    if provider == ANTHROPIC:
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": err.error_type, "message": err.message},
            "request_id": new_id("req_"),
        }
    else:
        body = {
            "error": {
                "message": err.message,
                "type": err.error_type,
                "param": err.param,
                "code": err.code,
            }
        }
    return json_response(body, err.status, err.headers)


def not_found_error(provider: str, args: Mapping[str, str]) -> ApiError:
    """The provider's 404 for the object named in the URL arguments ``args``.

    OpenAI: ``{"error": {"message": "No batch found with id '...'.", "type":
    "invalid_request_error", "param": null, "code": null}}`` (files: "No such File
    object: ..."); Anthropic: ``{"type": "error", "error": {"type": "not_found_error",
    "message": ...}}``.
    """
    if provider == ANTHROPIC:
        what = args.get("batch_id", "")
        return ApiError(404, "not_found_error", f"Message batch {what} not found.")
    if provider == GEMINI:
        what = (
            f"files/{args['file_id']}" if "file_id" in args else f"batches/{args.get('batch_id')}"
        )
        return ApiError(404, "NOT_FOUND", f"{what} not found.")
    if "file_id" in args:
        return ApiError(404, "invalid_request_error", f"No such File object: {args['file_id']}")
    return ApiError(
        404, "invalid_request_error", f"No batch found with id '{args.get('batch_id', '')}'."
    )


def status_error(
    provider: str,
    status: int,
    retry_after_ms: int,
    what: str,
    args: Mapping[str, str] | None = None,
) -> ApiError:
    """A scripted error in the provider's shape: a 404 like :func:`not_found_error` for
    the object in ``args``; any other status with ``retry-after-ms``/``retry-after``
    headers."""
    if status == 404:
        return not_found_error(provider, args or {})
    if provider == GEMINI:
        kind, code = _GOOGLE_STATUS.get(status, "UNKNOWN"), None
    elif provider == ANTHROPIC:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 504: "timeout_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        code = None
    else:
        kind = {429: "requests"}.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        code = {429: "rate_limit_exceeded", 503: "service_unavailable"}.get(status)
    headers = {
        "retry-after-ms": str(retry_after_ms),
        "retry-after": str(math.ceil(retry_after_ms / 1000)),
    }
    return ApiError(
        status,
        kind,
        f"Scripted {status} from the fake provider ({what}).",
        code=code,
        headers=headers,
    )


def query_limit(request: Request, default: int, maximum: int) -> int:
    """The ``limit`` query argument (``default`` when absent); 400 outside 1..maximum."""
    raw = request.args.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        limit = -1
    if not 1 <= limit <= maximum:
        raise ApiError(
            400,
            "invalid_request_error",
            f"limit: Input should be between 1 and {maximum}, got {raw!r}",
            param="limit",
        )
    return limit


def json_payload(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; 400 otherwise."""
    try:
        payload = json.loads(request.get_data(cache=False) or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_request_error", f"Invalid JSON body: {exc}") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_request_error", "The request body must be a JSON object.")
    return payload
