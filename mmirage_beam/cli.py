"""The ``mmirage`` command: ``run``, ``fake-provider`` (and the collect-side commands).

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
  demo           the whole lifecycle on the bundled GSM8K sample against the fake provider
  fake-provider  serve every built-in provider's batch API locally (the embedded fake)

Run 'mmirage <command> --help' for a command's options."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``mmirage`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
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
    if command == "demo":
        from mmirage_beam.demo import main as demo_main

        return demo_main(rest)
    if command == "fake-provider":
        from mmirage_beam.testing.fake_provider import main as fake_main

        return fake_main(rest)
    print(f"mmirage: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
