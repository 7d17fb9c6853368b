"""File writers built on Beam's ``fileio.WriteToFiles`` (any Beam filesystem)."""

from __future__ import annotations

import shutil
from typing import Any, BinaryIO, Iterator, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from mmirage_beam.crashpoints import crash_point
from mmirage_beam.io.fs import delete_files, delete_folder, list_files, move_file, replace_file

__all__ = [
    "BytesSink",
    "concatenate_files",
    "WriteSingleFile",
    "WriteJsonLinesShards",
    "ConcatenateFiles",
    "join",
]


class BytesSink(fileio.FileSink):
    """Writes each element (``bytes``, already newline-terminated) as is."""

    def open(self, fh: BinaryIO) -> None:
        self._fh = fh

    def write(self, record: bytes) -> None:
        self._fh.write(record)

    def flush(self) -> None:
        self._fh.flush()


class _RemoveTempDirFn(beam.DoFn):
    """Beam's WriteToFiles moves its files out of the temp folder but leaves the folder:
    deletes it once (the main input is an Impulse) after every file is written (the
    side input, a list of ``FileResult``, only orders this step after the writes)."""

    def __init__(self, temp_dir: str) -> None:
        self._temp_dir = temp_dir

    def process(self, _impulse: bytes, _written: list[Any]) -> None:
        delete_folder(self._temp_dir)


def _write_files(
    pcoll: beam.PCollection, directory: str, **kwargs: Any
) -> tuple[beam.PCollection, str]:
    """``fileio.WriteToFiles`` into ``directory`` through a temp folder inside it.

    The temp folder is left for the caller's final step to remove: each writer here has
    one step that runs once after every file is written and deletes ``directory`` (or
    its temp folder, :class:`_RemoveTempDirFn`).

    Returns:
        (PCollection[fileio.FileResult] of the final files, the temp folder's path).
    """
    import uuid

    from apache_beam.options.value_provider import StaticValueProvider

    temp_dir = FileSystems.join(directory, f".mmirage-tmp-{uuid.uuid4().hex}")
    written = pcoll | "WriteToFiles" >> fileio.WriteToFiles(
        path=directory,
        temp_directory=StaticValueProvider(str, temp_dir),
        sink=lambda _dest: BytesSink(),
        **kwargs,
    )
    return written, temp_dir


def _once(pcoll: beam.PCollection) -> beam.PCollection:
    """A single element (``b""``) for a final step that gets its input as side inputs.

    ``Impulse | ParDo(fn, AsList(pcoll))`` runs ``fn`` exactly once, after ``pcoll`` is
    complete, also when it is empty: what ``CombineGlobally`` (``ToList``) with its
    default does, without the combine's GroupByKey and its default-injecting stage.
    """
    return pcoll.pipeline | "Once" >> beam.Impulse()


def _dirname_basename(path: str) -> tuple[str, str]:
    if "/" not in path:
        return ".", path
    head, tail = path.rsplit("/", 1)
    return head or "/", tail


def concatenate_files(parts: Sequence[str], output_path: str, block_bytes: int = 1 << 20) -> None:
    """Stream ``parts`` (in the order given) into ``output_path``, atomically.

    The bytes go to ``<output_path>.tmp-concat`` ``block_bytes`` (1 MiB) at a time, which
    is then renamed over ``output_path``; a reader never sees a half-written file. Works
    on every Beam filesystem.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: a part cannot be read or the
        output written.
    """
    tmp = f"{output_path}.tmp-concat"
    with FileSystems.create(tmp) as out:
        for path in parts:
            with FileSystems.open(path, compression_type="uncompressed") as f:
                shutil.copyfileobj(f, out, block_bytes)

    replace_file(tmp, output_path)


class _ConcatenatePartsFn(beam.DoFn):
    """Impulse, side input: list of part file paths -> the single output file (nothing
    when there are none); ``parts_dir`` is removed after.

    With ``results_in_parts_dir``, the side input holds ``fileio.FileResult`` of files
    written into ``parts_dir`` (whose ``file_name`` is relative to it) instead of paths.
    """

    def __init__(
        self, output_path: str, parts_dir: str, results_in_parts_dir: bool = False
    ) -> None:
        self._out = output_path
        self._parts_dir = parts_dir
        self._results = results_in_parts_dir

    def process(self, _impulse: bytes, parts: list[Any]) -> Iterator[str]:
        if self._results:
            parts = [FileSystems.join(self._parts_dir, r.file_name) for r in parts]
        parts = sorted(set(parts))
        if parts:
            concatenate_files(parts, self._out)

        delete_folder(self._parts_dir)
        if parts:
            yield self._out


