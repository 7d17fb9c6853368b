"""What every front end does before and after a run's job, as data.

``mmirage run`` (``pipelines/submit.py``) and the Beam YAML ``SubmitBatches`` call
:func:`prepare_submit` the same way: it takes the run's lease (``RunLocked``, exit 2,
while another process holds it), refuses a fresh run whose config and data an earlier
run already submitted, clears the markers of an earlier attempt, writes the run record
and resolves a resumed run's interrupted chunks. It prints nothing: what the user should
read comes back in :attr:`SubmitPlan.messages`, for the driver to print.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple, Optional

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.io.fs import delete_files, write_durably
from mmirage_beam.run.fingerprint import (
    matching_run,
    read_run_record,
    run_fingerprint,
    write_run_record,
)
from mmirage_beam.run.layout import RunLayout, receipts_base
from mmirage_beam.run.lease import Lease, RunLocked, acquire
from mmirage_beam.run.resume import ResumeState, prepare_resume

FINGERPRINT_WAIT_SECS = 30.0  # how long an identical fresh run waits for the first one


class Message(NamedTuple):
    """One line for the user: ``level`` is ``"info"`` or ``"warning"``."""

    level: str
    text: str


@dataclasses.dataclass(frozen=True)
class SubmitPlan:
    """A run ready to submit (or, with ``earlier`` set, one with nothing to send).

    Attributes:
        layout: the run's files.
        fingerprint: the run fingerprint (:func:`run_fingerprint`).
        record: the run record as written before the job (``finished: false``).
        resume: what a resumed run must not send again (attempt 1 for a fresh run).
        messages: lines for the driver to print, in order.
        earlier: a fresh run only: the run record of an earlier run of the same config
            and data; nothing was taken nor written, and nothing is to be sent (exit 3).
        leases: the leases this plan holds until :meth:`release`.
    """

    layout: RunLayout
    fingerprint: str
    record: Optional[dict[str, Any]]
    resume: ResumeState
    messages: tuple[Message, ...] = ()
    earlier: Optional[dict[str, Any]] = None
    leases: tuple[Lease, ...] = ()

    @property
    def run_id(self) -> str:
        """The run id."""
        return self.layout.run_id

    def release(self) -> None:
        """Give up the run's lease (idempotent); the driver calls it once the job ended."""
        for lease in reversed(self.leases):
            lease.release()


