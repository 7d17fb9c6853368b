"""mmirage-beam: provider batch-API pipelines (OpenAI, Anthropic, Gemini, Mistral) on
Apache Beam.

The public API, importable from here (``from mmirage_beam import ReadDatasets``); each
name is loaded from its module on first use, so importing this package (as every
submodule import does first) loads neither Beam nor a provider SDK:

- PTransforms you compose into your own pipelines (docs/ptransforms.md), in graph
  order: :class:`ReadDatasets`, :class:`ExtractInputs`, :class:`BuildRequests`,
  :class:`ChunkRequests`, :class:`SubmitChunks`, :class:`RenderPlaceholderRows`; the
  whole submit and merge stages: :class:`SubmitRows`, :class:`MergeRows`, and
  :func:`build_submit_pipeline` and :func:`build_merge_pipeline` for the whole submit
  and merge graphs; their settings, one frozen
  object per pipeline: :class:`SubmitSettings`, :class:`MergeSettings`.
- The config: :func:`load_config`, :func:`config_from_dict`, :class:`PipelineConfig`.
- The plugin contracts: :class:`BatchSubmissionAdapter`, :class:`BatchAdapterRegistry`,
  :class:`BatchProviderConfig`, :class:`BatchProviderConfigRegistry`.
- The records that flow between the transforms: :class:`SourceRow`, :class:`RowError`,
  :class:`BatchRequest`, :class:`Chunk`, :class:`ChunkRef`, and :func:`load_chunk`.
- The errors: :class:`MmirageError`, :class:`ConfigError`.
"""

from __future__ import annotations

import importlib
from typing import Any

from mmirage_beam import compat as _compat

__version__ = "0.1.0"

_compat.install()  # the import paths that moved still import (mmirage_beam/compat.py)

#: public name -> the module that defines it
_HOMES = {
    "ReadDatasets": "mmirage_beam.io.readers",
    "ExtractInputs": "mmirage_beam.transforms.build",
    "BuildRequests": "mmirage_beam.transforms.build",
    "ChunkRequests": "mmirage_beam.transforms.chunking",
    "load_chunk": "mmirage_beam.transforms.chunking",
    "SubmitChunks": "mmirage_beam.transforms.submit",
    "RenderPlaceholderRows": "mmirage_beam.transforms.rows",
    "SubmitRows": "mmirage_beam.transforms.submit_rows",
    "MergeRows": "mmirage_beam.transforms.merge_rows",
    "build_submit_pipeline": "mmirage_beam.transforms.submit_rows",
    "build_merge_pipeline": "mmirage_beam.transforms.merge_rows",
    "SubmitSettings": "mmirage_beam.settings",
    "MergeSettings": "mmirage_beam.settings",
    "load_config": "mmirage_beam.config.loader",
    "config_from_dict": "mmirage_beam.config.loader",
    "PipelineConfig": "mmirage_beam.config.loader",
    "BatchSubmissionAdapter": "mmirage_beam.providers.base",
    "BatchAdapterRegistry": "mmirage_beam.providers.base",
    "BatchProviderConfig": "mmirage_beam.providers.config",
    "BatchProviderConfigRegistry": "mmirage_beam.providers.config",
    "SourceRow": "mmirage_beam.records",
    "RowError": "mmirage_beam.records",
    "BatchRequest": "mmirage_beam.records",
    "Chunk": "mmirage_beam.records",
    "ChunkRef": "mmirage_beam.records",
    "MmirageError": "mmirage_beam.errors",
    "ConfigError": "mmirage_beam.errors",
}

__all__ = ["__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not part of the public API.
    """
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mmirage_beam' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
