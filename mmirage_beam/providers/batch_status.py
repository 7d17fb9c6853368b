"""What a provider says about a batch, in provider-neutral terms.

The normalised statuses (``completed | failed | in_progress | unknown``) and the map of
provider status words onto them, :class:`BatchSubmissionResult` (a batch at submission
or status check), :class:`BatchProgress` (its counts, for reports), :class:`ProviderLimits`
(requests and bytes per batch) and :func:`parse_timestamp`. The adapter contract
(:mod:`mmirage_beam.providers.base`) returns these and re-exports them.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Dict, Mapping, NamedTuple, Optional

__all__ = [
    "NORMALISED_STATUSES",
    "ENDED_STATUSES",
    "COMMON_STATUS_MAP",
    "BatchSubmissionResult",
    "BatchProgress",
    "ProviderLimits",
    "normalize_status",
    "parse_timestamp",
    "optional_int",
]

NORMALISED_STATUSES = ("completed", "failed", "in_progress", "unknown")
#: the normalised statuses of a batch that has ended at its provider: its results (or
#: its error) can be fetched and it will not change any more.
ENDED_STATUSES = ("completed", "failed")

#: Provider status words -> normalised status. Adapters may extend this via
#: ``STATUS_MAP``; :func:`normalize_status` falls back to "unknown".
COMMON_STATUS_MAP = {
    "completed": "completed",
    "succeeded": "completed",
    "success": "completed",
    "ended": "completed",
    "done": "completed",
    "failed": "failed",
    "error": "failed",
    "errored": "failed",
    "expired": "failed",
    "cancelled": "failed",
    "canceled": "failed",
    "validating": "in_progress",
    "in_progress": "in_progress",
    "queued": "in_progress",
    "running": "in_progress",
    "finalizing": "in_progress",
    "cancelling": "in_progress",
    "canceling": "in_progress",
    "pending": "in_progress",
}


@dataclass(frozen=True)
class BatchSubmissionResult:
    """A provider batch as seen at submission or status check.

    Attributes:
        provider_batch_id: the provider's id (``batch_...``, ``msgbatch_...``).
        status: normalised: ``completed | failed | in_progress | unknown``.
        raw_response: the provider's own object, as a JSON-compatible dict.
    """

    provider_batch_id: str
    status: str
    raw_response: Dict[str, Any]

    def __post_init__(self) -> None:
        if self.status not in NORMALISED_STATUSES:
            raise ValueError(f"status must be one of {NORMALISED_STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class BatchProgress:
    """A provider batch's progress, in provider-neutral terms, for reports.

    Attributes:
        provider_status: the provider's own status word (``in_progress``, ``ended``...).
        completed: requests that succeeded so far (None: the provider does not say).
        failed: requests that failed so far (errored, expired, cancelled...).
        total: requests in the batch, including those still processing.
        created_at: when the provider created the batch, Unix seconds.
        detail: a short human-readable note (provider error codes, outcome counts).
        error_code: the provider's code for a batch-level failure (e.g.
            ``token_limit_exceeded``), None when the batch did not fail as a whole.
    """

    provider_status: str
    completed: Optional[int] = None
    failed: Optional[int] = None
    total: Optional[int] = None
    created_at: Optional[float] = None
    detail: str = ""
    error_code: Optional[str] = None


class ProviderLimits(NamedTuple):
    """A provider's limits on one batch, and where they are documented.

    Attributes:
        max_requests_per_batch: requests per batch (None: no documented limit).
        max_batch_bytes: bytes per batch upload or body (None: no documented limit).
        source: the documents (name or URL) the numbers come from.
    """

    max_requests_per_batch: Optional[int]
    max_batch_bytes: Optional[int]
    source: str


def parse_timestamp(value: Any) -> Optional[float]:
    """Unix seconds from a Unix timestamp (int/float) or an RFC 3339 / ISO 8601 string.

    Returns None for None, an empty string or anything that is not a timestamp.

    >>> parse_timestamp("1970-01-01T00:01:00Z")
    60.0
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            when = _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.timezone.utc)
        return when.timestamp()
    return None


def optional_int(value: Any) -> Optional[int]:
    """A count as an int; None for a bool or anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def normalize_status(status: Optional[str], extra: Optional[Mapping[str, str]] = None) -> str:
    """Map a provider status word to ``completed | failed | in_progress | unknown``:
    ``extra`` (an adapter's ``STATUS_MAP``) first, then :data:`COMMON_STATUS_MAP`.

    >>> normalize_status("Succeeded")
    'completed'
    """
    if not status:
        return "unknown"
    word = str(status).lower()
    return (extra or {}).get(word) or COMMON_STATUS_MAP.get(word, "unknown")
