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
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional

import apache_beam as beam

#: seconds between progress lines unless ``MMIRAGE_PROGRESS_INTERVAL_SECS`` says otherwise
INTERVAL_SECS = 10.0
INTERVAL_ENV = "MMIRAGE_PROGRESS_INTERVAL_SECS"
#: ``lines`` (never the live bar), ``off`` (neither), else the bar on a terminal
MODE_ENV = "MMIRAGE_PROGRESS"
#: the counters that are token counts (shown with the cost, not as progress rows)
INPUT_TOKENS, OUTPUT_TOKENS = "input tokens", "output tokens"
_TOKEN_NAMES = (INPUT_TOKENS, OUTPUT_TOKENS)
#: the order counters are shown in (others follow, in the order they were first counted)
ORDER = (
    "rows read",
    "requests built",
    "chunks exported",
    "batches submitted",
    "results fetched",
    "rows merged",
)
_BAR_TICK_SECS = 0.5  # the launcher's reporter draws the live bar this often
_ESTIMATE_LOOK_SECS = 1.0  # and looks for a worker's estimate file this often
_LISTENING = ".listening"  # beside the estimate file: the launcher will log it
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_WAKE = threading.Event()  # set by begin(): the reporter looks at the new job at once
_COUNTS: dict[str, int] = {}
_FIRST_SEEN: dict[str, float] = {}  # monotonic time of each counter's first count
_TOTALS: dict[str, Optional[int]] = {}  # None: the total is not known ("of ?")
_STATE: dict[str, Any] = {"thread": None, "started": 0.0, "active": False}
_JOB: dict[str, Any] = {}  # the launcher's job: price, estimate file, display (begin())


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


def expect_run(
    provider_config: Any,
    *,
    totals: Optional[Mapping[str, Optional[int]]] = None,
    staging: Optional[str] = None,
) -> None:
    """:func:`expect` for a run or merge of ``provider_config`` (a processor config):
    its batch price (none when the adapter's price table has no row for the model) and,
    with ``staging`` (the run's staging folder), the estimate file."""
    from mmirage_beam.costs.prices import batch_price

    try:
        price = batch_price(
            provider_config.provider, getattr(provider_config, "model", None), provider_config
        )
    except Exception:  # an unknown provider fails the run elsewhere, with its message
        price = None
    expect(
        totals=totals,
        price=price,
        estimate_file=estimate_file(staging) if staging else None,
    )


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
        if live:
            _JOB["bar"] = _LiveBar(stream)
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


def announce_estimate(
    stats: dict[str, int], provider_config: Any, path: Optional[str] = None
) -> dict[str, int]:
    """``dict[str, int] -> the same dict``: tell the run's token and cost estimate once,
    before its first batch (a step on the summed token counters, which the submit
    step takes as a side input, so it runs first and once per job).

    In the launcher's process it is logged at INFO at once; in a worker process of a
    job whose launcher listens (it wrote ``<path>.listening``, see :func:`begin`) it is
    written to ``path`` (see :func:`estimate_file`) for the launcher to log, and the
    worker logs nothing; without a listening launcher (a Beam YAML pipeline run by
    Beam's own launcher), the worker logs it, once per job."""
    from mmirage_beam.costs.report import estimate_lines

    lines = estimate_lines(stats, provider_config) if stats else []
    if not lines:
        return stats
    text = "before submitting: " + "\n".join(lines)
    with _LOCK:
        here = bool(_JOB.get("launcher"))
        if here:
            _JOB["told"] = True
    if not here and path and _exists(path + _LISTENING):
        _write_text(path, text)
    else:
        _LOG.info("%s", text)
    return stats


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
        _LOG.info("%s", text)


# --------------------------------------------------------------------------------------
# Formatting


