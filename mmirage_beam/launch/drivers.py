"""The preamble every ``pipelines/`` driver shares: its parser, ``-v``, the parse, and
what must happen before the command touches anything (logging; the Beam flags checked,
or the filesystem options handed to Beam).

Two kinds of driver:

- a **pipeline driver** (``run``, ``merge``, ``resubmit``) takes every Beam pipeline
  option: :func:`parse_pipeline_args` then :func:`start_pipeline_driver`;
- a **storage command** (``check``, ``cancel``, ``runs``) runs no pipeline and takes only
  Beam's filesystem options: :func:`parse_storage_args` then :func:`start_storage_command`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch.flags import (
    FILESYSTEM_FLAGS_HELP,
    check_beam_args,
    check_own_flag_typos,
    own_flags,
    parse_filesystem_args,
)
from mmirage_beam.launch.logs import configure_logging


def driver_parser(
    prog: str, description: str, storage_command: bool = False
) -> argparse.ArgumentParser:
    """A driver's parser: no abbreviated flags (a prefix of a flag must never pass for
    the flag); a storage command's epilog says which Beam flags it takes."""
    return argparse.ArgumentParser(
        allow_abbrev=False,
        prog=prog,
        description=description,
        epilog=FILESYSTEM_FLAGS_HELP if storage_command else None,
    )


def _add_verbose(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def parse_pipeline_args(
    ap: argparse.ArgumentParser, argv: Optional[Sequence[str]]
) -> tuple[argparse.Namespace, list[str]]:
    """``-v`` added, ``argv`` parsed: ``(args, beam_args)``, the flags the parser does
    not know left for Beam; ``args.own_flags`` lists the parser's own (for the "did you
    mean" of :func:`start_pipeline_driver`).

    Raises:
        ConfigError: (exit 2) a flag close to one of the parser's own but not one, even
            when argparse would first miss a required flag
            (:func:`~mmirage_beam.launch.flags.check_own_flag_typos`).
        SystemExit: (status 2) on other bad flags, as argparse does.
    """
    _add_verbose(ap)
    flags = own_flags(ap)
    check_own_flag_typos(sys.argv[1:] if argv is None else argv, flags)
    args, beam_args = ap.parse_known_args(argv)
    args.own_flags = flags
    return args, beam_args


def start_pipeline_driver(args: argparse.Namespace, beam_args: Sequence[str]) -> None:
    """Logging set up (``-v``), then every argument checked: the tool's own or a Beam
    pipeline option, before anything is read or run.

    Raises:
        ConfigError: an unknown flag, a storage secret as a flag, an unknown runner.
    """
    configure_logging(args.verbose)
    check_beam_args(beam_args, args.own_flags)


def parse_storage_args(
    ap: argparse.ArgumentParser, argv: Optional[Sequence[str]]
) -> argparse.Namespace:
    """``-v`` added, ``argv`` parsed; of Beam's options only the filesystem ones are
    accepted, in ``args.filesystem_flags``.

    Raises:
        SystemExit: (status 2) on any other flag, naming the accepted ones.
        ConfigError: a flag carrying a storage secret.
    """
    _add_verbose(ap)
    args, args.filesystem_flags = parse_filesystem_args(ap, argv)
    return args


def start_storage_command(args: argparse.Namespace) -> None:
    """Logging set up (``-v``), then the filesystem flags handed to Beam's
    ``FileSystems``, before any receipt is read: at once when there are any, else when a
    path first needs Beam (:func:`mmirage_beam.io.filesystems.defer_options`), so a
    command over a local state never loads Beam."""
    from mmirage_beam.io.filesystems import defer_options

    configure_logging(args.verbose)
    defer_options(args.filesystem_flags)
