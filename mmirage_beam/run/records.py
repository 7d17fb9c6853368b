"""A run's files as frozen, typed records (docs/files.md).

One record per kind of file beside the receipts, each with ``to_json()`` (the plain
dict the file holds) and ``from_json(obj)`` (any dict a reader meets, tolerant as the
readers always were), plus :meth:`encode`, the exact bytes the file holds:

- :class:`Receipt`: one accepted batch (a line of ``<base>.<modality>.<run_id>.jsonl``, a
  ``.parts/<chunk_id>.json`` file, or an ``.intent`` file: a receipt with
  ``intent_at_utc``);
- :class:`RunRecord`: ``<base>.run.<run_id>.json``; :class:`RunState`, what ``merge`` and
  ``check`` read of it;
- :class:`MergeRecord`: ``<base>.merge.<run_id>.json``;
- :class:`CancelRecord` of :class:`LedgerEntry` lines: ``<base>.cancel.<run_id>.json``, one
  entry per batch ``mmirage cancel`` asked the provider to cancel;
- :class:`LeaseRecord`: what ``<base>.lease.<run_id>`` holds (the held lease itself, with
  its refreshing thread, is :class:`mmirage_beam.run.lease.Lease`);
- :class:`SubmittedMarker`: ``<base>.submitted.<run_id>.json``.

Byte compatibility is the contract (``tests/unit/test_run_records.py`` checks it against
files written by an earlier release): a record read from a file and written back gives
the same bytes. So a record keeps what it does not know (``extra``, in the order read),
the order its keys were read in (``key_order``; None for a record built here, written in
the order the writers always used), and values as read: ``from_json`` converts nothing
(a receipt of the original MMIRAGE tool may hold ``"3"`` where this tool writes ``3``),
the field types are what this tool writes. A key absent from the file is None here and
stays absent when written back.

Nothing here reads or writes a file (:class:`mmirage_beam.run.store.RunStore` does).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
from typing import Any, ClassVar, Iterable, Mapping, Optional, TypedDict, TypeVar

from mmirage_beam.request_hashes import request_hash, request_line_hash

__all__ = [
    "CancelRecord",
    "JsonRecord",
    "LeaseRecord",
    "LedgerEntry",
    "MergeRecord",
    "Receipt",
    "ReceiptJson",
    "RunRecord",
    "RunState",
    "SubmittedMarker",
]

_R = TypeVar("_R", bound="JsonRecord")

#: fields of every record that are not keys of its file
_META = ("extra", "key_order")


@functools.cache
def _keys_of(cls: type) -> tuple[str, ...]:
    """The file keys of a record class: its fields but ``extra`` and ``key_order``."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in _META)


