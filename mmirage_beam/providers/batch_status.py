"""What a provider says about a batch, in provider-neutral terms.

The normalised statuses (``completed | failed | in_progress | unknown``) and the map of
provider status words onto them, :class:`BatchSubmissionResult` (a batch at submission
or status check), :class:`BatchProgress` (its counts, for reports), :class:`ProviderLimits`
(requests and bytes per batch) and :func:`parse_timestamp`. The adapter contract
(:mod:`mmirage_beam.providers.base`) returns these and re-exports them.

What an adapter hands back about a batch it made or found, besides the wire JSON of its
requests, is a typed frozen record: :class:`SubmittedBatch` (``submit_chunk*``, the
create's answer or the batch adopted instead) and :class:`FoundBatch` (``find_batch``,
``find_candidate_batches``). Each keeps the provider's own object and gives it back
unchanged with ``to_json()``; ``from_json`` takes the dict a plugin may still return, and
:class:`BatchFields` says where a provider's object keeps the fields the records read.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import (
    Any,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    TypedDict,
    TypeVar,
    Union,
)

#: A JSON value as an SDK's ``model_dump(mode="json")`` or :func:`json.loads` gives it.
JSONValue = Union[None, bool, int, float, str, List["JSONValue"], Dict[str, "JSONValue"]]
#: A JSON object whose shape is the provider's, not ours: its batch / job object as its
#: SDK dumps it, or an error object. Records keep it as ``raw`` and hand it back from
#: ``to_json`` unchanged; the fields shared code reads are the records' own.
JSONObject = Dict[str, JSONValue]


class OwnFields(TypedDict, total=False):
    """The fields a batch record subclass reads from the provider's object beside the
    shared ones (:meth:`_ProviderBatch._own_fields`)."""

    input_file_id: Optional[str]
    adoption: Optional[Mapping[str, Any]]


__all__ = [
    "NORMALISED_STATUSES",
    "ENDED_STATUSES",
    "COMMON_STATUS_MAP",
    "BatchSubmissionResult",
    "BatchFields",
    "SubmittedBatch",
    "FoundBatch",
    "ADOPTION_KEY",
    "BatchProgress",
    "ProviderLimits",
    "normalize_status",
    "parse_timestamp",
    "optional_int",
    "whole_count",
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


#: the key under which a submission's dict carries how its batch was adopted instead of
#: created (``{"method", "confirmed"}``; written to the receipt as ``adoption``).
ADOPTION_KEY = "mmirage_adoption"

#: one step into a provider's object: a key, or an index into a list
_Step = Union[str, int]


class BatchFields(NamedTuple):
    """Where a provider's batch object (as JSON) keeps what the batch records read: each
    a path of keys (or list indexes) from the top; an empty path: not kept.

    The defaults are OpenAI's names, which most batch APIs share.
    """

    batch_id: Tuple[_Step, ...] = ("id",)
    status: Tuple[_Step, ...] = ("status",)
    created_at: Tuple[_Step, ...] = ("created_at",)
    input_file_id: Tuple[_Step, ...] = ("input_file_id",)

    def read(self, raw: Mapping[str, Any], path: Tuple[_Step, ...]) -> Any:
        """The value at ``path`` in ``raw``; None when any step is missing (or the path
        is empty)."""
        value: Any = raw if path else None
        for step in path:
            if isinstance(step, int):
                ok = isinstance(value, list) and -len(value) <= step < len(value)
                value = value[step] if ok else None
            else:
                value = value.get(step) if isinstance(value, Mapping) else None
        return value

    def text(self, raw: Mapping[str, Any], path: Tuple[_Step, ...]) -> Optional[str]:
        """:meth:`read`, when it is a non-empty string; else None."""
        value = self.read(raw, path)
        return value if isinstance(value, str) and value else None


#: the default :class:`BatchFields` (OpenAI's names)
DEFAULT_FIELDS = BatchFields()

_B = TypeVar("_B", bound="_ProviderBatch")


@dataclass(frozen=True)
class _ProviderBatch:
    """What the batch records share: a provider's batch, typed, with its own object.

    Attributes:
        batch_id: the provider's id (``batch_...``, ``msgbatch_...``, ``batches/...``).
        status: normalised: ``completed | failed | in_progress | unknown``.
        raw: the provider's batch object as JSON, as its API sent it (``to_json()``).
        created_at: when the provider created the batch, Unix seconds (None: not said).
    """

    batch_id: str
    status: str
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    created_at: Optional[float] = None

    def __post_init__(self) -> None:
        if self.status not in NORMALISED_STATUSES:
            raise ValueError(f"status must be one of {NORMALISED_STATUSES}, got {self.status!r}")

    @classmethod
    def from_json(
        cls: type[_B],
        raw: Mapping[str, Any],
        parsed: BatchSubmissionResult,
        fields: BatchFields = DEFAULT_FIELDS,
        **more: Any,
    ) -> _B:
        """The record of a batch's dict (what a plugin's ``submit_chunk*`` or
        ``find_batch`` returns): ``parsed`` (the adapter's ``parse_submission_result``
        of it) gives the id and status, ``fields`` where the rest is; ``more`` are the
        subclass's own fields (e.g. ``request_count``). ``from_json(d, ...).to_json()
        == d``."""
        body = dict(raw)
        own = cls._own_fields(body, fields)
        return cls(
            batch_id=parsed.provider_batch_id,
            status=parsed.status,
            raw=body,
            created_at=parse_timestamp(fields.read(body, fields.created_at)),
            **own,
            **more,
        )

    @classmethod
    def _own_fields(cls, body: Dict[str, Any], fields: BatchFields) -> OwnFields:
        """The subclass's fields read from ``body`` (which it may take keys out of)."""
        return {}

    def result(self) -> BatchSubmissionResult:
        """The batch as the contract's :class:`BatchSubmissionResult` (its raw response
        :meth:`to_json`)."""
        return BatchSubmissionResult(self.batch_id, self.status, self.to_json())

    def to_json(self) -> JSONObject:
        """The provider's batch object, a new dict equal to the one the adapter read."""
        return dict(self.raw)


