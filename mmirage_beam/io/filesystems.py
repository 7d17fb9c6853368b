"""``FileSystems`` for the launcher: local paths without loading Beam, URIs through Beam.

Importing ``apache_beam.io.filesystems`` imports the whole Beam SDK (its package
``__init__`` loads coders, transforms, runners, pandas, pyarrow, boto3...): about 2 CPU
seconds, which ``mmirage check``, ``runs``, ``cancel`` and ``ui`` paid on every call
although they build no pipeline and their state is usually on a local disk.

:class:`FileSystems` has the static methods of Beam's ``FileSystems`` that the project
calls. A call whose paths are all local (no ``scheme://``, Beam's own test:
``FileSystems.URI_SCHEMA_PATTERN``) and uncompressed does what Beam's
``LocalFileSystem`` does, with ``os`` and ``io`` (apache_beam/io/localfilesystem.py,
Beam 2.x): the same results, the same ``IOError`` / ``BeamIOError`` on failure (Beam is
loaded to raise the latter). Every other call (a URI, a glob, a compressed file, a
missing path whose error Beam words) is Beam's own: Beam is imported then, once, with
:func:`mmirage_beam.io.beam_s3.fix_beam_s3` and the options a storage command deferred
(:func:`defer_options`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Any, NamedTuple, Optional, Sequence

__all__ = [
    "FileSystems",
    "FileMetadata",
    "MatchResult",
    "beam_filesystems",
    "defer_options",
    "use_filesystem_options",
]

#: Beam's ``FileSystems.URI_SCHEMA_PATTERN``: a path with a scheme goes to Beam
_URI = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")
#: Beam's ``CompressionTypes.detect_compression_type`` suffixes (lower case)
_COMPRESSED_SUFFIXES = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")
#: characters that make a ``match`` pattern a glob (Beam's ``'^[^[*?]*'`` prefix test)
_MAGIC = re.compile(r"[\[*?]")
_MAGIC_PREFIX = re.compile(r"^[^[*?]*")

#: filesystem flags a storage command handed over before Beam was loaded (None: none)
_pending_flags: Optional[list[str]] = None


class FileMetadata(NamedTuple):
    """Beam's ``apache_beam.io.filesystem.FileMetadata`` of a local file: its path, size
    in bytes and modification time (seconds since the epoch)."""

    path: str
    size_in_bytes: int
    last_updated_in_seconds: float


class MatchResult(NamedTuple):
    """Beam's ``apache_beam.io.filesystem.MatchResult``: a pattern and what it matched."""

    pattern: str
    metadata_list: list[Any]


def defer_options(flags: Sequence[str]) -> None:
    """Remember a storage command's Beam filesystem flags (none: Beam's defaults, which
    read boto3's environment such as ``AWS_ENDPOINT_URL_S3``), to hand them to Beam's
    ``FileSystems`` when it is first needed (:func:`beam_filesystems`); with flags, or
    once Beam is loaded, at once."""
    global _pending_flags
    _pending_flags = list(flags)
    if flags or "apache_beam.io.filesystems" in sys.modules:
        beam_filesystems()


def beam_filesystems() -> Any:
    """Beam's ``FileSystems`` class, imported (with :func:`~mmirage_beam.io.beam_s3.
    fix_beam_s3`) and given the deferred options (:func:`defer_options`) on first use."""
    global _pending_flags
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems

    if _pending_flags is not None:
        flags, _pending_flags = _pending_flags, None
        from apache_beam.options.pipeline_options import PipelineOptions

        use_filesystem_options(PipelineOptions(flags))
    else:
        from mmirage_beam.io.beam_s3 import fix_beam_s3

        fix_beam_s3()
    return BeamFileSystems


def use_filesystem_options(options: Any) -> None:
    """Hand ``options`` (Beam ``PipelineOptions``) to Beam's ``FileSystems``, so every
    file the launcher itself reads or writes (receipts, leases, run records, probes,
    merged files on ``s3://``...) goes through the same filesystem settings
    (``--s3_endpoint_url``...) as the workers'.

    Beam sets them only when a ``Pipeline`` is built; the launcher touches its storage
    before (and the commands that run no pipeline never build one). Without options,
    Beam's S3 filesystem cannot even make a client. Its two fixes
    (:func:`mmirage_beam.io.beam_s3.fix_beam_s3`) are applied here too."""
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems

    from mmirage_beam.io.beam_s3 import fix_beam_s3

    fix_beam_s3()
    BeamFileSystems.set_options(options)


def _local(*paths: str) -> bool:
    return all(isinstance(p, str) and _URI.match(p.strip()) is None for p in paths)


def _uncompressed(path: str, compression_type: str) -> bool:
    """Whether Beam opens ``path`` raw (``CompressionTypes`` values are these strings)."""
    if compression_type == "auto":
        return not path.lower().endswith(_COMPRESSED_SUFFIXES)
    return compression_type == "uncompressed"


def _translate(pattern: str) -> str:
    """Beam's ``FileSystem.translate_pattern``: fnmatch syntax where ``*`` stops at a
    separator and ``**`` does not; no way to quote a meta-character."""
    i, n, res = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                res += ".*"
                i += 1
            else:
                res += r"[^/\\]*"
        elif c == "?":
            res += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                res += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                res = f"{res}[{stuff}]"
        else:
            res += re.escape(c)
    return r"(?ms)" + res + r"\Z"