@dataclasses.dataclass(frozen=True)
class JsonRecord:
    """The shared JSON shape of the records: typed keys, unknown keys, key order.

    Subclasses declare their keys as fields (in the order the writer writes them) and,
    unless a record built here writes every key even when None, ``_ALWAYS``: the keys
    it writes even when None; the other fields are written when not None. ``extra``
    (unknown keys, in the order read) and ``key_order`` (the keys as read, None for a
    record built here) are declared here, keyword-only: last in every record's
    ``__init__``.
    """

    #: the keys a record built here writes even when None (None: every key)
    _ALWAYS: ClassVar[Optional[tuple[str, ...]]] = None
    #: json.dumps keywords of the file's writer
    _DUMPS: ClassVar[Mapping[str, Any]] = {}

    extra: Mapping[str, Any] = dataclasses.field(
        default_factory=dict, compare=False, repr=False, kw_only=True
    )
    key_order: Optional[tuple[str, ...]] = dataclasses.field(
        default=None, compare=False, repr=False, kw_only=True
    )

    @classmethod
    def _keys(cls) -> tuple[str, ...]:
        return _keys_of(cls)

    def to_json(self) -> dict[str, Any]:
        """The dict the file holds: keys in the order read (a record read from a file),
        else in the writer's order; unknown keys kept; absent keys left out."""
        keys = self._keys()
        always = keys if self._ALWAYS is None else self._ALWAYS
        values = {k: getattr(self, k) for k in keys}
        extra: Mapping[str, Any] = self.extra or {}
        order: Optional[tuple[str, ...]] = self.key_order
        out: dict[str, Any] = {}
        if order is not None:
            for k in order:
                if k in values:
                    out[k] = self._encode_value(k, values[k])
                elif k in extra:
                    out[k] = extra[k]
        for k in keys:
            if k not in out and ((order is None and k in always) or values[k] is not None):
                out[k] = self._encode_value(k, values[k])
        for k, v in extra.items():
            out.setdefault(k, v)
        return out

    def _encode_value(self, key: str, value: Any) -> Any:
        """The JSON value of field ``key`` (records nest their own records here)."""
        return value

    @classmethod
    def _decode_value(cls, key: str, value: Any) -> Any:
        """The field value of JSON value ``value`` at ``key`` (as read, by default)."""
        return value

    @classmethod
    def from_json(cls: type[_R], obj: Mapping[str, Any]) -> _R:
        """The record of a dict read from its file; unknown keys are kept in ``extra``,
        missing ones are None, values are kept as read.

        Raises:
            TypeError: ``obj`` is not a JSON object (a dict).
        """
        if not isinstance(obj, Mapping):
            raise TypeError(f"{cls.__name__}: a JSON object is needed, not {type(obj).__name__}")
        keys = cls._keys()
        known = {k: cls._decode_value(k, obj[k]) for k in keys if k in obj}
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(**known, extra=extra, key_order=tuple(obj))  # type: ignore[call-arg]

    def encode(self) -> bytes:
        """The file's bytes: one JSON line (UTF-8, ``\\n``-terminated), encoded as the
        file's writer always did."""
        return (json.dumps(self.to_json(), **self._DUMPS) + "\n").encode("utf-8")

    def without(self: _R, *keys: str) -> _R:
        """A copy with ``keys`` absent (fields set to None, unknown keys dropped), the
        other keys in their order."""
        order = self.key_order
        changes: dict[str, Any] = {k: None for k in keys if k in self._keys()}
        changes["extra"] = {k: v for k, v in self.extra.items() if k not in keys}
        if order is not None:
            changes["key_order"] = tuple(k for k in order if k not in keys)
        return dataclasses.replace(self, **changes)


