"""One command object per verb that runs a Beam job: what ``mmirage merge`` and
``mmirage resubmit`` do once their flags are parsed.

A driver in ``pipelines/`` maps its argv onto one command and returns its exit status;
``mmirage run --wait`` (:mod:`mmirage_beam.cycle.loop`) builds the same commands from its
state and reads what happened from the typed outcome they return, never by rebuilding an
argv or reading a record back from disk. Each command is a frozen dataclass of its
inputs, with ``run(beam_args, verbose, again)``; the steps it takes are the
``run.merge_plans`` and ``run.plans`` functions, which print nothing themselves.
"""
