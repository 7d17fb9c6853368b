"""The one Beam metrics namespace of mmirage-beam.

Every counter and distribution the transforms report (rows read, requests, chunks,
bytes, tokens, failures) is in :data:`METRICS_NAMESPACE`, where the launchers read them
back (:func:`mmirage_beam.launch.jobs.metric_counters`).
"""

__all__ = ["METRICS_NAMESPACE"]

METRICS_NAMESPACE = "mmirage"
