"""``mmirage run`` / ``python -m pipelines.submit``: the submit pipeline (or a dry run).

Usage:
    python -m pipelines.submit --config C.yaml [--export-prompts P] [--run-id ID]
        [--skip-invalid-rows] [standard Beam pipeline options, e.g. --runner ...]
    python -m pipelines.submit --config C.yaml --wait [--output-path OUT] [--retries N]
        [--poll-interval SECS] [--timeout SECS] [--run-id ID]

``--wait`` (or ``execution_params.merge`` / ``retry``) does the whole cycle: submit,
follow, merge, re-send the retryable failures (:mod:`mmirage_beam.cycle.loop`, which gives
its exit status).

Exit status: 0 submitted (or exported); 1 rows failed validation (nothing submitted) or a
submission failed; 2 bad flags, bad config, a missing API key, or the run id is held by
another live process (nothing sent); 3 an earlier run with the same fingerprint (config
and data) exists and has not failed: nothing was sent (resume it with ``--run-id``, or
pass ``--new-run`` to submit again on purpose); 130 stopped by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_pipeline_args, start_pipeline_driver
from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.interrupts import guarded
from mmirage_beam.launch.jobs import RunOutcome, metric_counters, run_pipeline


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    from mmirage_beam.cycle.flags import add_cycle_arguments
    from mmirage_beam.run.submit_flags import add_submit_arguments

    ap = driver_parser(
        "mmirage run",
        "Render every row into provider batch requests and submit them in "
        "byte-bounded chunks (or export them with --export-prompts). Unknown flags are "
        "passed to Beam as pipeline options (default runner: DirectRunner). Relative "
        "paths, in the config and on the command line, are relative to the current "
        "directory (as in MMIRAGE); "
        "they are made absolute before the pipeline is built, so workers in other folders "
        "or machines see the same files.",
    )
    add_submit_arguments(ap)
    add_cycle_arguments(ap)
    return parse_pipeline_args(ap, argv)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    start_pipeline_driver(args, beam_args)
    # Beam's FileSystems get the options (--s3_endpoint_url...) before anything is read.
    beam_options(beam_args, args.verbose)

    from mmirage_beam.config import load_config
    from mmirage_beam.cycle.flags import cycle_wanted
    from pipelines.cycle import run_cycle

    if cycle_wanted(args, load_config(args.config)):
        return run_cycle(args, beam_args, lambda run_id: _submit_main(args, beam_args, run_id))
    return _submit_main(args, beam_args)


def _submit_main(args, beam_args, preset_run_id: Optional[str] = None) -> int:  # noqa: ANN001
    """Submit (or export) the run; ``preset_run_id``: the id of a fresh run chosen by the
    caller (``args.run_id`` still means "resume this run")."""
    from mmirage_beam.config import load_config
    from mmirage_beam.run.submit_flags import SubmitFlags
    from mmirage_beam.run.submit_plans import hold_run, start_submit

    flags = SubmitFlags.from_args(args, beam_args)
    config = load_config(args.config)
    options = beam_options(beam_args, args.verbose)
    start = start_submit(config, flags, options, preset_run_id)
    _say(start.messages)
    held = hold_run(start, flags)
    try:
        _say(held.messages)
        if held.exit_code is not None:  # already submitted: nothing sent (exit 3)
            return held.exit_code
        return _submit(start, flags, held, options)
    finally:
        held.release()


def _submit(start, flags, held, options) -> int:  # noqa: ANN001
    """Build and run the submit job of a held run (``run.submit_plans``), then print what
    it says; its exit status."""
    import apache_beam as beam

    from mmirage_beam.progress import counters
    from mmirage_beam.run import submit_plans
    from mmirage_beam.run.staging import staging_area, staging_dir
    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    settings, said = submit_plans.submit_settings(start, flags, held.resume)
    _say(said)
    pipeline = beam.Pipeline(options=options)
    plan = build_submit_pipeline(pipeline, start.config, settings)
    _say([submit_plans.job_line(start, flags)])
    submit_plans.check_space(start, flags)
    counters.expect_run(start.config.processor, staging=staging_dir(start.base, start.run_id))
    outcome = RunOutcome()
    try:
        with staging_area(start.base, start.run_id, keep=flags.keep_staged or start.translate_only):
            result = run_pipeline(
                pipeline,
                stop_marker=plan.stop_marker,
                outcome=outcome,
                nothing_in_flight=submit_plans.nothing_in_flight(start, flags),
            )
    except (Exception, KeyboardInterrupt) as exc:  # also Ctrl-C / SIGTERM: say how to resume
        report = submit_plans.job_failed(start, flags, plan, exc, outcome)
    else:
        report = submit_plans.finish_run(start, flags, plan, held, metric_counters(result))
    _say(report.messages)
    for line in report.lines:
        print(line)
    return report.exit_code


def _say(messages) -> None:  # noqa: ANN001
    """Print a plan's messages (``run.plans.Message``) on stderr, in order."""
    for message in messages:
        print(message.text, file=sys.stderr)


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
