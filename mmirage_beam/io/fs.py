"""Files and folders on every Beam filesystem: durable writes, moves, folders.

Object stores (``gs://``, ``s3://``) have no folders: ``FileSystems.exists`` of a
"folder" is false even while files live under it, and deleting it deletes nothing. The
receipts' ``.parts`` folders and the writers' temporary folders are therefore handled
through the files they hold, which works the same on a local disk.

Every file the project publishes goes through :func:`write_durably` (new bytes),
:func:`replace_file` (a temporary file renamed over its target in the same folder) or
:func:`move_file` (a file moved to another folder, possibly on another filesystem or
storage scheme: a RAM disk, an NFS mount, a bucket). ``FileSystems.rename`` alone fails
across filesystems (``OSError(18, 'Invalid cross-device link')``, rename(2)'s ``EXDEV``)
and across schemes (Beam's ``FileSystems.rename`` requires one scheme).

Importing this module also applies :func:`mmirage_beam.io.beam_s3.fix_beam_s3` (Beam's
``s3://`` filesystem: empty files, one client per setting) when Beam is loaded (a
worker's), else :mod:`mmirage_beam.io.filesystems` applies it when it loads Beam, so every
process that writes through it, the launcher's and the workers', has it. Local paths
go through :mod:`mmirage_beam.io.filesystems` without loading Beam.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from typing import Optional, Sequence

from mmirage_beam.crashpoints import crash_point
from mmirage_beam.io.beam_s3 import fix_beam_s3
from mmirage_beam.io.filesystems import FileSystems
from mmirage_beam.paths import is_uri

__all__ = [
    "COPY_BLOCK_BYTES",
    "write_durably",
    "replace_file",
    "same_filesystem",
    "move_file",
    "move_files",
    "list_files",
    "delete_folder",
    "delete_files",
]


#: Bytes copied at a time by :func:`move_file` across filesystems (1 MiB).
COPY_BLOCK_BYTES = 1 << 20

if "apache_beam" in sys.modules:  # else when Beam loads (io/filesystems.beam_filesystems)
    fix_beam_s3()


def write_durably(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary sibling, then a rename over it.

    A reader (or a crash at any moment) sees the old content or the new, never none:
    the old file is not deleted first (a local rename replaces its target atomically;
    object stores copy over it). Works on every Beam filesystem (local, gs://, s3://...).
    When the rename fails (an object store refusing the copy), the temporary file is
    deleted (best effort) before the error is raised, so it does not outlive the write.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: the file cannot be written.
    """
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(tmp, compression_type="uncompressed") as f:
        f.write(data)
    crash_point("tmp_written")
    try:
        replace_file(tmp, path)
    except Exception:
        try:
            delete_files([tmp])
        except Exception:  # noqa: BLE001 - the storage is failing: the rename's error counts
            pass
        raise


def replace_file(src: str, dst: str) -> None:
    """Rename ``src`` over ``dst`` (same folder, same filesystem) without a moment where
    ``dst`` is missing, where the filesystem allows it; else (a rename that refuses an
    existing target) delete first. For another folder or filesystem use
    :func:`move_file`.

    Raises:
        apache_beam.io.filesystem.BeamIOError: the rename failed (``dst`` is a folder,
            ``src`` is missing, ...).
    """
    try:
        FileSystems.rename([src], [dst])
    except Exception:
        if not FileSystems.exists(dst) or not FileSystems.exists(src):
            raise
        if not is_uri(dst) and os.path.isdir(dst):
            raise  # a folder is never deleted to make room for a file
        FileSystems.delete([dst])
        FileSystems.rename([src], [dst])


def _scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if is_uri(path) else ""


def _local_device(path: str) -> Optional[int]:
    """``st_dev`` of ``path``, or of its nearest existing parent (None: unknown)."""
    probe = os.path.abspath(path)
    while True:
        try:
            return os.stat(probe).st_dev
        except OSError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return None
            probe = parent


