"""``mmirage check --watch``: poll until every batch is terminal, with a live display."""

from __future__ import annotations

import sys
import time
from typing import (
    Any,
    Callable,
    List,
    Optional,
    Sequence,
    TextIO,
    Tuple,
)

from mmirage_beam.check.report import GroupSummary, summarize
from mmirage_beam.progress.text import PollRate
from mmirage_beam.run.discovery import ReceiptEntry
from mmirage_beam.run.lookup import LOOKUP_FAILED, BatchStatus, BatchStatusChecker

__all__ = [
    "statuses_of",
    "watch_statuses",
    "poll_summary",
    "format_poll_line",
    "PlainWatchDisplay",
    "RichWatchDisplay",
]


def watch_statuses(
    checker: BatchStatusChecker,
    batches: Sequence[ReceiptEntry],
    *,
    interval_secs: float = 60.0,
    timeout_secs: Optional[float] = None,
    on_poll: Optional[Callable[[Sequence[BatchStatus], int, float], None]] = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    lookup_failure_polls: int = 3,
    first_interval_secs: Optional[float] = None,
) -> Tuple[List[BatchStatus], bool]:
    """Poll every ``interval_secs`` until every batch is terminal (or ``timeout_secs``).

    Batches already ``completed`` or ``failed`` are not looked up again. A lookup that
    failed (each lookup is already retried with the adapter's backoff) is looked up
    again at the next poll: the watch keeps going through a transient failure, and a
    batch counts as terminal only once its lookup has failed on ``lookup_failure_polls``
    polls in a row. When every lookup of a poll answered 404 (``not_found``: none of the
    batches is on this endpoint or account), the watch stops at once (issue 38: it took
    minutes to say so).

    Args:
        checker: an opened checker.
        batches: the batches to follow.
        interval_secs: seconds between polls (> 0).
        timeout_secs: stop watching after this many seconds (None: no limit).
        on_poll: called after each poll with ``(statuses, poll number, elapsed secs)``.
        sleep, clock: injectable for tests.
        lookup_failure_polls: consecutive failed polls after which a batch whose lookup
            keeps failing stops the watch (>= 1).
        first_interval_secs: when given, the first wait is this many seconds and each
            next one doubles, up to ``interval_secs`` (a small run that ends in seconds
            is merged in seconds; a long one is polled every ``interval_secs``).

    Returns:
        ``(last statuses, True if the timeout stopped the watch)``.

    Raises:
        ValueError: ``interval_secs`` is not > 0 or ``timeout_secs`` is negative.
    """
    if not interval_secs > 0:
        raise ValueError(f"interval_secs must be > 0, got {interval_secs}")
    if timeout_secs is not None and timeout_secs < 0:
        raise ValueError(f"timeout_secs must be >= 0, got {timeout_secs}")
    if lookup_failure_polls < 1:
        raise ValueError(f"lookup_failure_polls must be >= 1, got {lookup_failure_polls}")
    start = clock()
    statuses = checker.check(batches)
    failing = [1 if s.status == LOOKUP_FAILED else 0 for s in statuses]
    poll = 1
    while True:
        elapsed = clock() - start
        if on_poll is not None:
            on_poll(statuses, poll, elapsed)
        if all(
            s.status in ("completed", "failed") or n >= lookup_failure_polls
            for s, n in zip(statuses, failing)
        ):
            return statuses, False
        if statuses and all(s.not_found for s in statuses):
            return statuses, False  # nothing here to watch: another endpoint or account
        if timeout_secs is not None and elapsed >= timeout_secs:
            return statuses, True
        wait = interval_secs
        if first_interval_secs is not None:
            wait = min(interval_secs, first_interval_secs * 2 ** (poll - 1))
        if timeout_secs is not None:
            wait = max(0.0, min(wait, timeout_secs - elapsed))
        sleep(wait)
        again = [i for i, s in enumerate(statuses) if s.status not in ("completed", "failed")]
        fresh = checker.check([statuses[i].receipt for i in again])
        for i, s in zip(again, fresh):
            statuses[i] = s
            failing[i] = failing[i] + 1 if s.status == LOOKUP_FAILED else 0
        poll += 1