class ReceiptJson(TypedDict, total=False):
    """One receipt line as the receipt files hold it (:meth:`Receipt.to_json`): the keys
    are :class:`Receipt`'s fields, each written when set; keys this tool does not know
    are kept as read."""

    provider: str
    chunk_id: str
    provider_batch_id: str
    status: str
    custom_id_to_source_index: dict[str, int]
    request_hash: str
    request_hashes: dict[str, str]
    model_params_snapshot: dict[str, Any]
    submitted_request_count: int
    total_bytes: int
    has_oversized_request: bool
    flush_reason: str
    submitted_at_utc: str
    run_id: str
    output_name: str
    modality: str
    attempt: int
    parent_run_id: str
    input_tokens_estimate: int
    intent_at_utc: str
    adoption: dict[str, Any]
    reused_from: str
    reused_custom_ids: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Receipt(JsonRecord):
    """One receipt: a batch the provider accepted (docs/files.md).

    Attributes:
        provider: the provider's registry name.
        chunk_id: the chunk the batch was built from (``<output>-chunk-NNNNNN``).
        provider_batch_id: the provider's batch id (``dry-run-<modality>-<chunk_id>`` in
            a dry run).
        status: the status when receipted (``submitted``, ``dry_run``, ``reused``, ...).
        custom_id_to_source_index: custom_id -> source_index (ints; digit strings in
            receipts of the original tool).
        request_hash: SHA-256 (hex) of the chunk's canonical requests.
        request_hashes: custom_id -> its request line's hash (16 hex digits).
        model_params_snapshot: ``output_name``, ``output_type``, ``modality``, ``model``.
        submitted_request_count: requests in the batch.
        total_bytes: the chunk's size, bytes.
        has_oversized_request: the chunk is one request above ``max_chunk_bytes``.
        flush_reason: why the chunker closed the chunk.
        submitted_at_utc: when it was accepted, ISO 8601 UTC.
        run_id, output_name, modality: the run, output and modality it belongs to.
        attempt: 1, or the resume attempt that submitted it.
        parent_run_id: a resubmission's parent run (absent otherwise).
        input_tokens_estimate: its estimated input tokens (``max_enqueued_tokens``).
        intent_at_utc: an intent's start (intents only).
        adoption: ``{"method", "confirmed"[, "rejected"]}`` of an adopted batch.
        reused_from: a reused receipt's earlier run (:mod:`mmirage_beam.reuse`).
        reused_custom_ids: a reused receipt's custom_id -> the earlier custom_id.
        extra: keys this tool does not know, as read.
        key_order: the keys in the order read; None for a receipt built here.
    """

    provider: Optional[str] = None
    chunk_id: Optional[str] = None
    provider_batch_id: Optional[str] = None
    status: Optional[str] = None
    custom_id_to_source_index: Optional[Mapping[str, int]] = None
    request_hash: Optional[str] = None
    request_hashes: Optional[Mapping[str, str]] = None
    model_params_snapshot: Optional[Mapping[str, Any]] = None
    submitted_request_count: Optional[int] = None
    total_bytes: Optional[int] = None
    has_oversized_request: Optional[bool] = None
    flush_reason: Optional[str] = None
    submitted_at_utc: Optional[str] = None
    run_id: Optional[str] = None
    output_name: Optional[str] = None
    modality: Optional[str] = None
    attempt: Optional[int] = None
    parent_run_id: Optional[str] = None
    input_tokens_estimate: Optional[int] = None
    intent_at_utc: Optional[str] = None
    adoption: Optional[Mapping[str, Any]] = None
    reused_from: Optional[str] = None
    reused_custom_ids: Optional[Mapping[str, str]] = None

    _ALWAYS: ClassVar[tuple[str, ...]] = (
        "provider",
        "chunk_id",
        "provider_batch_id",
        "status",
        "custom_id_to_source_index",
        "request_hash",
        "request_hashes",
        "model_params_snapshot",
        "submitted_request_count",
        "total_bytes",
        "has_oversized_request",
        "flush_reason",
        "submitted_at_utc",
        "run_id",
        "output_name",
        "modality",
        "attempt",
    )
    _DUMPS: ClassVar[Mapping[str, Any]] = {"ensure_ascii": False}

    @classmethod
    def for_chunk(
        cls,
        *,
        provider: str,
        chunk: Any,
        provider_batch_id: str,
        status: str,
        run_id: str,
        output_type: str,
        model: Optional[str],
        submitted_at: Optional[_dt.datetime] = None,
        attempt: int = 1,
        parent_run_id: Optional[str] = None,
        metas: Optional[Iterable[Any]] = None,
        maps: Optional[tuple[dict[str, int], dict[str, str]]] = None,
    ) -> Receipt:
        """The receipt of ``chunk`` once submitted as ``provider_batch_id``
        (``submitted_at``: now when None).

        ``chunk`` is a :class:`~mmirage_beam.records.Chunk` (requests in memory) or a
        :class:`~mmirage_beam.records.ChunkRef` with ``metas``, its staged requests'
        :class:`~mmirage_beam.run.staging.RequestMeta` in chunk order (``request_hash``
        then comes from the ref: the hash of the staged bytes), or ``maps``: the ref's
        two maps already built (:func:`mmirage_beam.run.staging.receipt_maps`), used as
        they are.

        Besides MMIRAGE's fields and ``run_id``/``output_name``/``modality``: ``attempt``
        (1, or the resume attempt that submitted it), ``request_hashes`` (custom_id ->
        :func:`~mmirage_beam.request_hashes.request_line_hash`, so merge marks only the
        rows whose own request changed; receipts without it are checked per chunk with
        ``request_hash``) and, for a resubmission run, ``parent_run_id`` (the run whose
        failed requests it re-sends)."""
        when = submitted_at or _dt.datetime.now(_dt.timezone.utc)
        snapshot: dict[str, Any] = {
            "output_name": chunk.output_name,
            "output_type": output_type,
            "modality": chunk.modality,
        }
        if model:
            snapshot["model"] = model
        if maps is not None:
            index, hashes = maps
            digest = chunk.request_hash
            count = len(index)
        elif metas is not None:  # one pass: metas may be a stream (staging.iter_meta)
            index, hashes = {}, {}
            for m in metas:
                index[m.custom_id] = m.source_index
                hashes[m.custom_id] = m.line_hash
            digest = chunk.request_hash
            count = len(index)
        else:
            index = {r.custom_id: r.source_index for r in chunk.requests}
            digest = request_hash(r.line for r in chunk.requests)
            hashes = {r.custom_id: request_line_hash(r.line) for r in chunk.requests}
            count = len(chunk.requests)
        return cls(
            provider=provider,
            chunk_id=chunk.chunk_id,
            provider_batch_id=provider_batch_id,
            status=status,
            custom_id_to_source_index=index,
            request_hash=digest,
            request_hashes=hashes,
            model_params_snapshot=snapshot,
            submitted_request_count=count,
            total_bytes=chunk.total_bytes,
            has_oversized_request=chunk.has_oversized_request,
            flush_reason=chunk.flush_reason,
            submitted_at_utc=when.isoformat(),
            run_id=run_id,
            output_name=chunk.output_name,
            modality=chunk.modality,
            attempt=attempt,
            parent_run_id=parent_run_id or None,
        )

    @property
    def adoption_rejected(self) -> bool:
        """An adoption that was withdrawn (``adoption.rejected``): readers skip it
        (:func:`mmirage_beam.run.receipts.adoption_rejected`)."""
        return isinstance(self.adoption, dict) and bool(self.adoption.get("rejected"))


