"""Ctrl-C in a driver: :func:`guarded` turns mmirage errors, storage failures and
interrupts into one line and an exit status, and records every Ctrl-C
(:func:`interrupt_requested`) even when its KeyboardInterrupt is swallowed."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable, Optional, Protocol, Sequence, TypeVar

from mmirage_beam.errors import ConfigError, MmirageError
from mmirage_beam.launch.failures import describe_failure, is_storage_error

#: Set when a Ctrl-C (SIGINT) reached a driver started by :func:`guarded`. The
#: KeyboardInterrupt it raises can be lost: C code that clears the errors it sees (an
#: extension module's import, e.g. ``xml.etree``'s ``_elementtree``) swallows one that
#: lands inside it, so the drivers also look at this flag (:func:`run_pipeline`).
_INTERRUPTED = threading.Event()


def interrupt_requested() -> bool:
    """Whether a Ctrl-C reached the running driver (even if its KeyboardInterrupt was
    swallowed on the way)."""
    return _INTERRUPTED.is_set()


def mark_interrupted() -> None:
    """Record a Ctrl-C that a job's own signal handler took (:func:`interrupt_requested`
    then says so until the driver returns)."""
    _INTERRUPTED.set()


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
    A SIGTERM is taken the same way while its default action (ending the process at
    once, status -15, without a word) is in place: a SIGTERM during start-up, before a
    job's own handlers (:func:`~mmirage_beam.launch.jobs.run_pipeline`), is a stop said
    in one line with exit 130 (issue 38).
    """

    def wrapper(argv: Optional[Sequence[str]] = None) -> int:
        previous = None
        previous_term = None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            previous = signal.signal(signal.SIGINT, _on_sigint)
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        ):
            previous_term = signal.signal(signal.SIGTERM, _on_sigint)
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
                "mmirage: interrupted (Ctrl-C or SIGTERM; a pipeline it was running is "
                "cancelled; batches already submitted keep running at the provider); run "
                "the same command again to continue",
                file=sys.stderr,
            )
            code = 130
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if previous_term is not None:
                signal.signal(signal.SIGTERM, previous_term)
            _INTERRUPTED.clear()
        _forget_handled_interrupt()
        return code

    return wrapper


class _Outcome(Protocol):
    exit_code: int


_OutcomeT = TypeVar("_OutcomeT", bound=_Outcome)


def guarded_call(step: Callable[[], _OutcomeT]) -> tuple[int, Optional[_OutcomeT]]:
    """Run a command object's ``step`` (no arguments; returns an outcome with an
    ``exit_code``) as :func:`guarded` runs a driver: mmirage errors, storage failures and
    Ctrl-C become one line and an exit status.

    Returns:
        ``(exit status, the outcome)``; the outcome is None when ``step`` raised.
    """
    got: list[_OutcomeT] = []

    def main(_argv: Optional[Sequence[str]] = None) -> int:
        got.append(step())
        return got[0].exit_code

    code = guarded(main)()
    return code, (got[0] if got else None)
