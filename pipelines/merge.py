"""``mmirage merge`` / ``python -m pipelines.merge``: join results back onto the rows.

Usage:
    python -m pipelines.merge --config C.yaml --output-path OUT.jsonl
        [--output-format jsonl|parquet|hf] [--metadata-path R ...] [--run-id ID]
        [--allow-partial] [--no-verify-source] [--partitions N] [standard Beam pipeline options]

Exit status: 0 merged and every request succeeded; 1 merged with failed requests, or
refused because batches are still running (without --allow-partial), or the source
changed; 2 bad flags, bad config, no receipts or a missing API key.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.commands.merge import MergeCommand
from mmirage_beam.launch.drivers import driver_parser, parse_pipeline_args, start_pipeline_driver
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.paths import path_argument


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    ap = driver_parser(
        "mmirage merge",
        "Fetch the results of a run's batches and join them onto the source "
        "rows by source_index, in order, into one JSONL file. Unknown flags are Beam "
        "pipeline options (default runner: DirectRunner). Relative paths, in the config "
        "and on the command line, are relative to the current directory (as in MMIRAGE); "
        "they are made absolute before the pipeline is built, so workers in other folders "
        "or machines see the same files.",
    )
    ap.add_argument("--config", required=True, help="the config the run was submitted with")
    ap.add_argument(
        "--output-path",
        required=True,
        type=path_argument,
        help="merged JSONL file to write (relative paths: to the current directory)",
    )
    ap.add_argument(
        "--output-format",
        choices=("jsonl", "parquet", "hf"),
        default=None,
        help="jsonl (default; parquet when OUT ends in .parquet); parquet: one Parquet file; "
        "hf: a folder that datasets.load_from_disk opens. The errors file stays JSONL "
        "(OUT.errors.jsonl)",
    )
    ap.add_argument(
        "--metadata-path",
        action="append",
        type=path_argument,
        default=[],
        metavar="R",
        help="receipt file (repeatable); default: found from metadata_output_path",
    )
    ap.add_argument(
        "--run-id",
        action="append",
        default=[],
        help="merge this run (default: the newest); repeat it to merge several runs into "
        "one file, e.g. the runs of num_shards shards",
    )
    ap.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge while batches are still running; their rows are marked pending",
    )
    ap.add_argument(
        "--no-verify-source",
        action="store_true",
        help="skip rebuilding the requests to check that the source did not change",
    )
    ap.add_argument(
        "--partitions",
        type=int,
        help="range partitions of the ordered write (default: one per 25,000 rows, the most "
        "one worker holds while it joins)",
    )
    return parse_pipeline_args(ap, argv)


def command_of(args: argparse.Namespace) -> MergeCommand:
    """The :class:`MergeCommand` of ``mmirage merge``'s parsed flags."""
    from mmirage_beam.io.formats import format_for_path  # after the flags: it loads Beam

    return MergeCommand(
        config_path=args.config,
        output_path=args.output_path,
        output_format=args.output_format or format_for_path(args.output_path),
        metadata_paths=tuple(args.metadata_path),
        run_ids=tuple(args.run_id),
        allow_partial=args.allow_partial,
        verify_source=not args.no_verify_source,
        partitions=args.partitions,
    )


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    start_pipeline_driver(args, beam_args)
    given = list(argv) if argv is not None else sys.argv[1:]
    return command_of(args).run(beam_args, args.verbose, again=given).exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
