"""The collect side: verify the source, join by source_index, write in order.

What ``pipeline.MergeRows`` composes (bounded memory, see docs/architecture.md):

    BatchToFetch --FetchResults--> OutputResult (keyed by source_index)   + unknown ids
    ExtractedRow (re-read with the same reader) ---------------------------+
    rebuilt request hashes, receipts' expected entries --------------------+
        each --SpillByRange--> per-range spill files (RangePartitioner)
        --JoinPartitions--> per range: verify, join, render, sort -> parts,
                            concatenated in order -> OUT, OUT.errors.jsonl

The fetch step is :mod:`mmirage_beam.transforms.fetch`, the spilling
:mod:`mmirage_beam.transforms.spill`, a row's assembly
:mod:`mmirage_beam.transforms.assemble`; this module verifies each request against the
source and joins the spilled ranges. Their public names are importable from here too.
"""

from __future__ import annotations

import gc
import json
from typing import Any, Iterable, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from mmirage_beam.config.loader import OutputConfig
from mmirage_beam.crashpoints import crash_point
from mmirage_beam.io.fs import delete_folder
from mmirage_beam.io.writers import concatenate_files
from mmirage_beam.jsonl import json_line
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress.counters import add
from mmirage_beam.records import (
    ChangedRow,
    ChunkRequestLine,
    ExpectedRequest,
    RebuiltRequest,
    register_coders,
)
from mmirage_beam.reuse import canonical_settings, hash_and_answer_key, key_settings
from mmirage_beam.run.receipts import request_hash
from mmirage_beam.transforms import fetch, spill
from mmirage_beam.transforms.assemble import ANSWERS_TAG, ERRORS_TAG, MergedRow, _AssembleFn
from mmirage_beam.transforms.fetch import *  # noqa: F403 (re-exported, see __all__)
from mmirage_beam.transforms.fetch import OutputResult, never_submitted_result
from mmirage_beam.transforms.memory import release_free_memory
from mmirage_beam.transforms.spill import *  # noqa: F403 (re-exported, see __all__)
from mmirage_beam.transforms.spill import (
    ANSWER_KEYS_KIND,
    CHANGED_KIND,
    EXPECTED_KIND,
    REBUILT_KIND,
    RESULTS_KIND,
    ROWS_KIND,
    SKIPPED_KIND,
    UNKNOWN_KIND,
    RangePartitioner,
    SpillFile,
    SpillWriter,
    read_spilled,
)

register_coders()  # the records these PCollections carry: RowCoder, not pickle

# The join, and the public names of the stages it joins (fetch, spill), importable from
# here as before.
__all__ = [
    *fetch.__all__,
    *spill.__all__,
    "ERRORS_TAG",
    "MergedRow",
    "JoinPartitions",
    "ExpectedRequest",
    "RebuiltRequest",
    "ChunkRequestLine",
    "ChangedRow",
]


# -- source verification -----------------------------------------------------------------
# The verification records (ExpectedRequest, RebuiltRequest, ChunkRequestLine, ChangedRow)
# cross stages: spilled into the range files, or (chunk lines) grouped by chunk key.


def _expected_entries(receipt: dict[str, Any]) -> Iterator[tuple[str, ExpectedRequest]]:
    key = f"{receipt['run_id']}/{receipt.get('modality', '')}/{receipt['chunk_id']}"
    hashes = receipt.get("request_hashes") or {}
    for pos, (cid, idx) in enumerate(receipt["custom_id_to_source_index"].items()):
        yield cid, ExpectedRequest(key, pos, int(idx), receipt["request_hash"], hashes.get(cid))


def _check_chunk(element: tuple[str, Iterable[ChunkRequestLine]]) -> Iterator[ChangedRow]:
    key, entries = element
    ordered = sorted(entries, key=lambda e: e.position)
    lines = [e.line for e in ordered]
    expected = ordered[0].chunk_hash
    if any(line is None for line in lines) or request_hash(lines) != expected:
        Metrics.counter(METRICS_NAMESPACE, "chunks_source_changed").inc()
        for e in ordered:
            yield ChangedRow(e.source_index, key)


