"""``mmirage resubmit`` / ``python -m pipelines.resubmit``: re-send a run's failed requests.

Usage:
    python -m pipelines.resubmit --config C.yaml [--from OUT.errors.jsonl | --run-id ID]
        [--only retryable|all] [--new-run-id ID] [standard Beam pipeline options]

Builds new requests (from the source rows, exactly as at submission) for the failed,
expired and cancelled custom_ids of a run, never for succeeded ones, and submits them as
a new run whose receipts carry ``parent_run_id``; ``mmirage merge`` then takes, per
custom_id, the newest successful result across the linked runs.

Exit status: 0 resubmitted (or nothing to resubmit); 1 a submission failed or rows are
invalid; 2 bad flags, bad config, no receipts or a missing key.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.commands.resubmit import ResubmitCommand
from mmirage_beam.launch.drivers import driver_parser, parse_pipeline_args, start_pipeline_driver
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.paths import path_argument


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    ap = driver_parser(
        "mmirage resubmit",
        "Re-send the failed requests of a run as a new, linked run. Unknown "
        "flags are Beam pipeline options. Relative paths, in the config "
        "and on the command line, are relative to the current directory (as in MMIRAGE); "
        "they are made absolute before the pipeline is built, so workers in other folders "
        "or machines see the same files.",
    )
    ap.add_argument("--config", required=True, help="the config the run was submitted with")
    ap.add_argument(
        "--from",
        dest="errors_file",
        type=path_argument,
        metavar="OUT.errors.jsonl",
        help="take the failed requests from a merge's errors file",
    )
    ap.add_argument(
        "--run-id",
        help="the run to resubmit failures of (default: the newest); without --from its "
        "results are fetched from the provider",
    )
    ap.add_argument(
        "--only",
        choices=["retryable", "all"],
        default="retryable",
        help="retryable (default): expired, cancelled, timeouts, rate limits, server "
        "errors, token_limit_exceeded; all: also invalid requests and invalid JSON",
    )
    ap.add_argument("--new-run-id", help="run id of the resubmission (default: a fresh one)")
    return parse_pipeline_args(ap, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    start_pipeline_driver(args, beam_args)
    command = ResubmitCommand(
        config_path=args.config,
        errors_file=args.errors_file,
        run_id=args.run_id,
        only=args.only,
        new_run_id=args.new_run_id,
    )
    return command.run(beam_args, args.verbose).exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
