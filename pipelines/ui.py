"""``mmirage ui`` / ``python -m pipelines.ui``: a local dashboard of runs and spend.

Usage:
    python -m pipelines.ui --config C.yaml [--config C2.yaml ...] [--state DIR ...]
        [--port P] [--no-lookup] [--refresh SECS] [Beam filesystem options]

Serves, on 127.0.0.1 only (:mod:`mmirage_beam.ui`), a page with three views: the runs
under every config's state (what ``mmirage runs`` lists, with batches by status and
tokens), one run (its batches, refreshed while they are in flight, as ``mmirage check``
looks them up; its failures by error type, drillable to the rows) and the spend (the
cost ledger by day and by provider, estimated against actual). Viewing needs no token;
cancel and resubmit need the per-launch token printed at start. Stops on Ctrl-C.

Exit status: 0 stopped with Ctrl-C; 2 bad flags, bad config or the port is taken.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.drivers import driver_parser, parse_storage_args, start_storage_command
from mmirage_beam.launch.interrupts import guarded


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The command line of ``mmirage ui``.

    Raises:
        SystemExit: (status 2) on bad flags, as argparse does.
    """
    ap = driver_parser(
        "mmirage ui",
        "Serve a local dashboard (127.0.0.1 only) of the runs under the configs' state: "
        "runs, one run's batches and failures, and spend.",
        storage_command=True,
    )
    ap.add_argument(
        "--config",
        required=True,
        action="append",
        help="MMIRAGE-compatible YAML config; repeat it to show the runs of several states",
    )
    ap.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="DIR",
        help="also show the runs in the state folder DIR (the receipts of the first "
        "--config's kind kept there, e.g. copied from another machine); repeatable",
    )
    ap.add_argument(
        "--port",
        type=int,
        default=8766,
        help="port on 127.0.0.1 (0: a free one; not 8765, the README's fake-provider port)",
    )
    ap.add_argument(
        "--no-lookup",
        action="store_true",
        help="do not ask the providers for batch statuses (no key needed)",
    )
    ap.add_argument(
        "--refresh",
        type=float,
        default=5.0,
        metavar="SECS",
        help="seconds between refreshes of a run whose batches are in flight (default 5)",
    )
    args = parse_storage_args(ap, argv)
    if not 0 <= args.port <= 65535:
        ap.error(f"--port: must be 0..65535, got {args.port}")
    if args.refresh <= 0:
        ap.error(f"--refresh: must be more than 0 seconds, got {args.refresh}")
    return args


def _main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve until Ctrl-C; returns the exit status."""
    args = parse_args(argv)
    start_storage_command(args)  # before any receipt is read

    from mmirage_beam.config import load_config
    from mmirage_beam.ui.data import Source, config_at_state
    from mmirage_beam.ui.server import Dashboard, DashboardServer, new_token

    sources = [Source(i, p, load_config(p)) for i, p in enumerate(args.config)]
    for state in args.state:
        first = sources[0]
        here = config_at_state(
            first.config, os.path.abspath(state) if "://" not in state else state
        )
        sources.append(Source(len(sources), first.path, here, state))
    token = new_token()
    app = Dashboard(sources, token, lookup=not args.no_lookup, refresh_secs=args.refresh)
    try:
        server = DashboardServer(app, args.port)
    except OSError as exc:
        print(f"mmirage ui: cannot listen on 127.0.0.1:{args.port}: {exc}", file=sys.stderr)
        return 2
    for s in sources:
        print(f"mmirage ui: config #{s.index} {s.label} ({s.provider}; state {s.base})")
    print(f"mmirage ui: serving {server.url}/ (127.0.0.1 only; Ctrl-C stops)")
    print(f"mmirage ui: actions (cancel, resubmit) need this token: {token}")
    print(f"mmirage ui: or open {server.url}/#token={token}", flush=True)
    try:
        server.serve_forever()  # Werkzeug's returns on Ctrl-C (KeyboardInterrupt)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    print("\nmmirage ui: stopped")
    return 0


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