def same_filesystem(src: str, dst: str) -> bool:
    """Whether a rename can move ``src`` to ``dst``: both local on one device (``st_dev``
    of ``src`` and of ``dst``'s nearest existing folder), or both under one URI scheme
    (an object store's own rename; ``mem://``, ``gs://``...)."""
    a, b = _scheme(src), _scheme(dst)
    if a != b:
        return False
    if a:
        return True
    dev = _local_device(src)
    return dev is not None and dev == _local_device(os.path.dirname(os.path.abspath(dst)))


def _hidden_temp_beside(dst: str) -> str:
    """``<folder of dst>/.<name of dst>.tmp-<uuid>``: in the destination folder (so the
    final rename stays on one filesystem), hidden from ``*.jsonl`` globs of readers."""
    head, _, name = dst.rpartition("/")
    return f"{head}/.{name}.tmp-{uuid.uuid4().hex}" if head else f".{name}.tmp-{uuid.uuid4().hex}"


def move_file(src: str, dst: str, block_bytes: int = COPY_BLOCK_BYTES) -> None:
    """Move the file ``src`` to ``dst``, replacing ``dst``, across filesystems and schemes.

    On one filesystem (:func:`same_filesystem`) this is :func:`replace_file`, a rename.
    Otherwise: ``src`` is copied, ``block_bytes`` (1 MiB) at a time, into a hidden
    temporary file in ``dst``'s folder, which is renamed over ``dst`` (so ``dst`` appears
    whole or not at all), and only then is ``src`` deleted. A crash at any point leaves
    ``src``, or ``dst``, or both (never neither); a repeated move finishes the job. The
    destination folder is created on a local disk (object stores need none).

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: ``src`` cannot be read or
            ``dst`` written; ``src`` is then left in place.
    """
    _make_parent(dst)
    if same_filesystem(src, dst):
        replace_file(src, dst)
        return
    tmp = _hidden_temp_beside(dst)
    try:
        with FileSystems.open(src, compression_type="uncompressed") as f:
            with FileSystems.create(tmp, compression_type="uncompressed") as out:
                shutil.copyfileobj(f, out, block_bytes)
        crash_point("tmp_written")
        replace_file(tmp, dst)
    except BaseException:
        delete_files([tmp])
        raise
    crash_point("moved_copied")
    FileSystems.delete([src])


def move_files(srcs: Sequence[str], dsts: Sequence[str]) -> None:
    """:func:`move_file` of each ``srcs[i]`` to ``dsts[i]``, in order.

    Raises:
        ValueError: the sequences differ in length.
        apache_beam.io.filesystem.BeamIOError / OSError: see :func:`move_file` (the
            files before the failing one are moved).
    """
    if len(srcs) != len(dsts):
        raise ValueError(f"{len(srcs)} source(s) but {len(dsts)} destination(s)")
    for src, dst in zip(srcs, dsts):
        move_file(src, dst)


def _make_parent(path: str) -> None:
    head = path.rpartition("/")[0]
    if head and not _scheme(path) and not FileSystems.exists(head):
        try:
            FileSystems.mkdirs(head)
        except Exception:  # another worker made it meanwhile
            if not FileSystems.exists(head):
                raise


def list_files(folder: str, pattern: str = "*") -> list[str]:
    """Paths of the files in ``folder`` matching ``pattern`` (``**`` crosses ``/``),
    sorted; ``[]`` when there are none or the folder does not exist."""
    result = FileSystems.match([FileSystems.join(folder, pattern)])[0]
    return sorted(m.path for m in result.metadata_list)


def delete_folder(folder: str) -> None:
    """Delete every file under ``folder`` and the folder itself; a no-op when absent.

    Tolerates another worker deleting the same files at the same time.

    Raises:
        apache_beam.io.filesystem.BeamIOError: files remain that cannot be deleted.
    """
    try:
        files = list_files(folder, "**")
        if files:
            FileSystems.delete(files)
        if FileSystems.exists(folder):
            FileSystems.delete([folder])
    except Exception:
        if FileSystems.exists(folder) or list_files(folder, "**"):
            raise


def delete_files(paths: list[str]) -> None:
    """Delete ``paths`` that exist; missing ones are fine (best effort per file)."""
    for path in paths:
        try:
            if FileSystems.exists(path):
                FileSystems.delete([path])
        except Exception:  # noqa: BLE001 - another worker may delete it at the same time
            if FileSystems.exists(path):
                raise
