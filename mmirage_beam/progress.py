"""Progress lines on long work, from every worker process, at most every 10 s.

Beam metrics reach the launcher only when the job ends on the in-process runners, so
each worker process keeps cheap counters of its own (rows read, requests built, chunks
submitted; results fetched, rows written) and a daemon thread logs them through the
``mmirage_beam.progress`` logger every :data:`INTERVAL_SECS` while they change. On the
DirectRunner that is the terminal; on multi-process and portable runners, each worker's
log (which the launcher or the worker pool prints).

Counting is a pass-through step (:class:`CountProgress`) fused into the stage before it,
so it costs one dictionary update per element.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator

import apache_beam as beam

INTERVAL_SECS = 10.0
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_COUNTS: dict[str, int] = {}
_STATE: dict[str, Any] = {"thread": None, "started": 0.0, "active": False}


def add(name: str, n: int = 1) -> None:
    """Count ``n`` more of ``name`` in this process; starts the reporter on first use."""
    with _LOCK:
        _COUNTS[name] = _COUNTS.get(name, 0) + n
        if not _STATE["active"]:
            _STATE["active"] = True
            _STATE["started"] = time.monotonic()
        if _STATE["thread"] is None:
            _STATE["started"] = time.monotonic()
            t = threading.Thread(target=_report_forever, name="mmirage-progress", daemon=True)
            _STATE["thread"] = t
            t.start()


def snapshot() -> dict[str, int]:
    """A copy of this process's counters."""
    with _LOCK:
        return dict(_COUNTS)


def progress_line(counts: dict[str, int], elapsed_secs: float) -> str:
    """``"progress after 20 s: rows read 132,000, requests built 264,000"``."""
    parts = ", ".join(f"{name} {n:,}" for name, n in counts.items())
    return f"progress after {elapsed_secs:.0f} s: {parts}"


def finish() -> None:
    """The job of this process ended: stop reporting and forget the counts (the launcher
    calls it after each pipeline; a new job starts from zero)."""
    with _LOCK:
        _STATE["active"] = False
        _COUNTS.clear()


def _report_forever() -> None:
    while True:
        time.sleep(INTERVAL_SECS)
        with _LOCK:
            active, counts = _STATE["active"], dict(_COUNTS)
        if active:  # every interval, changed or not: long stages show they are alive
            _LOG.info("%s", progress_line(counts, time.monotonic() - _STATE["started"]))


class _CountFn(beam.DoFn):
    #: elements counted locally before they are added to the shared counter (one lock
    #: per this many elements instead of one per element).
    FLUSH_EVERY = 256

    def __init__(self, name: str) -> None:
        self._name = name

    def start_bundle(self) -> None:
        self._pending = 0

    def process(self, element: Any) -> Iterator[Any]:
        self._pending += 1
        if self._pending >= self.FLUSH_EVERY:
            add(self._name, self._pending)
            self._pending = 0
        yield element

    def finish_bundle(self) -> None:
        if self._pending:
            add(self._name, self._pending)
            self._pending = 0


class CountProgress(beam.PTransform):
    """PCollection[T] -> the same PCollection[T], counting elements as ``name`` for the
    progress lines."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "Count" >> beam.ParDo(_CountFn(self._name)).with_output_types(
            pcoll.element_type
        )
