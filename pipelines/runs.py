"""``mmirage runs`` / ``python -m pipelines.runs``: the runs under a config's state.

Usage:
    python -m pipelines.runs --config C.yaml [--no-lookup] [Beam filesystem options]

One line per run and its linked resubmissions (:mod:`mmirage_beam.run.listing`): run id,
created, links, state (submitting / unfinished / in progress / ended / merged), batches,
requests, failures, estimated cost and, once merged, the actual cost; then the total.

Exit status: 0 listed (also when there is no run); 2 bad flags, bad config or a missing
API key (a lookup needs it; --no-lookup does not).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_storage_args, start_storage_command
from mmirage_beam.launch.interrupts import guarded


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``mmirage runs``.

    Raises:
        SystemExit: (status 2) on bad flags, as argparse does.
    """
    ap = driver_parser(
        "mmirage runs",
        "List the runs under the config's state with their state, batches, "
        "requests, failures and cost (summed over each run's resubmissions).",
        storage_command=True,
    )
    ap.add_argument("--config", required=True, help="MMIRAGE-compatible YAML config")
    ap.add_argument(
        "--no-lookup",
        action="store_true",
        help="do not ask the provider for batch statuses (no key needed; runs not merged "
        "show 'submitted')",
    )
    args = parse_storage_args(ap, argv)
    return args


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start_storage_command(args)  # before any receipt is read

    from mmirage_beam.commands import show
    from mmirage_beam.commands.runs import RunsCommand

    report = RunsCommand(args.config, lookup=not args.no_lookup).run()
    show(report.lines)
    return report.exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
