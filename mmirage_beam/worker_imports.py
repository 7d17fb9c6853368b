"""Import mmirage-beam whole, once, in every Beam SDK worker before it runs a bundle.

Why: a portable SDK harness (Flink, Spark, Prism, Dataflow) decodes and unpickles the
pipeline's DoFns and elements in several threads at once, and each unpickled reference
imports its module. Python's import locks are per module and a package's ``__init__``
imports its submodules, so two threads that enter one package by two different modules
at the same moment can each hold a lock the other needs. Python then breaks the
deadlock by handing one of them a half-initialized module (``ImportError: cannot import
name 'resolve_credentials' from 'mmirage_beam.providers.base'``) or raising
``_DeadlockError``; the bundle fails. It was seen on a Flink TaskManager's worker
(``Batches/Map(decode)`` importing ``mmirage_beam.run.selection`` while another thread
imported ``mmirage_beam.providers.base``) and reproduced with two threads and a delay.

The cure is Beam's own start-up hook: every module named in the ``--beam_plugins``
pipeline option is imported by ``sdk_worker_main`` in one thread before the harness
starts (``apache_beam/runners/worker/sdk_worker_main.py``, ``_import_beam_plugins``).
This module is that entry: importing it imports every runtime module of the package,
so a worker's later imports find them all loaded. :func:`import_on_workers`, called in
the ``expand`` of each public PTransform, adds it to the pipeline's options, so a
pipeline that composes those transforms gets it too.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
from typing import Any

from apache_beam.options.pipeline_options import SetupOptions

import mmirage_beam

_LOG = logging.getLogger(__name__)

#: the ``--beam_plugins`` entry (a module path: importing it is the whole effect)
WORKER_IMPORTS = __name__

#: wings that never run in a worker: the fake provider, the engine launcher and the
#: dashboard (``mmirage ui``)
_NOT_ON_WORKERS = ("mmirage_beam.testing", "mmirage_beam.engines", "mmirage_beam.ui")

#: nor do the fakes that live in their provider's folder (``providers/<name>/fake.py``,
#: ``fake_bodies.py``...): they serve the fake provider (werkzeug), never a worker
_FAKE_MODULE_PREFIX = "fake"


def runtime_modules() -> list[str]:
    """The dotted names of mmirage-beam's modules that a worker may import (every module
    of the package but the :data:`_NOT_ON_WORKERS` wings and the providers' fakes), in a
    fixed order.

    Returns:
        module names, sorted.
    """
    names: list[str] = []

    # pkgutil.walk_packages imports every package it descends into, the excluded wings
    # too (the fake provider and its HTTP server: most of this module's import time);
    # this walk descends by folder and never into them, and imports nothing.
    def walk(paths: list[str], prefix: str) -> None:
        for info in pkgutil.iter_modules(paths, prefix):
            last = info.name.rsplit(".", 1)[-1]
            if info.name.startswith(_NOT_ON_WORKERS) or last.startswith(_FAKE_MODULE_PREFIX):
                continue
            names.append(info.name)
            if info.ispkg:
                folder = os.path.join(info.module_finder.path, last)
                walk([folder], info.name + ".")

    walk(list(mmirage_beam.__path__), "mmirage_beam.")
    return sorted(names)


def import_package() -> list[str]:
    """Import every module of :func:`runtime_modules` in this thread.

    A module whose optional dependency is missing (an extra not installed on the worker)
    is skipped: the worker then imports it as before, or never needs it.

    Returns:
        the names that could not be imported (logged at DEBUG).
    """
    skipped = []
    for name in runtime_modules():
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional extra missing on this worker
            _LOG.debug("worker imports: %s not imported: %s", name, exc)
            skipped.append(name)
    return skipped


def import_on_workers(pvalueish: Any) -> None:
    """Have every SDK worker of ``pvalueish``'s pipeline import mmirage-beam whole at
    start-up: add :data:`WORKER_IMPORTS` to its ``--beam_plugins`` (once), and import it
    here too, for the runners whose workers are threads of this process.

    Args:
        pvalueish: a ``PCollection``, ``PBegin``, or a dict/tuple of them, given to an
            ``expand``.
    """
    pipeline = getattr(pvalueish, "pipeline", None)
    if pipeline is None and isinstance(pvalueish, dict):
        pipeline = next((v.pipeline for v in pvalueish.values() if v is not None), None)
    if pipeline is None and isinstance(pvalueish, (tuple, list)):
        pipeline = next((v.pipeline for v in pvalueish if v is not None), None)
    if pipeline is None:
        return
    setup = pipeline.options.view_as(SetupOptions)
    plugins = list(setup.beam_plugins or [])
    if WORKER_IMPORTS not in plugins:
        setup.beam_plugins = [*plugins, WORKER_IMPORTS]


import_package()  # importing this module is the plugin's whole effect (see above)
