"""``mmirage check`` / ``python -m pipelines.check``: provider status of a run's batches.

Usage:
    python -m pipelines.check --config C.yaml [--metadata-path R ...] [--run-id ID]
        [--watch [--interval SECS] [--timeout SECS]]
        [Beam filesystem options, e.g. --s3_endpoint_url URL]

Reads the receipts of the run asked about (``--run-id``; default: the newest run of the
config's ``metadata_output_path`` and its resubmissions, as ``merge`` selects; every run
of the given files / ``.parts`` folders), looks every distinct provider batch up and prints
one line per batch (status, the provider's own status word, requests done / failed /
total, age) and a summary per provider and per run: ``rich`` tables on a terminal, plain
aligned text otherwise. ``--watch`` polls until every batch is terminal, then tells the
config's webhooks (``execution_params.notify``, docs/notifications.md) how the run named
by ``--run-id``, or each run it saw running, ended; a webhook never changes the exit
status.

Exit status: 0 every request of the ended batches succeeded, or batches are still
running with nothing failed so far (the verdict line says which); 1 a batch failed at
the provider or could not be looked up, a run stopped before all its chunks were
submitted, or every batch ended and requests failed; 2 bad flags, bad config, no receipt
found or a missing API key; 75 ``--watch --timeout`` stopped watching while batches were
still running (and nothing had failed); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_storage_args, start_storage_command
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.paths import path_argument


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``mmirage check``.

    Raises:
        SystemExit: (status 2) on bad flags, as argparse does.
    """
    ap = driver_parser(
        "mmirage check",
        "Report the provider status of submitted batches from their receipts.",
        storage_command=True,
    )
    ap.add_argument(
        "--config",
        help="MMIRAGE-compatible YAML config (optional with --metadata-path: a run made "
        "by a Beam YAML pipeline has none; the provider's defaults and its SDK's "
        "environment (its base-URL variable) are used then)",
    )
    ap.add_argument(
        "--metadata-path",
        action="append",
        type=path_argument,
        metavar="R",
        help="a receipt file (or its .parts folder) to read instead of the config's "
        "metadata_output_path; repeatable",
    )
    ap.add_argument("--run-id", help="only this run's receipts")
    ap.add_argument(
        "--watch", action="store_true", help="poll until every batch is completed or failed"
    )
    ap.add_argument(
        "--interval",
        type=float,
        default=60.0,
        metavar="SECS",
        help="seconds between polls with --watch (default 60)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECS",
        help="stop watching after SECS seconds (default: no limit)",
    )
    args = parse_storage_args(ap, argv)
    if args.config is None and not args.metadata_path:
        ap.error("one of --config or --metadata-path is required")
    return args


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start_storage_command(args)  # before any receipt is read

    from mmirage_beam.check.report import print_report
    from mmirage_beam.commands import show
    from mmirage_beam.commands.check import CheckCommand

    command = CheckCommand(
        config_path=args.config,
        metadata_paths=tuple(args.metadata_path or ()),
        run_id=args.run_id,
        watch=args.watch,
        interval_secs=args.interval,
        timeout_secs=args.timeout,
    )
    started = command.start()
    for message in started.messages:
        print(message, file=sys.stderr)
    tty = sys.stdout.isatty()
    looked = command.look(started, tty)
    report = command.finish(started, looked)
    for line in report.before:
        print(line, flush=True)
    print_report(report.summary, rich_output=tty)
    show(report.after)
    notified = command.notify(started, looked)
    show(notified.lines)
    for warning in notified.warnings:
        print(warning, file=sys.stderr)
    return report.exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
