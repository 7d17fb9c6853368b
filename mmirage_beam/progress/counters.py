"""Progress of long work: done of total, rate, ETA, tokens and cost, at most every 10 s.

Beam metrics reach the launcher only when the job ends on the in-process runners, so
each process keeps cheap counters of its own (rows read, requests built, batches
submitted, input tokens; results fetched, rows merged, tokens used) and a daemon thread
reports them through the ``mmirage_beam.progress`` logger while a job runs:

    progress after 20 s: rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA 2 min
    11 s; requests built 264,000; input tokens 3.1M (est. $1.24)

* **Totals** come from where they are known without reading the data twice: the
  readers' split row counts (:func:`set_total`, called with the shard's row range once
  the counting pass ended) and, for a merge, the receipts' request counts (the
  launcher's :func:`expect`). A counter without a known total shows its count only.
* **Rate and ETA** of a counter with a total: its count over the seconds since its
  first count, and what is left at that rate.
* **Cost**: tokens times the batch price the launcher found in the adapter's price
  table (:func:`expect`); without a price, tokens only.
* **Where it shows.** The launcher calls :func:`begin` before each job and
  :func:`finish` after it. When its stderr is a terminal and the runner runs in the
  launcher's process (DirectRunner in ``in_memory`` / ``multi_threading`` mode), the
  launcher draws a live ``rich`` bar per counter instead of the lines. Otherwise (no
  terminal, ``MMIRAGE_PROGRESS=lines``, or a multi-process / portable runner, where
  each worker process reports its own share through its log) a line every
  :func:`interval_secs` (10 s; ``MMIRAGE_PROGRESS_INTERVAL_SECS`` overrides it).
* **The estimate before submitting** (:func:`announce_estimate`, a step on the summed
  token counts, so it runs once per job) is logged once, by the launcher, at INFO: at
  once when the step runs in the launcher's process, else through a small file in the
  run's staging folder that the launcher's reporter picks up.

Counting is a pass-through step (:class:`CountProgress`) fused into the stage before it;
it adds to the shared counters once per 256 elements (one lock per 256 elements).

The words of a line live in :mod:`mmirage_beam.progress.text` (re-exported here), the
live bar in :mod:`mmirage_beam.progress.bar`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import apache_beam as beam

from mmirage_beam.progress.bar import LiveBar
from mmirage_beam.progress.text import (
    INPUT_TOKENS,
    ORDER,
    OUTPUT_TOKENS,
    progress_line,
)

__all__ = [
    "INTERVAL_SECS",
    "INTERVAL_ENV",
    "MODE_ENV",
    "interval_secs",
    "add",
    "set_total",
    "snapshot",
    "runs_in_process",
    "expect",
    "begin",
    "finish",
    "estimate_file",
    "told_estimate",
    "announce_estimate",
    "reported_usage",
    "CountProgress",
]

#: seconds between progress lines unless ``MMIRAGE_PROGRESS_INTERVAL_SECS`` says otherwise
INTERVAL_SECS = 10.0
INTERVAL_ENV = "MMIRAGE_PROGRESS_INTERVAL_SECS"
#: ``lines`` (never the live bar), ``off`` (neither), else the bar on a terminal
MODE_ENV = "MMIRAGE_PROGRESS"
_BAR_TICK_SECS = 0.5  # the launcher's reporter draws the live bar this often
_ESTIMATE_LOOK_SECS = 1.0  # and looks for a worker's estimate file this often
_LISTENING = ".listening"  # beside the estimate file: the launcher will log it
_LOG = logging.getLogger("mmirage_beam.progress")  # the name users filter on
_LOCK = threading.Lock()
_WAKE = threading.Event()  # set by begin(): the reporter looks at the new job at once
_COUNTS: dict[str, int] = {}
_FIRST_SEEN: dict[str, float] = {}  # monotonic time of each counter's first count
_TOTALS: dict[str, Optional[int]] = {}  # None: the total is not known ("of ?")
_STATE: dict[str, Any] = {"thread": None, "started": 0.0, "active": False}
_JOB: dict[str, Any] = {}  # the launcher's job: price, estimate file, display (begin())
_TOLD: dict[str, Optional[str]] = {}  # the estimate the launcher's job logged (kept after finish())


def interval_secs() -> float:
    """Seconds between progress lines: ``MMIRAGE_PROGRESS_INTERVAL_SECS`` when it is a
    number > 0, else :data:`INTERVAL_SECS` (10)."""
    raw = os.environ.get(INTERVAL_ENV)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if value > 0:
            return value
    return INTERVAL_SECS


def add(name: str, n: int = 1) -> None:
    """Count ``n`` more of ``name`` in this process; starts the reporter on first use."""
    with _LOCK:
        _COUNTS[name] = _COUNTS.get(name, 0) + n
        if name not in _FIRST_SEEN:
            _FIRST_SEEN[name] = time.monotonic()
        if not _STATE["active"]:
            _STATE["active"] = True
            _STATE["started"] = time.monotonic()
        _ensure_thread()


def set_total(name: str, total: Optional[int]) -> None:
    """The total ``name`` counts up to in this job (None: not known, shown ``of ?``).
    The readers call it with the shard's row count once the counting pass ended."""
    with _LOCK:
        _TOTALS[name] = None if total is None else int(total)


