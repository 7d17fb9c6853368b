"""Batch-status lookups moved to :mod:`mmirage_beam.run.lookup` (merge, cancel and runs
look batches up too); its public names stay importable from here."""

from mmirage_beam.run.lookup import *  # noqa: F401, F403
from mmirage_beam.run.lookup import __all__  # noqa: F401
