"""Failure scripting: the script keys (``fake.script(**keys)``, ``POST /_fake/script``)
and the ``FAKE_ERROR:...`` markers read from the prompt text.

The package docstring (:mod:`mmirage_beam.testing.fake_provider`) documents every key and
marker; this module parses and validates them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

UNKNOWN_CUSTOM_ID = "fake_unknown_custom_id"
FAKE_ERROR_PREFIX = "FAKE_ERROR:"
FENCE_MARKER = "FAKE_FENCE"
ERROR_MARKERS = ("server_error", "invalid_request", "rate_limit", "timeout")
NOT_JSON_MARKER = FAKE_ERROR_PREFIX + "not_json"
TRANSIENT_MARKER = FAKE_ERROR_PREFIX + "transient"
DEFAULT_RETRY_AFTER_MS = 10

OPENAI_ENDPOINT_NAMES = (
    "files_create",
    "files_list",
    "files_retrieve",
    "files_delete",
    "files_content",
    "batches_create",
    "batches_list",
    "batches_retrieve",
    "batches_cancel",
)
ANTHROPIC_ENDPOINT_NAMES = (
    "messages_batches_create",
    "messages_batches_list",
    "messages_batches_retrieve",
    "messages_batches_cancel",
    "messages_batches_delete",
    "messages_batches_results",
)
API_ENDPOINT_NAMES = frozenset(OPENAI_ENDPOINT_NAMES + ANTHROPIC_ENDPOINT_NAMES)


def error_marker(prompt_text: str) -> str | None:
    """The ``FAKE_ERROR:<name>`` marker in a prompt (``None`` when there is none)."""
    for name in ERROR_MARKERS:
        if FAKE_ERROR_PREFIX + name in prompt_text:
            return name
    if TRANSIENT_MARKER in prompt_text:
        return "transient"
    return None


def shuffled(seed: int | None, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``lines`` in a seeded shuffled order (never the original one), or as is for ``None``."""
    if seed is None or len(lines) < 2:
        return lines
    order = list(range(len(lines)))
    random.Random(seed).shuffle(order)
    if order == sorted(order):
        order = order[1:] + order[:1]
    return [lines[i] for i in order]


@dataclass
class LeadingErrors:
    status: int
    remaining: int
    retry_after_ms: int
    paths: frozenset[str] | None

    def view(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "count": self.remaining,
            "retry_after_ms": self.retry_after_ms,
            "paths": sorted(self.paths) if self.paths is not None else None,
        }


@dataclass
class CreateFailure:
    nth: int
    permanent: bool
    status: int
    created: bool
    retry_after_ms: int
    seen: int = 0

    def view(self) -> dict[str, Any]:
        return {
            "nth": self.nth,
            "permanent": self.permanent,
            "status": self.status,
            "created": self.created,
            "retry_after_ms": self.retry_after_ms,
            "seen": self.seen,
        }


def _check_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"script key {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"script key {key!r} must be true or false, got {value!r}")
    return value


def _check_status(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
        raise ValueError(f"script key {key!r}: status must be an HTTP error code, got {value!r}")
    return value


def _parse_leading_errors(value: Any) -> LeadingErrors:
    if not isinstance(value, Mapping):
        raise ValueError("script key 'leading_errors' must be an object")
    unknown = set(value) - {"status", "count", "retry_after_ms", "paths"}
    if unknown:
        raise ValueError(f"script key 'leading_errors' has unknown fields {sorted(unknown)}")
    paths = value.get("paths")
    if paths is not None:
        if isinstance(paths, str) or not isinstance(paths, Sequence):
            raise ValueError("leading_errors.paths must be a list of endpoint names")
        bad = [p for p in paths if p not in API_ENDPOINT_NAMES]
        if bad:
            raise ValueError(
                f"leading_errors.paths has unknown endpoint names {bad}; "
                f"known: {sorted(API_ENDPOINT_NAMES)}"
            )
        paths = frozenset(paths)
    return LeadingErrors(
        status=_check_status("leading_errors.status", value.get("status", 429)),
        remaining=_check_int("leading_errors.count", value.get("count", 1), 0),
        retry_after_ms=_check_int(
            "leading_errors.retry_after_ms",
            value.get("retry_after_ms", DEFAULT_RETRY_AFTER_MS),
            0,
        ),
        paths=paths,
    )


def _parse_create_failure(value: Any) -> CreateFailure:
    if not isinstance(value, Mapping):
        raise ValueError("script key 'fail_batch_creates' must be an object")
    unknown = set(value) - {"nth", "permanent", "status", "created", "retry_after_ms"}
    if unknown:
        raise ValueError(f"script key 'fail_batch_creates' has unknown fields {sorted(unknown)}")
    return CreateFailure(
        nth=_check_int("fail_batch_creates.nth", value.get("nth", 1), 1),
        permanent=_check_bool("fail_batch_creates.permanent", value.get("permanent", False)),
        status=_check_status("fail_batch_creates.status", value.get("status", 500)),
        created=_check_bool("fail_batch_creates.created", value.get("created", False)),
        retry_after_ms=_check_int(
            "fail_batch_creates.retry_after_ms",
            value.get("retry_after_ms", DEFAULT_RETRY_AFTER_MS),
            0,
        ),
    )


def parse_delay(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"script key {key!r} must be a number >= 0, got {value!r}")
    return float(value)


SCRIPT_PARSERS: dict[str, Callable[[Any], Any]] = {
    "processing_delay_secs": lambda v: parse_delay("processing_delay_secs", v),
    "expire_after_requests": lambda v: _check_int("expire_after_requests", v, 0),
    "cancel_after_requests": lambda v: _check_int("cancel_after_requests", v, 0),
    "token_limit_exceeded": lambda v: _check_bool("token_limit_exceeded", v),
    "enqueued_token_limit": lambda v: _check_int("enqueued_token_limit", v, 0),
    "leading_errors": _parse_leading_errors,
    "fail_batch_creates": _parse_create_failure,
    "empty_error_file_id": lambda v: _check_bool("empty_error_file_id", v),
    "shuffle_results": lambda v: _check_bool("shuffle_results", v),
    "shuffle_seed": lambda v: _check_int("shuffle_seed", v, 0),
    "unknown_custom_id": lambda v: _check_bool("unknown_custom_id", v),
}
SCRIPT_DEFAULTS: dict[str, Any] = {
    "processing_delay_secs": None,
    "expire_after_requests": None,
    "cancel_after_requests": None,
    "token_limit_exceeded": False,
    "enqueued_token_limit": None,
    "leading_errors": None,
    "fail_batch_creates": None,
    "empty_error_file_id": False,
    "shuffle_results": False,
    "shuffle_seed": 0,
    "unknown_custom_id": False,
}
SCRIPT_KEYS = tuple(SCRIPT_DEFAULTS)