def snapshot() -> dict[str, int]:
    """A copy of this process's counters."""
    with _LOCK:
        return dict(_COUNTS)


def _ensure_thread() -> None:  # holding _LOCK
    if _STATE["thread"] is None:
        t = threading.Thread(target=_report_forever, name="mmirage-progress", daemon=True)
        _STATE["thread"] = t
        t.start()


# --------------------------------------------------------------------------------------
# The launcher's side


def runs_in_process(options: Any) -> bool:
    """True when ``options`` (``PipelineOptions`` or None) name a runner that runs the
    job's DoFns in this process: the DirectRunner (or FnApiRunner) in ``in_memory`` or
    ``multi_threading`` mode. Multi-process and portable runners (Prism, Flink, Spark,
    Dataflow) are not."""
    if options is None:
        return True
    opts = options.get_all_options(drop_default=False, retain_unknown_options=True)
    runner = opts.get("runner")
    name = runner if isinstance(runner, str) or runner is None else type(runner).__name__
    if name not in (
        None,
        "DirectRunner",
        "direct",
        "SwitchingDirectRunner",
        "FnApiRunner",
        "BundleBasedDirectRunner",
    ):
        return False
    return opts.get("direct_running_mode") in (None, "in_memory", "multi_threading")


def expect(
    *,
    totals: Optional[Mapping[str, Optional[int]]] = None,
    price: Any = None,
    estimate_file: Optional[str] = None,
) -> None:
    """What the launcher knows of the next job before it runs: counter totals (e.g. a
    merge's ``results fetched`` from its receipts), the batch price
    (:class:`~mmirage_beam.costs.prices.BatchPrice`, for the cost so far) and the file
    through which a worker process hands over the estimate before submitting."""
    with _LOCK:
        for name, total in (totals or {}).items():
            _TOTALS[name] = total
        if price is not None:
            _JOB["price"] = price
        if estimate_file is not None:
            _JOB["estimate_file"] = estimate_file


