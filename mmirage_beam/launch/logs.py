"""The drivers' logging: mmirage at INFO on stderr, Beam's chatter at WARNING, a failed
job's relayed tracebacks and storage retries cut to one line (``-v`` keeps them)."""

from __future__ import annotations

import logging
import re
import sys

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
