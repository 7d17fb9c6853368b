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

    from mmirage_beam.commands.submit import SubmitCommand
    from mmirage_beam.cycle.loop import CycleCommand
    from mmirage_beam.run.submit_flags import SubmitFlags

    # argv onto the one command of ``mmirage run``: the submission, and the cycle around
    # it when --wait or the config asks for it
    submit = SubmitFlags(
        config=args.config,
        beam_args=tuple(beam_args),
        export_prompts=args.export_prompts,
        run_id=args.run_id,
        new_run=args.new_run,
        limit=args.limit,
        skip_invalid_rows=args.skip_invalid_rows,
        exact_tokens=args.exact_tokens,
        estimate=args.estimate,
        estimate_fraction=args.estimate_fraction,
        no_reuse=args.no_reuse,
        keep_staged=args.keep_staged,
        skip_space_check=args.skip_space_check,
    )
    command = CycleCommand(
        SubmitCommand(submit, args.verbose),
        wait=args.wait,
        output_path=args.output_path,
        retries=args.retries,
        poll_interval=args.poll_interval,
        timeout=args.timeout,
    )
    return command.run()


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
