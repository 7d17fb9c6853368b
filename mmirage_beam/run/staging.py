"""Staged chunks: each chunk's exact upload bytes in a file, so only a reference moves.

The chunker (:mod:`mmirage_beam.transforms.chunking`) streams every request line into a
staged file under the run's staging folder, ``<receipts base>.staged.<run_id>/`` (through
Beam's ``FileSystems``, so any filesystem works), and emits a small
:class:`~mmirage_beam.records.ChunkRef` instead of the chunk's requests. After the
validation barrier, SubmitChunks uploads the staged file as it is, or in a dry run
``WriteExport`` writes the export from it. What is hashed (``request_hash``), exported
and uploaded are the same bytes.

Files of one staged chunk (or fragment):

- ``<stem>.jsonl``: the request lines, exactly as uploaded (compact JSON + ``\\n``);
- ``<stem>.meta.jsonl``: one line per request, in the same order:
  ``[custom_id, source_index, nbytes, request_line_hash]``.

Memory: writing a chunk keeps one line at a time plus its per-request metadata (about 50
bytes a request); reading one back streams it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from typing import Any, Iterator, NamedTuple, Optional

from mmirage_beam.errors import MmirageError
from mmirage_beam.io.filesystems import FileSystems
from mmirage_beam.io.fs import delete_files, delete_folder
from mmirage_beam.io.splits import _list_splits
from mmirage_beam.paths import is_uri
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.receipts import REQUEST_HASH_CHARS

#: Bytes read at a time when a staged file is copied or uploaded.
COPY_BLOCK_BYTES = 1 << 20


def staging_dir(base: str, run_id: str) -> str:
    """``<receipts base>.staged.<run_id>``: the run's staged chunks and temp outputs."""
    return RunLayout(base, run_id).staging


def meta_path(path: str) -> str:
    """The metadata file beside a staged chunk file ``<stem>.jsonl``."""
    stem = path[: -len(".jsonl")] if path.endswith(".jsonl") else path
    return f"{stem}.meta.jsonl"


def new_stem(directory: str, label: str) -> str:
    """A fresh, unique ``<directory>/<label>-<uuid>.jsonl`` (retried bundles never clash)."""
    return FileSystems.join(directory, f"{label}-{uuid.uuid4().hex}.jsonl")


class RequestMeta(NamedTuple):
    """What a receipt needs of one staged request."""

    custom_id: str
    source_index: int
    nbytes: int
    line_hash: str


def canonical(line: bytes) -> bytes:
    """A request's canonical JSON as MMIRAGE hashes it: sorted keys, compact, ASCII."""
    return json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")).encode("ascii")


