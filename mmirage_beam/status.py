"""Provider status of submitted batches: the public names of :mod:`mmirage_beam.check`,
importable from here as before (``from mmirage_beam import status``).

The logic lives in one module per role: :mod:`mmirage_beam.run.discovery` (receipts),
:mod:`~mmirage_beam.run.lookup` (lookups), :mod:`~mmirage_beam.check.report`,
:mod:`~mmirage_beam.check.advice` and :mod:`~mmirage_beam.check.watch`.
"""

from mmirage_beam.check import *  # noqa: F401, F403
from mmirage_beam.check import __all__  # noqa: F401
