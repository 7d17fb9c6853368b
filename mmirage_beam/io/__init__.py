"""Beam I/O for mmirage-beam: reading the configured datasets (see :mod:`.readers`)."""

from mmirage_beam.io.readers import (
    DEFAULT_DESIRED_SPLIT_BYTES,
    ReadDatasets,
    ReadDatasetsResult,
    to_json_value,
)

__all__ = [
    "DEFAULT_DESIRED_SPLIT_BYTES",
    "ReadDatasets",
    "ReadDatasetsResult",
    "to_json_value",
]