def _results_record(r: OutputResult) -> tuple[int, OutputResult]:
    return r.source_index, r


def _rows_record(r: Any) -> tuple[int, Any]:
    # a text row has no images: the row itself, without building a copy
    return r.source_index, (r._replace(images=()) if r.images else r)


class _RequestLine(bytes):
    """A rebuilt request line that keeps, as ``.request``, the dict it was serialised
    from (``json.dumps`` of it: the adapter does not override ``serialize_request``), so
    its checks need no parse of the line. Lives only inside the fused rebuild stage."""


def _serialize_keeping(self: Any, request: dict[str, Any]) -> bytes:
    from mmirage_beam.providers.base import BatchSubmissionAdapter

    line = _RequestLine(BatchSubmissionAdapter.serialize_request(self, request))
    line.request = request
    return line


_KEEPING_CLASSES: dict[type, type] = {}


class KeepRequests:
    """``adapter_cls`` for the merge's ``BuildRequests``: a picklable factory of the
    provider's adapter whose request lines keep their request dict
    (:class:`_RequestLine`); an adapter with its own ``serialize_request`` is made as
    is (its lines are parsed). The subclass is made on the worker, never pickled.

    Args:
        adapter_cls: the provider's BatchSubmissionAdapter subclass.
    """

    def __init__(self, adapter_cls: type) -> None:
        self.adapter_cls = adapter_cls

    def __call__(self) -> Any:
        """A new adapter (as ``adapter_cls()``)."""
        cls = self.adapter_cls
        if cls.serializes_its_own_way:
            return cls()
        keeping = _KEEPING_CLASSES.get(cls)
        if keeping is None:
            keeping = _KEEPING_CLASSES[cls] = type(
                cls.__name__, (cls,), {"serialize_request": _serialize_keeping}
            )
        return keeping()


class _RebuiltChecksSettings(NamedTuple):
    """What :class:`RebuiltChecks` was given (documented there), which
    :class:`_RebuiltChecksFn` carries to the workers."""

    old_entries: dict[str, list[ExpectedRequest]]
    temp_dir: str
    partitioner: RangePartitioner
    adapter_cls: type
    provider_config: Any
    answer_keys: bool


class _RebuiltChecksFn(beam.DoFn):
    """Rebuilt request (``BatchRequest``) -> its :class:`RebuiltRequest` (request hash)
    and, with answer keys, its ``(custom_id, source_index, answer key)``, both spilled
    here (:class:`SpillWriter`, kinds ``rebuilt`` and ``answerkeys``): one DoFn, and the
    request's canonical JSON made once for both (:func:`hash_and_answer_key`, from the
    dict a :class:`_RequestLine` keeps, else from the parsed line). Emits
    :class:`SpillFile`; a request of a chunk whose receipt has no ``request_hashes``
    also goes, with its line, to ``by_chunk`` as ``(chunk key, ChunkRequestLine)``."""

    def __init__(self, settings: _RebuiltChecksSettings) -> None:
        self._s = settings

    def setup(self) -> None:
        self._adapter = self._s.adapter_cls()
        self._settings = (
            canonical_settings(key_settings(self._s.provider_config))
            if self._s.answer_keys
            else None
        )

    def start_bundle(self) -> None:
        self._hashes = SpillWriter(REBUILT_KIND, self._s.temp_dir, self._s.partitioner)
        self._keys = (
            SpillWriter(ANSWER_KEYS_KIND, self._s.temp_dir, self._s.partitioner)
            if self._s.answer_keys
            else None
        )

    def process(self, r: Any) -> Iterator[Any]:
        request = getattr(r.line, "request", None)
        if request is None:
            request = json.loads(r.line)
        now, key = hash_and_answer_key(self._adapter, request, self._settings)
        idx = r.source_index
        written = self._hashes.add(idx, RebuiltRequest(r.custom_id, idx, r.output_name, now))
        if written is not None:
            yield written
        if self._keys is not None:
            written = self._keys.add(idx, (r.custom_id, idx, key))
            if written is not None:
                yield written
        for e in self._s.old_entries.get(r.custom_id, ()):
            line = ChunkRequestLine(e.position, e.source_index, e.chunk_hash, bytes(r.line))
            yield pvalue.TaggedOutput("by_chunk", (e.chunk_key, line))

    def finish_bundle(self) -> Iterator[Any]:
        files = self._hashes.close() + (self._keys.close() if self._keys is not None else [])
        for written in files:
            yield WindowedValue(written, 0, [GlobalWindow()])


