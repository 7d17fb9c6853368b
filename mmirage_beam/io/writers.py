"""File writers built on Beam's ``fileio.WriteToFiles`` (any Beam filesystem)."""

from __future__ import annotations

from typing import Any, BinaryIO

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems


class BytesSink(fileio.FileSink):
    """Writes each element (``bytes``, already newline-terminated) as is."""

    def open(self, fh: BinaryIO) -> None:
        self._fh = fh

    def write(self, record: bytes) -> None:
        self._fh.write(record)

    def flush(self) -> None:
        self._fh.flush()


def _remove_temp_dir(_written: Any, temp_dir: str) -> None:
    """Beam's WriteToFiles moves its files out of the temp folder but leaves the folder."""
    if FileSystems.exists(temp_dir):
        FileSystems.delete([temp_dir])


def _write_files(pcoll: beam.PCollection, directory: str, **kwargs: Any) -> Any:
    """``fileio.WriteToFiles`` into ``directory`` through a temp folder removed afterwards."""
    import uuid

    from apache_beam.options.value_provider import StaticValueProvider

    temp_dir = FileSystems.join(directory, f".mmirage-tmp-{uuid.uuid4().hex}")
    written = pcoll | "WriteToFiles" >> fileio.WriteToFiles(
        path=directory,
        temp_directory=StaticValueProvider(str, temp_dir),
        sink=lambda _dest: BytesSink(),
        **kwargs,
    )
    (
        written
        | "AllWritten" >> beam.combiners.ToList()
        | "RemoveTempDir" >> beam.Map(_remove_temp_dir, temp_dir)
    )
    return written


def _dirname_basename(path: str) -> tuple[str, str]:
    if "/" not in path:
        return ".", path
    head, tail = path.rsplit("/", 1)
    return head or "/", tail


class WriteSingleFile(beam.PTransform):
    """PCollection[bytes] -> exactly one file at ``path`` (written via a temp folder).

    Elements are concatenated in arbitrary order; give each element whole lines. All
    elements go through one writer (one shard), streamed, not held in memory.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        if not path:
            raise ValueError("path must not be empty")
        self._dir, self._name = _dirname_basename(path)

    def expand(self, pcoll: beam.PCollection) -> Any:
        name = self._name
        return _write_files(pcoll, self._dir, file_naming=lambda *_args, **_kw: name, shards=1)


class WriteJsonLinesShards(beam.PTransform):
    """PCollection[bytes] -> ``<directory>/<prefix>-SSSSS-of-NNNNN.jsonl`` files."""

    def __init__(self, directory: str, prefix: str) -> None:
        super().__init__()
        self._dir = directory
        self._prefix = prefix

    def expand(self, pcoll: beam.PCollection) -> Any:
        return _write_files(
            pcoll, self._dir, file_naming=fileio.default_file_naming(self._prefix, ".jsonl")
        )


def join(*parts: str) -> str:
    """FileSystems.join that tolerates a relative first part."""
    return FileSystems.join(*parts)
