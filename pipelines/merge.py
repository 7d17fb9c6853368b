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

from mmirage_beam.launch.drivers import driver_parser, parse_pipeline_args, start_pipeline_driver
from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.launch.jobs import metric_counters, run_pipeline
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
        default="jsonl",
        help="jsonl (default); parquet: one Parquet file; hf: a folder that "
        "datasets.load_from_disk opens. The errors file stays JSONL (OUT.errors.jsonl)",
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


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    start_pipeline_driver(args, beam_args)
    # Beam and the modules that build the job load only now: --help and a bad flag
    # answer without the seconds Beam's import takes.
    import apache_beam as beam

    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.progress import counters
    from mmirage_beam.run import merge_plans
    from mmirage_beam.run.storage import check_job_endpoint, check_locations, config_locations
    from mmirage_beam.transforms.merge_rows import build_merge_pipeline

    if args.partitions is not None and args.partitions < 1:
        raise ConfigError("--partitions", "must be >= 1")
    # Beam's FileSystems get the options (--s3_endpoint_url...) before anything is read.
    options = beam_options(beam_args, args.verbose)
    start = merge_plans.start_merge(
        load_config(args.config),
        args.config,
        metadata_paths=args.metadata_path,
        run_ids=args.run_id,
        allow_partial=args.allow_partial,
        verify_source=not args.no_verify_source,
    )
    _say(start.messages)
    if start.blocked:
        return 1
    _print(start.lines)  # a --limit run: which rows are merged
    config, sel = start.config, start.selection
    outputs = merge_plans.merge_outputs(args.output_path, args.output_format, config)
    check_locations(config_locations(config, output_path=outputs.out), options)
    check_job_endpoint(options)
    pipeline = beam.Pipeline(options=options)
    settings = merge_plans.merge_settings(start, outputs, args.partitions)
    receipts = list(start.plan.receipts)  # ReceiptEntry: the workers read the per-request maps
    plan = build_merge_pipeline(pipeline, config, sel.batches, receipts, sel.providers, settings)
    counters.expect_run(
        config.processor, totals={"results fetched": start.results_expected or None}
    )
    ran = _run_merge(pipeline, plan, options, outputs, config, argv)
    if isinstance(ran, int):  # the job failed (1) or the runner only translated it (0)
        return ran
    report = merge_plans.finish_merge(start, plan, outputs, *ran)
    _say(report.messages)
    _print(report.lines)
    return report.exit_code


def _run_merge(pipeline, plan, options, outputs, config, argv):  # noqa: ANN001, ANN202
    """Run the merge job: ``(counters, the merged file as shown)``, or the exit status
    when the runner only translated it (0) or the job failed (1; what to run again is
    printed). Temporary files are removed either way."""
    from mmirage_beam.run import merge_plans, reports
    from mmirage_beam.run.storage import translation_only

    try:
        result = run_pipeline(pipeline)
        if translation_only(options):
            print(reports.MERGE_TRANSLATED)
            return 0
        stats = metric_counters(result)
        shown, lines = merge_plans.convert_output(outputs, config, stats)
        _print(lines)
        return stats, shown
    except Exception as exc:  # the runner's job failed (a worker died, storage failed...)
        given = list(argv) if argv is not None else sys.argv[1:]
        print(reports.merge_failure_message(exc, given), file=sys.stderr)
        return 1
    finally:  # the job removes its temporary files once written; after a failure, here
        _say(merge_plans.remove_temp_dir(plan.temp_dir))
        outputs.discard()


def _say(messages) -> None:  # noqa: ANN001
    """Print a plan's messages (``run.plans.Message``) on stderr, in order."""
    for message in messages:
        print(message.text, file=sys.stderr)


def _print(lines: Sequence[str]) -> None:
    """Print a plan's or a report's lines on stdout, in order."""
    for line in lines:
        print(line)


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
