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

from mmirage_beam.launch.drivers import driver_parser, parse_pipeline_args, start_pipeline_driver
from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.launch.jobs import RunOutcome, metric_counters, run_pipeline
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

    import apache_beam as beam

    from mmirage_beam.config import load_config
    from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
    from mmirage_beam.run import plans
    from mmirage_beam.run.layout import RunLayout, receipts_base
    from mmirage_beam.run.storage import (
        check_job_endpoint,
        check_locations,
        config_locations,
        probe_location,
    )
    from mmirage_beam.transforms.merge_rows import build_failures_pipeline

    # Beam's FileSystems get the options (--s3_endpoint_url...) before anything is read.
    options = beam_options(beam_args, args.verbose)
    config = load_config(args.config)
    provider = config.processor.provider
    resolve_credentials(BatchAdapterRegistry.get(provider), provider)
    new_run = plans.choose_run_id(args.new_run_id or None, None, "--new-run-id")
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    check_locations(config_locations(config), options)
    check_job_endpoint(options)
    probe_location(base, new_run, "processors[0].metadata_output_path")
    plan = plans.prepare_resubmit(
        config, errors_file=args.errors_file, run_id=args.run_id, only=args.only
    )
    if plan.blocked == "lookup_failed":
        print("mmirage: error: some batches cannot be looked up.", file=sys.stderr)
        return 1
    for message in plan.messages:
        print(message.text, file=sys.stderr)
    ids = plan.ids
    if ids is None:  # fetch the parent's results: which requests are still failed
        # Written by the workers, so beside the receipts (a location both sides see).
        ids_path = RunLayout(base, new_run).resubmit_ids
        fetch = beam.Pipeline(options=options)
        sel = plan.selection
        build_failures_pipeline(
            fetch, sel.batches, sel.providers, args.only, ids_path, config.outputs
        )
        run_pipeline(fetch)
        ids = plans.read_failed_ids(ids_path)
    if not ids:
        print(
            f"mmirage resubmit: nothing to resubmit ({args.only} failures in {plan.source}: none)"
        )
        return 0
    print(
        f"mmirage resubmit: re-sending {len(ids)} failed request(s) ({args.only}) of run "
        f"{plan.parent} as run {new_run}",
        file=sys.stderr,
    )
    return _resubmit(args, config, options, new_run, plan.parent, ids)


def _resubmit(args, config, options, new_run: str, parent, ids: frozenset) -> int:  # noqa: ANN001
    """Submit the requests ``ids`` of run ``parent`` as run ``new_run`` and print the
    summary."""
    import apache_beam as beam

    from mmirage_beam.run.receipts import consolidate_run
    from mmirage_beam.run.reports import resubmit_summary_lines
    from mmirage_beam.run.staging import staging_area
    from mmirage_beam.settings import SubmitSettings
    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    settings = SubmitSettings(
        new_run, skip_invalid_rows=True, only_custom_ids=frozenset(ids), parent_run_id=parent
    )
    pipeline = beam.Pipeline(options=options)
    plan = build_submit_pipeline(pipeline, config, settings)
    outcome = RunOutcome()
    try:
        with staging_area(plan.receipts_base, new_run):
            result = run_pipeline(pipeline, stop_marker=plan.stop_marker, outcome=outcome)
    except (Exception, KeyboardInterrupt) as exc:  # the runner wraps worker failures
        stopped = isinstance(exc, KeyboardInterrupt) or outcome.stop_requested
        consolidate_run(plan.receipts_base, new_run)
        why = "stopped on request" if stopped else str(exc).strip().split("\n")[-1]
        print(
            f"mmirage: error: the resubmission failed: {why}\n"
            f"Resume it with: mmirage run --config {args.config} --run-id {new_run}",
            file=sys.stderr,
        )
        return 130 if stopped else 1
    written = list(consolidate_run(plan.receipts_base, new_run))
    stats = metric_counters(result)
    lines = resubmit_summary_lines(
        plan, new_run, parent, stats, written, len(ids), args.only, args.config
    )
    print("\n".join(lines))
    return 0


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
