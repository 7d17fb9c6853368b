"""Running a job from a driver: :func:`run_pipeline` (Ctrl-C and SIGTERM stop it on every
runner, through the stop marker, then a cancel), the GC setting while it runs in the
launcher's process, and its counters read back."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Optional

from mmirage_beam.launch.interrupts import interrupt_requested, mark_interrupted
from mmirage_beam.metrics import METRICS_NAMESPACE

_LOG = logging.getLogger("mmirage_beam")


# How long a stop request waits for in-flight provider calls before the job is cancelled;
# above the SDKs' own per-call timeouts of our adapters (see ``timeout_seconds``).
STOP_GRACE_SECS = 120.0

# How long a cancelled job may take to reach a terminal state.
_CANCEL_WAIT_SECS = 60.0


class RunOutcome:
    """What :func:`run_pipeline` saw: the result, and whether a stop was requested."""

    def __init__(self) -> None:
        self.result: Any = None
        self.stop_requested = False
        self.forced = False
        self.cancelled = False


def _terminal(result: Any) -> bool:
    from apache_beam.runners.runner import PipelineState

    try:
        return PipelineState.is_terminal(result.state)
    except Exception:
        return True


def _cancel(outcome: RunOutcome, wait_secs: float = _CANCEL_WAIT_SECS) -> None:
    """Cancel a job that is still running (portable, Flink, Dataflow) and wait for it."""
    result = outcome.result
    if result is None or _terminal(result):
        return
    try:
        result.cancel()
        outcome.cancelled = True
    except Exception as exc:  # a runner without cancellation
        _LOG.warning("could not cancel the job: %s", exc)
        return
    try:
        result.wait_until_finish(duration=int(wait_secs * 1000))
    except Exception:
        pass


def _remove_quietly(path: str) -> None:
    """Delete ``path`` if it exists; a storage error here must not hide the job's own."""
    from apache_beam.io.filesystems import FileSystems

    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])
    except Exception as exc:
        _LOG.warning("could not remove %s: %s", path, exc)


#: CPython's allocation threshold of its youngest GC generation while a job runs in the
#: launcher's process (CPython's default is 700 container allocations). An in-process
#: runner allocates a few short-lived dicts, tuples and lists per element and step, so
#: at 700 the collector runs hundreds of times a second, each pass walking the young
#: objects; at this threshold the 200,000-row dry run of benchmarks/bench_scale.py
#: used about 9% less CPU, with the same peak memory (docs/benchmarks.md).
RUN_GC_THRESHOLD = 20_000


@contextlib.contextmanager
def fewer_young_collections(threshold: int = RUN_GC_THRESHOLD) -> Iterator[None]:
    """Within the block, CPython's youngest generation is collected after ``threshold``
    container allocations instead of its default (never fewer than it was); the older
    generations keep their settings, and the old thresholds are back afterwards.
    Only this process: workers of multi_processing and portable runs keep theirs."""
    import gc

    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def in_process_direct_runner(pipeline: Any) -> None:
    """Keep the DirectRunner (the default runner) in this process.

    Beam's DirectRunner (``SwitchingDirectRunner``, apache_beam/runners/direct/
    direct_runner.py) first tries the Prism runner for a pipeline it supports (the merge
    pipeline is one): it downloads Prism's binary from GitHub, starts it as a job service
    and runs the job in it; offline the download fails and it falls back to the
    in-process runners it would choose without Prism (the FnApiRunner, else the
    BundleBasedDirectRunner). A fixed cost per job for a local run, and another runner
    than the one the tests and the docs describe. The runner's own switch
    (``is_interactive()``, which Beam's InteractiveRunner sets to the same end) turns the
    Prism attempt off; its other choices stay Beam's. Other runners are untouched
    (``--runner PrismRunner`` still runs on Prism)."""
    try:
        from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
    except ImportError:  # pragma: no cover - a Beam without it has no Prism detour
        return
    runner = getattr(pipeline, "runner", None)
    if isinstance(runner, SwitchingDirectRunner):
        runner.is_interactive()


