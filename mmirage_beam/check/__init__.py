"""``mmirage check``, one module per role, over the run wing's receipts and lookups:

1. :mod:`~mmirage_beam.run.discovery` finds and reads receipt files
   (:func:`collect_receipts`): ours, or the original MMIRAGE tool's, which carry no
   ``run_id`` (it is taken from the file name ``<base>.<modality>.<run_id>.jsonl``);
   dry-run receipts are skipped. ``mmirage merge``, ``resubmit``, ``cancel`` and ``runs``
   use it too, so it lives in ``run/``.
2. :mod:`~mmirage_beam.run.lookup` looks every distinct ``(provider,
   provider_batch_id)`` up through its adapter (:class:`BatchStatusChecker`); a batch the
   provider cannot resolve becomes a :data:`LOOKUP_FAILED` status, never hiding others
   (``run/`` too: merge refuses while batches still run, cancel and runs ask it).
3. :mod:`~mmirage_beam.check.report` summarises per provider and per run
   (:func:`build_report`) and prints it as plain text or ``rich`` tables.
4. :mod:`~mmirage_beam.check.advice` explains failures and gives the fixing command.
5. :mod:`~mmirage_beam.check.watch` polls until every batch is terminal.

This package re-exports the public names of all five. Generic code only:
everything provider-specific comes from the adapters. Credentials are read from the
environment (``resolve_credentials``) and never printed.
"""

from mmirage_beam.check.advice import advice_lines
from mmirage_beam.check.report import (
    GroupSummary,
    StatusReport,
    build_report,
    format_report_lines,
    human_age,
    print_report,
    print_rich_report,
    summarize,
)
from mmirage_beam.check.watch import (
    PlainWatchDisplay,
    RichWatchDisplay,
    format_poll_line,
    poll_summary,
    watch_statuses,
)
from mmirage_beam.run.discovery import (
    NoReceiptsError,
    ReceiptEntry,
    ReceiptSet,
    collect_receipts,
)
from mmirage_beam.run.lookup import (
    LOOKUP_FAILED,
    STATUS_ORDER,
    TERMINAL_STATUSES,
    BatchStatus,
    BatchStatusChecker,
    check_statuses,
    exit_code,
    not_terminal,
)

__all__ = [
    "LOOKUP_FAILED",
    "STATUS_ORDER",
    "TERMINAL_STATUSES",
    "BatchStatus",
    "BatchStatusChecker",
    "GroupSummary",
    "NoReceiptsError",
    "PlainWatchDisplay",
    "ReceiptEntry",
    "ReceiptSet",
    "RichWatchDisplay",
    "StatusReport",
    "advice_lines",
    "build_report",
    "check_statuses",
    "collect_receipts",
    "exit_code",
    "format_poll_line",
    "format_report_lines",
    "human_age",
    "not_terminal",
    "poll_summary",
    "print_report",
    "print_rich_report",
    "summarize",
    "watch_statuses",
]
