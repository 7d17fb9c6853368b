"""``mmirage cancel``: cancel every unfinished batch of a run and of its linked runs.

Each batch is cancelled through its adapter's ``cancel_batch``
(:class:`mmirage_beam.providers.base.BatchSubmissionAdapter`); the provider then ends it
cancelled, with the results of the requests it had already processed. What was asked is
recorded per run in ``<base>.cancel.<run_id>.json`` (:mod:`mmirage_beam.run.ledger`), which
``check``, ``merge``, ``runs`` and ``run --wait`` read: a later merge joins the partial
results and marks the rest cancelled (``batch_cancelled`` / ``canceled``), and the cycle
does not re-send what a user cancelled. A batch already in the record is not cancelled a
second time.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.run.discovery import collect_receipts
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.lookup import TERMINAL_STATUSES, BatchStatusChecker
from mmirage_beam.run.records import CancelRecord, LedgerEntry
from mmirage_beam.run.selection import linked_runs
from mmirage_beam.run.store import RunStore


@dataclass
class CancelPlan:
    """What ``cancel`` would do.

    Attributes:
        runs: the run and its linked runs, oldest first.
        to_cancel: statuses (:class:`~mmirage_beam.run.lookup.BatchStatus`) of the
            batches not ended and not cancelled before.
        already: those not ended that an earlier ``cancel`` already asked for.
        ended: how many batches have ended.
        records: run -> its cancel record, for the runs cancelled before.
    """

    runs: list[str]
    to_cancel: list[Any]
    already: list[Any]
    ended: int
    records: dict[str, CancelRecord] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        """Requests in the batches to cancel."""
        return sum(s.receipt.request_count for s in self.to_cancel)


def plan_cancel(
    config: PipelineConfig, run_id: Optional[str], checker_factory: Any = None
) -> tuple[CancelPlan, Any]:
    """Find the run (default: the newest) and its linked runs, and look their batches up.

    Returns:
        ``(plan, opened checker)``; the caller closes the checker (``checker.close()``).

    Raises:
        mmirage_beam.run.discovery.NoReceiptsError: no receipt (exit 2).
        mmirage_beam.errors.CredentialsError: a provider key is missing (exit 2).
    """
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    if run_id is not None:
        collect_receipts(config, (), run_id)  # NoReceiptsError names the run
    every = collect_receipts(config)
    start = run_id or every.run_ids[0]
    runs, _rank = linked_runs(every.receipts, [start])
    batches = [e for e in every.batches if e.run_id in runs]
    records = {r: rec for r in runs if (rec := RunStore(base, r).read_cancel_record()) is not None}
    asked = {key for rec in records.values() for key in rec.asked()}
    checker = (checker_factory or BatchStatusChecker)({e.provider for e in batches}, config)
    checker.open()
    statuses = checker.check(batches)
    open_ = [s for s in statuses if s.status not in TERMINAL_STATUSES]
    plan = CancelPlan(
        runs=runs,
        to_cancel=[s for s in open_ if s.receipt.key not in asked],
        already=[s for s in open_ if s.receipt.key in asked],
        ended=len(statuses) - len(open_),
        records=records,
    )
    return plan, checker


def cancel_batches(base: str, plan: CancelPlan, checker: Any) -> list[LedgerEntry]:
    """Cancel ``plan.to_cancel`` and record each run's cancellations durably (its cancel
    record: the earlier entries, then these).

    Returns:
        One entry per batch (``error`` None when the provider accepted the cancel).

    Raises:
        OSError / apache_beam.io.filesystem.BeamIOError: a cancel record cannot be written.
    """
    now = _dt.datetime.now(_dt.timezone.utc).isoformat()
    done: list[LedgerEntry] = []
    for st in plan.to_cancel:
        after = checker.cancel_one(st.receipt)
        done.append(
            LedgerEntry(
                provider=st.receipt.provider,
                provider_batch_id=st.receipt.provider_batch_id,
                run_id=st.receipt.run_id,
                status_before=st.progress.provider_status if st.progress else st.status,
                status_after=after.progress.provider_status if after.progress else None,
                error=after.error,
            )
        )
    for run in plan.runs:
        mine = [d for d in done if d.run_id == run]
        if not mine:
            continue
        earlier = plan.records.get(run) or CancelRecord()
        record = CancelRecord(
            run_id=run,
            cancelled_at=earlier.cancelled_at or now,
            last_cancel_at=now,
            batches=tuple(earlier.batches or ()) + tuple(mine),
        )
        RunStore(base, run).write_cancel_record(record)
    return done


def cancelled_note(base: str, runs: Sequence[str]) -> Optional[str]:
    """One line naming the runs cancelled with ``mmirage cancel`` (None: none), for
    ``check`` and ``merge``."""
    found = [(r, rec) for r in runs if (rec := RunStore(base, r).read_cancel_record()) is not None]
    if not found:
        return None
    parts = [f"{r} at {rec.cancelled_at}" for r, rec in found]
    return (
        "cancelled with 'mmirage cancel': run "
        + ", ".join(parts)
        + "; their unfinished requests end cancelled and are merged as such (not re-sent "
        "by run --wait)"
    )