def _match_local(pattern: str, limit: Optional[int]) -> MatchResult:
    """Beam's ``FileSystem.match`` of one local pattern (``LocalFileSystem._list``: a
    recursive walk of the pattern's folder, files only, filtered by :func:`_translate`)."""
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = _MAGIC_PREFIX.match(pattern).group(0)  # type: ignore[union-attr]
    found: list[FileMetadata] = []
    if prefix == pattern:  # no glob: the path itself, a folder too
        if os.path.exists(pattern):
            found = [FileMetadata(pattern, os.path.getsize(pattern), os.path.getmtime(pattern))]
    else:
        folder = os.path.dirname(prefix)
        if os.path.exists(folder):
            for dirpath, _, files in os.walk(folder):
                for name in files:
                    path = os.path.join(dirpath, name)
                    try:
                        found.append(
                            FileMetadata(path, os.path.getsize(path), os.path.getmtime(path))
                        )
                    except OSError:  # files may disappear while listed
                        pass
    match = re.compile(_translate(pattern)).match
    out = []
    for meta in found:
        if match(meta.path):
            if limit is not None and len(out) >= limit:
                break
            out.append(meta)
    return MatchResult(pattern, out)


def _beam_io_error(message: str, details: dict[Any, Exception]) -> Exception:
    from apache_beam.io.filesystem import BeamIOError

    return BeamIOError(message, details)


class FileSystems:
    """The subset of Beam's ``apache_beam.io.filesystems.FileSystems`` the project
    calls, with the same signatures and results (see the module docstring)."""

    @staticmethod
    def get_scheme(path: str) -> Optional[str]:
        m = _URI.match(path.strip())
        return m["scheme"] if m else None

    @staticmethod
    def get_filesystem(path: str) -> Any:
        return beam_filesystems().get_filesystem(path)

    @staticmethod
    def set_options(options: Any) -> None:
        beam_filesystems().set_options(options)

    @staticmethod
    def join(basepath: str, *paths: str) -> str:
        if _local(basepath):
            return os.path.join(basepath, *paths)
        return beam_filesystems().join(basepath, *paths)

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        if _local(path):
            return os.path.split(os.path.abspath(path))
        return beam_filesystems().split(path)

    @staticmethod
    def exists(path: str) -> bool:
        if _local(path):
            return os.path.exists(path)
        return beam_filesystems().exists(path)

    @staticmethod
    def last_updated(path: str) -> float:
        if _local(path) and os.path.exists(path):
            return os.path.getmtime(path)
        return beam_filesystems().last_updated(path)

    @staticmethod
    def mkdirs(path: str) -> None:
        if not _local(path):
            return beam_filesystems().mkdirs(path)
        try:
            os.makedirs(path)
        except OSError as err:
            raise OSError(err) from err

    @staticmethod
    def open(
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = "auto",
    ) -> Any:
        if _local(path) and _uncompressed(path, compression_type):
            return open(path, "rb")
        return beam_filesystems().open(path, mime_type, compression_type)

    @staticmethod
    def create(
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = "auto",
    ) -> Any:
        if _local(path) and _uncompressed(path, compression_type):
            dirname = os.path.dirname(path)
            if dirname:
                os.makedirs(dirname, exist_ok=True)
            return open(path, "wb")
        return beam_filesystems().create(path, mime_type, compression_type)

    @staticmethod
    def match(patterns: Sequence[str], limits: Optional[Sequence[Any]] = None) -> list[Any]:
        if isinstance(patterns, str) or not patterns or not _local(*patterns):
            return beam_filesystems().match(patterns, limits)
        if limits is None:
            limits = [None] * len(patterns)
        assert len(patterns) == len(limits), "Patterns and limits should be equal in length"
        results, errors = [], {}
        for pattern, limit in zip(patterns, limits):
            try:
                results.append(_match_local(pattern, limit))
            except Exception as exc:  # noqa: BLE001 - Beam collects every pattern's error
                errors[pattern] = exc
        if errors:
            raise _beam_io_error("Match operation failed", errors)
        return results

    @staticmethod
    def rename(source_file_names: Sequence[str], destination_file_names: Sequence[str]) -> None:
        if len(source_file_names) == 0:
            return
        if not _local(*source_file_names, *destination_file_names):
            return beam_filesystems().rename(source_file_names, destination_file_names)
        assert len(source_file_names) == len(destination_file_names), (
            "source_file_names and destination_file_names should be equal in length"
        )
        errors: dict[Any, Exception] = {}
        for src, dst in zip(source_file_names, destination_file_names):
            try:
                os.rename(src, dst)
            except OSError as err:
                errors[(src, dst)] = OSError(err)
        if errors:
            raise _beam_io_error("Rename operation failed", errors)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        if isinstance(paths, str) or not all(
            _local(p) and not _MAGIC.search(p) and not p.endswith(("/", "\\")) and os.path.exists(p)
            for p in paths
        ):
            return beam_filesystems().delete(paths)  # its errors, its globs
        errors: dict[Any, Exception] = {}
        for path in paths:
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            except OSError as err:
                errors[path] = OSError(err)
        if errors:
            raise _beam_io_error("Delete operation failed", errors)