@dataclasses.dataclass(frozen=True)
class RunRecord(JsonRecord):
    """The run record ``<base>.run.<run_id>.json`` (:mod:`mmirage_beam.run.fingerprint`).

    Attributes:
        run_id: the run.
        fingerprint: SHA-256 (hex) of what the run sends (``beam-yaml-...`` for Beam YAML).
        started_at: when the run started, ISO 8601 UTC.
        finished: the submission pipeline completed.
        rows_read, requests, chunks_submitted: the pipeline's counts (None until
            finished, or unknown).
        estimate: token counters ``<metric>:<output>`` -> tokens (absent when None).
        limit: ``mmirage run --limit N`` (absent when None).
        extra, key_order: see :class:`Receipt`.
    """

    run_id: Optional[str] = None
    fingerprint: Optional[str] = None
    started_at: Optional[str] = None
    finished: Optional[bool] = None
    rows_read: Optional[int] = None
    requests: Optional[int] = None
    chunks_submitted: Optional[int] = None
    estimate: Optional[Mapping[str, int]] = None
    limit: Optional[int] = None

    _ALWAYS: ClassVar[tuple[str, ...]] = (
        "run_id",
        "fingerprint",
        "started_at",
        "finished",
        "rows_read",
        "requests",
        "chunks_submitted",
    )

    def state(self) -> RunState:
        """What ``merge`` and ``check`` read of it (:class:`RunState`; the record's
        ``run_id`` is not checked: :meth:`RunState.of` takes the file's)."""
        return RunState.of(str(self.run_id), self)


@dataclasses.dataclass(frozen=True)
class RunState(JsonRecord):
    """What the launcher recorded about a run, for ``merge`` and ``check``
    (:meth:`mmirage_beam.run.store.RunStore.read_run_state`); no file of its own.

    Attributes:
        run_id: the run.
        state: ``finished``, ``submitting`` (stopped before its pipeline completed, or
            running) or ``stopped`` (no record, a stop marker left).
        requests_total: the requests a finished run built (absent when unknown).
    """

    run_id: Optional[str] = None
    state: Optional[str] = None
    requests_total: Optional[int] = None

    _ALWAYS: ClassVar[tuple[str, ...]] = ("run_id", "state")

    @classmethod
    def of(cls, run_id: str, record: RunRecord) -> RunState:
        """``run_id``'s state from its run record: ``finished`` with ``requests_total``
        (when the record's ``requests`` is an int), else ``submitting``."""
        finished = bool(record.finished)
        total = record.requests if finished and isinstance(record.requests, int) else None
        return cls(run_id, "finished" if finished else "submitting", total)

    @property
    def is_finished(self) -> bool:
        """``state == "finished"``."""
        return self.state == "finished"


@dataclasses.dataclass(frozen=True)
class MergeRecord(JsonRecord):
    """The merge record ``<base>.merge.<run_id>.json`` (:mod:`mmirage_beam.run.ledger`).

    Attributes:
        run_id: the oldest merged run (the chain's root), which names the file.
        runs: the merged runs with their linked runs, oldest first.
        output_path: the merged file written.
        merged_at: when, ISO 8601 UTC; ``merged_at_unix``: the same, Unix seconds.
        stats: the merge pipeline's counters (``rows_written``, ``used_input_tokens:<o>``...).
        failed_by_type: error type -> rows that failed with it.
        retryable: failed rows that a resubmission may send again.
        extra, key_order: see :class:`Receipt` (the file's keys are sorted).
    """

    run_id: Optional[str] = None
    runs: Optional[list[str]] = None
    output_path: Optional[str] = None
    merged_at: Optional[str] = None
    merged_at_unix: Optional[float] = None
    stats: Optional[Mapping[str, int]] = None
    failed_by_type: Optional[Mapping[str, int]] = None
    retryable: Optional[int] = None

    _DUMPS: ClassVar[Mapping[str, Any]] = {"sort_keys": True}

    @property
    def failures(self) -> int:
        """Rows that failed, every type together."""
        return sum((self.failed_by_type or {}).values())


