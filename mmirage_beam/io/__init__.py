"""Beam I/O for mmirage-beam: reading the configured datasets (see :mod:`.readers`).

The names below load :mod:`.readers` (and so Beam) on first use, not when a submodule
such as :mod:`.filesystems` or :mod:`.fs` is imported by a command that builds no
pipeline.
"""

from typing import Any

__all__ = [
    "DEFAULT_DESIRED_SPLIT_BYTES",
    "ReadDatasets",
    "ReadDatasetsResult",
    "to_json_value",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mmirage_beam.io import readers

        return getattr(readers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
