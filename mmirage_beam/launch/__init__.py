"""The drivers' shared launch: what every ``pipelines/`` driver does around its command.

- :mod:`~mmirage_beam.launch.logs`: logging on stderr, one line per failure unless ``-v``.
- :mod:`~mmirage_beam.launch.interrupts`: :func:`guarded` (errors -> a line and an exit
  status; Ctrl-C -> 130 and how to continue).
- :mod:`~mmirage_beam.launch.failures`: storage failures and lost workers in one line.
- :mod:`~mmirage_beam.launch.flags`: Beam's flags checked, turned into options, and the
  filesystem flags of the commands that run no pipeline.
- :mod:`~mmirage_beam.launch.jobs`: :func:`run_pipeline` (stop, cancel, counters).
- :mod:`~mmirage_beam.launch.drivers`: the preamble every driver shares (its parser,
  ``-v``, the parse, logging and the flags checked or handed to Beam).

Importing it loads neither Beam nor a provider SDK: each module imports Beam inside
the functions that need it, so ``--help`` and a bad flag answer at once. May import the
shared records, errors and ``io/``; imported by ``pipelines/`` and ``run/reports``.
"""
