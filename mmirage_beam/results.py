"""Provider results after normalisation: JSON parsing, schema validation, retryability.

Adapters' ``retrieve_results`` yield neutral dicts::

    {"custom_id", "generated_text"?, "error"?: {"type", "message", "status_code"},
     "input_tokens"?, "output_tokens"?}

This module holds the provider-neutral rules applied to them at merge.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)

# Error types (lower-case) a new attempt can fix: expiry and cancellation, timeouts,
# rate limits and server errors (OpenAI and Anthropic vocabularies, PROVIDERS.md), and
# OpenAI's batch-level enqueued-token limit.
RETRYABLE_ERROR_TYPES = frozenset(
    {
        "batch_expired",
        "expired",
        "batch_cancelled",
        "cancelled",
        "canceled",
        "request_timeout",
        "timeout",
        "timeout_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "server_error",
        "api_error",
        "overloaded_error",
        "internal_error",
        "service_unavailable",
        "token_limit_exceeded",
        "pending",
    }
)


def is_retryable(error: dict[str, Any]) -> bool:
    """Whether resubmitting the request could succeed.

    True for expiry, cancellation, timeouts, rate limits (429), server errors (5xx) and
    OpenAI's ``token_limit_exceeded``; False for invalid requests and anything unknown.
    """
    kind = str(error.get("type") or "").lower()
    if kind in RETRYABLE_ERROR_TYPES:
        return True
    status = error.get("status_code")
    try:
        code = int(status) if status is not None else None
    except (TypeError, ValueError):
        code = None
    return code is not None and (code in (408, 409, 429) or code >= 500)


def parse_json_output(text: Optional[str]) -> tuple[Any, Optional[str]]:
    """Parse a JSON answer, tolerating surrounding whitespace and a fenced code block.

    Returns:
        ``(value, None)`` on success, ``(None, reason)`` when the text is not JSON.
    """
    if text is None:
        return None, "no text"
    body = text.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"


def validate_json_output(value: Any, schema: dict[str, Any]) -> Optional[str]:
    """Check ``value`` against the output's JSON schema (fields, types, bounds).

    Returns:
        None when valid, else a short reason naming the field.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path) or "(root)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.message}{more}"
