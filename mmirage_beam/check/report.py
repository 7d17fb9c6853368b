"""The report of ``mmirage check``: summaries per provider and per run, as plain aligned
text (stdout not a terminal) or ``rich`` tables."""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import (
    Any,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
)

from mmirage_beam.run.discovery import ReceiptEntry, ReceiptSet
from mmirage_beam.run.lookup import LOOKUP_FAILED, STATUS_ORDER, BatchStatus, exit_code

#: the providers' status words of a cancelled batch (Bedrock's ``Stopped`` included)
CANCELLED_WORDS = ("cancelled", "canceled", "cancelling", "canceling", "stopped", "stopping")

__all__ = [
    "GroupSummary",
    "StatusReport",
    "summarize",
    "build_report",
    "human_age",
    "format_report_lines",
    "print_rich_report",
    "print_report",
]


@dataclass(frozen=True)
class GroupSummary:
    """Totals of a group of batches (one provider, or one run).

    Attributes:
        label: ``openai`` or ``run 3aa41d``.
        batches: number of batches.
        by_status: batches per status, in :data:`STATUS_ORDER` (only non-zero ones).
        done, failed, total: requests succeeded, failed and in all (unknown counts as 0).
    """

    label: str
    batches: int
    by_status: Tuple[Tuple[str, int], ...]
    done: int
    failed: int
    total: int

    def status_text(self) -> str:
        """``completed 3, in_progress 1``."""
        return ", ".join(f"{k} {v}" for k, v in self.by_status) or "none"


@dataclass(frozen=True)
class StatusReport:
    """What ``mmirage check`` prints.

    Attributes:
        statuses: one per distinct batch, in receipt order (newest run first).
        by_provider: one summary per provider, sorted by name.
        by_run: one summary per run, in receipt order.
        files: receipt files read.
        skipped_dry_run: dry-run receipt files skipped.
        checked_at: when the report was built, Unix seconds.
        unfinished_runs: runs that stopped before all their chunks were submitted.
        cancelled_runs: runs cancelled with ``mmirage cancel`` (a cancel record): their
            batches that ended cancelled are told as ``cancelled``, not as failures.
    """

    statuses: Tuple[BatchStatus, ...]
    by_provider: Tuple[GroupSummary, ...]
    by_run: Tuple[GroupSummary, ...]
    files: Tuple[str, ...]
    skipped_dry_run: Tuple[str, ...]
    checked_at: float
    unfinished_runs: Tuple[str, ...] = ()
    cancelled_runs: Tuple[str, ...] = ()

    def cancelled_on_purpose(self, s: BatchStatus) -> bool:
        """``s`` ended cancelled (the provider's word) in a run cancelled with
        ``mmirage cancel``: what the user asked for, not a failure."""
        word = (s.progress.provider_status if s.progress else "").lower()
        return (
            s.status == "failed"
            and s.receipt.run_id in self.cancelled_runs
            and word in CANCELLED_WORDS
        )

    @property
    def failed_requests(self) -> int:
        """Requests the providers report failed, over every batch (those of batches
        cancelled on purpose left out)."""
        return sum(s.failed or 0 for s in self.statuses if not self.cancelled_on_purpose(s))

    @property
    def running(self) -> int:
        """Batches not in a terminal status yet."""
        return sum(1 for s in self.statuses if not s.terminal)

    @property
    def exit_code(self) -> int:
        """1 when a batch failed or could not be looked up, a run stopped before all its
        chunks were submitted (``unfinished_runs``), or every batch ended and requests
        failed; 0 when every request of the ended batches succeeded or batches are still
        running with nothing failed so far (the one verdict line says which)."""
        others = [s for s in self.statuses if not self.cancelled_on_purpose(s)]
        if exit_code(others) or self.unfinished_runs:
            return 1
        return 1 if not self.running and self.failed_requests else 0


def summarize(label: str, statuses: Sequence[BatchStatus]) -> GroupSummary:
    """Totals of ``statuses`` under ``label``."""
    counts: Dict[str, int] = {}
    for s in statuses:
        counts[s.status] = counts.get(s.status, 0) + 1
    order = list(STATUS_ORDER) + sorted(set(counts) - set(STATUS_ORDER))
    return GroupSummary(
        label=label,
        batches=len(statuses),
        by_status=tuple((k, counts[k]) for k in order if counts.get(k)),
        done=sum(s.done or 0 for s in statuses),
        failed=sum(s.failed or 0 for s in statuses),
        total=sum(s.total for s in statuses),
    )


