"""MergeRows: everything ``mmirage merge`` does after reading, as one PTransform.

    merge: receipts -> FetchResults -> range partitions by source_index (spilled) ->
           JoinPartitions with the re-read source rows -> one ordered merged file

:func:`build_merge_pipeline` is the whole merge graph (ReadDatasets, then MergeRows),
:func:`build_failures_pipeline` the failures job of ``mmirage resubmit``;
``mmirage_beam`` exports them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Sequence, Union

import apache_beam as beam

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.io.readers import ReadDatasets
from mmirage_beam.io.writers import WriteSingleFile
from mmirage_beam.jsonl import json_line
from mmirage_beam.progress.counters import (
    CountProgress,
    reported_usage,
)
from mmirage_beam.results import EMBEDDING, check_answer, resubmittable
from mmirage_beam.reuse import settings_key
from mmirage_beam.run.discovery import ReceiptEntry
from mmirage_beam.run.receipts import (
    ReceiptLocation,
    read_receipt_at,
    source_index_range,
)
from mmirage_beam.run.records import ReceiptJson
from mmirage_beam.settings import (
    ROWS_PER_PARTITION,
    MergeSettings,
    settings_from,
)
from mmirage_beam.transforms.build import BuildRequests, ExtractInputs
from mmirage_beam.transforms.fetch import FetchResults
from mmirage_beam.transforms.merge import (
    ExpectedRequest,
    JoinPartitions,
    KeepRequests,
    RebuiltChecks,
    _check_old_chunk,
    _expected_entries,
    _old_chunk_entries,
    _results_record,
    _rows_record,
)
from mmirage_beam.transforms.spill import (
    CHANGED_KIND,
    EXPECTED_KIND,
    RESULTS_KIND,
    ROWS_KIND,
    SKIPPED_KIND,
    UNKNOWN_KIND,
    RangePartitioner,
    SpillByRange,
    partition_bounds,
    partitions_for,
)

__all__ = [
    "MergePlan",
    "MergeRows",
    "build_failures_pipeline",
    "build_merge_pipeline",
]


@dataclass(frozen=True)
class MergePlan:
    """What :func:`build_merge_pipeline` wired, for the launcher's summary."""

    output_path: str
    errors_path: str
    num_partitions: int
    verified_receipts: int
    #: the merge's temporary folder (``<output>.merge-tmp-<id>``): removed by the job
    #: once both files are written; the launcher removes it when the job fails
    temp_dir: Optional[str] = None


