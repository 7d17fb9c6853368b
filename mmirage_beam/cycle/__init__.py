"""``mmirage run --wait``: the whole cycle, submit -> follow -> merge -> re-send the
retryable failures -> merge, resumable after an interrupt.

- :mod:`~mmirage_beam.cycle.flags`: the ``--wait`` flags and when a run wants the cycle.
- :mod:`~mmirage_beam.cycle.state`: the cycle's durable state file and its phases.
- :mod:`~mmirage_beam.cycle.loop`: :class:`CycleCommand`, ``mmirage run``'s command: the
  submission (handed in) and, when wanted, the cycle over the command objects of
  :mod:`mmirage_beam.commands` (merge and resubmit built from the cycle's state).

May import: ``run/``, ``check/``, ``launch/``, ``costs/``, ``config/``, ``progress/``.
Never ``pipelines/``; imported by ``pipelines/`` only.
"""
