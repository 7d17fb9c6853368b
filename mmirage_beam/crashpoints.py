"""A test hook: kill this process at a named write or create step.

``MMIRAGE_CRASH_AT=<step>:<n>`` makes the ``n``-th (1-based, default 1) time this
process reaches ``<step>`` end it with SIGKILL (nothing is flushed, no ``finally`` runs),
as a power cut or ``kill -9`` would. Unset (always, outside the crash tests), a step
costs one dictionary lookup. Steps:

- ``tmp_written``: a durable write's temporary file is written, not yet renamed;
- ``intent_written``: a chunk's intent is durable, the provider not yet called;
- ``batch_created``: the provider accepted the batch, its receipt is not yet written;
- ``receipt_written``: the receipt part is durable, the intent not yet removed;
- ``consolidated``: a receipt file was rewritten from its parts, the parts not yet removed;
- ``adopted``: a resume wrote an adopted batch's receipt, its intent not yet removed;
- ``publishing``: a placeholder rows file is about to be moved into ``output_dir``
  (every batch is receipted; the submitted marker is written);
- ``moved_copied``: a move across filesystems published its copy, the source not yet
  deleted (:func:`mmirage_beam.io.fs.move_file`);
- ``finishing``: the launcher consolidated the receipts, the run record is not yet
  marked finished.

Used by ``tests/crash`` and ``benchmarks/crash_suite.py``.
"""

from __future__ import annotations

import os
import signal
import threading

_SEEN: dict[str, int] = {}
_LOCK = threading.Lock()


def crash_point(step: str) -> None:
    """SIGKILL this process if ``MMIRAGE_CRASH_AT`` names this step and occurrence."""
    spec = os.environ.get("MMIRAGE_CRASH_AT")
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != step:
        return
    with _LOCK:
        _SEEN[step] = _SEEN.get(step, 0) + 1
        hit = _SEEN[step] == int(nth or 1)
    if hit:
        os.kill(os.getpid(), signal.SIGKILL)