@dataclasses.dataclass(frozen=True)
class LedgerEntry(JsonRecord):
    """One line of the cancel ledger: a batch ``mmirage cancel`` asked to cancel.

    Attributes:
        provider, provider_batch_id: the batch.
        run_id: the run that submitted it.
        status_before: the provider's status before the cancel.
        status_after: the provider's status after it (None: unknown).
        error: why the provider refused it (None: accepted).
        extra, key_order: see :class:`Receipt`.
    """

    provider: Optional[str] = None
    provider_batch_id: Optional[str] = None
    run_id: Optional[str] = None
    status_before: Optional[str] = None
    status_after: Optional[str] = None
    error: Optional[str] = None

    @property
    def key(self) -> tuple[Optional[str], Optional[str]]:
        """``(provider, provider_batch_id)``: the batch."""
        return (self.provider, self.provider_batch_id)


@dataclasses.dataclass(frozen=True)
class CancelRecord(JsonRecord):
    """The cancel record ``<base>.cancel.<run_id>.json`` (:mod:`mmirage_beam.run.cancel`).

    Attributes:
        run_id: the run.
        cancelled_at: the first ``mmirage cancel`` of it, ISO 8601 UTC.
        last_cancel_at: the last one, ISO 8601 UTC.
        batches: every batch asked, oldest first (:class:`LedgerEntry`; an entry that is
            not a JSON object is kept as read).
        extra, key_order: see :class:`Receipt` (the file's keys are sorted).
    """

    run_id: Optional[str] = None
    cancelled_at: Optional[str] = None
    last_cancel_at: Optional[str] = None
    batches: Optional[tuple[LedgerEntry, ...]] = None

    _DUMPS: ClassVar[Mapping[str, Any]] = {"sort_keys": True}

    def _encode_value(self, key: str, value: Any) -> Any:
        if key == "batches" and isinstance(value, tuple):
            return [b.to_json() if isinstance(b, LedgerEntry) else b for b in value]
        return value

    @classmethod
    def _decode_value(cls, key: str, value: Any) -> Any:
        if key == "batches" and isinstance(value, list):
            return tuple(LedgerEntry.from_json(b) if isinstance(b, dict) else b for b in value)
        return value

    def asked(self) -> set[tuple[Optional[str], Optional[str]]]:
        """The batches whose cancel the provider accepted (no ``error``)."""
        return {b.key for b in self.batches or () if isinstance(b, LedgerEntry) and not b.error}


@dataclasses.dataclass(frozen=True)
class LeaseRecord(JsonRecord):
    """What a lease file holds (:mod:`mmirage_beam.run.lease`); an unreadable or
    half-written one reads as a record of Nones.

    Attributes:
        run_id: the run (or ``fp-<hash>``, ``cycle-<run_id>``).
        host: the holder's host name.
        pid: the holder's process id.
        started_at, refreshed_at: Unix seconds.
        token: random per holder.
        extra, key_order: see :class:`Receipt` (the file's keys are sorted).
    """

    run_id: Optional[str] = None
    host: Optional[str] = None
    pid: Optional[int] = None
    started_at: Optional[float] = None
    refreshed_at: Optional[float] = None
    token: Optional[str] = None

    _DUMPS: ClassVar[Mapping[str, Any]] = {"sort_keys": True}


@dataclasses.dataclass(frozen=True)
class SubmittedMarker(JsonRecord):
    """The submitted marker ``<base>.submitted.<run_id>.json``
    (:func:`mmirage_beam.run.receipts.mark_submitted`).

    Attributes:
        run_id: the run.
        attempt: the attempt that receipted every chunk it built.
        receipts: that attempt's receipts.
        extra, key_order: see :class:`Receipt`.
    """

    run_id: Optional[str] = None
    attempt: Optional[int] = None
    receipts: Optional[int] = None