class MergeRows(beam.PTransform):
    """``PCollection[SourceRow]`` (every row of the datasets) -> the merged file and its
    errors file: everything ``mmirage merge`` does after reading (fetch the batches'
    results, verify the re-read source against the receipts, join by source_index,
    ordered write). ``MergeRows(config, batches, receipts, providers, settings)`` with a
    :class:`~mmirage_beam.settings.MergeSettings`, or ``output_path`` and the other
    settings as keywords, as before (they build the settings, on ``.settings``); the
    :class:`MergePlan` is on ``.plan`` once expanded. Returns a ``PCollection[str]``
    holding the merged file's path once both files are written.

    Memory is bounded by one range partition (``rows_per_partition`` rows), not by the
    dataset: rows, results, rebuilt-request hashes and receipt entries are written, in
    the stage producing them, into per-range temporary files under
    ``<output>.merge-tmp-<id>/`` (:class:`~mmirage_beam.transforms.spill.SpillByRange`);
    only file names cross a stage boundary; each range is then joined by one DoFn call
    and the ranges' parts concatenated in order
    (:class:`~mmirage_beam.transforms.merge.JoinPartitions`).

    Args:
        config: the validated config (datasets, inputs, outputs, output_schema).
        batches: the :class:`~mmirage_beam.run.selection.BatchToFetch` of the merge.
        receipts: their receipts: the
            :class:`~mmirage_beam.run.discovery.ReceiptEntry` of
            :func:`mmirage_beam.run.selection.select_run` (read back one at a time by the
            workers, so no per-request map is held here) or receipt dicts; those with a
            ``run_id`` (written by mmirage-beam) are verified against the re-read source.
        providers: provider name -> (adapter class, provider config).
        output_path: the merged JSONL file (errors go to ``OUT.errors.jsonl``), with
            the settings below as keywords; or a
            :class:`~mmirage_beam.settings.MergeSettings` holding them all.
        num_partitions: ordered-write partitions (default: as many as it takes for
            none to hold more than ``rows_per_partition`` of the receipts'
            source_index range).
        rows_per_partition: the default partition's width, in rows.
        verify_source: rebuild the requests and compare chunk hashes.
        invalid_rows_files: the runs' ``<base>.invalid_rows.<run_id>.jsonl`` files; their
            rows (skipped at submission) are written marked ``mmirage_skipped``.
        unsubmitted_run: ``(run_id, resume command)``: report every rebuilt request that
            no receipt holds as ``never_submitted`` of that run (its row is written,
            marked), counted in ``requests_never_submitted``. Only when the receipts are
            every receipt of runs that read all the rows this merge reads (one shard) and
            the source is verified.
        errors_path: where the errors file goes (default: :func:`errors_path_for`
            ``output_path``), e.g. beside the final output when ``output_path`` is the
            temporary JSONL of a Parquet or hf merge.
        answers_path: where to write the answers file of the merge (every output merged
            without error, with its answer key; :mod:`mmirage_beam.reuse`), written last;
            None: none. Needs the source verified (the keys come from the rebuilt
            requests).
    """

    def __init__(
        self,
        config: PipelineConfig,
        batches: list[Any],
        receipts: Sequence[Any],
        providers: dict[str, tuple[type, Any]],
        output_path: Union[str, MergeSettings],
        num_partitions: Optional[int] = None,
        rows_per_partition: int = ROWS_PER_PARTITION,
        verify_source: bool = True,
        invalid_rows_files: Sequence[str] = (),
        unsubmitted_run: Optional[tuple[str, str]] = None,
        errors_path: Optional[str] = None,
        answers_path: Optional[str] = None,
    ) -> None:
        super().__init__()
        given = dict(
            num_partitions=num_partitions,
            rows_per_partition=rows_per_partition,
            verify_source=verify_source,
            invalid_rows_files=invalid_rows_files,
            unsubmitted_run=unsubmitted_run,
            errors_path=errors_path,
            answers_path=answers_path,
        )
        self.settings = settings_from(MergeSettings, output_path, given, _MERGE_DEFAULTS)
        self.config = config
        self.batches = batches
        self.receipts = receipts
        self.providers = providers
        self.plan: Optional[MergePlan] = None

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        import uuid

        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(rows)  # every SDK worker imports the package at start-up
        p = rows.pipeline
        config, batches, receipts = self.config, self.batches, self.receipts
        providers, settings = self.providers, self.settings
        output_path, num_partitions = settings.output_path, settings.num_partitions
        unsubmitted_run = settings.unsubmitted_run

        held = [_held_receipt(r) for r in receipts]  # no per-request map is kept
        ranges = [h.index_range for h in held if h.index_range is not None]
        lo = min((r[0] for r in ranges), default=0)
        hi = max((r[1] for r in ranges), default=0)
        if num_partitions is None:
            num_partitions = partitions_for(lo, hi, settings.rows_per_partition)
        bounds = partition_bounds(lo, hi, num_partitions)
        partitioner = RangePartitioner(lo, hi, bounds)
        errors_path = settings.errors_file
        # Next to the output (the launcher made it absolute or a URI), so every worker
        # sees it; removed once both files are written, and by the launcher on failure.
        temp_dir = f"{output_path}.merge-tmp-{uuid.uuid4().hex[:12]}"

        def spill(pcoll: beam.PCollection, kind: str, key: Any = None) -> beam.PCollection:
            return pcoll | f"Spill{kind.capitalize()}" >> SpillByRange(
                kind, temp_dir, partitioner, key
            )

        fetched = (
            p
            | "Batches" >> beam.Create(batches, reshuffle=False)
            | "FetchResults" >> FetchResults(providers)
        )
        spilled = [
            spill(
                fetched.results
                | "ProgressResults" >> CountProgress("results fetched", reported_usage),
                RESULTS_KIND,
                _results_record,
            ),
            spill(
                fetched.unknown | "UnknownLines" >> beam.Map(_unknown_line, lo - 1),
                UNKNOWN_KIND,
            ),
        ]
        verifiable = [h for h in held if h.receipt.get("run_id")] if settings.verify_source else []
        # the longest phase of a large merge: without it, only "results fetched" shows
        own_adapter = (providers.get(config.processor.provider) or (None,))[0]
        extracted = rows | "ExtractInputs" >> ExtractInputs(
            config.inputs,
            config.datasets,
            load_images=bool(verifiable),
            lenient=True,
            max_image_file_bytes=own_adapter.max_image_file_bytes if own_adapter else None,
            image_file_limit=own_adapter.image_file_limit if own_adapter else "",
            progress="rows read",  # counted by the step: no pass-through step per row
        )
        spilled.append(spill(extracted.rows, ROWS_KIND, _rows_record))
        if verifiable:
            adapter_cls = providers[config.processor.provider][0]
            rebuilt = extracted.rows | "RebuildRequests" >> BuildRequests(
                config.outputs,
                config.datasets,
                KeepRequests(adapter_cls),  # lines that keep their dict: no parse to check
                config.processor,
                count_tokens=False,  # only the bytes are compared
                canonical=False,  # hashed from the line in RebuiltHashes
            )
            # Receipts written before per-request hashes: checked per chunk (a GroupByKey
            # of those chunks' requests only; receipts of this version send nothing).
            old = [_load_receipt(h.source) for h in verifiable if not h.has_request_hashes]
            old_entries: dict[str, list[ExpectedRequest]] = {}
            for receipt in old:
                for cid, entry in _expected_entries(receipt):
                    old_entries.setdefault(cid, []).append(entry)
            # each request's hash and (with answers, for later runs to reuse, see
            # mmirage_beam.reuse) its answer key, spilled from one DoFn
            hashed = rebuilt.requests | "RebuiltChecks" >> RebuiltChecks(
                old_entries,
                temp_dir,
                partitioner,
                adapter_cls,
                config.processor,
                answer_keys=bool(settings.answers_path),
            )
            spilled.append(hashed.files)
            expected = (
                p
                # locations (or small test receipts): each worker reads its receipt
                | "VerifiableReceipts"
                >> beam.Create([h.source for h in verifiable], reshuffle=False)
                | "ExpectedRequests" >> beam.FlatMap(_expected_from)
            )
            spilled.append(spill(expected, EXPECTED_KIND, lambda e: (e[1].source_index, e)))
            if old:
                changed_chunks = (
                    (
                        hashed.by_chunk,
                        p
                        | "OldReceipts" >> beam.Create(old, reshuffle=False)
                        | "OldReceiptEntries" >> beam.FlatMap(_old_chunk_entries),
                    )
                    | "OldChunkEntries" >> beam.Flatten()
                    | "GroupOldChunks" >> beam.GroupByKey()
                    | "CompareChunkHashes" >> beam.FlatMap(_check_old_chunk)
                )
                spilled.append(spill(changed_chunks, CHANGED_KIND, lambda c: (c.source_index, c)))
        else:
            unsubmitted_run = None  # told apart only by verification
        if settings.invalid_rows_files:
            skipped = (
                p
                | "InvalidRowsFiles" >> beam.Create(list(settings.invalid_rows_files))
                | "ReadInvalidRows" >> beam.io.ReadAllFromText()
                | "ParseInvalidRows" >> beam.Map(json.loads)
                | "WithIndex" >> beam.Filter(lambda e: e.get("source_index") is not None)
                | "SkippedByIndex" >> beam.Map(lambda e: (int(e["source_index"]), e["reason"]))
            )
            spilled.append(spill(skipped, SKIPPED_KIND))
        written = tuple(spilled) | "AllSpillFiles" >> beam.Flatten()
        out = written | "JoinPartitions" >> JoinPartitions(
            temp_dir,
            output_path,
            errors_path,
            config.outputs,
            config.output_schema,
            config.remove_columns,
            unsubmitted_run,
            settings.answers_path if verifiable else None,
            settings_key(config.processor),
        )
        self.plan = MergePlan(output_path, errors_path, len(bounds), len(verifiable), temp_dir)
        return out


