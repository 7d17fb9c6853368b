"""Small durable records beside the receipts that ``runs``, ``cancel`` and the cycle read.

- ``<base>.merge.<run_id>.json``: written by ``mmirage merge`` after each merge, keyed by
  the oldest run of the merge's linked runs (the chain's root)::

      {"run_id": str, "runs": [str], "output_path": str, "merged_at": ISO 8601 UTC str,
       "merged_at_unix": float, "stats": {"<counter>": int}, "failed_by_type":
       {"<error_type>": int}, "retryable": int}

  ``stats`` are the merge pipeline's Beam counters (``rows_written``,
  ``outputs_succeeded``, ``rows_with_failures``, ``used_input_tokens:<output>`` ...).
- ``<base>.cancel.<run_id>.json``: written by ``mmirage cancel``, one per run::

      {"run_id": str, "cancelled_at": ISO 8601 UTC str, "last_cancel_at": ISO 8601 UTC
       str, "batches": [{"provider", "provider_batch_id", "run_id", "status_before",
       "status_after", "error"}]}

Typed: :class:`~mmirage_beam.run.records.MergeRecord`,
:class:`~mmirage_beam.run.records.CancelRecord` of
:class:`~mmirage_beam.run.records.LedgerEntry` (one per batch), read and written by
:class:`~mmirage_beam.run.store.RunStore`. Both are written with
:func:`mmirage_beam.io.fs.write_durably` (atomic on every
Beam filesystem) and read through Beam's FileSystems, so they live wherever the receipts
do (local disk, gs://, s3://).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from typing import Any, Iterable, Mapping, Optional

from mmirage_beam.io.fs import write_durably
from mmirage_beam.results import resubmittable
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.records import CancelRecord, MergeRecord


def merge_record_path(base: str, run_id: str) -> str:
    """``<base>.merge.<run_id>.json``."""
    return RunLayout(base, run_id).merge_record


def cancel_record_path(base: str, run_id: str) -> str:
    """``<base>.cancel.<run_id>.json``."""
    return RunLayout(base, run_id).cancel_record


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def read_json_record(path: str) -> Optional[dict[str, Any]]:
    """The JSON object at ``path``, or None (absent, unreadable or not an object)."""
    from mmirage_beam.io.filesystems import FileSystems

    try:
        if not FileSystems.exists(path):
            return None
        with FileSystems.open(path, compression_type="uncompressed") as f:
            value = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json_record(path: str, record: Mapping[str, Any]) -> None:
    """Write ``record`` durably (atomically) as one JSON line at ``path``.

    Raises:
        OSError / apache_beam.io.filesystem.BeamIOError: the location is not writable.
    """
    write_durably(path, (json.dumps(dict(record), sort_keys=True) + "\n").encode("utf-8"))


def write_record(path: str, record: MergeRecord | CancelRecord) -> None:
    """Write a merge or cancel record durably (atomically) at ``path``, as
    :func:`write_json_record` writes its dict (one JSON line, sorted keys).

    Raises:
        OSError / apache_beam.io.filesystem.BeamIOError: the location is not writable.
    """
    write_durably(path, record.encode())


def write_merge_record(
    base: str,
    runs: Iterable[str],
    output_path: str,
    stats: Mapping[str, int],
    errors: Iterable[Mapping[str, Any]],
) -> MergeRecord:
    """Record a finished merge of ``runs`` (oldest first; the first names the record).

    Args:
        base: the receipts base (:func:`mmirage_beam.run.receipts.receipts_base`).
        runs: the merged runs with their linked runs, oldest first.
        output_path: the merged file written.
        stats: the merge pipeline's counters.
        errors: the errors file's lines (dicts with ``error_type``, ``source_index``,
            ``retryable``).

    Returns:
        The record written.

    Raises:
        OSError / apache_beam.io.filesystem.BeamIOError: the location is not writable.
    """
    runs = list(runs)
    by_type: dict[str, int] = {}
    retryable = 0
    for e in errors:
        if e.get("source_index") is None:  # unknown ids and unreadable lines: no row
            continue
        by_type[e["error_type"]] = by_type.get(e["error_type"], 0) + 1
        retryable += bool(resubmittable(dict(e), "retryable"))
    record = MergeRecord(
        run_id=runs[0],
        runs=runs,
        output_path=output_path,
        merged_at=_now(),
        merged_at_unix=time.time(),
        stats={k: int(v) for k, v in stats.items()},
        failed_by_type=by_type,
        retryable=retryable,
    )
    write_record(merge_record_path(base, runs[0]), record)
    return record


def read_cancel_record(base: str, run_id: str) -> Optional[CancelRecord]:
    """The cancel record of ``run_id``, or None (never cancelled with ``mmirage cancel``,
    or unreadable)."""
    found = read_json_record(cancel_record_path(base, run_id))
    return None if found is None else CancelRecord.from_json(found)
