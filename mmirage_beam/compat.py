"""Import paths that moved, kept working in one place.

Each old module path below still imports, as the module (or, for
``mmirage_beam.pipeline``, the names) that now lives elsewhere; nothing in this package
imports an old path. :func:`install` (run when ``mmirage_beam`` is imported) puts a
finder on ``sys.meta_path`` that answers only for these names, importing the new home
on first use, so keeping them costs no import time.

Why each stays:

- ``mmirage_beam.config.batch_provider``: where the seed document (MMIRAGE's batch API
  guide) tells plugin authors to import ``BatchProviderConfig`` from
  (``mmirage.config.batch_provider``); now :mod:`mmirage_beam.providers.config`.
- ``mmirage_beam.yaml_transforms``: the ``constructor:`` of Beam YAML files written
  before the ``beam_yaml/`` wing; now :mod:`mmirage_beam.beam_yaml.transforms`.
- ``mmirage_beam.pipeline``: the PTransforms' old module for Beam users
  (``from mmirage_beam.pipeline import SubmitRows``); the names are importable from
  ``mmirage_beam`` itself, and live in :mod:`mmirage_beam.transforms.submit_rows` and
  :mod:`mmirage_beam.transforms.merge_rows`.
- ``mmirage_beam.status``, ``mmirage_beam.check.discovery`` and
  ``mmirage_beam.check.lookup``: earlier homes of :mod:`mmirage_beam.check`,
  :mod:`mmirage_beam.run.discovery` and :mod:`mmirage_beam.run.lookup`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Optional, Sequence

#: old module path -> the module that is its new home
MODULE_ALIASES = {
    "mmirage_beam.config.batch_provider": "mmirage_beam.providers.config",
    "mmirage_beam.yaml_transforms": "mmirage_beam.beam_yaml.transforms",
    "mmirage_beam.status": "mmirage_beam.check",
    "mmirage_beam.check.discovery": "mmirage_beam.run.discovery",
    "mmirage_beam.check.lookup": "mmirage_beam.run.lookup",
}

#: ``mmirage_beam.pipeline``'s names -> the module that defines each
PIPELINE_NAMES = {
    "SubmitRows": "mmirage_beam.transforms.submit_rows",
    "SubmitPlan": "mmirage_beam.transforms.submit_rows",
    "SubmitRowsResult": "mmirage_beam.transforms.submit_rows",
    "build_submit_pipeline": "mmirage_beam.transforms.submit_rows",
    "default_chunking_parallelism": "mmirage_beam.transforms.submit_rows",
    "invalid_rows_path": "mmirage_beam.transforms.submit_rows",
    "stop_marker_path": "mmirage_beam.transforms.submit_rows",
    "MergeRows": "mmirage_beam.transforms.merge_rows",
    "MergePlan": "mmirage_beam.transforms.merge_rows",
    "build_merge_pipeline": "mmirage_beam.transforms.merge_rows",
    "build_failures_pipeline": "mmirage_beam.transforms.merge_rows",
    "NOT_RESUBMITTABLE": "mmirage_beam.results",
    "resubmittable": "mmirage_beam.results",
    "errors_path_for": "mmirage_beam.settings",
}
PIPELINE_MODULE = "mmirage_beam.pipeline"


def _pipeline_module() -> types.ModuleType:
    """``mmirage_beam.pipeline``: a module whose names load from their homes on first
    use (PEP 562), as the package's own public names do."""
    module = types.ModuleType(PIPELINE_MODULE, "The two pipelines' PTransforms (moved).")
    module.__all__ = sorted(PIPELINE_NAMES)

    def __getattr__(name: str) -> Any:
        home = PIPELINE_NAMES.get(name)
        if home is None:
            raise AttributeError(f"module {PIPELINE_MODULE!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(module, name, value)
        return value

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths only; every other import passes by untouched."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname in MODULE_ALIASES or fullname == PIPELINE_MODULE:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if spec.name == PIPELINE_MODULE:
            return _pipeline_module()
        return importlib.import_module(MODULE_ALIASES[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the new home ran when it was imported."""


_FINDER = _MovedModules()


def install() -> None:
    """Put the finder of the old paths on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
