"""One run's files behind one object: :class:`RunStore` reads and writes them as the
typed records of :mod:`mmirage_beam.run.records`.

A run's files sit beside its receipts, under the receipts base ``<base>``
(:func:`mmirage_beam.run.layout.receipts_base`), named by :class:`RunLayout`: receipts
and their parts and intents, the lease, the run record, the submitted and stop markers,
the merge and cancel records (the ledger), the staging folder. Every path is a local
path or a URI read through Beam's ``FileSystems``; what is written is byte for byte what
the module functions it replaces wrote (``tests/unit/test_run_records.py``).

The module functions (``fingerprint.read_run_record``, ``ledger.read_merge_record``,
``receipts.read_receipts``...) still return the plain dicts for
their callers; new code asks a :class:`RunStore`.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Optional

from mmirage_beam.io.fs import write_durably
from mmirage_beam.run import lease as _lease
from mmirage_beam.run import ledger as _ledger
from mmirage_beam.run import receipts as _receipts
from mmirage_beam.run.layout import RunLayout, parts_dir
from mmirage_beam.run.records import (
    CancelRecord,
    LeaseRecord,
    MergeRecord,
    Receipt,
    RunRecord,
    RunState,
    SubmittedMarker,
)

__all__ = ["RunStore", "run_records"]


def run_records(base: str) -> list[RunRecord]:
    """Every readable run record under receipts base ``base`` whose ``run_id`` is the
    one in its file name, newest ``started_at`` first."""
    from mmirage_beam.io.filesystems import FileSystems

    out = []
    for m in FileSystems.match([RunLayout(base, "*").run_record])[0].metadata_list:
        run_id = m.path[len(base) + len(".run.") : -len(".json")]
        record = RunStore(base, run_id).read_run_record()
        if record is not None and record.run_id == run_id:
            out.append(record)
    return sorted(out, key=lambda r: str(r.started_at or ""), reverse=True)


class RunStore:
    """The files of run ``run_id`` under receipts base ``base`` (a path or a URI).

    Reads return None for a file that is absent (and, for the small records, one that
    is unreadable or not a JSON object), as the readers always did. Writes are durable
    (temporary file, then rename: :func:`mmirage_beam.io.fs.write_durably`) and raise
    ``OSError`` / ``apache_beam.io.filesystem.BeamIOError`` when the place is not
    writable.
    """

    def __init__(self, base: str, run_id: str) -> None:
        self.base = base
        self.run_id = run_id
        self.layout = RunLayout(base, run_id)

    def __repr__(self) -> str:
        return f"RunStore({self.base!r}, {self.run_id!r})"

    # receipts -----------------------------------------------------------------------

    def receipt_path(self, modality: str, dry_run: bool = False) -> str:
        """The receipt file of ``modality`` (``text`` / ``multimodal``)."""
        return self.layout.receipt(modality, dry_run)

    def receipt_paths(self, dry_run: bool = False) -> list[str]:
        """The receipt file of every modality, text first (present or not)."""
        return [self.receipt_path(m, dry_run) for m in _receipts.MODALITIES]

    def read_receipts(self, modality: Optional[str] = None, dry_run: bool = False) -> list[Receipt]:
        """The run's receipts (every modality, text first, when ``modality`` is None), each
        file's in chunk_id order, its parts folder included (a part wins over the line of
        the same chunk). Holds them all: for a run's whole receipts, prefer
        :meth:`iter_receipts`.

        Raises:
            ValueError: a line or part is not JSON.
        """
        modalities = _receipts.MODALITIES if modality is None else (modality,)
        return [
            Receipt.from_json(r)
            for m in modalities
            for r in _receipts.read_receipts(self.receipt_path(m, dry_run))
        ]

    def iter_receipts(self, dry_run: bool = False) -> Iterator[Receipt]:
        """:meth:`read_receipts` of every modality, one receipt in memory at a time
        (lines that are not JSON objects are skipped).

        Raises:
            ValueError: a line or part is not JSON.
        """
        for path in self.receipt_paths(dry_run):
            for _location, r in _receipts.iter_located_receipts(path):
                if isinstance(r, dict):
                    yield Receipt.from_json(r)

    def part_path(self, modality: str, chunk_id: str, dry_run: bool = False) -> str:
        """``<receipt>.parts/<chunk_id>.json``: the receipt of one chunk."""
        return self.layout.part(modality, chunk_id, dry_run)

    def read_receipt_part(
        self, modality: str, chunk_id: str, dry_run: bool = False
    ) -> Optional[Receipt]:
        """The receipt part of ``chunk_id``, or None when there is none.

        Raises:
            ValueError: the part is not JSON; TypeError: not a JSON object.
        """
        found = _receipts.read_receipt_part(self.part_path(modality, chunk_id, dry_run))
        return None if found is None else Receipt.from_json(found)

    def write_receipt_part(self, receipt: Receipt, dry_run: bool = False) -> str:
        """Write ``receipt`` as its chunk's part (one line, as consolidation copies it)
        under its ``modality``; returns the part's path.

        Raises:
            ValueError: the receipt has no ``chunk_id`` or no ``modality``.
        """
        if not receipt.chunk_id or not receipt.modality:
            raise ValueError("a receipt part needs the receipt's chunk_id and modality")
        path = self.part_path(receipt.modality, receipt.chunk_id, dry_run)
        write_durably(path, receipt.encode())
        return path

    def consolidate(self, dry_run: bool = False) -> dict[str, int]:
        """Fold every modality's parts into its receipt file
        (:func:`mmirage_beam.run.receipts.consolidate_run`).

        Returns:
            receipt file -> receipts it holds, for the files holding at least one.
        """
        return _receipts.consolidate_run(self.base, self.run_id, dry_run)

    # intents and markers --------------------------------------------------------------

    def intent_path(self, modality: str, chunk_id: str) -> str:
        """``<receipt>.parts/<chunk_id>.intent``: written before a chunk is submitted."""
        return self.layout.intent(modality, chunk_id)

    def has_started(self) -> bool:
        """Whether the run has sent anything, or may have: a receipt file, a parts folder
        (receipts not yet consolidated) or an intent, in any modality."""
        from mmirage_beam.io.filesystems import FileSystems

        for path in self.receipt_paths():
            if FileSystems.exists(path) or FileSystems.exists(parts_dir(path)):
                return True
        return bool(self.pending_intents())

    def forget_unsent(self) -> bool:
        """Delete the run record of a run that sent nothing (:meth:`has_started` is
        False), e.g. one stopped by a Ctrl-C before its job started: a record left there
        would make the same config's next run "already submitted" (exit 3) and ``runs``
        list it as unfinished. Returns whether the record was deleted.

        Raises:
            OSError / BeamIOError: the storage failed.
        """
        from mmirage_beam.io.filesystems import FileSystems

        if self.has_started():
            return False
        path = self.layout.run_record
        if not FileSystems.exists(path):
            return False
        FileSystems.delete([path])
        return True

    def pending_intents(self) -> list[str]:
        """Paths of the intents still present (a provider call started, no receipt
        written), sorted."""
        return _receipts.pending_intents(self.base, self.run_id)

    def read_intent(self, path: str) -> Receipt:
        """The intent at ``path`` (one of :meth:`pending_intents`): a receipt with
        ``intent_at_utc`` and no provider batch yet.

        Raises:
            OSError / BeamIOError: it cannot be read; ValueError: not JSON; TypeError:
            not a JSON object.
        """
        from mmirage_beam.io.filesystems import FileSystems

        with FileSystems.open(path, compression_type="uncompressed") as f:
            return Receipt.from_json(json.loads(f.read().decode("utf-8")))

    def mark_submitted(self, receipts: int, attempt: int) -> SubmittedMarker:
        """Write the submitted marker: attempt ``attempt`` receipted every chunk it built
        (``receipts`` of them); returns it."""
        marker = SubmittedMarker(self.run_id, attempt, int(receipts))
        write_durably(self.layout.submitted_marker, marker.encode())
        return marker

    def read_submitted_marker(self) -> Optional[SubmittedMarker]:
        """The submitted marker, or None (absent or unreadable)."""
        found = _ledger.read_json_record(self.layout.submitted_marker)
        return None if found is None else SubmittedMarker.from_json(found)

    def submission_complete(self) -> bool:
        """Whether the last attempt receipted every chunk it built (the submitted marker
        exists)."""
        return _receipts.submission_complete(self.base, self.run_id)

    def stop_requested(self) -> bool:
        """Whether the stop marker exists (the run submits nothing more)."""
        from mmirage_beam.io.filesystems import FileSystems

        return bool(FileSystems.exists(self.layout.stop_marker))

    # run record -------------------------------------------------------------------------

    def read_run_record(self) -> Optional[RunRecord]:
        """The run record, or None (absent, unreadable or not a JSON object)."""
        found = _ledger.read_json_record(self.layout.run_record)
        return None if found is None else RunRecord.from_json(found)

    def write_run_record(self, record: RunRecord) -> RunRecord:
        """Write ``record`` as the run record (replacing any earlier one); returns it."""
        write_durably(self.layout.run_record, record.encode())
        return record

    def read_run_state(self) -> Optional[RunState]:
        """``finished`` or ``submitting`` from the run record, or None when the run has
        no record (runs of older versions, resubmissions)."""
        record = self.read_run_record()
        return None if record is None else RunState.of(self.run_id, record)

    # lease ------------------------------------------------------------------------------

    def read_lease(self) -> Optional[LeaseRecord]:
        """The lease file's content, or None when there is none (an unreadable or
        half-written one reads as a record of Nones)."""
        return _lease.read_lease(self.layout.lease)

    def lease_held(self) -> bool:
        """Whether a live launcher holds the run's lease (refreshed within
        :data:`mmirage_beam.run.lease.STALE_AFTER_SECS` seconds; on this host, its pid
        alive)."""
        return _lease.is_held(self.base, self.run_id)

    def acquire_lease(
        self, *, on_lost: Optional[Callable[[dict[str, Any]], None]] = None, **kwargs: float
    ) -> _lease.Lease:
        """Take the run's lease (:func:`mmirage_beam.run.lease.acquire`; ``kwargs``:
        ``refresh_secs``, ``stale_after_secs``, ``settle_secs``, in seconds).

        Raises:
            mmirage_beam.run.lease.RunLocked: a live process holds it (exit 2).
        """
        return _lease.acquire(self.base, self.run_id, on_lost=on_lost, **kwargs)

    # ledger -----------------------------------------------------------------------------

    def read_merge_record(self) -> Optional[MergeRecord]:
        """The merge record this run names (as a chain's root), or None."""
        found = _ledger.read_json_record(self.layout.merge_record)
        return None if found is None else MergeRecord.from_json(found)

    def write_merge_record(self, record: MergeRecord) -> MergeRecord:
        """Write ``record`` as this run's merge record; returns it."""
        _ledger.write_record(self.layout.merge_record, record)
        return record

    def read_cancel_record(self) -> Optional[CancelRecord]:
        """The cancel record, or None (never cancelled with ``mmirage cancel``, or
        unreadable)."""
        return _ledger.read_cancel_record(self.base, self.run_id)

    def write_cancel_record(self, record: CancelRecord) -> CancelRecord:
        """Write ``record`` as the run's cancel record; returns it."""
        _ledger.write_record(self.layout.cancel_record, record)
        return record

    # staging and the rest ---------------------------------------------------------------

    @property
    def staging_dir(self) -> str:
        """``<base>.staged.<run_id>``: the staged chunks and temporary outputs."""
        return self.layout.staging

    @property
    def invalid_rows_path(self) -> str:
        """``<base>.invalid_rows.<run_id>.jsonl``: one line per invalid row."""
        return self.layout.invalid_rows