def begin(options: Any = None, stream: Any = None) -> None:
    """The launcher starts a job in this process: report its progress as a live bar
    (``stream``, default ``sys.stderr``, is a terminal and the runner runs in process,
    see :func:`runs_in_process`) or as lines every :func:`interval_secs`."""
    stream = stream if stream is not None else sys.stderr
    mode = os.environ.get(MODE_ENV, "").strip().lower()
    tty = bool(getattr(stream, "isatty", lambda: False)())
    live = mode not in ("lines", "off") and tty and runs_in_process(options)
    with _LOCK:
        _JOB.update(launcher=True, told=False, quiet=mode == "off")
        _TOLD["text"] = None
        if live:
            _JOB["bar"] = LiveBar(stream)
        _ensure_thread()
        wanted = _JOB.get("estimate_file")
    if wanted:  # a worker process that computes the estimate hands it over, not logs it
        try:
            _write_text(wanted + _LISTENING, "")
        except Exception as exc:  # noqa: BLE001 - then the worker logs it: not lost
            _LOG.debug("could not write %s%s: %s", wanted, _LISTENING, exc)
    _WAKE.set()


def finish() -> None:
    """The job of this process ended: stop reporting (the live bar is drawn a last time
    and left on screen) and forget the counts and totals (the launcher calls it after
    each pipeline; a new job starts from zero)."""
    with _LOCK:
        bar = _JOB.pop("bar", None)
        price = _JOB.get("price")
        if _JOB.get("launcher"):
            _announce_from_file(force=True)
        _JOB.clear()
        _STATE["active"] = False
        counts, totals, first = _ordered(_COUNTS), dict(_TOTALS), dict(_FIRST_SEEN)
        _COUNTS.clear()
        _TOTALS.clear()
        _FIRST_SEEN.clear()
    if bar is not None:
        bar.stop(counts, totals, first, price)


def estimate_file(staging: str) -> str:
    """``<staging>/estimate.txt``: where a worker process leaves the estimate before
    submitting for the launcher to log."""
    return f"{staging.rstrip('/')}/estimate.txt"


def announce_estimate(lines: Sequence[str], path: Optional[str] = None) -> None:
    """Tell the run's token and cost estimate (``lines``:
    :func:`mmirage_beam.costs.report.estimate_lines`; none: nothing to tell) once, before
    its first batch (called by a step on the summed token counters, which the submit
    step takes as a side input, so it runs first and once per job).

    In the launcher's process it is logged at INFO at once; in a worker process of a
    job whose launcher listens (it wrote ``<path>.listening``, see :func:`begin`) it is
    written to ``path`` (see :func:`estimate_file`) for the launcher to log, and the
    worker logs nothing; without a listening launcher (a Beam YAML pipeline run by
    Beam's own launcher), the worker logs it, once per job."""
    if not lines:
        return
    text = "before submitting: " + "\n".join(lines)
    with _LOCK:
        here = bool(_JOB.get("launcher"))
        if here:
            _JOB["told"] = True
            _TOLD["text"] = text
    if not here and path and _exists(path + _LISTENING):
        _write_text(path, text)
    else:
        _LOG.info("%s", text)


