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


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    start_storage_command(args)  # before any receipt is read

    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.ids import check_run_id
    from mmirage_beam.run.cancel import cancel_batches, plan_cancel
    from mmirage_beam.run.layout import receipts_base

    if args.run_id is not None:
        try:
            check_run_id(args.run_id)
        except ValueError as exc:
            raise ConfigError("--run-id", str(exc)) from None
    config = load_config(args.config)
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    plan, checker = plan_cancel(config, args.run_id)
    try:
        runs = ", ".join(plan.runs)
        if plan.already:
            print(
                f"mmirage cancel: {len(plan.already)} batch(es) of run {runs} were cancelled "
                "before and are still ending; not cancelled again"
            )
        if not plan.to_cancel:
            print(
                f"mmirage cancel: nothing to cancel: {plan.ended} batch(es) of run {runs} "
                "have ended" + (", the others are being cancelled" if plan.already else "")
            )
            return 0
        what = (
            f"{len(plan.to_cancel)} unfinished batch(es) ({plan.requests:,} request(s)) of "
            f"run {runs}"
        )
        if not args.yes:
            if not sys.stdin or not sys.stdin.isatty():
                print(
                    f"mmirage cancel: would cancel {what}; no terminal to ask: pass --yes to "
                    "cancel",
                    file=sys.stderr,
                )
                return 2
            answer = input(f"Cancel {what} at the provider? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("mmirage cancel: nothing cancelled", file=sys.stderr)
                return 2
        done = cancel_batches(base, plan, checker)
    finally:
        checker.close()
    refused = [d for d in done if d.error]
    for d in done:
        outcome = f"refused: {d.error}" if d.error else f"now {d.status_after}"
        print(
            f"  {d.provider_batch_id} ({d.provider}, run {d.run_id}, was "
            f"{d.status_before}): {outcome}"
        )
    print(
        f"mmirage cancel: asked to cancel {len(done) - len(refused)} of {len(done)} batch(es); "
        "their processed requests keep their results. Merge once they have ended: "
        f"mmirage merge --config {args.config} --output-path OUT.jsonl --run-id {plan.runs[0]}"
    )
    return 1 if refused else 0


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
