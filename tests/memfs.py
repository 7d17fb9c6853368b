"""``mem://``: an in-memory Beam filesystem with object-store semantics, for tests.

Beam's Python SDK ships no in-memory filesystem (the Java SDK has one), so this one is
registered the way Beam finds every filesystem: by subclassing
``apache_beam.io.filesystem.FileSystem`` (``FileSystems`` picks the subclass whose
``scheme()`` matches). It behaves like GCS (``gcsfilesystem.py``): flat objects, no
folders (``has_dirs`` is false, ``exists`` of a "folder" is false, ``mkdirs`` does
nothing), ``delete`` of a path deletes the objects matching it, and of a path ending in
``/`` everything under it. Any code that uses ``open()`` or ``os.path`` on a configured
path, or treats a folder as a thing, fails on it as it would on a bucket.

State is per process: only runners whose workers run in the test process can use it.
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem

_OBJECTS: dict[str, tuple[bytes, float]] = {}
_LOCK = threading.Lock()


class _Writer(io.BytesIO):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def close(self) -> None:
        if not self.closed:
            with _LOCK:
                _OBJECTS[self._path] = (self.getvalue(), time.time())
        super().close()


class InMemoryFileSystem(FileSystem):
    """Beam filesystem for ``mem://bucket/key`` paths (see the module docstring)."""

    @classmethod
    def scheme(cls) -> str:
        return "mem"

    def join(self, basepath: str, *paths: str) -> str:
        out = basepath
        for p in paths:
            out = out.rstrip("/") + "/" + p.lstrip("/")
        return out

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        return None

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str) -> Any:
        with _LOCK:
            items = [(k, v) for k, v in _OBJECTS.items() if k.startswith(dir_or_prefix)]
        for key, (data, mtime) in items:
            yield FileMetadata(key, len(data), mtime)

    def create(self, path: str, mime_type: str = "", compression_type: str = "") -> Any:
        self._check(compression_type)
        return _Writer(path)

    def open(self, path: str, mime_type: str = "", compression_type: str = "") -> Any:
        self._check(compression_type)
        with _LOCK:
            if path not in _OBJECTS:
                raise BeamIOError("Open failed", {path: FileNotFoundError(path)})
            return io.BytesIO(_OBJECTS[path][0])

    @staticmethod
    def _check(compression_type: str) -> None:
        if compression_type not in ("", CompressionTypes.AUTO, CompressionTypes.UNCOMPRESSED):
            raise NotImplementedError(f"mem:// does not compress ({compression_type})")

    def copy(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        errors = {}
        with _LOCK:
            for src, dst in zip(source_file_names, destination_file_names):
                if src in _OBJECTS:
                    _OBJECTS[dst] = (_OBJECTS[src][0], time.time())
                else:
                    errors[(src, dst)] = FileNotFoundError(src)
        if errors:
            raise BeamIOError("Copy operation failed", errors)

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        self.copy(source_file_names, destination_file_names)
        self.delete(source_file_names)

    def exists(self, path: str) -> bool:
        with _LOCK:
            return path in _OBJECTS

    def size(self, path: str) -> int:
        return self.metadata(path).size_in_bytes

    def last_updated(self, path: str) -> float:
        return self.metadata(path).last_updated_in_seconds

    def checksum(self, path: str) -> str:
        return str(self.size(path))

    def metadata(self, path: str) -> FileMetadata:
        with _LOCK:
            if path not in _OBJECTS:
                raise BeamIOError("Metadata failed", {path: FileNotFoundError(path)})
            data, mtime = _OBJECTS[path]
        return FileMetadata(path, len(data), mtime)

    def delete(self, paths: list[str]) -> None:
        with _LOCK:
            for path in paths:
                if path.endswith("/"):
                    for key in [k for k in _OBJECTS if k.startswith(path)]:
                        del _OBJECTS[key]
                else:
                    _OBJECTS.pop(path, None)  # like GCS: deleting nothing is no error

    def report_lineage(self, path: str, lineage: Any) -> None:
        return None


def objects(prefix: str = "mem://") -> dict[str, bytes]:
    """A copy of the objects whose path starts with ``prefix``."""
    with _LOCK:
        return {k: v[0] for k, v in _OBJECTS.items() if k.startswith(prefix)}