def run_pipeline(
    pipeline: Any,
    stop_marker: Optional[str] = None,
    grace_secs: float = STOP_GRACE_SECS,
    outcome: Optional[RunOutcome] = None,
    nothing_in_flight: Optional[Callable[[], bool]] = None,
) -> Any:
    """Run ``pipeline`` to completion; Ctrl-C and SIGTERM stop it on every runner. The
    DirectRunner runs in this process (:func:`in_process_direct_runner`).

    With ``stop_marker`` (a path the workers can see, watched by ``SubmitChunks``), the
    first Ctrl-C or SIGTERM writes the marker: no new provider call starts, the calls in
    flight finish and their receipts are written, and the job then fails with
    :class:`~mmirage_beam.errors.RunStopped`; if it has not ended after ``grace_secs`` it
    is cancelled. A second Ctrl-C (or a run without ``stop_marker``) cancels the job at
    once (``PipelineResult.cancel()``, waiting for it to stop) and raises
    ``KeyboardInterrupt``. On in-process runners ``pipeline.run()`` itself does the
    work, so the interrupt is raised in it. When ``nothing_in_flight()`` says no provider
    call can be under way (no chunk is being submitted: the run is still reading and
    validating rows), the first signal stops at once too: there is nothing to wait for.

    Returns:
        the finished ``PipelineResult``.

    Raises:
        KeyboardInterrupt: stopped at once; whatever the job raised otherwise.
    """
    outcome = outcome if outcome is not None else RunOutcome()
    if interrupt_requested():  # a Ctrl-C before the job whose KeyboardInterrupt was lost
        raise KeyboardInterrupt
    in_process_direct_runner(pipeline)
    timer: list[threading.Timer] = []

    def idle() -> bool:
        try:
            return nothing_in_flight is not None and bool(nothing_in_flight())
        except Exception:  # cannot tell: wait for the calls in flight, as by default
            return False

    def on_signal(signum: int, _frame: object) -> None:
        if stop_marker is not None and not outcome.stop_requested and idle():
            outcome.stop_requested = True
            from mmirage_beam.io.fs import write_durably  # loads Beam: only on a signal

            try:  # a chunk that would start before the cancel lands creates nothing
                write_durably(stop_marker, b"stop requested\n")
            except Exception as exc:
                _LOG.warning("could not write the stop marker %s: %s", stop_marker, exc)
            print(
                "mmirage: stopping at once: no batch is being submitted",
                file=sys.stderr,
                flush=True,
            )
        elif stop_marker is not None and not outcome.stop_requested:
            outcome.stop_requested = True
            from mmirage_beam.io.fs import write_durably  # loads Beam: only on a signal

            try:
                write_durably(stop_marker, b"stop requested\n")
            except Exception as exc:  # cannot tell the workers: stop at once instead
                _LOG.warning("could not write the stop marker %s: %s", stop_marker, exc)
            else:
                print(
                    "mmirage: stopping: no new batch will be created; waiting for the "
                    "provider calls in flight to be receipted (Ctrl-C again to stop at "
                    "once)",
                    file=sys.stderr,
                )
                t = threading.Timer(grace_secs, _cancel, args=(outcome,))
                t.daemon = True
                t.start()
                timer.append(t)
                return
        outcome.forced = True
        mark_interrupted()
        _cancel(outcome)
        raise KeyboardInterrupt

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)
    from mmirage_beam.progress import counters  # loads Beam; launch/ itself does not

    counters.begin(getattr(pipeline, "options", None))  # the live bar or the lines
    try:
        try:
            with fewer_young_collections():
                outcome.result = pipeline.run()
                outcome.result.wait_until_finish()
            if outcome.forced:  # stopped at once, but the KeyboardInterrupt was lost
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            outcome.forced = True
            _cancel(outcome)
            raise
        except Exception:
            # On in-process runners the handler's KeyboardInterrupt is raised inside a
            # DoFn, and Beam wraps it ("RuntimeError: KeyboardInterrupt [while running
            # ...]"): a stop the user asked for is still a stop, not a job failure.
            if outcome.forced:
                raise KeyboardInterrupt from None
            raise
        return outcome.result
    finally:
        counters.finish()
        if stop_marker is not None:
            _remove_quietly(stop_marker)  # its job is over; a resume must not see it
        for t in timer:
            t.cancel()
        for sig, old in handlers.items():
            signal.signal(sig, old)


def metric_counters(result: Any, namespace: str = METRICS_NAMESPACE) -> dict[str, int]:
    """Committed (falling back to attempted) counter totals of ``namespace``, by name."""
    from apache_beam.metrics.metric import MetricsFilter

    totals: dict[str, int] = {}
    try:
        query = result.metrics().query(MetricsFilter().with_namespace(namespace))
    except Exception:  # a runner without metrics support
        return totals
    for c in query["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + int(value or 0)
    return totals
