"""Receipt discovery moved to :mod:`mmirage_beam.run.discovery` (merge, resubmit, cancel
and runs read a run's receipts too); its public names stay importable from here."""

from mmirage_beam.run.discovery import *  # noqa: F401, F403
from mmirage_beam.run.discovery import __all__  # noqa: F401