def _exists(path: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    try:
        return FileSystems.exists(path)
    except Exception:  # cannot tell: log it here rather than not at all
        return False


def _write_text(path: str, text: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def _announce_from_file(force: bool = False) -> None:  # holding _LOCK, in the launcher
    path = _JOB.get("estimate_file")
    if not path or _JOB.get("told"):
        return
    now = time.monotonic()
    if not force and now - _JOB.get("looked", 0.0) < _ESTIMATE_LOOK_SECS:
        return  # (the folder may be an object store: not every tick)
    _JOB["looked"] = now
    from apache_beam.io.filesystems import FileSystems

    try:
        if not FileSystems.exists(path):
            return
        with FileSystems.open(path) as f:
            text = f.read().decode("utf-8")
    except Exception:  # not there yet, or being written: the next tick reads it
        return
    if text:
        _JOB["told"] = True
        _TOLD["text"] = text
        _LOG.info("%s", text)


def told_estimate() -> Optional[list[str]]:
    """The estimate lines (:func:`mmirage_beam.costs.report.estimate_lines`) this
    launcher logged before the job's first batch, None when it logged none."""
    with _LOCK:
        text = _TOLD.get("text")
    if not text:
        return None
    return text.removeprefix("before submitting: ").split("\n")


# --------------------------------------------------------------------------------------
# The reporter


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    rank = {name: i for i, name in enumerate(ORDER)}
    return dict(sorted(counts.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def _report_forever() -> None:
    last_line = time.monotonic()
    while True:
        with _LOCK:
            launcher = bool(_JOB.get("launcher"))
        _WAKE.wait(min(_BAR_TICK_SECS, interval_secs()) if launcher else interval_secs())
        _WAKE.clear()
        with _LOCK:
            active, counts = _STATE["active"], _ordered(_COUNTS)
            totals, first = dict(_TOTALS), dict(_FIRST_SEEN)
            price, bar, quiet = _JOB.get("price"), _JOB.get("bar"), _JOB.get("quiet")
            if _JOB.get("launcher"):
                _announce_from_file()
        if not active or not counts or quiet:
            continue
        now = time.monotonic()
        if bar is not None:
            bar.update(counts, totals, first, price, now)
            continue
        if now - max(last_line, _STATE["started"]) < interval_secs() - 0.01:
            continue
        last_line = now
        # every interval, changed or not: long stages show they are alive
        _LOG.info(
            "%s",
            progress_line(counts, now - _STATE["started"], totals, first, now, price),
        )


# --------------------------------------------------------------------------------------
# The counting step


class _CountFn(beam.DoFn):
    #: elements counted locally before they are added to the shared counter (one lock
    #: per this many elements instead of one per element).
    FLUSH_EVERY = 256

    def __init__(
        self, name: str, usage: Optional[Callable[[Any], tuple]] = None, flush_every: int = 0
    ) -> None:
        self._name = name
        self._usage = usage
        self._flush_every = flush_every or self.FLUSH_EVERY

    def start_bundle(self) -> None:
        self._pending = 0
        self._tokens_in = self._tokens_out = 0

    def process(self, element: Any) -> Iterator[Any]:
        self._pending += 1
        if self._usage is not None:
            i, o = self._usage(element)
            self._tokens_in += i
            self._tokens_out += o
        if self._pending >= self._flush_every:
            self._flush()
        yield element

    def _flush(self) -> None:
        add(self._name, self._pending)
        if self._usage is not None:
            add(INPUT_TOKENS, self._tokens_in)
            add(OUTPUT_TOKENS, self._tokens_out)
        self._pending = self._tokens_in = self._tokens_out = 0

    def finish_bundle(self) -> None:
        if self._pending:
            self._flush()


def reported_usage(element: Any) -> tuple[int, int]:
    """``(input tokens, output tokens)`` a result record's provider reported (0, 0 when
    it reported none): the ``usage`` of :class:`CountProgress` for fetched results. A
    reused answer (``reused_from`` set, :mod:`mmirage_beam.reuse`) counts (0, 0): the
    earlier run paid for it, as the merge summary says."""
    if getattr(element, "reused_from", None):
        return 0, 0
    return int(getattr(element, "input_tokens", 0) or 0), int(
        getattr(element, "output_tokens", 0) or 0
    )


class CountProgress(beam.PTransform):
    """PCollection[T] -> the same PCollection[T], counting elements as ``name`` for the
    progress report; with ``usage`` (``T -> (input tokens, output tokens)``, e.g.
    :func:`reported_usage`) it counts their tokens too. ``flush_every``: elements
    counted locally before they are added (default 256; 1 for slow elements such as
    batches, so each shows at once)."""

    def __init__(
        self, name: str, usage: Optional[Callable[[Any], tuple]] = None, flush_every: int = 0
    ) -> None:
        super().__init__()
        self._name = name
        self._usage = usage
        self._flush_every = flush_every

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        fn = _CountFn(self._name, self._usage, self._flush_every)
        return pcoll | "Count" >> beam.ParDo(fn).with_output_types(pcoll.element_type)
