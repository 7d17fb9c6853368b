"""Progress of long work, as a person watching a terminal sees it.

- :mod:`~mmirage_beam.progress.text`: the words (counts, rates, ETAs, tokens and cost as
  one line); pure functions, no Beam.
- :mod:`~mmirage_beam.progress.bar`: the live ``rich`` bar drawn on a terminal.
- :mod:`~mmirage_beam.progress.counters`: each process's counters, the reporting thread
  (log lines through the ``mmirage_beam.progress`` logger), :class:`CountProgress` for a
  pipeline, and the launcher's ``begin`` / ``finish`` / ``expect``.

May import: the shared records and errors, ``costs/``. Imported by the transforms, the
readers, ``check/``, ``cycle/`` and the launchers; it imports none of them.
"""
