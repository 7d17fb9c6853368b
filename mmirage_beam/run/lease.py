"""One process per run: an exclusive, refreshed lease on a run id.

A run (``mmirage run``, a resume of it) holds ``<base>.lease.<run_id>`` beside its
receipts while it lives. The file is one JSON object::

    {"run_id", "host", "pid", "started_at", "refreshed_at", "token"}

``started_at``/``refreshed_at`` are Unix seconds; ``token`` is random per holder.

Taking it:

- on the local disk (a plain path or ``file://``) the file is created with
  ``os.open(O_CREAT | O_EXCL)``: of two processes starting together exactly one
  succeeds;
- on an object store (``gs://``, ``s3://``... through Beam's ``FileSystems``, whose API
  has no create-if-absent), the lease is written when absent (or stale), then read back
  after ``settle_secs``; the writer whose token it reads holds it. Residual race: two
  writers whose writes are more than ``settle_secs`` apart *and* whose existence checks
  both came before either write (i.e. a check-to-write gap above ``settle_secs``, in
  practice a stalled process) can both believe they hold it; each refresh reads the
  lease back first, so the one that lost finds out within ``refresh_secs`` and its
  ``on_lost`` callback stops the run (no new batch is created).

A lease is *stale*, and taken over, when it was not refreshed for
``stale_after_secs`` (3 x ``refresh_secs``: 90 s by default), or at once when its holder
ran on this host and that pid is gone. A takeover on the local disk is serialised by a
second create-if-absent file (``<lease>.takeover``), so two processes cannot both take
over the same stale lease. The lease is refreshed by a daemon thread and removed by
:meth:`Lease.release` (also when the run fails); a process killed with SIGKILL leaves it,
and the next run takes it over (at once on the same host).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable, Optional

from mmirage_beam.errors import MmirageError
from mmirage_beam.paths import is_local
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.records import LeaseRecord

_LOG = logging.getLogger(__name__)

#: how often a held lease is rewritten, in seconds.
REFRESH_SECS = 30.0
#: a lease not refreshed for this long is stale (3 refresh intervals), in seconds.
STALE_AFTER_SECS = 3 * REFRESH_SECS
#: object stores: how long to wait before reading a written lease back, in seconds.
SETTLE_SECS = 2.0


class RunLocked(MmirageError):
    """Another live process holds the run id (exit 2); nothing was read or sent."""

    exit_code = 2


def lease_path(base: str, run_id: str) -> str:
    """``<base>.lease.<run_id>``: the lease file of a run, beside its receipts."""
    return RunLayout(base, run_id).lease


def _local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def read_lease(path: str) -> Optional[LeaseRecord]:
    """The lease stored at ``path``; None when there is none. An unreadable or
    half-written lease reads as an empty record (every field None: stale once old
    enough, see :func:`is_stale`).

    Raises:
        OSError / apache_beam.io.filesystem.BeamIOError: the file exists but cannot be read.
    """
    from mmirage_beam.io.filesystems import FileSystems

    try:
        if is_local(path):
            with open(_local(path), "rb") as f:
                data = f.read()
        else:
            if not FileSystems.exists(path):
                return None
            with FileSystems.open(path, compression_type="uncompressed") as f:
                data = f.read()
    except FileNotFoundError:
        return None
    try:
        found = json.loads(data.decode("utf-8"))
    except ValueError:
        return LeaseRecord.from_json({})
    return LeaseRecord.from_json(found if isinstance(found, dict) else {})


def _mtime(path: str) -> float:
    if is_local(path):
        try:
            return os.stat(_local(path)).st_mtime
        except OSError:
            return 0.0
    from mmirage_beam.io.filesystems import FileSystems

    try:
        return float(FileSystems.last_updated(path))
    except Exception:
        return 0.0


def is_stale(
    lease: dict[str, Any] | LeaseRecord, now: float, stale_after_secs: float, mtime: float = 0.0
) -> bool:
    """Whether ``lease`` (as :func:`read_lease` returns it, or the record) may be taken
    over: not refreshed for ``stale_after_secs`` seconds (``now``, ``mtime``: the lease
    file's, used when it holds no ``refreshed_at``: Unix seconds), or held by a dead pid
    of this host."""
    if isinstance(lease, LeaseRecord):
        lease = lease.to_json()
    refreshed = lease.get("refreshed_at")
    last = float(refreshed) if isinstance(refreshed, (int, float)) else mtime
    if now - last > stale_after_secs:
        return True
    pid = lease.get("pid")
    if lease.get("host") == socket.gethostname() and isinstance(pid, int):
        return pid != os.getpid() and not _pid_alive(pid)
    return False


def is_held(base: str, run_id: str) -> bool:
    """Whether a live launcher holds ``run_id``'s lease under receipts base ``base``:
    the lease file exists, was refreshed within :data:`STALE_AFTER_SECS` and, on this
    host, its pid is alive (:func:`is_stale`)."""
    path = lease_path(base, run_id)
    lease = read_lease(path)
    return lease is not None and not is_stale(lease, time.time(), STALE_AFTER_SECS, _mtime(path))


def describe_holder(lease: dict[str, Any] | LeaseRecord, now: Optional[float] = None) -> str:
    """``pid 123 on host h, started 2026-...Z, refreshed 4 s ago`` (``now``: Unix seconds)."""
    now = time.time() if now is None else now
    if isinstance(lease, LeaseRecord):
        lease = lease.to_json()

    def when(v: Any) -> str:
        if not isinstance(v, (int, float)):
            return "?"
        return _dt.datetime.fromtimestamp(v, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    refreshed = lease.get("refreshed_at")
    ago = f"{now - refreshed:.0f} s ago" if isinstance(refreshed, (int, float)) else "never"
    return (
        f"pid {lease.get('pid', '?')} on host {lease.get('host', '?')}, started "
        f"{when(lease.get('started_at'))}, refreshed {ago}"
    )


class Lease:
    """A held lease; refresh it with :meth:`start_refreshing`, end it with :meth:`release`.

    Attributes:
        path: the lease file.
        info: what the file holds (host, pid, started_at, refreshed_at, token).
        lost: True once a refresh found another holder's token (object stores' race).
    """

    def __init__(
        self,
        path: str,
        info: dict[str, Any],
        refresh_secs: float = REFRESH_SECS,
        on_lost: Optional[Callable[[dict[str, Any]], None]] = None,
    ) -> None:
        self.path = path
        self.info = info
        self.lost = False
        self._refresh_secs = refresh_secs
        self._on_lost = on_lost
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def record(self) -> LeaseRecord:
        """What the lease file holds now (:attr:`info` as a record)."""
        return LeaseRecord.from_json(self.info)

    def refresh(self) -> bool:
        """Rewrite the lease with a new ``refreshed_at``; False (and ``on_lost``) when
        another process's token is found in it."""
        current = read_lease(self.path)
        if current is not None and current.token != self.info["token"]:
            self.lost = True
            _LOG.error(
                "run %s: the lease %s is now held by %s; this process stops creating batches",
                self.info["run_id"],
                self.path,
                describe_holder(current),
            )
            if self._on_lost is not None:
                self._on_lost(current.to_json())
            return False
        self.info["refreshed_at"] = time.time()
        from mmirage_beam.io.fs import write_durably  # late, as the lease module imports no I/O

        write_durably(self.path, _encode(self.info))
        return True

    def start_refreshing(self) -> None:
        """Refresh every ``refresh_secs`` from a daemon thread until :meth:`release`."""

        def loop() -> None:
            while not self._stop.wait(self._refresh_secs):
                try:
                    if not self.refresh():
                        return
                except Exception as exc:  # storage hiccup: try again at the next tick
                    _LOG.warning("could not refresh the lease %s: %s", self.path, exc)

        self._thread = threading.Thread(target=loop, name="mmirage-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop refreshing and remove the lease if it is still ours (best effort)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            current = read_lease(self.path)
            if current is not None and current.token == self.info["token"]:
                _delete(self.path)
        except Exception as exc:  # the next run takes a leftover lease over once stale
            _LOG.warning("could not remove the lease %s: %s", self.path, exc)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _encode(info: dict[str, Any]) -> bytes:
    return LeaseRecord.from_json(info).encode()


def _delete(path: str) -> None:
    if is_local(path):
        try:
            os.unlink(_local(path))
        except FileNotFoundError:
            pass
        return
    from mmirage_beam.io.filesystems import FileSystems

    if FileSystems.exists(path):
        FileSystems.delete([path])


def _create_exclusive(path: str, data: bytes) -> bool:
    """Local disk: create ``path`` only if absent (O_EXCL); False when it exists."""
    local = _local(path)
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    try:
        fd = os.open(local, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return True


def acquire(
    base: str,
    run_id: str,
    *,
    refresh_secs: float = REFRESH_SECS,
    stale_after_secs: Optional[float] = None,
    settle_secs: float = SETTLE_SECS,
    on_lost: Optional[Callable[[dict[str, Any]], None]] = None,
) -> Lease:
    """Take the lease of ``run_id`` (not yet refreshing: call ``start_refreshing``).

    Args:
        base: the receipts base (``metadata_output_path`` without ``.jsonl``).
        run_id: the run.
        refresh_secs: refresh interval, seconds.
        stale_after_secs: a lease older than this is taken over (default 3 x refresh).
        settle_secs: object stores only: the wait before the read-back, seconds.
        on_lost: called (with the other holder's lease, as the dict the file holds) if a
            refresh finds it lost.

    Raises:
        RunLocked: (exit 2) a live process holds it; the message names the holder.
        OSError / apache_beam.io.filesystem.BeamIOError: the location is not writable.
    """
    stale_after = 3 * refresh_secs if stale_after_secs is None else stale_after_secs
    path = lease_path(base, run_id)
    now = time.time()
    info = {
        "run_id": run_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_at": now,
        "refreshed_at": now,
        "token": uuid.uuid4().hex,
    }
    lease = Lease(path, info, refresh_secs, on_lost)
    if is_local(path):
        for _ in range(5):
            if _create_exclusive(path, _encode(info)):
                return lease
            current = read_lease(path)
            if current is None:
                continue  # released meanwhile: try again
            if not is_stale(current, time.time(), stale_after, _mtime(path)):
                raise _locked(run_id, path, current)
            _take_over_local(path, current, stale_after)
        raise _locked(run_id, path, read_lease(path) or LeaseRecord())
    from mmirage_beam.io.filesystems import FileSystems

    current = read_lease(path)
    if current is not None and not is_stale(current, time.time(), stale_after, _mtime(path)):
        raise _locked(run_id, path, current)
    with FileSystems.create(path) as f:
        f.write(_encode(info))
    time.sleep(settle_secs)
    current = read_lease(path)
    if current is None or current.token != info["token"]:
        raise _locked(run_id, path, current or LeaseRecord())
    return lease


def _take_over_local(path: str, stale: LeaseRecord, stale_after: float) -> None:
    """Remove a stale lease, serialised by ``<lease>.takeover`` (itself stale after
    ``stale_after`` seconds), and only if it is still the lease judged stale."""
    guard = path + ".takeover"
    if not _create_exclusive(guard, b"%d\n" % os.getpid()):
        if time.time() - _mtime(guard) > stale_after:
            _delete(guard)  # a takeover that died midway
        else:
            time.sleep(0.2)
        return
    try:
        current = read_lease(path)
        if current is not None and current.token == stale.token:
            _LOG.warning("taking over the stale lease %s (%s)", path, describe_holder(current))
            _delete(path)
    finally:
        _delete(guard)


#: the lease of a ``run --wait`` cycle is ``<CYCLE_LEASE_PREFIX><run_id>``
CYCLE_LEASE_PREFIX = "cycle-"


def cycle_lease(run_id: str) -> str:
    """The lease name of ``run --wait``'s cycle of ``run_id``."""
    return CYCLE_LEASE_PREFIX + run_id


def _locked(run_id: str, path: str, holder: LeaseRecord) -> RunLocked:
    who = (  # a cycle's lease is said as the cycle of its run (issue 38: "run cycle-<id>")
        f"the run --wait cycle of run {run_id[len(CYCLE_LEASE_PREFIX) :]}"
        if run_id.startswith(CYCLE_LEASE_PREFIX)
        else f"run {run_id}"
    )
    return RunLocked(
        f"{who} is in use by another process ({describe_holder(holder)}; lease "
        f"{path}); nothing was sent. Wait for it to end, or stop it; a lease whose holder "
        f"died is taken over at once on the same host, or after "
        f"{STALE_AFTER_SECS:.0f} s without a refresh elsewhere"
    )