class RebuiltChecks(beam.PTransform):
    """``PCollection[BatchRequest]`` (the merge's rebuilt requests) ->
    ``PCollection[SpillFile]`` (main output ``files``) and ``by_chunk``: each request's
    hash and, with ``answer_keys``, its answer key, spilled by range
    (:class:`_RebuiltChecksFn`).

    Args:
        old_entries: custom_id -> expected entries of the receipts without
            ``request_hashes`` (their chunks are checked as a whole).
        temp_dir: the merge's temporary folder.
        partitioner: the ranges.
        adapter_cls: the provider's adapter class.
        provider_config: the processor's config (its answer-key settings).
        answer_keys: also spill each request's answer key (the merge writes answers).
    """

    def __init__(
        self,
        old_entries: dict[str, list[ExpectedRequest]],
        temp_dir: str,
        partitioner: RangePartitioner,
        adapter_cls: type,
        provider_config: Any,
        answer_keys: bool,
    ) -> None:
        super().__init__()
        self._fn = _RebuiltChecksFn(
            _RebuiltChecksSettings(
                old_entries, temp_dir, partitioner, adapter_cls, provider_config, answer_keys
            )
        )

    def expand(self, requests: beam.PCollection) -> Any:
        return requests | "HashAndSpill" >> beam.ParDo(self._fn).with_outputs(
            "by_chunk", main="files"
        )


def _old_chunk_entries(receipt: dict[str, Any]) -> Iterator[tuple[str, ChunkRequestLine]]:
    """A receipt without per-request hashes -> ``(chunk key, ChunkRequestLine)`` (line
    None) per request: the chunk's expected requests, rebuilt or not."""
    for _cid, e in _expected_entries(receipt):
        if e.request_hash is None:
            yield e.chunk_key, ChunkRequestLine(e.position, e.source_index, e.chunk_hash, None)


def _check_old_chunk(element: tuple[str, Iterable[ChunkRequestLine]]) -> Iterator[ChangedRow]:
    """A chunk of a receipt without per-request hashes: its receipt's entries (line None)
    and its rebuilt requests (with their line) -> every row, when the chunk changed."""
    key, entries = element
    by_pos: dict[int, ChunkRequestLine] = {}
    for e in entries:
        if e.position not in by_pos or e.line is not None:
            by_pos[e.position] = e
    yield from _check_chunk((key, list(by_pos.values())))


class _CollectPartitionsFn(beam.DoFn):
    def process(self, files: list[SpillFile]) -> Iterator[tuple[int, dict[str, list[str]]]]:
        by_part: dict[int, dict[str, list[str]]] = {}
        for f in files:
            by_part.setdefault(f.partition, {}).setdefault(f.kind, []).append(f.path)
        for part in sorted(by_part):
            yield part, {k: sorted(v) for k, v in by_part[part].items()}


#: rows merged between two updates of the "rows merged" progress counter
_PROGRESS_EVERY = 1000


