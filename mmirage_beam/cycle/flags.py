"""The ``--wait`` flags of ``mmirage run``, and whether a run does the whole cycle.

:func:`add_cycle_arguments` adds them to the driver's parser (``mmirage run --help``
imports this module: it stays light); :func:`cycle_wanted` checks them against the
config. :class:`mmirage_beam.cycle.loop.CycleCommand` drives the cycle.
"""

from __future__ import annotations

import argparse
from typing import Any

from mmirage_beam.config.pipeline_config import DEFAULT_RETRIES, PipelineConfig
from mmirage_beam.errors import ConfigError

__all__ = [
    "DEFAULT_POLL_INTERVAL_SECS",
    "FIRST_POLL_INTERVAL_SECS",
    "add_cycle_arguments",
    "cycle_wanted",
]

#: seconds between status polls while waiting (``--poll-interval``).
DEFAULT_POLL_INTERVAL_SECS = 60.0
#: without ``--poll-interval``, the first wait after the first poll, in seconds; each
#: next wait doubles up to :data:`DEFAULT_POLL_INTERVAL_SECS` (5, 10, 20, 40, 60, 60 ...),
#: so a run that ends in seconds is merged in seconds.
FIRST_POLL_INTERVAL_SECS = 5.0


def add_cycle_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``--wait`` flags of ``mmirage run`` (defaults None: "not given")."""
    g = ap.add_argument_group("the whole cycle (--wait)")
    g.add_argument(
        "--wait",
        action="store_true",
        help="after submitting, follow the batches, merge into --output-path, re-send the "
        "retryable failures (at most --retries times) and merge again; one summary at the "
        "end; exit 0 only when every row succeeded. Resume an interrupted cycle with "
        "--wait --run-id ID (same as execution_params.merge / retry)",
    )
    g.add_argument(
        "--output-path",
        metavar="OUT",
        default=None,
        help="merged JSONL file of --wait (default: execution_params.merge_output_path, "
        "else merged.<run_id>.jsonl beside the receipts)",
    )
    g.add_argument(
        "--retries",
        type=int,
        default=None,
        metavar="N",
        help="re-send the retryable failures (expired, cancelled, rate-limited, server "
        "errors, malformed result lines) at most N times (default: execution_params.retry; "
        f"retry: true is {DEFAULT_RETRIES}; 0 without it)",
    )
    g.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        metavar="SECS",
        help=f"seconds between status polls (default: {FIRST_POLL_INTERVAL_SECS:g}, doubling "
        f"each poll up to {DEFAULT_POLL_INTERVAL_SECS:g})",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECS",
        help="stop waiting after SECS seconds in all (the batches keep running; exit 1 "
        "with the command that continues)",
    )


def cycle_wanted(args: Any, config: PipelineConfig) -> bool:
    """Whether ``mmirage run`` does the whole cycle: ``--wait``, or
    ``execution_params.merge`` / ``retry`` in the config (not for a dry run).

    ``args`` has the flags as attributes (``wait``, ``output_path``, ``retries``,
    ``poll_interval``, ``timeout``, ``export_prompts``; None: not given): the
    :class:`~mmirage_beam.cycle.loop.CycleCommand`, or the parsed command line.

    Raises:
        ConfigError: a ``--wait`` flag without ``--wait`` (and without the config keys),
            ``--wait`` with ``--export-prompts``, or a negative/zero number.
    """
    given = [
        flag
        for flag, value in (
            ("--output-path", args.output_path),
            ("--retries", args.retries),
            ("--poll-interval", args.poll_interval),
            ("--timeout", args.timeout),
        )
        if value is not None
    ]
    if args.export_prompts is not None:
        if args.wait or given:
            flag = "--wait" if args.wait else given[0]
            raise ConfigError(flag, "a dry run (--export-prompts) submits nothing to wait for")
        return False
    wanted = bool(args.wait or config.execution.cycle)
    if given and not wanted:
        raise ConfigError(
            given[0], "needs --wait (or execution_params.merge / retry in the config)"
        )
    if args.retries is not None and args.retries < 0:
        raise ConfigError("--retries", f"must be >= 0, got {args.retries}")
    if args.poll_interval is not None and not args.poll_interval > 0:
        raise ConfigError("--poll-interval", f"must be > 0 seconds, got {args.poll_interval}")
    if args.timeout is not None and args.timeout < 0:
        raise ConfigError("--timeout", f"must be >= 0 seconds, got {args.timeout}")
    return wanted