def reused_view(s: BatchStatus) -> BatchStatus:
    """A reused receipt's status (:mod:`mmirage_beam.reuse`) over its own requests: the
    earlier batch's answers it reuses are successful ones by construction, so its
    requests are done, never the earlier batch's failures of requests this run sent
    again (issue 38); other statuses as they are."""
    n = s.receipt.request_count
    if not s.receipt.record.reused_from or s.progress is None or s.status != "completed":
        return s
    return dataclasses.replace(
        s, progress=dataclasses.replace(s.progress, completed=n, failed=0, total=n)
    )


def build_report(
    receipts: ReceiptSet, statuses: Sequence[BatchStatus], now: Optional[float] = None
) -> StatusReport:
    """Summaries per provider and per run of ``statuses`` (from ``receipts``); a reused
    receipt counts its own requests only (:func:`reused_view`)."""
    statuses = [reused_view(s) for s in statuses]
    providers = sorted({s.receipt.provider for s in statuses})
    runs = list(dict.fromkeys(s.receipt.run_id for s in statuses))
    return StatusReport(
        statuses=tuple(statuses),
        by_provider=tuple(
            summarize(p, [s for s in statuses if s.receipt.provider == p]) for p in providers
        ),
        by_run=tuple(
            summarize(f"run {r}", [s for s in statuses if s.receipt.run_id == r]) for r in runs
        ),
        files=receipts.files,
        skipped_dry_run=receipts.skipped_dry_run,
        checked_at=time.time() if now is None else now,
    )


def human_age(secs: Optional[float]) -> str:
    """``42s``, ``12m05s``, ``3h07m``, ``2d04h`` (``-`` when unknown)."""
    if secs is None:
        return "-"
    s = int(secs)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


_COLUMNS = (
    "RUN",
    "MODALITY",
    "PROVIDER",
    "BATCH",
    "CHUNK",
    "STATUS",
    "PROVIDER STATUS",
    "DONE",
    "FAILED",
    "TOTAL",
    "AGE",
    "DETAIL",
)


