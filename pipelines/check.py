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
import dataclasses
import sys
from typing import Any, Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_storage_args, start_storage_command
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.paths import path_argument

#: ``check --watch --timeout`` stopped watching while batches still ran (sysexits'
#: EX_TEMPFAIL: "try again later"); 0 would say the run is done.
WATCH_TIMED_OUT = 75


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

    from mmirage_beam.check import advice, report, watch
    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.ids import check_run_id
    from mmirage_beam.run import discovery, lookup
    from mmirage_beam.run.cancel import cancelled_note
    from mmirage_beam.run.layout import receipts_base
    from mmirage_beam.run.selection import RunStates, judged_runs, run_states

    if args.run_id is not None:
        try:
            check_run_id(args.run_id)
        except ValueError as exc:
            raise ConfigError("--run-id", str(exc)) from None
    if not args.interval > 0:
        raise ConfigError("--interval", f"must be > 0 seconds, got {args.interval}")
    if args.timeout is not None and args.timeout < 0:
        raise ConfigError("--timeout", f"must be >= 0 seconds, got {args.timeout}")

    # 1. find the receipts of the config's runs (or the given files)
    config = load_config(args.config) if args.config is not None else None
    receipts = discovery.collect_receipts(config, args.metadata_path or (), run_id=args.run_id)
    # the run asked about (default: the newest and its resubmissions), as merge judges
    judged = judged_runs(receipts, newest_only=args.run_id is None and not args.metadata_path)
    receipts = judged.receipts
    if judged.others:
        print(
            f"mmirage check: checking run {', '.join(judged.runs)} (the newest); also found "
            f"run(s) {', '.join(judged.others)}: pass --run-id to check another",
            file=sys.stderr,
        )
    tty = sys.stdout.isatty()
    # 2. look every batch up once, or until all are terminal (--watch)
    running_at_start: set = set()  # runs with a batch not ended at the first poll

    def first_poll(polled: Sequence, poll: int, _elapsed: float) -> None:
        if poll == 1:
            running_at_start.update(s.receipt.run_id for s in polled if not s.terminal)

    with lookup.BatchStatusChecker(receipts.providers, config) as checker:
        statuses, timed_out, interrupted = watch.statuses_of(
            checker,
            receipts.batches,
            watch=args.watch,
            interval_secs=args.interval,
            timeout_secs=args.timeout,
            tty=tty,
            also_on_poll=first_poll,
        )
    # 3. runs still submitting, stopped midway or before their finish steps; cancelled
    states = RunStates([], ())
    note = None
    if config is not None:
        base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        if not args.metadata_path:
            states = run_states(base, receipts, args.config)
        note = cancelled_note(base, receipts.run_ids)
    # 4. the report, per batch, per provider and per run, and its verdict (a run that
    # stopped midway is never "ok", as in merge)
    built = report.build_report(receipts, statuses)
    summary = dataclasses.replace(built, unfinished_runs=states.unfinished)
    waiting = len(lookup.not_terminal(statuses))
    if interrupted:
        print(
            f"stopped watching (Ctrl-C): {waiting} batch(es) not finished yet keep running "
            "at the provider; the table is the last poll's",
            flush=True,
        )
        report.print_report(summary, rich_output=tty)
        return 130
    if timed_out:
        print(
            f"stopped watching after {args.timeout:g}s (--timeout): {waiting} batch(es) "
            "not finished yet",
            flush=True,
        )
    report.print_report(summary, rich_output=tty)
    # 5. what the failures mean and the command that fixes them; the runs' states
    for line in advice.advice_lines(summary, args.config):
        print(line)
    for line in [*states.lines, *([note] if note else [])]:
        print(line)
    # 6. --watch: tell the config's webhooks (execution_params.notify) how runs ended
    # (every run named by --run-id; without it, only the runs this watch saw running,
    # so that turning notify on never reports every run of the past)
    if args.watch and config is not None and config.execution.notify:
        watched = receipts.run_ids if args.run_id else sorted(running_at_start)
        _notify(config, base, statuses, watched, args.config)
    if timed_out and waiting and not summary.exit_code:
        return WATCH_TIMED_OUT  # stopped watching, not finished: not "done", not failed
    return summary.exit_code


def _notify(
    config: Any, base: str, statuses: Sequence[Any], run_ids: Sequence[str], config_arg: str
) -> None:
    """Each run's events to the webhooks, each once (``mmirage_beam.notify``); a failure
    is a warning on stderr, never the exit status."""
    from mmirage_beam.notify import notify_run

    for run_id in run_ids:
        mine = [s for s in statuses if s.receipt.run_id == run_id]
        if not run_id or run_id == "?" or not mine:
            continue
        try:
            result = notify_run(base, run_id, config, statuses=mine, config_arg=config_arg)
        except Exception as exc:  # the check's verdict stands whatever the webhook does
            print(f"notify: run {run_id}: not sent ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        for d in result.deliveries:
            if d.status == "delivered":
                print(f"notify: event '{d.event}' of run {run_id} sent to {d.url}")
        for warning in result.warnings:
            print(f"run {run_id}: {warning}", file=sys.stderr)


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