#: the keyword settings of :class:`MergeRows` and their defaults
_MERGE_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(MergeSettings) if f.name != "output_path"
}


class _HeldReceipt(NamedTuple):
    """What the launcher keeps of one receipt for the merge graph: its fields without the
    per-request maps, and ``source``, what a worker reads the whole receipt from (a
    :class:`~mmirage_beam.run.receipts.ReceiptLocation`, or the receipt dict itself)."""

    receipt: Any
    index_range: Optional[tuple[int, int]]
    has_request_hashes: bool
    source: Any


def _held_receipt(r: Any) -> _HeldReceipt:
    """A receipt dict or a :class:`~mmirage_beam.run.discovery.ReceiptEntry` ->
    :class:`_HeldReceipt`."""
    if isinstance(r, ReceiptEntry) and r.location is not None:
        return _HeldReceipt(r.receipt, r.source_index_range, bool(r.has_request_hashes), r.location)
    full = r.full_receipt() if isinstance(r, ReceiptEntry) else r
    if not isinstance(full.get("custom_id_to_source_index"), dict):
        raise ValueError(
            f"receipt of chunk {full.get('chunk_id')!r} has no custom_id_to_source_index: "
            "pass the ReceiptEntry objects of collect.select_run (their .receipt leaves "
            "the per-request maps out) or whole receipt dicts"
        )

    index_range = source_index_range(full["custom_id_to_source_index"])
    return _HeldReceipt(full, index_range, bool(full.get("request_hashes")), full)


