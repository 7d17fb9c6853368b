"""Read the configured datasets into :class:`~mmirage_beam.records.SourceRow` elements.

``source_index`` is the 0-based position of a row in the concatenation of the configured
datasets, in config order (JSONL: non-blank lines; Parquet / Arrow: row position). It is
computed the same way on every runner and re-run, without funnelling rows through one
worker:

1. When :class:`ReadDatasets` is constructed, only metadata is touched: every dataset is
   cut into *splits* (JSONL: byte ranges of about ``desired_split_bytes``, a line belonging
   to the range it starts in, as in Beam's ``textio``; Parquet: one row group; ``loadable``
   (HuggingFace ``save_to_disk``): one Arrow file listed in ``state.json``).
2. A counting pass gives each split its number of rows (and, for JSONL, of physical
   lines); the counts become a tiny table of prefix sums (one entry per split) that is a
   singleton side input.
3. A reading pass decodes each split in parallel and numbers its rows ``offset + local
   position``, keeping only the rows of this shard's contiguous slice.

Value conversion (Parquet / Arrow rows, see :func:`to_json_value`): rows become plain
JSON-compatible dicts; binary values always become standard base64 strings.

Step 1 is :mod:`mmirage_beam.io.splits`, the decoding of a line or a record batch
:mod:`mmirage_beam.io.decode`; this module counts and reads. ``to_json_value`` and
``replace_lone_surrogates`` are importable from here too.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from mmirage_beam.errors import ConfigError
from mmirage_beam.io.decode import (
    _arrow_batches,
    _decode_jsonl_line,
    _rows_in_range,
    _RowsNotJson,
    replace_lone_surrogates,
    to_json_value,
)
from mmirage_beam.io.splits import _JSONL, _PARQUET, DatasetSource, _list_splits, _Split
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress.counters import set_total
from mmirage_beam.records import RowError, SourceRow

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DEFAULT_DESIRED_SPLIT_BYTES",
    "ReadDatasetsResult",
    "ReadDatasets",
    "to_json_value",
    "replace_lone_surrogates",
]


_LOGGER = logging.getLogger(__name__)

#: counter ``empty_dataset:<i>``: 1 when dataset ``i`` of the config holds no row
EMPTY_DATASET_PREFIX = "empty_dataset:"

DEFAULT_DESIRED_SPLIT_BYTES = 64 * 1024 * 1024  # 64 MiB
_PARQUET_BATCH_ROWS = 1024  # rows per record batch read from a Parquet row group
_ERRORS_TAG = "errors"
_UTF8_BOM = b"\xef\xbb\xbf"


class ReadDatasetsResult(NamedTuple):
    """The outputs of :class:`ReadDatasets`.

    Attributes:
        rows: ``PCollection[SourceRow]``, one element per row of this shard.
        errors: ``PCollection[RowError]``, one element per JSONL line of this shard that
            is not valid UTF-8, not JSON, or not a JSON object.
    """

    rows: beam.PCollection
    errors: beam.PCollection


class ReadDatasets(beam.PTransform):
    """Read datasets into numbered rows: ``PBegin -> ReadDatasetsResult``.

    Apply it to the pipeline root: ``result = p | ReadDatasets(cfg.datasets)``, then use
    ``result.rows`` (``PCollection[SourceRow]``) and ``result.errors``
    (``PCollection[RowError]``). Elements are unordered; ``source_index`` gives the order.

    Supported dataset types:

    * ``JSONL``: UTF-8, one JSON object per line, ``\\n`` or ``\\r\\n`` line ends, a BOM
      at the start of a file tolerated. Whitespace-only lines are skipped and not counted.
      A line that is not UTF-8, not JSON, or not a JSON object becomes a ``RowError``
      (``location="line N"``, N the 1-based physical line number in the file) that still
      uses up its ``source_index``. ``NaN``/``Infinity`` literals and out-of-range floats
      become ``None``; an escaped lone UTF-16 surrogate (``"\\ud800"``, which has no
      UTF-8 encoding) is kept as the str JSON decodes it to (ExtractInputs makes an input
      holding one an invalid row; writers escape it back, ``jsonl.json_line``).
      Compressed files (``.gz``, ``.bz2``, ...) are one split each.
    * ``parquet``: one split per row group (row counts from the footer).
    * ``loadable``: a HuggingFace ``save_to_disk`` directory; its Arrow IPC files are read
      in the order of ``state.json``'s ``_data_files`` (no ``datasets`` package needed).

    A JSONL or Parquet ``path`` may also be a glob or a directory: matching files are read
    in sorted path order (from a directory: only files named ``*.jsonl``, ``*.ndjson``,
    ``*.jsonlines`` (optionally compressed) or ``*.parquet``, ``*.pq``, ``*.parq``, and not
    starting with ``.`` or ``_``; a glob takes every file it matches). Files are opened
    through Beam's ``FileSystems``, so remote paths (``gs://``, ``s3://``...) work when
    their Beam filesystem is installed.

    Args:
        datasets: ``loading_params.datasets``, in config order.
        num_shards: number of contiguous row slices the whole input is cut into.
        shard_id: the slice this pipeline reads: with N rows in total, rows
            ``[shard_id * N // num_shards, (shard_id + 1) * N // num_shards)``.
        desired_split_bytes: target size of a JSONL split, in bytes (default 64 MiB).
        max_rows: read only the slice's first ``max_rows`` rows by source_index
            (``mmirage run --limit N``); None: all of them.

    Raises:
        ConfigError: (when constructed) a dataset path that does not exist or matches no
            file, an unreadable Parquet footer or ``state.json``, an unknown dataset type,
            or invalid ``num_shards`` / ``shard_id`` / ``max_rows``; the message names
            ``loading_params.datasets[i]`` and the path.
        ValueError: ``desired_split_bytes`` is not a positive integer.
        RuntimeError: (on a worker, failing the pipeline) a file changed between the
            counting and the reading pass. A Parquet / Arrow file that cannot be decoded
            also fails the pipeline (``pyarrow.ArrowException`` / ``OSError``).
    """

    def __init__(
        self,
        datasets: Sequence[DatasetSource],
        num_shards: int = 1,
        shard_id: int = 0,
        desired_split_bytes: int = DEFAULT_DESIRED_SPLIT_BYTES,
        max_rows: Optional[int] = None,
    ) -> None:
        super().__init__()
        if max_rows is not None and (
            isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1
        ):
            raise ConfigError("--limit", f"must be an integer >= 1, got {max_rows!r}")
        if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
            raise ConfigError("loading_params.datasets", "must be a list of datasets")
        if not datasets:
            raise ConfigError("loading_params.datasets", "must be a non-empty list")
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise ConfigError(
                "loading_params.num_shards", f"must be an integer >= 1, got {num_shards!r}"
            )
        if isinstance(shard_id, bool) or not isinstance(shard_id, int) or shard_id < 0:
            raise ConfigError(
                "loading_params.shard_id", f"must be an integer >= 0, got {shard_id!r}"
            )
        if shard_id >= num_shards:
            raise ConfigError(
                "loading_params.shard_id", f"{shard_id} must be < num_shards ({num_shards})"
            )
        if (
            isinstance(desired_split_bytes, bool)
            or not isinstance(desired_split_bytes, int)
            or desired_split_bytes < 1
        ):
            raise ValueError(
                f"desired_split_bytes must be a positive integer, got {desired_split_bytes!r}"
            )
        self._datasets = tuple(datasets)
        self._num_shards = num_shards
        self._shard_id = shard_id
        self._max_rows = max_rows
        self._desired_split_bytes = desired_split_bytes
        self._splits = _list_splits(self._datasets, desired_split_bytes)

    @property
    def num_splits(self) -> int:
        """Number of splits (units of parallel work) the datasets were cut into."""
        return len(self._splits)

    def display_data(self) -> dict[str, Any]:
        return {
            "datasets": ", ".join(f"{d.type}:{d.path}" for d in self._datasets),
            "num_shards": self._num_shards,
            "shard_id": self._shard_id,
            "desired_split_bytes": self._desired_split_bytes,
            "num_splits": len(self._splits),
        }

    def expand(self, pbegin: beam.pvalue.PBegin) -> ReadDatasetsResult:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(pbegin)  # every SDK worker imports the package at start-up
        file_ids = tuple(s.file_id for s in self._splits)
        # Both passes take the splits from one Reshuffle (spread over the workers).
        splits = (
            pbegin
            | "CreateSplits" >> beam.Create(self._splits, reshuffle=False)
            | "ReshuffleSplits" >> beam.Reshuffle()
        )
        counts = splits | "CountRows" >> beam.ParDo(_CountSplitRowsFn())
        # Once, over every split's count (a side input: no global combine's GroupByKey).
        offsets = (
            pbegin
            | "OffsetsOnce" >> beam.Impulse()
            | "ComputeOffsets"
            >> beam.Map(
                lambda _impulse, counts, **kwargs: _compute_offsets(counts, **kwargs),
                beam.pvalue.AsList(counts),
                file_ids=file_ids,
                num_shards=self._num_shards,
                shard_id=self._shard_id,
                max_rows=self._max_rows,
                split_datasets=tuple(s.dataset_index for s in self._splits),
                dataset_count=len(self._datasets),
            )
        )
        outputs = splits | "ReadRows" >> beam.ParDo(
            _ReadSplitFn(self._num_shards, self._shard_id),
            offsets=beam.pvalue.AsSingleton(offsets),
        ).with_outputs(_ERRORS_TAG, main="rows")
        return ReadDatasetsResult(rows=outputs.rows, errors=outputs[_ERRORS_TAG])


# --------------------------------------------------------------------------------------
# Counting pass


class _CountSplitRowsFn(beam.DoFn):
    """``_Split -> (split_id, rows, physical_lines)``; ``physical_lines`` is JSONL only."""

    def process(self, split: _Split) -> Iterator[tuple[int, int, int]]:
        if split.kind == _PARQUET:
            rows, lines = split.num_rows or 0, 0
        elif split.kind == _JSONL:
            rows = lines = 0
            with _open_jsonl(split) as f:
                for content in _jsonl_lines(f, split):
                    lines += 1
                    rows += content is not None
        else:
            with _open_binary(split.path) as f:
                rows, lines = sum(b.num_rows for b in _arrow_batches(f)), 0
        _LOGGER.debug(
            "ReadDatasets: split %d of %s holds %d rows", split.split_id, split.path, rows
        )
        yield split.split_id, rows, lines


@dataclasses.dataclass(frozen=True)
class _Offsets:
    """Prefix sums over splits (indexed by ``split_id``) and this shard's row slice.

    Attributes:
        rows_before: source_index of each split's first row.
        row_counts: rows in each split.
        lines_before: physical lines in the same file before each split (JSONL).
        total_rows: rows in all datasets.
        shard_start, shard_end: this shard's source_index range ``[start, end)``.
    """

    rows_before: tuple[int, ...]
    row_counts: tuple[int, ...]
    lines_before: tuple[int, ...]
    total_rows: int
    shard_start: int
    shard_end: int


def _compute_offsets(
    counts: list[tuple[int, int, int]],
    file_ids: tuple[int, ...],
    num_shards: int,
    shard_id: int,
    max_rows: Optional[int] = None,
    split_datasets: tuple[int, ...] = (),
    dataset_count: int = 0,
) -> _Offsets:
    by_id: dict[int, tuple[int, int]] = {}
    for split_id, rows, lines in counts:
        if split_id in by_id:
            raise RuntimeError(f"ReadDatasets: split {split_id} was counted twice")
        by_id[split_id] = (rows, lines)
    if len(by_id) != len(file_ids):
        missing = sorted(set(range(len(file_ids))) - set(by_id))
        raise RuntimeError(f"ReadDatasets: splits {missing[:10]} were not counted")
    rows_before, row_counts, lines_before = [], [], []
    total = line_total = 0
    previous_file = None
    for split_id, file_id in enumerate(file_ids):
        rows, lines = by_id[split_id]
        if file_id != previous_file:
            previous_file, line_total = file_id, 0
        rows_before.append(total)
        row_counts.append(rows)
        lines_before.append(line_total)
        total += rows
        line_total += lines
    per_dataset = [0] * dataset_count
    for split_id, index in enumerate(split_datasets):
        per_dataset[index] += by_id[split_id][0]
    for index, rows in enumerate(per_dataset):
        if not rows:  # said by the launcher, naming the dataset (issue 38: it was silent)
            Metrics.counter(METRICS_NAMESPACE, f"{EMPTY_DATASET_PREFIX}{index}").inc()
    start, end = shard_id * total // num_shards, (shard_id + 1) * total // num_shards
    if max_rows is not None:  # mmirage run --limit N: the shard's first N rows
        end = min(end, start + max_rows)
    _LOGGER.info(
        "ReadDatasets: %d rows in %d splits; shard %d of %d reads source_index [%d, %d)",
        total,
        len(file_ids),
        shard_id,
        num_shards,
        start,
        end,
    )
    return _Offsets(tuple(rows_before), tuple(row_counts), tuple(lines_before), total, start, end)


# --------------------------------------------------------------------------------------
# Reading pass


class _ReadSplitFn(beam.DoFn):
    """``_Split -> SourceRow`` (main output) and ``RowError`` (``errors`` output).

    Only the rows of the split that fall inside this shard's slice are decoded.
    """

    def __init__(self, num_shards: int, shard_id: int) -> None:
        self._num_shards = num_shards
        self._shard_id = shard_id
        self._rows_read = Metrics.counter(METRICS_NAMESPACE, "rows_read")
        self._row_errors = Metrics.counter(METRICS_NAMESPACE, "row_errors")

    def start_bundle(self) -> None:
        self._read_count = 0  # added to the rows_read metric once per bundle

    def finish_bundle(self) -> None:
        if self._read_count:
            self._rows_read.inc(self._read_count)
        self._read_count = 0

    def _row_error(
        self, split: _Split, source_index: int, reason: str, location: str
    ) -> beam.pvalue.TaggedOutput:
        """A row of ``split`` that cannot be read, counted in ``row_errors``: its
        ``RowError`` (no input named) for the ``errors`` output."""
        self._row_errors.inc()
        return beam.pvalue.TaggedOutput(
            _ERRORS_TAG,
            RowError(
                source_index=source_index,
                dataset_path=split.dataset_path,
                input_name=None,
                reason=reason,
                location=location,
            ),
        )

    def process(self, split: _Split, offsets: _Offsets) -> Iterator[Any]:
        set_total("rows read", offsets.shard_end - offsets.shard_start)  # for "of N"
        first = offsets.rows_before[split.split_id]
        count = offsets.row_counts[split.split_id]
        begin = max(offsets.shard_start - first, 0)
        stop = min(offsets.shard_end - first, count)
        if begin >= stop:
            return
        if split.kind == _JSONL:
            yield from self._read_jsonl(split, first, begin, stop, count, offsets)
            return
        import pyarrow as pa

        source_index = first + begin
        try:
            with _open_binary(split.path) as f:
                if split.kind == _PARQUET:
                    import pyarrow.parquet as pq

                    batches: Iterable[pa.RecordBatch] = pq.ParquetFile(f).iter_batches(
                        batch_size=_PARQUET_BATCH_ROWS, row_groups=[split.start]
                    )
                else:
                    batches = _arrow_batches(f)
                for row in _rows_in_range(batches, begin, stop, split):
                    self._read_count += 1
                    yield SourceRow(source_index, split.dataset_index, row)
                    source_index += 1
        except (pa.ArrowException, OSError, _RowsNotJson) as exc:
            # Corrupt data (the footer was readable, so the rows are counted), or a schema
            # no JSON object can hold: every row not read is invalid, named, and stops the
            # run before anything is submitted.
            what = f"row group {split.start}" if split.kind == _PARQUET else "Arrow data"
            for index in range(source_index, first + stop):
                yield self._row_error(
                    split, index, f"{split.path}: {what} cannot be read ({exc})", what
                )

    def _read_jsonl(
        self, split: _Split, first: int, begin: int, stop: int, count: int, offsets: _Offsets
    ) -> Iterator[Any]:
        lines_before = offsets.lines_before[split.split_id]
        in_file = "" if split.path == split.dataset_path else f" of {split.path}"
        local = -1
        with _open_jsonl(split) as f:
            for line_index, content in enumerate(_jsonl_lines(f, split)):
                if content is None:
                    continue
                local += 1
                if local < begin:
                    continue
                if local >= stop:
                    return
                source_index = first + local
                row, reason = _decode_jsonl_line(content)
                if reason is None:
                    self._read_count += 1
                    yield SourceRow(source_index, split.dataset_index, row)
                else:
                    yield self._row_error(
                        split,
                        source_index,
                        reason,
                        f"line {lines_before + line_index + 1}{in_file}",
                    )
        if local + 1 != count:
            raise RuntimeError(
                f"{split.path} changed while being read: bytes [{split.start}, {split.end}) "
                f"held {count} rows when counted and {local + 1} when read"
            )


def _open_binary(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _open_jsonl(split: _Split) -> BinaryIO:
    compression = CompressionTypes.AUTO if split.compressed else CompressionTypes.UNCOMPRESSED
    return FileSystems.open(split.path, compression_type=compression)


def _jsonl_lines(f: BinaryIO, split: _Split) -> Iterator[bytes | None]:
    """Each physical line that starts in the split's byte range, in order.

    Yields the line without BOM (at the start of the file) and line terminator, or
    ``None`` for a whitespace-only line. As in Beam's ``textio``, a range that does not
    start at byte 0 begins after the first ``\\n`` at or after byte ``start - 1``.
    """
    position = split.start
    if split.start > 0:
        f.seek(split.start - 1)
        position = split.start - 1 + len(f.readline())
    first_in_file = split.start == 0
    while split.end is None or position < split.end:
        line = f.readline()
        if not line:
            return
        position += len(line)
        if first_in_file:
            first_in_file = False
            if line.startswith(_UTF8_BOM):
                line = line[len(_UTF8_BOM) :]
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        # what `line.strip()` being empty says, without copying the line
        yield None if not line or line.isspace() else line
