"""A test hook: kill this process at a named write or create step.

``MMIRAGE_CRASH_AT=<step>:<n>`` (several: ``<step>:<n>,<step>:<n>``) makes the
``n``-th (1-based, default 1) time this process reaches ``<step>`` end it with SIGKILL
(nothing is flushed, no ``finally`` runs), as a power cut or ``kill -9`` would. Unset
(always, outside the crash tests), a step costs one dictionary lookup. Steps:

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
  marked finished;
- ``merge_joined``: merge wrote one range partition's joined files (a worker step).

With ``MMIRAGE_CRASH_ONCE=<path>`` as well, only the first process to reach the step
dies: it creates ``<path>.<step>`` (exclusively, holding its pid and its parent's) just
before killing itself, and any process that finds the file there carries on. The SDK
workers of a portable runner inherit one environment from their worker pool, so without
it a worker restarted for a retried bundle, or the workers of the resumed run, would die
at the same step again.

With ``MMIRAGE_CRASH_KILL=group``, the SIGKILL goes to this process's whole process
group instead: on a Flink cluster started by ``mmirage cluster up`` each TaskManager
leads its own group, so an SDK worker at the step takes down its TaskManager JVM and
every sibling worker with it, as a TaskManager host that dies would.

Used by ``tests/crash``, ``tests/engines/test_engines.py`` and ``benchmarks/crash_suite.py``.
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
    nth = None
    for item in spec.split(","):
        name, _, n = item.strip().partition(":")
        if name == step:
            nth = int(n or 1)
    if nth is None:
        return
    with _LOCK:
        _SEEN[step] = _SEEN.get(step, 0) + 1
        hit = _SEEN[step] == nth
    if not hit:
        return
    once = os.environ.get("MMIRAGE_CRASH_ONCE")
    if once:
        try:
            fd = os.open(f"{once}.{step}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return  # another process already died here
        os.write(fd, f"{os.getpid()} {os.getppid()}\n".encode())  # who died, its parent
        os.close(fd)
    if os.environ.get("MMIRAGE_CRASH_KILL") == "group":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
