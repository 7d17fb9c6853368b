"""The two pipelines as PTransforms, for imports that name this module.

SubmitRows and :func:`build_submit_pipeline` live in
:mod:`mmirage_beam.transforms.submit_rows`; MergeRows, :func:`build_merge_pipeline` and
:func:`build_failures_pipeline` in :mod:`mmirage_beam.transforms.merge_rows`. Every name
stays importable from here (``from mmirage_beam.pipeline import SubmitRows``).
"""

from __future__ import annotations

from mmirage_beam.results import NOT_RESUBMITTABLE, resubmittable
from mmirage_beam.settings import errors_path_for
from mmirage_beam.transforms.merge_rows import (
    MergePlan,
    MergeRows,
    _held_receipt,
    build_failures_pipeline,
    build_merge_pipeline,
)
from mmirage_beam.transforms.submit_rows import (
    SubmitPlan,
    SubmitRows,
    SubmitRowsResult,
    build_submit_pipeline,
    default_chunking_parallelism,
    invalid_rows_path,
    stop_marker_path,
)

__all__ = [
    "NOT_RESUBMITTABLE",
    "MergePlan",
    "MergeRows",
    "SubmitPlan",
    "SubmitRows",
    "SubmitRowsResult",
    "build_failures_pipeline",
    "build_merge_pipeline",
    "build_submit_pipeline",
    "default_chunking_parallelism",
    "errors_path_for",
    "invalid_rows_path",
    "resubmittable",
    "stop_marker_path",
    "_held_receipt",
]
