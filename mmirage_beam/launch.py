"""Launcher helpers shared by the ``pipelines/`` drivers: errors, options, summaries."""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Optional, Sequence

from mmirage_beam.errors import ConfigError, MmirageError

_LOG = logging.getLogger("mmirage_beam")


# Import-time notices of Beam about optional cloud filesystems it cannot load; they
# concern remote storage the user did not ask for.
_IMPORT_NOISE = ("Failed to import GCSFileSystem", "apitools not found")


class _DropImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not any(n in msg for n in _IMPORT_NOISE)


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
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_DropImportNoise())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("mmirage_beam").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("apache_beam", "httpx", "openai", "anthropic", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # The runner logs a worker failure's whole traceback chain; the drivers print one
    # clear message (and the resume command) instead. -v shows it all.
    logging.getLogger("apache_beam.runners").setLevel(
        logging.WARNING if verbose else logging.CRITICAL
    )


def guarded(main: Callable[[Optional[Sequence[str]]], int]) -> Callable[..., int]:
    """Run a driver ``main`` turning mmirage errors into a message and an exit status."""

    def wrapper(argv: Optional[Sequence[str]] = None) -> int:
        try:
            return main(argv)
        except MmirageError as exc:
            # A missing key (CredentialsError) also exits 2 but is not a config problem.
            kind = "config error" if isinstance(exc, ConfigError) else "error"
            print(f"mmirage: {kind}: {exc}", file=sys.stderr)
            return exc.exit_code

    return wrapper


def counters(result: Any, namespace: str = "mmirage") -> dict[str, int]:
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
    from mmirage_beam.jsonl import read_jsonl as _read

    return _read(path, limit)


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def check_beam_args(beam_args: Sequence[str], own_flags: Sequence[str]) -> None:
    """Refuse flags that are neither the tool's nor a Beam pipeline option.

    Beam only warns about and discards flags it does not know, so a typo such as
    ``--export-promts`` would otherwise turn a dry run into a real, paid submission.

    Raises:
        ConfigError: (exit 2) naming the flag and the closest known one.
    """
    import difflib

    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.errors import ConfigError

    known = set(
        PipelineOptions([]).get_all_options(drop_default=False, retain_unknown_options=False)
    )
    for arg in beam_args:
        if not arg.startswith("--"):
            continue  # the value of the previous flag
        flag = arg.split("=", 1)[0]
        if flag[2:].replace("-", "_") in known:
            continue
        candidates = list(own_flags) + [f"--{k}" for k in known]
        close = difflib.get_close_matches(flag, candidates, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(
            flag,
            f"unknown flag{hint} (flags other than the tool's own must be Beam pipeline "
            "options; nothing was run)",
        )


def own_flags(parser: Any) -> list[str]:
    """Every option string an argparse parser defines."""
    return [s for action in parser._actions for s in action.option_strings]