@dataclass(frozen=True)
class SubmittedBatch(_ProviderBatch):
    """The batch a chunk's submission made, or adopted (``submit_chunk``,
    ``submit_chunk_lines``, ``submit_chunk_file``, ``create_once``).

    Attributes:
        input_file_id: the uploaded input file the batch reads (None: the requests went
            in the create's body, e.g. Anthropic).
        adoption: set when the batch was adopted rather than answered by the create
            (``{"method", "confirmed"}``, the receipt's ``adoption``); None: created.
    """

    input_file_id: Optional[str] = None
    adoption: Optional[Mapping[str, Any]] = None

    def to_json(self) -> JSONObject:
        """The dict ``submit_chunk*`` returned before the records: the provider's batch
        object, plus ``mmirage_adoption`` (last) when adopted."""
        out = dict(self.raw)
        if self.adoption:
            out[ADOPTION_KEY] = dict(self.adoption)
        return out

    @classmethod
    def _own_fields(cls, body: Dict[str, Any], fields: BatchFields) -> OwnFields:
        """The input file where ``fields`` says, and ``mmirage_adoption`` taken out of
        ``body`` into :attr:`adoption` (:meth:`to_json` puts it back)."""
        adoption = body.pop(ADOPTION_KEY, None)
        return {
            "input_file_id": fields.text(body, fields.input_file_id),
            "adoption": dict(adoption) if isinstance(adoption, Mapping) and adoption else None,
        }


@dataclass(frozen=True)
class FoundBatch(_ProviderBatch):
    """A batch found by a lookup (``find_batch``: by its metadata;
    ``find_candidate_batches``: by its creation time and request count), which a lost
    create or an interrupted submission may adopt (:meth:`adopted`).

    Attributes:
        request_count: the requests the batch holds, when the lookup counted them.
    """

    request_count: Optional[int] = None

    def adopted(
        self, adoption: Optional[Mapping[str, Any]] = None, fields: BatchFields = DEFAULT_FIELDS
    ) -> SubmittedBatch:
        """This batch as a chunk's submission (adopted instead of created); ``adoption``
        says how, when it is a match to be confirmed (by shape)."""
        return SubmittedBatch(
            batch_id=self.batch_id,
            status=self.status,
            raw=self.raw,
            created_at=self.created_at,
            input_file_id=fields.text(self.raw, fields.input_file_id),
            adoption=adoption,
        )


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


def whole_count(value: Any) -> Optional[int]:
    """A count the provider sent as a JSON integer; None for anything else (a bool, a
    float, a string, null)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


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