def _acquire_waiting(base: str, key: str, wait_secs: float) -> Lease:
    """The lease ``key``, waiting up to ``wait_secs`` seconds for a short-lived holder.

    Raises:
        RunLocked: still held after ``wait_secs``.
    """
    deadline = time.monotonic() + wait_secs
    while True:
        try:
            return acquire(base, key)
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def prepare_submit(
    config: PipelineConfig,
    run_id: str,
    *,
    adapter_cls: type,
    resuming: bool,
    new_run: bool = False,
    read_data: bool = True,
    on_lost: Optional[Callable[[dict[str, Any]], None]] = None,
    fingerprint_wait_secs: float = FINGERPRINT_WAIT_SECS,
) -> SubmitPlan:
    """Take run ``run_id`` for a submission (not a dry run) and return its plan.

    Args:
        config: the run's config (``row_limit`` already applied).
        run_id: the run id.
        adapter_cls: the provider's adapter class (resolves a resumed run's intents).
        resuming: the user named the run (``--run-id``, YAML ``run_id``): receipted
            requests are not sent again.
        new_run: submit even if an earlier run sent the same config and data.
        read_data: the run reads the configured datasets (``mmirage run``); False for a
            Beam YAML run (its rows come from the pipeline, so no data fingerprint and
            no look for an earlier identical run).
        on_lost: called if the lease is found lost while refreshing (default: write the
            stop marker, so the job submits nothing more).
        fingerprint_wait_secs: how long a fresh run waits for an identical one started
            together to write its run record, seconds.

    Raises:
        RunLocked: (exit 2) another live process holds the run (nothing was written).
        apache_beam.io.filesystem.BeamIOError / OSError: the receipts place or a data
            file cannot be read or written.
    """
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    layout = RunLayout(base, run_id)
    fingerprint = run_fingerprint(config, read_data=read_data)
    messages: list[Message] = []
    leases: list[Lease] = []

    def stop_on_lost(_holder: dict[str, Any]) -> None:
        write_durably(layout.stop_marker, b"lease lost\n")

    try:
        if read_data and not resuming and not new_run:
            # Serialises identical fresh runs started together, until the run record of
            # the first one is written (the others then find it).
            leases.append(_acquire_waiting(base, "fp-" + fingerprint[:16], fingerprint_wait_secs))
            earlier = matching_run(base, fingerprint)
            if earlier is not None:
                leases.pop().release()
                return SubmitPlan(layout, fingerprint, None, ResumeState(), earlier=earlier)
        leases.append(acquire(base, run_id, on_lost=on_lost or stop_on_lost))
        for lease in leases:
            lease.start_refreshing()
        # left by an earlier stopped attempt; this attempt writes its own submitted marker
        delete_files([layout.stop_marker, layout.submitted_marker])
        started_at = None
        if resuming:
            earlier = read_run_record(base, run_id)
            if earlier is not None:
                started_at = earlier.get("started_at")
                if earlier.get("fingerprint") != fingerprint:
                    messages.append(
                        Message(
                            "warning",
                            f"mmirage run {run_id}: warning: the config or the data changed "
                            "since this run started; requests already receipted are not sent "
                            "again, the others are built from the current config and data",
                        )
                    )
        record = write_run_record(
            base, run_id, fingerprint, started_at=started_at, limit=config.row_limit
        )
        if len(leases) == 2:
            leases.pop(0).release()
        resume = ResumeState()
        if resuming:
            resume = prepare_resume(base, run_id, adapter_cls, config.processor)
            if resume.submitted_ids or resume.attempt > 1:
                messages.append(
                    Message(
                        "info",
                        f"mmirage run {run_id}: resuming (attempt {resume.attempt}): "
                        f"{len(resume.submitted_ids)} request(s) already receipted are not "
                        f"sent again; adopted {len(resume.adopted)} interrupted batch(es), "
                        f"re-sending {len(resume.resent) + len(resume.dropped)} interrupted "
                        "chunk(s)",
                    )
                )
    except BaseException:
        for lease in reversed(leases):
            lease.release()
        raise
    return SubmitPlan(layout, fingerprint, record, resume, tuple(messages), None, tuple(leases))


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """What a merge of a selected run reads, decided before its pipeline is built.

    Attributes:
        selection: the run selection (``run.selection.RunSelection``: receipts, batches
            and their statuses, linked runs).
        base: the receipts base.
        receipts: the ``ReceiptEntry`` of every receipt merged (workers read the maps).
        unfinished: the merged runs that stopped before all their chunks were
            submitted (``run.selection.Unfinished``; falsy when none).
        resume_run: the run to resume to submit what is missing.
        count_unsubmitted: tell requests no receipt holds apart as never submitted
            (only when every row read belongs to the merged runs).
        invalid_rows_files: the linked runs' invalid-rows files that exist.
        blocked: ``"lookup_failed"`` (a batch cannot be looked up) or ``"pending"``
            (a batch has not ended and a partial merge was not allowed): nothing is to
            be merged; None otherwise.
    """

    selection: Any
    base: str
    receipts: tuple[Any, ...]
    unfinished: Any
    resume_run: str
    count_unsubmitted: bool
    invalid_rows_files: tuple[str, ...]
    blocked: Optional[str] = None


def prepare_merge(
    config: PipelineConfig,
    selection: Any,
    *,
    allow_partial: bool,
    verify_source: bool,
    receipts_picked: bool = False,
) -> MergePlan:
    """The plan of a merge of ``selection`` (``run.selection.select_run``'s answer).

    Args:
        config: the merge's config.
        selection: the selected run(s) with every batch looked up.
        allow_partial: merge what is available while batches still run.
        verify_source: rebuild the requests to check the source (and so tell never
            submitted requests apart).
        receipts_picked: the receipt files were named by hand (they may be a subset,
            so never-submitted requests are not counted).

    Raises:
        apache_beam.io.filesystem.BeamIOError: the receipts place cannot be read.
    """
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.run.selection import find_unfinished

    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    blocked = None
    if selection.lookup_failed:
        blocked = "lookup_failed"
    elif selection.pending and not allow_partial:
        blocked = "pending"
    receipts = tuple(selection.entries)
    unfinished = find_unfinished(base, selection.linked, selection.entries)
    resume_run = (unfinished.runs or selection.starts or [selection.run])[0]
    count_unsubmitted = (
        config.num_shards == 1
        and not receipts_picked
        and verify_source
        and all(e.receipt.get("run_id") for e in receipts)
    )
    invalid = tuple(
        path
        for path in (RunLayout(base, run).invalid_rows for run in selection.linked)
        if FileSystems.exists(path)
    )
    return MergePlan(
        selection, base, receipts, unfinished, resume_run, count_unsubmitted, invalid, blocked
    )
