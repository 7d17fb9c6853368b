"""``mmirage run --wait``: the whole cycle, submit -> follow -> merge -> re-send the
retryable failures -> merge, resumable after an interrupt.

- :mod:`~mmirage_beam.cycle.flags`: the ``--wait`` flags and when a run wants the cycle.
- :mod:`~mmirage_beam.cycle.state`: the cycle's durable state file and its phases.
- :mod:`~mmirage_beam.cycle.loop`: :func:`run_cycle`, over the command objects of
  :mod:`mmirage_beam.commands` (the submission handed in, merge and resubmit built).

May import: ``run/``, ``check/``, ``launch/``, ``costs/``, ``config/``, ``progress/``.
Never ``pipelines/``; imported by ``pipelines/`` only.
"""