def _num(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


def _row(s: BatchStatus, report: Optional[StatusReport] = None) -> List[str]:
    r = s.receipt
    on_purpose = report is not None and report.cancelled_on_purpose(s)
    return [
        r.run_id,
        r.modality,
        r.provider,
        r.provider_batch_id,
        r.chunk_id or "-",
        "cancelled" if on_purpose else s.status,
        s.progress.provider_status if s.progress else "-",
        _num(s.done),
        _num(s.failed),
        str(s.total),
        human_age(s.age_secs),
        _reused_note(r) or s.detail,
    ]


def _reused_note(r: ReceiptEntry) -> str:
    """A reused receipt (mmirage_beam.reuse): whose batch it is, and that it was paid there."""
    earlier = r.record.reused_from
    if not earlier:
        return ""
    return (
        f"reused: {r.request_count:,} answer(s) of run {earlier}'s batch (paid by that run, "
        "not sent again)"
    )


def _headline(report: StatusReport) -> str:
    n_runs = len(report.by_run)
    n_files = len(report.files)
    return f"{len(report.statuses)} batch(es) in {n_runs} run(s), from {n_files} receipt file(s)"


def _verdict(report: StatusReport) -> str:
    """The one verdict line; "ok" only when every request of the ended batches succeeded
    (and no run stopped midway): it agrees with :attr:`StatusReport.exit_code`."""
    on_purpose = sum(1 for s in report.statuses if report.cancelled_on_purpose(s))
    failed = sum(1 for s in report.statuses if s.status == "failed") - on_purpose
    lookups = sum(1 for s in report.statuses if s.status == LOOKUP_FAILED)
    running = report.running
    if failed or lookups:
        return (
            f"result: FAILED ({failed} batch(es) failed at the provider, {lookups} lookup "
            f"failure(s), {running} still running)"
        )
    if report.unfinished_runs:
        return (
            f"result: UNFINISHED (run {', '.join(report.unfinished_runs)} stopped before all "
            "its chunks were submitted; the command that resumes it is below)"
        )
    failed_requests = report.failed_requests
    note = (
        f"{failed_requests:,} request(s) failed at the provider: mmirage merge lists them, "
        "and also counts as failed the answers the provider returned but that are unusable "
        "(refusals, truncations, invalid JSON), which are 'done' here"
    )
    if running:
        so_far = (
            f"{failed_requests:,} request(s) failed so far"
            if failed_requests
            else ("nothing failed so far")
        )
        return f"result: still running ({running} batch(es) not finished; {so_far})"
    if failed_requests:
        return f"result: completed with failures (every batch ended; {note})"
    if on_purpose:
        return (
            f"result: cancelled ({on_purpose} batch(es) cancelled with 'mmirage cancel', "
            "as asked; nothing else failed: the requests that ran keep their results, "
            "which mmirage merge writes, the rest as cancelled)"
        )
    return (
        "result: ok (every batch completed and the provider reports no failed request; "
        "the answers themselves (refusals, truncations, invalid JSON) are judged by "
        "mmirage merge)"
    )


def _summary_line(g: GroupSummary, width: int) -> str:
    return (
        f"  {g.label.ljust(width)}  {g.batches} batch(es): {g.status_text()}; "
        f"requests done {g.done}, failed {g.failed}, total {g.total}"
    )


def format_report_lines(report: StatusReport) -> List[str]:
    """The report as plain text lines: aligned columns, then the summaries.

    Fully informative on its own (used when stdout is not a terminal).
    """
    lines = [f"mmirage check: {_headline(report)}"]
    if report.skipped_dry_run:
        lines.append(
            "skipped dry-run receipts (nothing was submitted): " + ", ".join(report.skipped_dry_run)
        )
    rows = [list(_COLUMNS)] + [_row(s, report) for s in report.statuses]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    width = max(len(g.label) for g in report.by_provider + report.by_run)
    lines.append("")
    lines.append("by provider:")
    lines.extend(_summary_line(g, width) for g in report.by_provider)
    lines.append("by run:")
    lines.extend(_summary_line(g, width) for g in report.by_run)
    lines.append(_verdict(report))
    return lines


_STATUS_STYLES = {
    "completed": "green",
    "in_progress": "yellow",
    "unknown": "magenta",
    "failed": "bold red",
    LOOKUP_FAILED: "red",
}


def print_rich_report(report: StatusReport, console: Any = None) -> None:
    """Print the report as ``rich`` tables (for a terminal).

    Args:
        report: what to print.
        console: a ``rich.console.Console`` (default: a new one on stdout).
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]mmirage check[/bold]: {_headline(report)}", highlight=False)
    if report.skipped_dry_run:
        console.print(
            "[dim]skipped dry-run receipts (nothing was submitted): "
            + escape(", ".join(report.skipped_dry_run))
            + "[/dim]",
            highlight=False,
        )
    table = Table(show_lines=False)
    for col in _COLUMNS:
        numeric = col in ("DONE", "FAILED", "TOTAL", "AGE")
        table.add_column(col.title(), justify="right" if numeric else "left", overflow="fold")
    for s in report.statuses:
        cells = [escape(c) for c in _row(s, report)]
        style = _STATUS_STYLES.get(s.status, "")
        cells[5] = f"[{style}]{cells[5]}[/{style}]" if style else cells[5]
        table.add_row(*cells)
    console.print(table)
    for title, groups in (("by provider", report.by_provider), ("by run", report.by_run)):
        summary = Table(title=title, title_justify="left")
        for col in ("", "batches", "status", "done", "failed", "total"):
            summary.add_column(col, justify="left" if col in ("", "status") else "right")
        for g in groups:
            summary.add_row(
                escape(g.label),
                str(g.batches),
                g.status_text(),
                str(g.done),
                str(g.failed),
                str(g.total),
            )
        console.print(summary)
    style = "bold red" if report.exit_code else "bold green"
    console.print(f"[{style}]{_verdict(report)}[/{style}]", highlight=False)


def print_report(report: StatusReport, rich_output: Optional[bool] = None) -> None:
    """Print the report: ``rich`` tables on a terminal, plain lines otherwise.

    Args:
        report: what to print.
        rich_output: force one form; None decides by ``sys.stdout.isatty()``.
    """
    if rich_output is None:
        rich_output = sys.stdout.isatty()
    if rich_output:
        print_rich_report(report)
    else:
        print("\n".join(format_report_lines(report)), flush=True)
