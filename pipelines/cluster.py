"""``mmirage cluster``: a real engine on this machine, to rehearse a distributed run.

    FLAGS=$(mmirage cluster up --engine flink --taskmanagers 2 --dir /tmp/flink | tail -1)
    mmirage run --config C $FLAGS
    mmirage merge --config C --output-path O $FLAGS
    mmirage cluster down --dir /tmp/flink

``up`` fetches what the engine needs on first use (Flink from PyPI, Beam's Flink job
server from Maven Central, Prism with ``go install``; cached, see
``mmirage_beam/engines/provision.py``), starts it, waits until it is ready and prints,
as the last line of its standard output, the runner flags for ``mmirage run``,
``merge`` and ``resubmit``. Progress goes to stderr. The SDK workers inherit the
environment ``up`` was started with: export the provider keys first.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

ENGINES = ("flink", "prism", "spark")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mmirage cluster",
        description="Start, inspect or stop a local Flink or Spark cluster, or Prism.",
    )
    sub = p.add_subparsers(dest="action", required=True, metavar="{up,down,status,fetch}")
    up = sub.add_parser("up", help="start an engine; prints the runner flags last")
    up.add_argument("--engine", choices=ENGINES, default="flink")
    up.add_argument("--dir", required=True, help="the cluster's folder (state, logs)")
    up.add_argument(
        "--taskmanagers",
        "--workers",
        dest="taskmanagers",
        type=int,
        default=2,
        help="Flink TaskManager JVMs, or Spark workers (default 2)",
    )
    up.add_argument(
        "--slots", type=int, default=1, help="task slots per TaskManager (Spark: cores per worker)"
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    down = sub.add_parser("down", help="stop the engine started in --dir, by PID")
    down.add_argument("--dir", required=True)
    status = sub.add_parser("status", help="the engine in --dir: processes and flags")
    status.add_argument("--dir", required=True)
    fetch = sub.add_parser("fetch", help="fetch an engine into the cache, start nothing")
    fetch.add_argument("--engine", choices=ENGINES, default="flink")
    return p


def _say(line: str) -> None:
    print(f"mmirage cluster: {line}", file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``mmirage cluster``; returns the exit status (0 ok, 1 an engine
    error, printed as one message with the log tails, 2 bad flags, 130 interrupted:
    whatever ``up`` had started is stopped first)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.action == "up" and (args.taskmanagers < 1 or args.slots < 1):
        parser.error("--taskmanagers (--workers) and --slots must be at least 1")
    from mmirage_beam.engines.processes import EngineError

    try:
        return _ACTIONS[args.action](args)
    except EngineError as exc:
        print(f"mmirage cluster {args.action}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        done = "; every process it had started is stopped" if args.action == "up" else ""
        print(f"mmirage cluster {args.action}: interrupted{done}", file=sys.stderr)
        return 130


def _up(args: argparse.Namespace) -> int:
    if args.engine == "flink":
        from mmirage_beam.engines.flink import start_flink

        state = start_flink(
            Path(args.dir),
            taskmanagers=args.taskmanagers,
            slots=args.slots,
            timeout=args.timeout,
            say=_say,
        )
        what = (
            f"Flink {state.versions['flink']}: JobManager (REST http://localhost:"
            f"{state.ports['rest']}), {args.taskmanagers} TaskManager(s) x {args.slots} "
            f"slot(s), Beam Flink job server {state.versions['beam_job_server']} on "
            f"localhost:{state.ports['job']}"
        )
    elif args.engine == "spark":
        from mmirage_beam.engines.spark import start_spark

        state = start_spark(
            Path(args.dir),
            workers=args.taskmanagers,
            cores=args.slots,
            timeout=args.timeout,
            say=_say,
        )
        what = (
            f"Spark {state.versions.get('spark')}: master, {args.taskmanagers} worker(s) x "
            f"{args.slots} core(s), Beam Spark job server on localhost:{state.ports['job']}"
        )
    else:
        from mmirage_beam.engines.prism import start_prism

        state = start_prism(Path(args.dir), timeout=args.timeout, say=_say)
        what = f"Prism {state.versions['prism']} on localhost:{state.ports['job']}"
    print(f"{what}; logs in {state.dir}/logs; stop it with: mmirage cluster down --dir {state.dir}")
    print("runner flags (pass them to mmirage run, merge and resubmit):")
    print(state.flags_line())
    return 0


def _down(args: argparse.Namespace) -> int:
    from mmirage_beam.engines.cluster import stop_cluster

    stopped = stop_cluster(Path(args.dir))
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from mmirage_beam.engines.cluster import ClusterState

    state = ClusterState.load(Path(args.dir))
    print(f"engine: {state.engine} ({', '.join(f'{k} {v}' for k, v in state.versions.items())})")
    for d in state.daemons:
        print(f"  {d.name:<14} pid {d.pid:<8} {'running' if d.alive() else 'stopped'}  log {d.log}")
    print(state.flags_line())
    return 0 if all(d.alive() for d in state.daemons) else 1


def _fetch(args: argparse.Namespace) -> int:
    from mmirage_beam.engines import provision

    if args.engine == "flink":
        print(provision.flink_home(say=_say))
        print(provision.flink_job_server_classpath(say=_say))
    elif args.engine == "spark":
        print(provision.spark_home(say=_say))
        print(provision.spark_job_server_classpath(say=_say))
    else:
        print(provision.prism_binary(say=_say))
    return 0


_ACTIONS = {"up": _up, "down": _down, "status": _status, "fetch": _fetch}


if __name__ == "__main__":
    sys.exit(main())