class StagedChunkWriter:
    """Streams request lines into one staged file and computes the chunk's hashes.

    ``request_hash`` is ``receipts.request_hash`` of the lines written (the SHA-256 of
    ``"[" + ",".join(canonical lines) + "]"``, which is exactly MMIRAGE's
    ``json.dumps(requests, sort_keys=True, separators=(",", ":"))``), computed on the fly;
    each request's line hash is the first ``REQUEST_HASH_CHARS`` hex digits of the
    SHA-256 of its canonical form, as ``receipts.request_line_hash``.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: the file cannot be written.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._out = FileSystems.create(path)
        self._meta = FileSystems.create(meta_path(path))
        self._hash = hashlib.sha256(b"[")
        self.request_count = 0
        self.total_bytes = 0

    def write(
        self,
        custom_id: str,
        source_index: int,
        line: bytes,
        nbytes: int,
        canonical_line: Optional[bytes] = None,
    ) -> None:
        """Append one request line (``nbytes``: its chunking size, >= ``len(line)``).

        ``canonical_line``: the line's :func:`canonical` form when the caller encoded it
        already (``BatchRequest.canonical``); None: derived here by parsing ``line``."""
        canon = canonical(line) if canonical_line is None else canonical_line
        if self.request_count:
            self._hash.update(b",")
        self._hash.update(canon)
        line_hash = hashlib.sha256(canon).hexdigest()[:REQUEST_HASH_CHARS]
        self._out.write(line)
        self._meta.write(_meta_line(custom_id, source_index, nbytes, line_hash))
        self.request_count += 1
        self.total_bytes += nbytes

    def write_staged(self, line: bytes, meta: RequestMeta) -> None:
        """Append a line already staged elsewhere, with its metadata (no re-parse of the
        metadata; the canonical form is recomputed for the chunk's hash)."""
        canon = canonical(line)
        if self.request_count:
            self._hash.update(b",")
        self._hash.update(canon)
        self._out.write(line)
        self._meta.write(_meta_line(*meta))
        self.request_count += 1
        self.total_bytes += meta.nbytes

    def close(self) -> str:
        """Close both files; returns the chunk's ``request_hash``."""
        self._out.close()
        self._meta.close()
        self._hash.update(b"]")
        return self._hash.hexdigest()

    def abort(self) -> None:
        """Close and delete what was written (best effort)."""
        for f in (self._out, self._meta):
            try:
                f.close()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        delete_staged(self.path)


def _meta_line(custom_id: str, source_index: int, nbytes: int, line_hash: str) -> bytes:
    """``[custom_id, source_index, nbytes, line_hash]`` as one JSON line (the id quoted
    as ``json.dumps`` quotes a str)."""
    return f'[{_json_str(custom_id)},{int(source_index)},{int(nbytes)},"{line_hash}"]\n'.encode()


#: ``json.dumps`` of a ``str`` (ASCII escapes), without building an encoder per call.
_json_str = json.encoder.encode_basestring_ascii

#: Bytes of metadata lines read, and parsed by one ``json.loads``, at a time (1 MiB, about
#: 17,000 requests' lines of about 60 bytes).
_META_BLOCK_BYTES = 1 << 20


def _meta_blocks(path: str, start: int = 0, end: Optional[int] = None) -> Iterator[list[Any]]:
    """The metadata of requests ``start`` (inclusive) to ``end`` (exclusive) of a staged
    file, in order, as parsed rows ``[custom_id, source_index, nbytes, line_hash]``: about
    :data:`_META_BLOCK_BYTES` of lines read and parsed as one JSON array at a time."""
    with FileSystems.open(meta_path(path), compression_type="uncompressed") as f:
        seen = 0
        while end is None or seen < end:
            lines = f.readlines(_META_BLOCK_BYTES)
            if not lines:
                break
            first, seen = seen, seen + len(lines)
            lo = max(start - first, 0)
            hi = len(lines) if end is None else min(end - first, len(lines))
            if lo < hi:
                if lo or hi < len(lines):
                    lines = lines[lo:hi]
                yield json.loads(b"[" + b",".join(lines) + b"]")


def iter_meta(path: str, start: int = 0, end: Optional[int] = None) -> Iterator[RequestMeta]:
    """The metadata of requests ``start`` (inclusive) to ``end`` (exclusive) of a staged
    file, in order, streamed (a chunk of 50,000 requests held as a list is about 45 MB):
    parsed a block at a time (:func:`_meta_blocks`)."""
    for rows in _meta_blocks(path, start, end):
        for cid, idx, nbytes, h in rows:
            yield RequestMeta(cid, int(idx), int(nbytes), h)


def receipt_maps(path: str) -> tuple[dict[str, int], dict[str, str]]:
    """A whole staged chunk's receipt maps, from its metadata file in chunk order:
    ``custom_id -> source_index`` and ``custom_id -> request line hash`` (the receipt's
    ``custom_id_to_source_index`` and ``request_hashes``). The same as reading
    :func:`iter_meta`, in bulk: each parsed block (:func:`_meta_blocks`) goes into the
    maps by ``zip``, with no object per request.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: the file cannot be read.
    """
    index: dict[str, int] = {}
    hashes: dict[str, str] = {}
    for rows in _meta_blocks(path):
        ids = [r[0] for r in rows]
        index.update(zip(ids, [r[1] for r in rows]))
        hashes.update(zip(ids, [r[3] for r in rows]))
    return index, hashes


def read_meta(path: str, start: int = 0, end: Optional[int] = None) -> list[RequestMeta]:
    """:func:`iter_meta` as a list."""
    return list(iter_meta(path, start, end))


def iter_lines(path: str, start: int = 0, end: Optional[int] = None) -> Iterator[bytes]:
    """The request lines ``start`` to ``end`` of a staged file, one at a time."""
    with FileSystems.open(path, compression_type="uncompressed") as f:
        for i, line in enumerate(f):
            if i < start:
                continue
            if end is not None and i >= end:
                break
            yield line


def open_staged(path: str) -> Any:
    """A binary file object of the staged file, to upload it streamed."""
    return FileSystems.open(path, compression_type="uncompressed")


def delete_staged(path: str) -> None:
    """Delete a staged file and its metadata (missing ones are fine)."""
    delete_files([path, meta_path(path)])


class StagingSpaceError(MmirageError):
    """Not enough free disk for the staged chunks (raised before anything is read)."""

    exit_code = 2


def dataset_bytes(datasets: Any) -> int:
    """Total size in bytes of the files the datasets read (their splits' files)."""
    files = {s.path for s in _list_splits(datasets, 1 << 40)}
    total = 0
    for match in FileSystems.match(sorted(files)):
        total += sum(m.size_in_bytes for m in match.metadata_list)
    return total


def staging_need_bytes(config: Any, dry_run: bool) -> int:
    """About what a run stages, in bytes: every request once (twice in a dry run: the
    staged chunks and the export) plus the placeholder rows, estimated as
    ``(outputs x (1 or 2) + 1) x`` the datasets' file sizes (text requests are about as
    large as the rows they are built from; image bytes referenced by path are not
    counted)."""
    per = 2 if dry_run else 1
    return (len(config.outputs) * per + 1) * dataset_bytes(config.datasets)


def check_free_space(folder: str, need: int) -> None:
    """Refuse a local staging folder whose disk has less than ``need`` bytes free.

    Raises:
        StagingSpaceError: naming the folder, the free and the needed bytes.
    """
    import os
    import shutil

    if is_uri(folder):
        return  # object stores: no fixed capacity to check
    probe = os.path.dirname(os.path.abspath(folder)) or "."
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free
    if free < need:
        raise StagingSpaceError(
            f"not enough free disk for the staged chunks in {folder}: {free / 2**20:,.0f} "
            f"MiB free, about {need / 2**20:,.0f} MiB needed (every request is staged "
            "before anything is sent); free some space, put metadata_output_path on a "
            "larger disk, or pass --skip-space-check"
        )


@contextlib.contextmanager
def staging_area(
    base: str,
    run_id: str,
    need_bytes: int = 0,
    keep: bool = False,
) -> Iterator[str]:
    """The run's staging folder for one pipeline: leftovers of an earlier attempt of
    the run are removed first (a resumed run rebuilds its chunks), free space is checked
    on a local disk (``need_bytes``; 0 skips the check), and the folder is removed when
    the pipeline is over, whatever its outcome, unless ``keep``.

    Raises:
        StagingSpaceError: see :func:`check_free_space`.
    """
    folder = staging_dir(base, run_id)
    delete_folder(folder)
    if need_bytes:
        check_free_space(folder, need_bytes)
    try:
        yield folder
    finally:
        if not keep:
            try:
                delete_folder(folder)
            except Exception as exc:  # noqa: BLE001 - the run's outcome matters more
                import logging

                logging.getLogger(__name__).warning(
                    "could not remove the staging folder %s: %s", folder, exc
                )
