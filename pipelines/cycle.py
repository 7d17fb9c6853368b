"""``mmirage run --wait``: the cycle of :mod:`mmirage_beam.cycle.loop` over this driver.

The cycle runs the merge and resubmit command objects itself
(:mod:`mmirage_beam.run.commands`); the submission is handed to it here, so the package
itself never imports ``pipelines``.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional, Sequence

from mmirage_beam.cycle.loop import Drivers
from mmirage_beam.cycle.loop import run_cycle as _run_cycle


def run_cycle(
    args: argparse.Namespace,
    beam_args: Sequence[str],
    submit: Callable[[Optional[str]], int],
) -> int:
    """:func:`mmirage_beam.cycle.loop.run_cycle` with ``submit`` (``submit(preset_run_id)``:
    the submission's exit status).

    Returns and raises as :func:`mmirage_beam.cycle.loop.run_cycle`.
    """
    return _run_cycle(args, beam_args, Drivers(submit))
