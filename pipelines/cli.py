"""The ``mmirage`` command (``python -m pipelines.cli``): ``run``, ``check``, ``merge``,
``resubmit``, ``cancel``, ``runs``, ``ui``, ``demo``, ``fake-provider`` and ``cluster``.

Each subcommand delegates to its driver (``pipelines.submit`` for ``run``), so
``mmirage run ...`` and ``python -m pipelines.submit ...`` are the same program.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

USAGE = """usage: mmirage <command> [options]

commands:
  run            render and submit batches (or --export-prompts for a dry run)
  check          report the provider status of a run's batches (--watch to follow)
  merge          fetch results and join them onto the source rows, in order
  resubmit       re-send a run's failed requests as a new, linked run
  cancel         cancel a run's unfinished batches at the provider (asks first; --yes)
  runs           list the runs under a config's state: state, batches, failures, cost
  ui             a local web dashboard of the runs, one run's batches and failures, spend
  demo           the whole lifecycle on the bundled GSM8K sample against the fake provider
  fake-provider  serve every built-in provider's batch API locally (the embedded fake)
  cluster        start/stop a local Flink cluster or Prism (up prints the runner flags)

Run 'mmirage <command> --help' for a command's options; 'mmirage --version' for the
installed version."""


#: the commands of USAGE, for "did you mean" on a typo
COMMANDS = (
    "run",
    "check",
    "merge",
    "resubmit",
    "cancel",
    "runs",
    "ui",
    "demo",
    "fake-provider",
    "cluster",
)


def version() -> str:
    """The installed distribution's version (package metadata), or a note when the code
    runs from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("mmirage-beam")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``mmirage`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"mmirage {version()}")
        return 0
    command, rest = args[0], args[1:]
    if command == "run":
        from pipelines.submit import main as run_main

        return run_main(rest)
    if command == "check":
        from pipelines.check import main as check_main

        return check_main(rest)
    if command == "merge":
        from pipelines.merge import main as merge_main

        return merge_main(rest)
    if command == "resubmit":
        from pipelines.resubmit import main as resubmit_main

        return resubmit_main(rest)
    if command == "cancel":
        from pipelines.cancel import main as cancel_main

        return cancel_main(rest)
    if command == "runs":
        from pipelines.runs import main as runs_main

        return runs_main(rest)
    if command == "ui":
        from pipelines.ui import main as ui_main

        return ui_main(rest)
    if command == "demo":
        from pipelines.demo import main as demo_main

        return demo_main(rest)
    if command == "fake-provider":
        from mmirage_beam.testing.fake_provider import main as fake_main

        return fake_main(rest)
    if command == "cluster":
        from pipelines.cluster import main as cluster_main

        return cluster_main(rest)
    import difflib

    close = difflib.get_close_matches(command, COMMANDS, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    print(f"mmirage: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
