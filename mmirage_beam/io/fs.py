"""Folders on every Beam filesystem.

Object stores (``gs://``, ``s3://``) have no folders: ``FileSystems.exists`` of a
"folder" is false even while files live under it, and deleting it deletes nothing. The
receipts' ``.parts`` folders and the writers' temporary folders are therefore handled
through the files they hold, which works the same on a local disk.
"""

from __future__ import annotations

from apache_beam.io.filesystems import FileSystems


def list_files(folder: str, pattern: str = "*") -> list[str]:
    """Paths of the files in ``folder`` matching ``pattern`` (``**`` crosses ``/``),
    sorted; ``[]`` when there are none or the folder does not exist."""
    result = FileSystems.match([FileSystems.join(folder, pattern)])[0]
    return sorted(m.path for m in result.metadata_list)


def folder_exists(folder: str) -> bool:
    """Whether ``folder`` exists as a folder (local) or holds any file (object stores)."""
    return FileSystems.exists(folder) or bool(list_files(folder, "**"))


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
