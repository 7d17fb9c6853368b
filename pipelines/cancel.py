"""``mmirage cancel`` / ``python -m pipelines.cancel``: cancel a run's unfinished batches.

Usage:
    python -m pipelines.cancel --config C.yaml [--run-id ID] [--yes] [Beam filesystem options]

Cancels, at the provider, every batch of the run (default: the newest) and of its linked
runs (resubmissions) that has not ended, and records it (:mod:`mmirage_beam.run.cancel`).
Asks first unless ``--yes``. A batch cancelled before is not cancelled again.

Exit status: 0 cancelled (or nothing left to cancel); 1 the provider refused some
cancels; 2 bad flags, bad config, no receipts, a missing key, no answer to the question
(no terminal: pass --yes), or the answer was no.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_storage_args, start_storage_command
from mmirage_beam.launch.interrupts import guarded


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``mmirage cancel``.

    Raises:
        SystemExit: (status 2) on bad flags, as argparse does.
    """
    ap = driver_parser(
        "mmirage cancel",
        "Cancel every unfinished batch of a run (and of its resubmissions) at "
        "the provider. Requests already processed keep their results; merge marks the "
        "rest cancelled.",
        storage_command=True,
    )
    ap.add_argument("--config", required=True, help="the config the run was submitted with")
    ap.add_argument("--run-id", help="the run to cancel (default: the newest)")
    ap.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    args = parse_storage_args(ap, argv)
    return args


def _confirmed(what: str) -> bool:
    """Ask on the terminal whether to cancel ``what``; False (with why on stderr) when
    there is no terminal to ask or the answer is not yes."""
    if not sys.stdin or not sys.stdin.isatty():
        print(
            f"mmirage cancel: would cancel {what}; no terminal to ask: pass --yes to cancel",
            file=sys.stderr,
        )
        return False
    answer = input(f"Cancel {what} at the provider? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        print("mmirage cancel: nothing cancelled", file=sys.stderr)
        return False
    return True


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start_storage_command(args)  # before any receipt is read

    from mmirage_beam.commands import show
    from mmirage_beam.commands.cancel import CancelCommand

    command = CancelCommand(args.config, args.run_id)
    planned = command.plan()
    show(planned.lines)
    try:  # the lookup client is closed however the question ends (Ctrl-C, EOF)
        go = not planned.nothing_to_cancel and (args.yes or _confirmed(planned.what))
    except BaseException:
        planned.close()
        raise
    if not go:
        planned.close()
        return 0 if planned.nothing_to_cancel else 2
    outcome = command.cancel(planned)
    show(outcome.lines)
    return outcome.exit_code


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
