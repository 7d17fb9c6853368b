"""HTTP helpers shared by the providers' fakes: ids, errors (:class:`ApiError`) answered in
the shape each provider's fake registers (:class:`ErrorShape`), JSON responses, and
query/body parsing (an input file's JSON lines too)."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from werkzeug.wrappers import Request, Response


class ErrorShape:
    """How one provider answers errors; each provider's fake registers its own
    (:func:`register_error_shape`) and the shared helpers below look it up by name.

    Subclasses override :meth:`body`, :meth:`not_found`, :meth:`scripted_kind` and the two
    kinds; the defaults here are the plain ``{"error": {message, type, param, code}}``
    shape."""

    #: ``error_type`` of the 404 for a path none of the provider's routes serves.
    missing_route_kind = "invalid_request_error"
    #: ``error_type`` of a 500 caused by a bug in the fake.
    internal_kind = "server_error"

    def body(self, err: ApiError) -> dict[str, Any]:
        """The JSON body of ``err``."""
        return {
            "error": {
                "message": err.message,
                "type": err.error_type,
                "param": err.param,
                "code": err.code,
            }
        }

    def not_found(self, args: Mapping[str, str]) -> ApiError:
        """The 404 for the object named in the URL arguments ``args``."""
        return ApiError(404, self.missing_route_kind, f"{dict(args)} not found.")

    def unknown_batch(self, batch_id: str) -> ApiError:
        """The 404 for a batch id the store does not hold (``store.get_batch``)."""
        return self.not_found({"batch_id": batch_id})

    def scripted_kind(self, status: int) -> tuple[str, str | None]:
        """``(error_type, code)`` of a scripted error with HTTP ``status`` (not 404)."""
        return ("server_error" if status >= 500 else "invalid_request_error"), None


_SHAPES: dict[str, ErrorShape] = {}


def register_error_shape(provider: str, shape: ErrorShape) -> None:
    """Answer ``provider``'s errors in ``shape`` (a later registration replaces it)."""
    _SHAPES[provider] = shape


def error_shape(provider: str) -> ErrorShape:
    """The error shape registered for ``provider``.

    Raises:
        KeyError: no fake registered one under that name.
    """
    try:
        return _SHAPES[provider]
    except KeyError:
        raise KeyError(
            f"no error shape registered for {provider!r}; known: {sorted(_SHAPES)}"
        ) from None


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
    """``err`` in the provider's error shape (:func:`register_error_shape`)."""
    return json_response(error_shape(provider).body(err), err.status, err.headers)


def not_found_error(provider: str, args: Mapping[str, str]) -> ApiError:
    """The provider's 404 for the object named in the URL arguments ``args``."""
    return error_shape(provider).not_found(args)


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
    kind, code = error_shape(provider).scripted_kind(status)
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


#: what :func:`numbered_json_lines` gives for a line that is not UTF-8 JSON
NOT_JSON: Any = object()


def numbered_json_lines(content: bytes) -> Iterator[tuple[int, Any]]:
    """``(number, value)`` of each non-blank line of a JSON Lines input file:
    the line's number (from 1, blank lines counted) and its JSON value, or
    :data:`NOT_JSON` when the line is not UTF-8 JSON."""
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            value = NOT_JSON
        yield number, value