def statuses_of(
    checker: BatchStatusChecker,
    batches: Sequence[ReceiptEntry],
    *,
    watch: bool,
    interval_secs: float,
    timeout_secs: Optional[float],
    tty: bool,
    also_on_poll: Optional[Callable[[Sequence[BatchStatus], int, float], None]] = None,
) -> tuple[list[BatchStatus], bool, bool]:
    """``mmirage check``'s lookups: every batch once, or with ``watch`` until all are
    terminal (:func:`watch_statuses`, shown live: a rich table on a terminal, a line a
    poll otherwise). Returns ``(statuses, timed_out, interrupted)``; a Ctrl-C while
    watching returns the last poll's statuses with ``interrupted`` (check starts nothing,
    so only the watching stops), or is raised if no poll finished yet. ``also_on_poll``
    is called after the display with each poll's ``(statuses, poll number, elapsed
    secs)`` (``--watch`` only)."""
    if not watch:
        return list(checker.check(batches)), False, False
    display = RichWatchDisplay() if tty else PlainWatchDisplay()
    seen: list = []  # the last poll's statuses, for the table after a Ctrl-C

    def on_poll(statuses: Sequence[BatchStatus], poll: int, elapsed: float) -> None:
        seen[:] = [list(statuses)]
        display.update(statuses, poll, elapsed)
        if also_on_poll is not None:
            also_on_poll(statuses, poll, elapsed)

    try:
        with display:
            statuses, timed_out = watch_statuses(
                checker,
                batches,
                interval_secs=interval_secs,
                timeout_secs=timeout_secs,
                on_poll=on_poll,
            )
    except KeyboardInterrupt:
        if not seen:
            raise
        return seen[0], False, True
    return list(statuses), timed_out, False


def poll_summary(statuses: Sequence[BatchStatus]) -> GroupSummary:
    """Totals of one poll (all batches)."""
    return summarize("all", statuses)


def finished_requests(statuses: Sequence[BatchStatus]) -> int:
    """Requests that ended (succeeded or failed); a terminal batch's every request (an
    expired batch's never-run requests are neither completed nor failed)."""
    return sum(s.total if s.terminal else (s.done or 0) + (s.failed or 0) for s in statuses)


#: ``(requests finished, requests in all) -> text`` shown beside the counts (tokens, cost)
TokensNote = Callable[[int, int], str]


def format_poll_line(
    statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float, extra: str = ""
) -> str:
    """One plain line per poll: requests done / total and batches per status, then
    ``extra`` (rate, ETA, tokens) when given."""
    g = poll_summary(statuses)
    return (
        f"poll {poll} ({elapsed_secs:.1f}s): requests done {g.done:,}/{g.total:,}, failed "
        f"{g.failed:,}; batches {g.batches}: {g.status_text()}" + (f"; {extra}" if extra else "")
    )


def _extra(
    rate: Any, tokens: Optional[TokensNote], statuses: Sequence[BatchStatus], elapsed: float
) -> str:
    finished, total = finished_requests(statuses), poll_summary(statuses).total
    parts = [rate.text(finished, total, elapsed), tokens(finished, total) if tokens else ""]
    return "; ".join(p for p in parts if p)


class PlainWatchDisplay:
    """Watch display for a non-terminal stdout: one line per poll, with the requests'
    rate and ETA from the second poll on.

    Args:
        stream: where lines go (default ``sys.stdout`` at the time of each poll).
        tokens: a :data:`TokensNote` (e.g. the run's estimated tokens and cost so far).
    """

    def __init__(
        self, stream: Optional[TextIO] = None, tokens: Optional[TokensNote] = None
    ) -> None:
        self._stream = stream
        self._tokens = tokens
        self._rate = PollRate()

    def __enter__(self) -> PlainWatchDisplay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def update(self, statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float) -> None:
        """Print the poll's line."""
        stream = self._stream or sys.stdout
        extra = _extra(self._rate, self._tokens, statuses, elapsed_secs)
        print(format_poll_line(statuses, poll, elapsed_secs, extra), file=stream, flush=True)


class RichWatchDisplay:
    """Watch display for a terminal: a live ``rich.progress`` bar of requests finished
    (done + failed) out of the total, with the batches per status beside it.

    Args:
        console: a ``rich.console.Console`` (default: a new one on stdout).
        tokens: a :data:`TokensNote` (e.g. the run's estimated tokens and cost so far).
    """

    def __init__(self, console: Any = None, tokens: Optional[TokensNote] = None) -> None:
        self._tokens = tokens
        self._rate = PollRate()
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]requests[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console or Console(),
        )
        self._task: Any = None

    def __enter__(self) -> RichWatchDisplay:
        self._progress.start()
        self._task = self._progress.add_task("requests", total=None, detail="looking up...")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def update(self, statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float) -> None:
        """Move the bar to this poll's counts."""
        g = poll_summary(statuses)
        detail = f"failed {g.failed:,} | batches: {g.status_text()} | poll {poll}"
        extra = _extra(self._rate, self._tokens, statuses, elapsed_secs)
        if extra:
            detail += " | " + extra.replace("; ", " | ")
        # A terminal batch is finished whatever its counts say: an expired batch's
        # never-run requests are neither completed nor failed (completed + failed may be
        # less than total).
        finished = finished_requests(statuses)
        self._progress.update(self._task, total=g.total, completed=finished, detail=detail)