def _load_receipt(source: Any) -> ReceiptJson:
    """The whole receipt from a :attr:`_HeldReceipt.source`."""
    return read_receipt_at(source) if isinstance(source, ReceiptLocation) else source


def _expected_from(source: Any) -> Any:
    """The expected-request entries of the receipt at ``source`` (see
    :func:`mmirage_beam.transforms.merge._expected_entries`)."""
    return _expected_entries(_load_receipt(source))


def build_merge_pipeline(
    p: beam.Pipeline,
    config: PipelineConfig,
    batches: list[Any],
    receipts: Sequence[Any],
    providers: dict[str, tuple[type, Any]],
    output_path: Union[str, MergeSettings],
    **settings: Any,
) -> MergePlan:
    """Add the merge graph: fetch results, verify and re-read the source, join, write.

    Args:
        p: the pipeline to extend.
        config: the validated config (datasets, inputs, outputs, output_schema).
        batches, receipts, providers, output_path: as :class:`MergeRows` takes them.
        settings: :class:`MergeRows`' keywords (``num_partitions``, ``verify_source``,
            ``errors_path``...) when ``output_path`` is a path, as it documents them.

    Raises:
        TypeError: a settings object and keyword settings were both given, or an
            unknown keyword.
    """
    merge = MergeRows(config, batches, receipts, providers, output_path, **settings)
    # Every row of the datasets is read (not only this config's shard): receipts from
    # several shards can be merged together; rows without results are not written.
    # A run made with --limit N (config.row_limit): only its first N rows.
    read = p | "ReadDatasets" >> ReadDatasets(config.datasets, max_rows=config.row_limit)
    _ = read.rows | "MergeRows" >> merge
    assert merge.plan is not None
    return merge.plan


def _unknown_line(u: dict[str, Any], index: int) -> tuple[int, bytes]:
    """An unknown custom_id (or unreadable result line) as an errors-file line, sorted
    at ``index`` (before every row)."""
    return index, json_line(
        {
            "custom_id": u["custom_id"],
            "source_index": None,
            "output_name": None,
            "error_type": u.get("error_type") or "unknown_custom_id",
            "message": u.get("message")
            or f"batch {u['provider_batch_id']} returned a result for a "
            "custom_id that is in none of the receipts",
            "status_code": None,
            "retryable": False,
        }
    )


def build_failures_pipeline(
    p: beam.Pipeline,
    batches: list[Any],
    providers: dict[str, tuple[type, Any]],
    only: str,
    ids_path: str,
    outputs: Sequence[Any] = (),
) -> None:
    """Fetch the batches' results, keep per custom_id the best outcome across linked runs
    (see ``OutputResult.better_than``), and write the custom_ids still failed (and
    resubmittable under ``only``) to ``ids_path``, one per line.

    ``outputs`` (the config's outputs): a JSON output's answer that is not valid JSON or
    does not match its schema, or an embedding that is not a vector of its
    ``dimensions``, counts as failed, exactly as merge counts it
    (:func:`mmirage_beam.results.check_answer`), so ``--only all`` re-sends it.
    """
    checked = {
        o.name: (
            o.output_type,
            json_schema_for(o.output_schema) if o.output_type == "JSON" else None,
            getattr(o, "dimensions", None),
        )
        for o in outputs
        if o.output_type in ("JSON", EMBEDDING)
    }

    def with_answer_check(r: Any) -> Any:
        if r.error is not None or r.output_name not in checked:
            return r
        output_type, schema, dimensions = checked[r.output_name]
        _value, err = check_answer(output_type, r.text, schema, dimensions)
        return r if err is None else r._replace(error=err)

    def best(results: Any) -> Any:
        chosen = None
        for r in results:
            if r.better_than(chosen):
                chosen = r
        return chosen

    fetched = (
        p
        | "Batches" >> beam.Create(batches, reshuffle=False)
        | "FetchResults" >> FetchResults(providers)
    )
    (
        fetched.results
        | "CheckAnswers" >> beam.Map(with_answer_check)
        | "ById" >> beam.Map(lambda r: (r.custom_id, r))
        | "BestOutcome" >> beam.CombinePerKey(best)
        | "StillFailed"
        >> beam.Filter(lambda kv: kv[1].error is not None and resubmittable(kv[1].error, only))
        | "IdLines" >> beam.Map(lambda kv: (kv[0] + "\n").encode("utf-8"))
        | "WriteIds" >> WriteSingleFile(ids_path)
    )