class WriteSingleFile(beam.PTransform):
    """PCollection[bytes] -> exactly one file at ``path``, complete on every runner.

    Each element must be whole lines. Every bundle of every worker writes its own part
    file (``fileio.WriteToFiles``, names ``part-<i>-of-<n>`` unique per destination) into
    a hidden folder beside ``path``; one final step concatenates the parts, streamed, into
    ``path`` (atomically: temp file + rename) and removes the folder. Memory stays bounded
    by one block (1 MiB), whatever the number of elements; elements come in no
    particular order. Writes nothing when the PCollection is empty.

    Returns:
        PCollection[str] holding ``path`` once written (empty when nothing was written).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        if not path:
            raise ValueError("path must not be empty")
        self._path = path
        self._dir, self._name = _dirname_basename(path)

    def expand(self, pcoll: beam.PCollection) -> Any:
        import uuid

        parts_dir = FileSystems.join(self._dir, f".{self._name}.parts-{uuid.uuid4().hex[:12]}")
        written, _temp_dir = _write_files(  # inside parts_dir: removed with it
            pcoll, parts_dir, file_naming=fileio.default_file_naming("part", ".jsonl")
        )
        return _once(pcoll) | "Concatenate" >> beam.ParDo(
            _ConcatenatePartsFn(self._path, parts_dir, results_in_parts_dir=True),
            beam.pvalue.AsList(written),
        )


class WriteJsonLinesShards(beam.PTransform):
    """PCollection[bytes] -> ``<directory>/<prefix>-SSSSS-of-NNNNN.jsonl`` files.

    With ``staging_dir`` and ``gate`` (a singleton side input, e.g. the invalid-row
    count): the files are written into ``staging_dir`` as the lines come (one file per
    bundle, never held in memory), then moved into ``directory`` only when the gate is 0,
    else deleted. The staging folder may be on another filesystem or scheme than
    ``directory`` (each file is copied, published atomically, then deleted:
    :func:`mmirage_beam.io.fs.move_file`). ``replace_earlier``: the publication owns
    ``<prefix>-*`` in ``directory``, so files of that prefix it did not write (an earlier
    attempt's) are deleted after it. ``after``: a singleton side input the publication
    waits for (the submit pipeline's every-chunk-receipted step).
    """

    def __init__(
        self,
        directory: str,
        prefix: str,
        staging_dir: str | None = None,
        gate: Any = None,
        replace_earlier: bool = False,
        after: Any = None,
    ) -> None:
        super().__init__()
        self._after = after
        self._replace = replace_earlier
        self._dir = directory
        self._prefix = prefix
        self._staging = staging_dir
        self._gate = gate

    def expand(self, pcoll: beam.PCollection) -> Any:
        naming = fileio.default_file_naming(self._prefix, ".jsonl")
        if self._staging is None:
            written, temp_dir = _write_files(pcoll, self._dir, file_naming=naming)
            _ = _once(pcoll) | "RemoveTempDir" >> beam.ParDo(
                _RemoveTempDirFn(temp_dir), beam.pvalue.AsList(written)
            )
            return written
        # The temp folder is inside the staging folder, which Publish removes.
        written, _temp_dir = _write_files(pcoll, self._staging, file_naming=naming)
        kwargs = {} if self._gate is None else {"gate": self._gate}
        if self._after is not None:
            kwargs["after"] = self._after
        return _once(pcoll) | "Publish" >> beam.ParDo(
            _PublishFn(self._dir, self._staging, self._prefix if self._replace else ""),
            beam.pvalue.AsList(written),
            **kwargs,
        )


class _PublishFn(beam.DoFn):
    """Impulse, side input: list of ``fileio.FileResult`` staged in ``staging_dir`` ->
    the files moved into ``directory`` (gate 0) or deleted; ``staging_dir`` is removed.

    Each file is moved with :func:`mmirage_beam.io.fs.move_file`, so the staging folder
    may be on another filesystem or storage scheme than ``directory``. With
    ``replace_prefix``, files ``<prefix>-*`` already in ``directory`` that this
    publication did not write (an earlier attempt's, named for another shard count) are
    deleted once every new file is in place, so a repeated publication leaves exactly one
    copy of each row.
    """

    def __init__(self, directory: str, staging_dir: str, replace_prefix: str = "") -> None:
        self._dir = directory
        self._staging = staging_dir
        self._replace_prefix = replace_prefix

    def process(
        self, _impulse: bytes, written: list[Any], gate: int = 0, after: Any = None
    ) -> Iterator[str]:
        # FileResult.file_name of a final file is its name inside the staging folder.
        paths = sorted({FileSystems.join(self._staging, r.file_name) for r in written})
        if gate:
            delete_folder(self._staging)
            return
        if paths:
            targets = [FileSystems.join(self._dir, _dirname_basename(p)[1]) for p in paths]
            for src, dst in zip(paths, targets):
                crash_point("publishing")
                move_file(src, dst)
            if self._replace_prefix:
                new = set(targets)
                stale = list_files(self._dir, f"{self._replace_prefix}-*")
                delete_files([p for p in stale if p not in new])
            yield from targets
        delete_folder(self._staging)


class ConcatenateFiles(beam.PTransform):
    """PCollection[str] of file paths -> one file at ``path``: their bytes in the sorted
    order of their paths, streamed and atomic (see :func:`concatenate_files`); then
    ``parts_dir`` (the folder holding them) is removed. Writes nothing when empty.

    Returns:
        PCollection[str] holding ``path`` once written.
    """

    def __init__(self, path: str, parts_dir: str) -> None:
        super().__init__()
        self._path = path
        self._parts_dir = parts_dir

    def expand(self, paths: beam.PCollection) -> Any:
        return _once(paths) | "Concatenate" >> beam.ParDo(
            _ConcatenatePartsFn(self._path, self._parts_dir), beam.pvalue.AsList(paths)
        )


def join(*parts: str) -> str:
    """FileSystems.join that tolerates a relative first part."""
    return FileSystems.join(*parts)