class _JoinPartitionFn(beam.DoFn):
    """One partition: read its files, verify, join, render, write its ordered parts.

    Memory: the partition's rows, results and lines, never more.
    """

    def __init__(
        self,
        temp_dir: str,
        outputs: Sequence[OutputConfig],
        schema: Any,
        remove_columns: bool,
        unsubmitted_run: Optional[tuple[str, str]],
        answers_settings_key: str = "",
    ) -> None:
        self._dir = temp_dir
        self._assemble = _AssembleFn(outputs, schema, remove_columns, answers_settings_key)
        self._unsubmitted_run = unsubmitted_run

    def setup(self) -> None:
        self._assemble.setup()

    def _verify(self, files: dict[str, list[str]]) -> Iterator[Any]:
        """Per-request check: (source_index, key) changed, and never-submitted results."""
        expected: dict[str, list[ExpectedRequest]] = {}
        for path in files.get(EXPECTED_KIND, ()):
            for cid, entry in read_spilled(path):
                expected.setdefault(cid, []).append(entry)
        for path in files.get(REBUILT_KIND, ()):
            for cid, idx, output_name, now in read_spilled(path):  # RebuiltRequest
                entries = expected.pop(cid, None)
                if entries is None:
                    if self._unsubmitted_run is not None:
                        run, command = self._unsubmitted_run
                        Metrics.counter(METRICS_NAMESPACE, "requests_never_submitted").inc()
                        add("results fetched")
                        yield (
                            RESULTS_KIND,
                            never_submitted_result((cid, idx, output_name), run, command),
                        )
                    continue
                yield from self._compare(entries, now)
        for entries in expected.values():  # a receipted request the source no longer builds
            yield from self._compare(entries, None)

    def _compare(self, entries: list[ExpectedRequest], now: Optional[str]) -> Iterator[Any]:
        hashed = [e for e in entries if e.request_hash is not None]
        if hashed and not any(e.request_hash == now for e in hashed):
            Metrics.counter(METRICS_NAMESPACE, "requests_source_changed").inc()
            yield CHANGED_KIND, ChangedRow(hashed[-1].source_index, hashed[-1].chunk_key)

    def process(self, element: tuple[int, dict[str, list[str]]]) -> Iterator[tuple]:
        # The collector is paused while a partition is joined: its records (tuples,
        # dicts and lists of decoded JSON) hold no reference cycles and all live until
        # the partition is written, yet each would be traversed by the collections its
        # own allocation triggers. Cyclic garbage of the call, if any, is collected
        # once the collector runs again (peak RSS unchanged at 200,000 rows). The pause
        # is process-wide (a worker's other threads go without it meanwhile); a call
        # that found the collector on turns it back on, so it is never left off.
        paused = gc.isenabled()
        gc.disable()
        try:
            written = self._join(*element)
        finally:
            if paused:
                gc.enable()
        crash_point("merge_joined")
        yield written

    def _join(self, part: int, files: dict[str, list[str]]) -> tuple[int, str, str, str]:
        """One partition joined -> ``(part, merged path, errors path, answers path)``."""
        grouped: dict[int, dict[str, list]] = {}

        # A row's slot holds only the lists it has ("results" always): most rows have
        # one result and one row, and no changed chunk or skip reason.
        def slot(idx: int) -> dict[str, list]:
            g = grouped.get(idx)
            if g is None:
                g = grouped[idx] = {"results": []}
            return g

        def put(g: dict[str, list], kind: str, value: Any) -> None:
            values = g.get(kind)
            if values is None:
                g[kind] = [value]
            else:
                values.append(value)

        for kind, record in self._verify(files):
            if kind == RESULTS_KIND:
                slot(record.source_index)["results"].append(record)
            else:
                put(slot(record.source_index), "changed", record.chunk_key)
        for path in files.get(RESULTS_KIND, ()):
            for r in read_spilled(path):
                slot(r.source_index)["results"].append(r)
        for path in files.get(CHANGED_KIND, ()):
            for idx, key in read_spilled(path):
                put(slot(idx), "changed", key)
        for path in files.get(SKIPPED_KIND, ()):
            for idx, reason in read_spilled(path):
                put(slot(idx), "skipped", reason)
        for path in files.get(ROWS_KIND, ()):
            for row in read_spilled(path):
                g = grouped.get(row.source_index)
                if g is not None:  # rows without any result are not written
                    put(g, "rows", row)
        for path in files.get(ANSWER_KEYS_KIND, ()):
            for cid, idx, key in read_spilled(path):
                g = grouped.get(idx)
                if g is not None:
                    g.setdefault("keys", {})[cid] = key
        lines: list[tuple[int, bytes]] = []
        errors: list[tuple[int, bytes]] = []
        answers: list[bytes] = []
        merged = 0
        for path in files.get(UNKNOWN_KIND, ()):
            errors.extend(read_spilled(path))
        for idx in sorted(grouped):
            g = grouped.pop(idx)
            if "changed" in g:
                g["changed"].sort()
            for out in self._assemble.process((idx, g)):
                if isinstance(out, pvalue.TaggedOutput) and out.tag == ANSWERS_TAG:
                    answers.append(json_line(out.value))
                elif isinstance(out, pvalue.TaggedOutput):
                    errors.append((out.value["source_index"], json_line(out.value)))
                else:
                    lines.append((out.source_index, out.line))
                    merged += 1
                    if merged == _PROGRESS_EVERY:
                        add("rows merged", merged)  # one lock per thousand rows, not per row
                        merged = 0
        if merged:
            add("rows merged", merged)
        lines.sort()
        errors.sort()
        written = []
        for what, entries in (
            ("merged", lines),
            ("errors", errors),
            ("answers", [(0, a) for a in answers]),
        ):
            path = f"{self._dir}/{what}-{part:+012d}.jsonl"
            with FileSystems.create(path) as f:
                for _idx, line in entries:
                    f.write(line)
            written.append(path)
        del lines, errors, answers  # (grouped is empty: each row popped as it was joined)
        release_free_memory()  # the partition's rows, results and lines
        return part, written[0], written[1], written[2]


