"""``mmirage run --wait``: the whole cycle, submit -> follow -> merge -> re-send the
retryable failures -> merge, resumable after an interrupt.

- :mod:`~mmirage_beam.cycle.flags`: the ``--wait`` flags and when a run wants the cycle.
- :mod:`~mmirage_beam.cycle.state`: the cycle's durable state file and its phases.
- :mod:`~mmirage_beam.cycle.loop`: :func:`run_cycle`, over the drivers it is handed.

May import: ``run/``, ``check/``, ``costs/``, ``config/``, ``progress/``. Never
``pipelines/`` (the drivers are handed in); imported by ``pipelines/`` only.
"""
