"""``mmirage ui``: a local, read-mostly web dashboard of the runs under one or more configs'
state and of their spend.

- :mod:`mmirage_beam.ui.views`: the JSON documents the views answer with, as ``TypedDict``.
- :mod:`mmirage_beam.ui.data`: the JSON views (runs, one run, spend), built from the same
  functions ``mmirage runs`` (:func:`mmirage_beam.run.listing.list_runs`), ``mmirage check``
  (:class:`mmirage_beam.run.lookup.BatchStatusChecker`) and the merge records
  (:class:`mmirage_beam.run.store.RunStore`) use; no second copy of the logic.
- :mod:`mmirage_beam.ui.server`: the Werkzeug app on 127.0.0.1: ``GET`` views need no
  token; ``POST`` actions (cancel, resubmit) need the per-launch token; a request whose
  ``Origin`` or ``Host`` is not the server's own is refused (403).
- ``static/``: one small page (HTML, CSS, plain JS; the charts are SVG drawn by hand),
  shipped in the wheel (``package_data``); nothing is fetched at run time.
"""