class _ConcatenatePartsFn(beam.DoFn):
    def __init__(
        self,
        output_path: str,
        errors_path: str,
        temp_dir: str,
        answers_path: Optional[str] = None,
    ) -> None:
        self._out, self._errors, self._dir = output_path, errors_path, temp_dir
        self._answers = answers_path

    def process(self, parts: list[tuple[int, str, str, str]]) -> Iterator[str]:
        ordered = sorted(parts)
        # Streamed, then renamed over the output: a reader never sees half a file.
        concatenate_files([p[1] for p in ordered], self._out)
        concatenate_files([p[2] for p in ordered], self._errors)
        if self._answers:  # last: only a merge that wrote both files records answers
            concatenate_files([p[3] for p in ordered], self._answers)
        delete_folder(self._dir)
        yield self._out


class JoinPartitions(beam.PTransform):
    """PCollection[:class:`SpillFile`] (every file of every kind) -> the output file and
    its errors file, each in source_index order (lines of one source_index by their
    bytes), written whole; PCollection[str] of the output path.

    Waits for every spill file (a global list of their names: one small element per
    file), then joins each partition in its own DoFn call and concatenates the parts in
    partition order; the temporary folder is removed once both files are written.
    """

    def __init__(
        self,
        temp_dir: str,
        output_path: str,
        errors_path: str,
        outputs: Sequence[OutputConfig],
        output_schema: Any,
        remove_columns: bool,
        unsubmitted_run: Optional[tuple[str, str]] = None,
        answers_path: Optional[str] = None,
        answers_settings_key: str = "",
    ) -> None:
        super().__init__()
        self._dir, self._out, self._errors = temp_dir, output_path, errors_path
        self._answers = answers_path
        self._join = _JoinPartitionFn(
            temp_dir, outputs, output_schema, remove_columns, unsubmitted_run, answers_settings_key
        )

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        return (
            files
            | "AllSpillFiles" >> beam.combiners.ToList()
            | "Partitions" >> beam.ParDo(_CollectPartitionsFn())
            | "SpreadPartitions" >> beam.Reshuffle()
            | "JoinPartition" >> beam.ParDo(self._join)
            | "AllParts" >> beam.combiners.ToList()
            | "Concatenate"
            >> beam.ParDo(_ConcatenatePartsFn(self._out, self._errors, self._dir, self._answers))
        )
