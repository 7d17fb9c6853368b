"""Launcher helpers shared by the ``pipelines/`` drivers: errors, options, summaries."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

from mmirage_beam.errors import ConfigError, MmirageError
from mmirage_beam.jsonl import read_jsonl as _read_jsonl
from mmirage_beam.metrics import METRICS_NAMESPACE

_LOG = logging.getLogger("mmirage_beam")


# Import-time notices of Beam about optional cloud filesystems it cannot load; they
# concern remote storage the user did not ask for.
_IMPORT_NOISE = ("Failed to import GCSFileSystem", "apitools not found")


class _DropImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not any(n in msg for n in _IMPORT_NOISE)


class _DropJobMessages(logging.Filter):
    """The portable runner relays the job's messages (a worker failure's whole traceback
    chain) through the root logger; the drivers print one clear message instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.replace("\\", "/").endswith(
            "runners/portability/portable_runner.py"
        )


class _DropBeamS3Errors(logging.Filter):
    """Beam's S3 writer logs every failed upload start as an ERROR with its whole
    traceback (``s3io.py``, on the root logger), then raises; the drivers report that
    failure once, in one line (``-v`` shows Beam's log too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.replace("\\", "/").endswith("apache_beam/io/aws/s3io.py")


class _NoTracebackFormatter(logging.Formatter):
    """A log line without the traceback a library put into its message or attached
    (e.g. Beam's storage retries: "Retry with exponential backoff: ... Traceback for
    above exception"): cut where it starts; ``-v`` keeps it."""

    _START = re.compile(r"Traceback (\(most recent call last\)|for above exception)")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        found = self._START.search(text)
        return text if not found else text[: found.start()].rstrip() + " (traceback: -v)"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def configure_logging(verbose: bool = False) -> None:
    """mmirage at INFO (DEBUG with ``verbose``) on stderr; Beam's own chatter at WARNING.

    Call it before importing ``apache_beam`` so Beam's import-time notices are filtered.
    Replaces the root handlers a previous call or an implicit ``logging.basicConfig``
    installed (plain stream handlers), and keeps any other handler of the program that
    embeds the driver (files, pytest's ``caplog``...).
    """
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) in (logging.StreamHandler, _StderrHandler):
            root.removeHandler(old)
    handler = _StderrHandler()
    line = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(logging.Formatter(line) if verbose else _NoTracebackFormatter(line))
    handler.addFilter(_DropImportNoise())
    if not verbose:
        handler.addFilter(_DropJobMessages())
        handler.addFilter(_DropBeamS3Errors())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("mmirage_beam").setLevel(logging.DEBUG if verbose else logging.INFO)
    # (the provider SDKs' loggers stay at the root's WARNING unless their own env asks)
    for noisy in ("apache_beam", "httpx", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The runner logs a worker failure's whole traceback chain; the drivers print one
    # clear message (and the resume command) instead. -v shows it all.
    logging.getLogger("apache_beam.runners").setLevel(
        logging.WARNING if verbose else logging.CRITICAL
    )


#: Set when a Ctrl-C (SIGINT) reached a driver started by :func:`guarded`. The
#: KeyboardInterrupt it raises can be lost: C code that clears the errors it sees (an
#: extension module's import, e.g. ``xml.etree``'s ``_elementtree``) swallows one that
#: lands inside it, so the drivers also look at this flag (:func:`run_pipeline`).
_INTERRUPTED = threading.Event()


def interrupt_requested() -> bool:
    """Whether a Ctrl-C reached the running driver (even if its KeyboardInterrupt was
    swallowed on the way)."""
    return _INTERRUPTED.is_set()


def _on_sigint(_signum: int, _frame: object) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def _forget_handled_interrupt() -> None:
    """Clear CPython's "KeyboardInterrupt went unhandled" flag before a driver returns.

    CPython sets it (``_Py_UnhandledKeyboardInterrupt``, since bpo-1054041) whenever a
    KeyboardInterrupt leaves code run by ``exec()`` of a string, even if the program then
    catches it, and ``python -m`` checks it at exit: the process then kills itself with
    SIGINT (status -2 to a parent process, not the 130 we return). ``dataclasses`` and
    ``namedtuple`` build their methods with ``exec``, so a Ctrl-C landing while a module
    defining one is imported (Beam imports many lazily) set it. A driver that returns has
    handled every interrupt, so the flag is cleared; interpreters without it are left
    alone.
    """
    try:
        import ctypes  # only here: a private CPython flag, absent elsewhere

        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (AttributeError, ValueError, OSError):
        pass


def guarded(main: Callable[[Optional[Sequence[str]]], int]) -> Callable[..., int]:
    """Run a driver ``main`` turning mmirage errors into a message and an exit status.

    Ctrl-C: 130 and one line saying how to continue (never a traceback). In the main
    thread, while Python's default SIGINT handler is in place, the driver's own handler
    records each Ctrl-C (:func:`interrupt_requested`) before raising KeyboardInterrupt.
    """

    def wrapper(argv: Optional[Sequence[str]] = None) -> int:
        previous = None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            previous = signal.signal(signal.SIGINT, _on_sigint)
        _INTERRUPTED.clear()
        try:
            code = main(argv)
        except MmirageError as exc:
            # A missing key (CredentialsError) also exits 2 but is not a config problem.
            kind = "config error" if isinstance(exc, ConfigError) else "error"
            print(f"mmirage: {kind}: {exc}", file=sys.stderr)
            code = exc.exit_code
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            # Beam's filesystems (boto3 under s3://, google-cloud-storage under gs://)
            # give up after their own retries: one line naming the storage error, as for
            # every other failure.
            print(f"mmirage: error: storage: {describe_failure(exc)}", file=sys.stderr)
            code = 1
        except KeyboardInterrupt:
            print(
                "mmirage: interrupted (a pipeline it was running is cancelled; batches "
                "already submitted keep running at the provider); run the same command "
                "again to continue",
                file=sys.stderr,
            )
            code = 130
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            _INTERRUPTED.clear()
        _forget_handled_interrupt()
        return code

    return wrapper


#: What Beam's portable runners (the Python job service, Flink's, Dataflow's) say when
#: an SDK worker process died or its connection dropped mid-bundle: the data channel
#: closes (``apache_beam/runners/worker/data_plane.py``: "Channel closed prematurely.").
WORKER_LOST_MESSAGES = (
    "Channel closed prematurely",
    "SDK harness",
    "harness disconnected",
    "worker lost",
    "Socket closed",
)


#: The modules whose exceptions are storage failures: Beam's filesystems, boto3 under
#: ``s3://``, and google-cloud-storage under ``gs://`` (its API errors, ``403
#: Forbidden``..., its upload and download errors, its credentials' errors).
STORAGE_ERROR_MODULES = (
    "apache_beam.io.",
    "botocore.",
    "boto3.",
    "google.api_core.exceptions",
    "google.cloud.storage.",
    "google.resumable_media.",
    "google.auth.exceptions",
)


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a storage failure raised through Beam's filesystems (Beam's
    ``BeamIOError``, its S3 client's ``S3ClientError``, a boto3/botocore error, a
    google-cloud-storage error: Beam's GCS filesystem lets them through unwrapped)
    rather than a bug: those reach the drivers when a location cannot be listed, read or
    written after the filesystem's own retries (:data:`STORAGE_ERROR_MODULES`)."""
    return any(
        (cls.__module__ or "").startswith(STORAGE_ERROR_MODULES) for cls in type(exc).__mro__
    )


def describe_failure(exc: BaseException) -> str:
    """One line for a failed job: the last line of ``exc``'s message (a runner's job
    failure carries the worker's whole traceback), and, when the runner reports a worker
    process that died or lost its connection (:data:`WORKER_LOST_MESSAGES`), a plain
    statement of that."""
    text = str(exc).strip().splitlines()
    last = text[-1].strip() if text else type(exc).__name__
    if any(m.lower() in str(exc).lower() for m in WORKER_LOST_MESSAGES):
        return (
            "a worker process of the runner died or lost its connection while the job ran "
            f"(the runner said: {last})"
        )
    return last


def counters(result: Any, namespace: str = METRICS_NAMESPACE) -> dict[str, int]:
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


def read_jsonl(path: str, limit: Optional[int] = None) -> list[dict[str, Any]]:
    """Lines of a (small) JSONL file through Beam's FileSystems; [] when it is absent.

    Split on ``\n`` only (:mod:`mmirage_beam.jsonl`), never ``str.splitlines()``.
    """
    return _read_jsonl(path, limit)


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# Beam modules that define pipeline options but are not imported by ``apache_beam``
# itself. They are read, not imported: some cannot be imported without optional
# dependencies (dask, pandas), and an option class imported in the launcher would also
# put its defaults into the pipeline's options, which workers without that class then
# report as "unparseable".
_OPTION_MODULES = (
    "apache_beam.runners.render",
    "apache_beam.runners.dask.dask_runner",
    "apache_beam.yaml.options",
    "apache_beam.runners.interactive.interactive_runner",
)


def _beam_option_parser() -> Any:
    """Beam's own argument parser with the options of every runner Beam ships: the option
    classes ``apache_beam`` registers, plus the flags of :data:`_OPTION_MODULES` read from
    their source (accepted with or without a value)."""
    import re
    from pathlib import Path

    import apache_beam
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class _RaisingParser(_BeamArgumentParser):
        def error(self, message: str) -> None:  # argparse would print usage and exit
            raise ValueError(message)

    parser = _RaisingParser(allow_abbrev=False)
    classes: dict[str, type] = {}
    stack = list(PipelineOptions.__subclasses__())
    while stack:
        cls = stack.pop()
        classes.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
        stack.extend(cls.__subclasses__())
    for cls in classes.values():
        try:
            cls._add_argparse_args(parser)
        except Exception:  # an option class whose flags clash with another's
            continue
    known = {s for action in parser._actions for s in action.option_strings}
    static_flags: set[str] = set()
    root = Path(apache_beam.__file__).parent
    for name in _OPTION_MODULES:
        src = root.joinpath(*name.split(".")[1:]).with_suffix(".py")
        if src.is_file():
            text = src.read_text(encoding="utf-8")
            static_flags.update(re.findall(r"add_argument\(\s*['\"](--[A-Za-z0-9_]+)", text))
    for flag in sorted(static_flags - known):
        parser.add_argument(flag, nargs="?")
    return parser


def check_beam_args(beam_args: Sequence[str], own_flags: Sequence[str]) -> None:
    """Refuse every argument that is neither the tool's nor a Beam pipeline option.

    Beam's parser only warns about and discards what it does not know, so a typo such as
    ``--export-promts``, a hyphenated Beam flag (``--num-workers``: Beam's are
    ``--num_workers``) or ``--dry-run`` would otherwise turn a dry run into a real, paid
    submission. The check uses Beam's own parser with the option classes of every runner
    Beam ships registered (Dataflow, Flink, Spark, Prism, Dask, portable...). Beam's
    ``--dry_run`` is honoured only by the DataflowRunner, so it is refused elsewhere.

    Raises:
        ConfigError: (exit 2) naming the argument and, where one is close, the flag the
        user probably meant; nothing has been read or run.
    """
    import difflib

    _refuse_secret_flags(beam_args)
    parser = _beam_option_parser()
    try:
        known_args, unknown = parser.parse_known_args(list(beam_args))
    except ValueError as exc:  # e.g. "argument --num_workers: expected one argument"
        raise ConfigError("beam options", f"{exc} (nothing was run)") from None
    if unknown:
        arg = next((a for a in unknown if a.startswith("-")), unknown[0])
        flag = arg.split("=", 1)[0]
        if not flag.startswith("-"):
            raise ConfigError(
                flag, "unexpected argument (every value must follow its flag; nothing was run)"
            )
        beam_flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
        if flag in ("--dry-run", "--dryrun"):
            hint = "; for a dry run use --export-prompts PATH"
        else:
            close = difflib.get_close_matches(
                flag.replace("-", "_").replace("__", "--", 1),
                [f.replace("-", "_").replace("__", "--", 1) for f in own_flags] + beam_flags,
                n=1,
                cutoff=0.75,
            )
            by_norm = {f.replace("-", "_").replace("__", "--", 1): f for f in own_flags}
            hint = f"; did you mean {by_norm.get(close[0], close[0])}?" if close else ""
        raise ConfigError(
            flag,
            f"unknown flag{hint} (flags other than the tool's own must be Beam pipeline "
            "options, spelt as Beam spells them; nothing was run)",
        )
    runner = str(getattr(known_args, "runner", None) or "")
    _check_runner_name(runner)
    if getattr(known_args, "dry_run", False) and "dataflow" not in runner.lower():
        raise ConfigError(
            "--dry_run",
            "Beam's --dry_run is honoured only by the DataflowRunner; for a dry run that "
            "sends nothing use --export-prompts PATH (nothing was run)",
        )


def _check_runner_name(runner: str) -> None:
    """Refuse a ``--runner`` that Beam does not know (``DirectRunnr``): Beam would fail
    only when the pipeline runs, and the location checks, which read the runner's name,
    would first complain about local paths. A dotted name is a runner class's module path
    (Beam imports it) and is not checked here.

    Raises:
        ConfigError: on ``--runner``, naming the closest known runner and all of them.
    """
    import difflib

    from apache_beam.options.pipeline_options import StandardOptions

    if not runner or "." in runner:
        return
    known = list(StandardOptions.KNOWN_RUNNER_NAMES)
    lowered = {name.lower(): name for name in known}
    name = runner.lower()
    if name in lowered or name + "runner" in lowered or name == "pythonrpcdirectrunner":
        return
    close = difflib.get_close_matches(name, list(lowered), n=1, cutoff=0.6)
    hint = f"; did you mean {lowered[close[0]]}?" if close else ""
    raise ConfigError(
        "--runner",
        f"unknown runner {runner!r}{hint} (Beam's runners: {', '.join(known)}; nothing was run)",
    )


def own_flags(parser: Any) -> list[str]:
    """Every option string an argparse parser defines."""
    return [s for action in parser._actions for s in action.option_strings]


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


def run_pipeline(
    pipeline: Any,
    stop_marker: Optional[str] = None,
    grace_secs: float = STOP_GRACE_SECS,
    outcome: Optional[RunOutcome] = None,
    nothing_in_flight: Optional[Callable[[], bool]] = None,
) -> Any:
    """Run ``pipeline`` to completion; Ctrl-C and SIGTERM stop it on every runner.

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
    if _INTERRUPTED.is_set():  # a Ctrl-C before the job whose KeyboardInterrupt was lost
        raise KeyboardInterrupt
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
        _INTERRUPTED.set()
        _cancel(outcome)
        raise KeyboardInterrupt

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)
    from mmirage_beam import progress  # loads Beam; launch.py itself does not

    progress.begin(getattr(pipeline, "options", None))  # the live bar or the lines
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
        progress.finish()
        if stop_marker is not None:
            _remove_quietly(stop_marker)  # its job is over; a resume must not see it
        for t in timer:
            t.cancel()
        for sig, old in handlers.items():
            signal.signal(sig, old)


def beam_options(beam_args: Sequence[str], verbose: bool = False) -> Any:
    """``PipelineOptions`` of the driver's Beam flags, with SDK workers' own logging at
    WARNING unless ``verbose`` or the user chose a level (in multi_processing and portable
    runs, every worker otherwise prints dozens of INFO lines about its own start-up).
    mmirage's own progress lines stay (``sdk_harness_log_level_overrides``).

    The options are also handed to Beam's ``FileSystems`` (:func:`use_filesystem_options`):
    call this before the driver touches its storage, so the launcher's own reads and
    writes use the same ``--s3_endpoint_url`` (or other filesystem options) as the job."""
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(beam_args)
    if not verbose and not any(
        a.split("=", 1)[0]
        in ("--default_sdk_harness_log_level", "--sdk_harness_log_level_overrides")
        for a in args
    ):
        args += [
            # WARN, not WARNING: Python reads either, and Java runners (the Flink job
            # server of Beam 2.62, whose enum has WARN only) parse this option too.
            "--default_sdk_harness_log_level=WARN",
            '--sdk_harness_log_level_overrides={"mmirage_beam": "INFO"}',
        ]
    options = PipelineOptions(args)
    use_filesystem_options(options)
    return options


#: Beam's option classes that configure its filesystems: the ``--s3_*`` flags of
#: ``s3://``, Azure Blob Storage's and HDFS's. The commands that run no pipeline
#: (``check``, ``runs``, ``cancel``) take these flags, and only these, of Beam's options.
FILESYSTEM_OPTION_CLASSES = ("S3Options", "AzureOptions", "HadoopFileSystemOptions")

#: Beam's options that carry a storage secret. They are refused: pipeline options are
#: stored in the job (Dataflow's console, a job service), so a key there is as good as
#: published. The storage clients read their credentials from the environment instead.
SECRET_STORAGE_FLAGS = {
    "--s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "--s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "--s3_session_token": "AWS_SESSION_TOKEN",
    "--azure_connection_string": "AZURE_STORAGE_CONNECTION_STRING",
}

FILESYSTEM_FLAGS_HELP = (
    "Beam's filesystem options are accepted as 'mmirage run' takes them, e.g. "
    "--s3_endpoint_url URL --s3_region_name REGION for an S3-compatible server (boto3's "
    "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL and AWS_DEFAULT_REGION work too), "
    "--blob_service_endpoint, --hdfs_host/--hdfs_port/--hdfs_user. Storage credentials "
    "come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, a profile...)."
)


def use_filesystem_options(options: Any) -> None:
    """Hand ``options`` to Beam's ``FileSystems``, so every file the launcher itself reads
    or writes (receipts, leases, run records, probes, merged files on ``s3://``...) goes
    through the same filesystem settings (``--s3_endpoint_url``...) as the workers'.

    Beam sets them only when a ``Pipeline`` is built; the launcher touches its storage
    before (and the commands that run no pipeline never build one). Without options,
    Beam's S3 filesystem cannot even make a client. Its two fixes
    (:func:`mmirage_beam.io.beam_s3.fix_beam_s3`) are applied here too."""
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.io.beam_s3 import fix_beam_s3

    fix_beam_s3()
    FileSystems.set_options(options)


def _refuse_secret_flags(args: Sequence[str]) -> None:
    """Refuse a Beam option that carries a storage secret (:data:`SECRET_STORAGE_FLAGS`).

    Raises:
        ConfigError: naming the flag and the environment variable to use instead.
    """
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in SECRET_STORAGE_FLAGS:
            raise ConfigError(
                flag,
                "a storage secret is never taken as a flag (pipeline options are stored "
                "in the job, where anyone who sees the job reads them); set "
                f"{SECRET_STORAGE_FLAGS[flag]} in the environment of the launcher and of "
                "the workers instead (nothing was run)",
            )


def parse_filesystem_args(parser: Any, argv: Optional[Sequence[str]]) -> tuple[Any, list[str]]:
    """``parser.parse_known_args(argv)`` for a command that runs no pipeline, allowing of
    Beam's options only its filesystem ones (:data:`FILESYSTEM_OPTION_CLASSES`).

    Beam loads only when such a flag is given, so ``--help`` and plain command lines stay
    as fast as before. Hand the returned flags to :func:`filesystem_pipeline_options`.

    Returns:
        ``(args, filesystem_flags)``.

    Raises:
        SystemExit: (status 2, argparse's error) for any other argument, naming it and
            the flags that are accepted.
        ConfigError: a flag carrying a storage secret (:data:`SECRET_STORAGE_FLAGS`).
    """
    args, rest = parser.parse_known_args(argv)
    if not rest:
        return args, []
    _refuse_secret_flags(rest)
    from apache_beam.options import pipeline_options

    fs_parser = _parser_of([getattr(pipeline_options, n) for n in FILESYSTEM_OPTION_CLASSES])
    try:
        _, unknown = fs_parser.parse_known_args(list(rest))
    except ValueError as exc:  # "argument --s3_region_name: expected one argument"
        parser.error(str(exc))
    if unknown:
        known = sorted(
            s for a in fs_parser._actions for s in a.option_strings if s not in SECRET_STORAGE_FLAGS
        )
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} ({parser.prog} runs no pipeline: "
            f"of Beam's options it takes only the filesystem ones: {', '.join(known)})"
        )
    return args, list(rest)


def _parser_of(option_classes: Sequence[type]) -> Any:
    """A parser that raises ``ValueError`` (instead of exiting) with the flags of Beam's
    ``option_classes``."""
    import argparse

    class _Raising(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise ValueError(message)

    parser = _Raising(allow_abbrev=False, add_help=False)
    for cls in option_classes:
        cls._add_argparse_args(parser)
    return parser


def filesystem_pipeline_options(flags: Sequence[str]) -> Any:
    """``PipelineOptions`` of a command's Beam filesystem flags (:func:`parse_filesystem_args`;
    none: Beam's defaults, and boto3's environment such as ``AWS_ENDPOINT_URL_S3``),
    handed to Beam's ``FileSystems`` (:func:`use_filesystem_options`)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(flags))
    use_filesystem_options(options)
    return options
