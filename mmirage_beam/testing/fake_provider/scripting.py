"""Failure scripting: the script keys (``fake.script(**keys)``, ``POST /_fake/script``)
and the ``FAKE_ERROR:...`` markers read from the prompt text.

The package docstring (:mod:`mmirage_beam.testing.fake_provider`) documents every key and
marker; this module parses and validates them.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

UNKNOWN_CUSTOM_ID = "fake_unknown_custom_id"
FAKE_ERROR_PREFIX = "FAKE_ERROR:"
FENCE_MARKER = "FAKE_FENCE"
NOT_JSON_MARKER = FAKE_ERROR_PREFIX + "not_json"
TRANSIENT_MARKER = FAKE_ERROR_PREFIX + "transient"

# Marker name -> what it does (``mmirage fake-provider --help`` lists these; the package
# docstring gives each provider's exact shape).
MARKERS: dict[str, str] = {
    "server_error": "the request fails with a 500 server error",
    "invalid_request": "the request fails with a 400 invalid_request_error",
    "rate_limit": "the request fails with a 429",
    "timeout": "the request times out (a timeout error in the result)",
    "transient": "fails like server_error once per custom_id, then answers",
    "flaky": "fails like rate_limit the first time this prompt is seen, then answers",
    "not_json": "a JSON-output request gets plain, non-JSON text",
    "refusal": "the model refuses (the service's refusal field or stop reason)",
    "length": "the answer is cut at the token limit (finish_reason length, max_tokens)",
    "content_filter": "finish_reason content_filter where the service has one (else answers)",
    "empty": "an empty answer (content '', output [], content [])",
    "error_body_200": "status_code 200 with an error object as the body, where lines carry one",
    "empty_body_200": "status_code 200 with an empty body {}, where lines carry one",
    "malformed_line": "this request's result line is not JSON",
    "truncated_line": "this request's result line is cut mid-way",
    "wrong_shape": "this request's result line is JSON of the wrong shape",
    "invalid_utf8": "this request's result line holds invalid UTF-8 in the answer text",
    "u2028": "an error whose message holds raw U+2028, U+2029 and U+0085",
}
# Markers that change how the result line is written.
LINE_MARKERS = ("malformed_line", "truncated_line", "wrong_shape", "invalid_utf8", "u2028")
U2028_MESSAGE = (
    "Scripted invalid request (FAKE_ERROR:u2028):\u2028line separator,\u2029paragraph "
    "separator,\u0085next line."
)
_MARKER_RE = re.compile(re.escape(FAKE_ERROR_PREFIX) + r"([a-z0-9_]+)")
DEFAULT_RETRY_AFTER_MS = 10


def error_marker(prompt_text: str) -> str | None:
    """The first known ``FAKE_ERROR:<name>`` marker in a prompt, other than ``not_json``.

    A marker is the whole word after the prefix (``FAKE_ERROR:empty_body_200`` is
    ``empty_body_200``, not ``empty``). Returns ``None`` when there is none.
    """
    for match in _MARKER_RE.finditer(prompt_text):
        name = match.group(1)
        if name in MARKERS and name != "not_json":
            return name
    return None


def broken_line(
    marker: str,
    custom_id: str,
    line: Mapping[str, Any],
    *,
    body_key: str,
    answer_text: str,
    wrong_shape: Mapping[str, Any],
) -> bytes:
    """The bytes of a result line scripted by one of :data:`LINE_MARKERS` (no ``\\n``).

    ``line`` is the valid line it replaces; ``body_key`` the key after ``custom_id``
    (OpenAI ``response``, Anthropic ``result``); ``answer_text`` the answer text inside
    ``line`` (``invalid_utf8`` puts the bytes ``ff fe`` in front of it); ``wrong_shape``
    the valid JSON of the wrong shape; ``u2028`` writes ``line`` with raw (unescaped)
    non-ASCII characters.
    """
    valid = json.dumps(line).encode("utf-8")
    if marker == "malformed_line":
        return f'{{"custom_id": {json.dumps(custom_id)}, "{body_key}": <<garbage'.encode()
    if marker == "truncated_line":
        return valid[: len(valid) // 2]
    if marker == "wrong_shape":
        return json.dumps(wrong_shape).encode("utf-8")
    if marker == "invalid_utf8":
        encoded = json.dumps(answer_text)[1:-1].encode("utf-8")
        if encoded and encoded in valid:
            return valid.replace(encoded, b"\xff\xfe" + encoded, 1)
        return valid.replace(b'"custom_id"', b'"\xff\xfe": 0, "custom_id"', 1)
    if marker == "u2028":
        return json.dumps(line, ensure_ascii=False).encode("utf-8")
    raise ValueError(f"not a line marker: {marker!r}")


def markers_help() -> str:
    """One line per marker, ``FAKE_ERROR:<name>  <what it does>``, for ``--help``."""
    return "\n".join(f"  {FAKE_ERROR_PREFIX}{name:<16} {what}" for name, what in MARKERS.items())


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
    """The parsed ``leading_errors`` key (``remaining`` counts down)."""

    status: int
    remaining: int
    retry_after_ms: int
    paths: frozenset[str] | None

    def view(self) -> dict[str, Any]:
        """The key as JSON-friendly values."""
        return {
            "status": self.status,
            "count": self.remaining,
            "retry_after_ms": self.retry_after_ms,
            "paths": sorted(self.paths) if self.paths is not None else None,
        }


@dataclass
class CreateFailure:
    """The parsed ``fail_batch_creates`` key (``seen`` counts valid creates)."""

    nth: int
    permanent: bool
    status: int
    created: bool
    retry_after_ms: int
    seen: int = 0

    def view(self) -> dict[str, Any]:
        """The key as JSON-friendly values."""
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
        from mmirage_beam.testing.fake_registry import registered_endpoint_names

        known = registered_endpoint_names()  # each fake registers its own
        bad = [p for p in paths if p not in known]
        if bad:
            raise ValueError(
                f"leading_errors.paths has unknown endpoint names {bad}; known: {sorted(known)}"
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
    """A delay in seconds >= 0; raises ValueError otherwise."""
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
