"""Spill a merge's streams to temporary files by source_index range.

Every stream a merge joins (results, rows, expected and rebuilt requests, ...) goes
through :class:`SpillByRange`, fused with the stage producing it: each element is
pickled (by groups of records) into the file of its range (:class:`RangePartitioner` over
:func:`partition_bounds`), and only a small :class:`SpillFile` per file moves on.
:func:`read_spilled` reads one back for the join (:mod:`mmirage_beam.transforms.merge`).
"""

from __future__ import annotations

import bisect
import io
import pickle
import uuid
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from mmirage_beam.transforms.memory import release_free_memory

__all__ = [
    "partitions_for",
    "partition_bounds",
    "SPILL_BUFFER_BYTES",
    "ROWS_KIND",
    "RESULTS_KIND",
    "EXPECTED_KIND",
    "REBUILT_KIND",
    "CHANGED_KIND",
    "SKIPPED_KIND",
    "UNKNOWN_KIND",
    "ANSWER_KEYS_KIND",
    "RangePartitioner",
    "SpillFile",
    "read_spilled",
    "read_spilled_groups",
    "SPILL_GROUP_RECORDS",
    "SpillWriter",
    "SpillByRange",
]


def partitions_for(lo: int, hi: int, rows_per_partition: int) -> int:
    """How many range partitions over ``[lo, hi]`` (inclusive) hold at most
    ``rows_per_partition`` indices each: the ceiling of the span over the width, so the
    partition a worker joins stays the same size however large the dataset (at least 1)."""
    span = max(1, hi - lo + 1)
    return max(1, -(-span // max(1, rows_per_partition)))


def partition_bounds(lo: int, hi: int, num_partitions: int) -> list[int]:
    """Start indices of ``num_partitions`` equal ranges over ``[lo, hi]`` (inclusive)."""
    span = max(1, hi - lo + 1)
    n = max(1, min(num_partitions, span))
    return [lo + (span * i) // n for i in range(n)]


SPILL_BUFFER_BYTES = 16 << 20

ROWS_KIND = "rows"
RESULTS_KIND = "results"
EXPECTED_KIND = "expected"
REBUILT_KIND = "rebuilt"
CHANGED_KIND = "changed"
SKIPPED_KIND = "skipped"
UNKNOWN_KIND = "unknown"
#: (custom_id, source_index, answer key) of every rebuilt request (mmirage_beam.reuse)
ANSWER_KEYS_KIND = "answerkeys"


class RangePartitioner:
    """source_index -> partition id, monotone: a lower id holds only lower indices.

    Inside ``[lo, hi]`` the ``bounds`` of :func:`partition_bounds`; below and above it
    (rows without a receipt: skipped or never submitted ones, rows of other runs),
    further ranges of the same width numbered on (negative ids below ``lo``), so no
    partition holds more than about ``width`` indices.
    """

    def __init__(self, lo: int, hi: int, bounds: Sequence[int]) -> None:
        self.lo, self.hi, self.bounds = lo, hi, list(bounds)
        self.width = max(1, -(-(hi - lo + 1) // max(1, len(self.bounds))))

    def __call__(self, source_index: int) -> int:
        if source_index < self.lo:
            return -1 - (self.lo - 1 - source_index) // self.width
        if source_index > self.hi:
            return len(self.bounds) + (source_index - self.hi - 1) // self.width
        return bisect.bisect_right(self.bounds, source_index) - 1


class SpillFile(NamedTuple):
    """One temporary file of one kind of record for one partition."""

    partition: int
    kind: str
    path: str


def _write_records(path: str, records: list[bytes]) -> None:
    with FileSystems.create(path) as f:
        f.write(b"".join(records))


#: records pickled together, one pickle per group: the class of a group's records and
#: their repeated strings are written once, and one pickler call covers many records
SPILL_GROUP_RECORDS = 128

_tuple_new = tuple.__new__


def _pack(records: list[Any]) -> bytes:
    """A group of records -> one pickle: ``(cls, [plain tuples])`` when every record is
    an instance of the same NamedTuple class ``cls`` (rebuilt with ``tuple.__new__``,
    without the class's Python ``__new__``), else ``(None, records)``."""
    cls = type(records[0])
    if (
        cls is not tuple
        and hasattr(cls, "_fields")
        and issubclass(cls, tuple)
        and all(type(r) is cls for r in records)
    ):
        return pickle.dumps((cls, [tuple(r) for r in records]), protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps((None, records), protocol=pickle.HIGHEST_PROTOCOL)


def read_spilled_groups(path: str) -> Iterator[list[Any]]:
    """The records of one spill file, in the order written, a list per pickled group
    (one file is at most about :data:`SPILL_BUFFER_BYTES`, read whole)."""
    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read()
    stream = io.BytesIO(data)
    size = len(data)
    load = pickle.load
    while stream.tell() < size:
        # One unpickler per group: each group is its own pickle, whose memo indices
        # start at 0 (one unpickler's memo would carry over and shift them).
        cls, records = load(stream)
        if cls is not None:
            records = [_tuple_new(cls, r) for r in records]
        yield records


def read_spilled(path: str) -> Iterator[Any]:
    """The records of one spill file, in the order written (one file is at most about
    :data:`SPILL_BUFFER_BYTES`, read whole)."""
    for group in read_spilled_groups(path):
        yield from group


class SpillWriter:
    """Records of one kind -> per-partition temporary files, for a DoFn that spills.

    Records are pickled by groups of :data:`SPILL_GROUP_RECORDS` per partition; at most
    :data:`SPILL_BUFFER_BYTES` of pickled groups are buffered: past it, :meth:`add`
    writes the biggest partition's buffer out and returns its :class:`SpillFile`;
    :meth:`close` writes the rest (call it at the end of each bundle). Made in a DoFn's
    ``start_bundle`` (it holds buffers, it is never pickled).

    Args:
        kind: the kind of record (part of the file names, read back by kind).
        temp_dir: the merge's temporary folder (absolute path or URI).
        partitioner: the ranges.
    """

    def __init__(self, kind: str, temp_dir: str, partitioner: RangePartitioner) -> None:
        self._kind = kind
        self._dir = temp_dir
        self._part = partitioner
        self._pending: dict[int, list[Any]] = {}
        self._buffers: dict[int, list[bytes]] = {}
        self._sizes: dict[int, int] = {}
        self._total = 0

    def _pack_pending(self, part: int) -> None:
        data = _pack(self._pending.pop(part))
        self._buffers.setdefault(part, []).append(data)
        self._sizes[part] = self._sizes.get(part, 0) + len(data)
        self._total += len(data)

    def _flush(self, part: int) -> SpillFile:
        if part in self._pending:
            self._pack_pending(part)
        path = f"{self._dir}/{self._kind}-p{part}-{uuid.uuid4().hex}.pkl"
        _write_records(path, self._buffers.pop(part))
        self._total -= self._sizes.pop(part)
        release_free_memory()  # the buffer's records, scattered between live rows
        return SpillFile(part, self._kind, path)

    def add(self, source_index: int, record: Any) -> Optional[SpillFile]:
        """Buffer ``record`` for the partition of ``source_index``; the
        :class:`SpillFile` of a buffer written out to stay within
        :data:`SPILL_BUFFER_BYTES`, else None."""
        part = self._part(source_index)
        pending = self._pending.get(part)
        if pending is None:
            pending = self._pending[part] = []
        pending.append(record)
        if len(pending) >= SPILL_GROUP_RECORDS:
            self._pack_pending(part)
            if self._total > SPILL_BUFFER_BYTES:
                return self._flush(max(self._sizes, key=self._sizes.__getitem__))
        return None

    def close(self) -> list[SpillFile]:
        """Write every buffered record out: one :class:`SpillFile` per partition, in
        partition order."""
        return [self._flush(part) for part in sorted(set(self._buffers) | set(self._pending))]


class _SpillFn(beam.DoFn):
    """Records -> per-partition temporary files (:class:`SpillWriter`); emits a
    :class:`SpillFile` per file."""

    def __init__(
        self, kind: str, temp_dir: str, partitioner: RangePartitioner, key: Any = None
    ) -> None:
        self._kind = kind
        self._dir = temp_dir
        self._part = partitioner
        self._key = key

    def start_bundle(self) -> None:
        self._writer = SpillWriter(self._kind, self._dir, self._part)

    def process(self, element: Any) -> Iterator[SpillFile]:
        index, record = self._key(element) if self._key else (element[0], element)
        written = self._writer.add(int(index), record)
        if written is not None:
            yield written

    def finish_bundle(self) -> Iterator[Any]:
        for written in self._writer.close():
            yield WindowedValue(written, 0, [GlobalWindow()])


class SpillByRange(beam.PTransform):
    """PCollection[T] -> PCollection[:class:`SpillFile`]: each element pickled (in
    groups) into the temporary file of its source_index's range, fused with the stage
    producing it.

    Args:
        kind: the kind of record (part of the file names, read back by kind).
        temp_dir: the merge's temporary folder (absolute path or URI).
        partitioner: the ranges.
        key: element -> ``(source_index, record to store)``; default ``(element[0],
            element)``.
    """

    def __init__(
        self, kind: str, temp_dir: str, partitioner: RangePartitioner, key: Any = None
    ) -> None:
        super().__init__()
        self._fn = _SpillFn(kind, temp_dir, partitioner, key)

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "Spill" >> beam.ParDo(self._fn)
