"""One command object per verb: what ``mmirage run``, ``merge``, ``resubmit``,
``cancel``, ``check`` and ``runs`` do once their flags are parsed.

A driver in ``pipelines/`` maps its argv onto one command and returns its exit status;
``mmirage run --wait`` (:mod:`mmirage_beam.cycle.loop`) builds the same commands from its
state and reads what happened from the typed outcome they return, never by rebuilding an
argv or reading a record back from disk. Each command is a frozen dataclass of its
inputs; those that run a Beam job have ``run(beam_args, verbose, ...)``, whose steps are
the ``run.merge_plans`` and ``run.plans`` functions, which print nothing themselves;
``CancelCommand`` (no job) has ``plan()`` then ``cancel(planned)``, so the driver asks
its question between them; ``CheckCommand`` has ``start()``, ``look()``, ``finish()`` and
``notify()``, so the driver prints the table between them; ``RunsCommand`` has ``run()``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from mmirage_beam.run.plans import Message

__all__ = ["say", "show"]


def say(messages: Sequence[Message]) -> None:
    """Print a plan's messages (``run.plans.Message``) on stderr, in order."""
    for message in messages:
        print(message.text, file=sys.stderr)


def show(lines: Sequence[str]) -> None:
    """Print a plan's or a report's lines on stdout, in order."""
    for line in lines:
        print(line)