def duration_text(secs: float) -> str:
    """``"45 s"``, ``"2 min 11 s"``, ``"3 h 05 min"``."""
    s = max(0, int(round(secs)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _compact(n: float) -> str:
    """``"950"``, ``"12.3k"``, ``"3.1M"``, ``"2.0B"``."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{int(n)}"


def _usd(x: float) -> str:
    return f"${x:.2f}" if x >= 0.1 else f"${x:.4f}"


def _unit(name: str) -> str:
    """``rows read`` -> ``rows``: the counted thing, for the rate."""
    return name.split(" ", 1)[0]


def counter_text(
    name: str, done: int, total: Optional[int], rate: Optional[float], with_name: bool = True
) -> str:
    """``"rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA 2 min 11 s"``; the
    total, rate and ETA only when known (``total`` None and ``name`` among the totals:
    ``of ?``)."""
    text = f"{name} {done:,}" if with_name else f"{done:,}"
    if total is None:
        return text
    pct = 100 * done / total if total else 100.0
    text += f" of {total:,} ({pct:.0f}%)"
    if rate and done < total:
        text += f", {rate:,.0f} {_unit(name)}/s, ETA {duration_text((total - done) / rate)}"
    return text


def tokens_text(counts: Mapping[str, int], price: Any = None) -> str:
    """``"input tokens 3.1M (est. $1.24)"`` (estimated while submitting) or ``"tokens
    1.2M in + 300.0k out, cost $0.41"`` (reported by the provider, merge); empty
    without token counts."""
    i, o = counts.get(INPUT_TOKENS), counts.get(OUTPUT_TOKENS)
    if i is None and o is None:
        return ""
    if o is None:  # the estimate of what is sent: input tokens only are known
        text = f"input tokens {_compact(i)}"
        return text + (f" (est. {_usd(price.cost_usd(i))})" if price is not None else "")
    text = f"tokens {_compact(i or 0)} in + {_compact(o)} out"
    return text + (f", cost {_usd(price.cost_usd(i or 0, o))}" if price is not None else "")


def waiting_tokens_text(finished: int, total: int, input_tokens: int, price: Any = None) -> str:
    """While batches run: ``"input tokens ~115.7k of 463.0k (est. $0.0232 of $0.0926)"``,
    the run's estimated input tokens (``input_tokens``, from its record) times the
    share of its ``total`` requests ``finished``; empty without an estimate."""
    if not input_tokens or not total:
        return ""
    share = min(max(finished, 0) / total, 1.0)
    text = f"input tokens ~{_compact(input_tokens * share)} of {_compact(input_tokens)}"
    if price is not None:
        so_far, whole = price.cost_usd(input_tokens * share), price.cost_usd(input_tokens)
        text += f" (est. {_usd(so_far)} of {_usd(whole)})"
    return text


class PollRate:
    """Requests finished per second between the first poll and now, and the ETA of
    the rest (for ``check --watch`` and ``run --wait``)."""

    def __init__(self) -> None:
        self._first: Optional[tuple[int, float]] = None

    def text(self, finished: int, total: int, elapsed_secs: float) -> str:
        """``"12.5 requests/s, ETA 3 min 2 s"``; empty until requests finished between
        two polls, and once every request finished."""
        if self._first is None:
            self._first = (finished, elapsed_secs)
            return ""
        f0, t0 = self._first
        if finished <= f0 or elapsed_secs <= t0 or finished >= total:
            return ""  # nothing moved yet, or nothing is left
        rate = (finished - f0) / (elapsed_secs - t0)
        return f"{rate:,.1f} requests/s, ETA {duration_text((total - finished) / rate)}"


def _rate(name: str, done: int, first: Mapping[str, float], now: float) -> Optional[float]:
    since = first.get(name)
    if since is None or not done:
        return None
    return done / max(now - since, 1e-3)


def progress_line(
    counts: dict[str, int],
    elapsed_secs: float,
    totals: Optional[Mapping[str, Optional[int]]] = None,
    first_seen: Optional[Mapping[str, float]] = None,
    now: Optional[float] = None,
    price: Any = None,
) -> str:
    """``"progress after 20 s: rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA
    2 min 11 s; requests built 264,000; input tokens 3.1M (est. $1.24)"``.

    Args:
        counts: counter name -> count.
        elapsed_secs: seconds since the job started.
        totals: counter name -> its total (None: ``of ?``); counters not in it show
            their count only.
        first_seen: counter name -> ``time.monotonic()`` of its first count (for rates).
        now: ``time.monotonic()`` now (default: now).
        price: a :class:`~mmirage_beam.costs.prices.BatchPrice` for the cost, or None.
    """
    totals, first_seen = totals or {}, first_seen or {}
    now = time.monotonic() if now is None else now
    parts = []
    for name, n in counts.items():
        if name in _TOKEN_NAMES:
            continue
        if name in totals and totals[name] is None:
            parts.append(f"{name} {n:,} of ?")
        else:
            rate = _rate(name, n, first_seen, now) if name in totals else None
            parts.append(counter_text(name, n, totals.get(name), rate))
    tokens = tokens_text(counts, price)
    if tokens:
        parts.append(tokens)
    return f"progress after {duration_text(elapsed_secs)}: " + "; ".join(parts)


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


class _LiveBar:
    """The launcher's live display on a terminal: a ``rich`` bar per counter with a
    total (a count per counter without one) and a row of tokens and cost."""

    def __init__(self, stream: Any) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn
        from rich.text import Text

        class _BarIfTotal(BarColumn):  # a count without a total gets no (pulsing) bar
            def render(self, task: Any) -> Any:
                return super().render(task) if task.total is not None else Text("")

        self._progress = Progress(
            TextColumn("[bold]{task.description:<17}[/bold]"),
            _BarIfTotal(),
            TextColumn("{task.fields[stats]}"),
            console=Console(file=stream),
            transient=False,
            redirect_stderr=True,
            redirect_stdout=False,
        )
        self._tasks: dict[str, Any] = {}
        self._started = self._stopped = False
        self._lock = threading.Lock()  # the reporter draws, the launcher stops

    def _task(self, name: str, total: Optional[int]) -> Any:
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = self._progress.add_task(name, total=total, stats="")
            # rows in ORDER whatever came first, the tokens row last: the rows that
            # belong below the new one are drawn again after it
            rank = {n: i for i, n in enumerate(ORDER)}
            mine = rank.get(name, len(rank))
            for other in list(self._tasks):
                if other != name and (other.startswith("tokens") or rank.get(other, 99) > mine):
                    self._progress.remove_task(self._tasks.pop(other))
        return task

    def update(
        self,
        counts: Mapping[str, int],
        totals: Mapping[str, Optional[int]],
        first: Mapping[str, float],
        price: Any,
        now: float,
    ) -> None:
        """Draw this moment's counts."""
        with self._lock:
            if self._stopped:
                return
            if not self._started:
                self._progress.start()
                self._started = True
            self._draw(counts, totals, first, price, now)

    def _draw(
        self,
        counts: Mapping[str, int],
        totals: Mapping[str, Optional[int]],
        first: Mapping[str, float],
        price: Any,
        now: float,
    ) -> None:
        for name, n in counts.items():
            if name in _TOKEN_NAMES:
                continue
            total = totals.get(name)
            rate = _rate(name, n, first, now) if total is not None else None
            stats = counter_text(name, n, total, rate, with_name=False)
            if name in totals and total is None:
                stats += " of ?"
            self._progress.update(self._task(name, total), completed=n, total=total, stats=stats)
        tokens = tokens_text(counts, price)
        if tokens:
            what = "tokens (est.)" if OUTPUT_TOKENS not in counts else "tokens"
            self._progress.update(self._task(what, None), stats=tokens.removeprefix("tokens "))

    def stop(
        self,
        counts: Mapping[str, int],
        totals: Mapping[str, Optional[int]],
        first: Mapping[str, float],
        price: Any = None,
    ) -> None:
        """Draw the final counts and stop (the bar stays on screen)."""
        with self._lock:
            if self._started and not self._stopped:
                self._draw(counts, totals, first, price, time.monotonic())
                self._progress.stop()
            self._stopped = True


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
