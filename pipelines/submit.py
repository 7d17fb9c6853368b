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
    from mmirage_beam.config import load_config
    from mmirage_beam.cycle.flags import cycle_wanted
    from mmirage_beam.cycle.loop import run_cycle
    from mmirage_beam.run.submit_flags import SubmitFlags

    command = SubmitCommand(SubmitFlags.from_args(args, beam_args), args.verbose)
    if cycle_wanted(args, load_config(args.config)):
        return run_cycle(args, beam_args, command)
    return command.run().exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
