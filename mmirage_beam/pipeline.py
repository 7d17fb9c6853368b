"""Composition of the submit pipeline from the public PTransforms.

    ReadDatasets -> ExtractInputs -> BuildRequests -> ChunkRequests -> SubmitChunks
         \\errors ------\\errors--------\\errors---------\\rejected   |-> receipt parts
          => invalid rows file + invalid_row_count (side input: the barrier) |-> export
    BuildRequests.rows -> RenderPlaceholderRows
        -> <output_dir>/shard_<id>/placeholders.<run_id>-*.jsonl

Nothing is submitted unless ``invalid_row_count`` is 0 (or ``skip_invalid_rows``): the
count is a singleton side input of SubmitChunks, so Beam computes it over every row
before the first chunk is submitted.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.io.readers import ReadDatasets
from mmirage_beam.io.writers import ConcatenateFiles, WriteJsonLinesShards, WriteSingleFile
from mmirage_beam.jsonl import json_line
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress import (
    CountProgress,
    announce_estimate,
    estimate_file,
    reported_usage,
)
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.results import NOT_RESUBMITTABLE, resubmittable  # noqa: F401 (public here too)
from mmirage_beam.reuse import sent_stats
from mmirage_beam.run.layout import RunLayout, export_file_for, receipts_base
from mmirage_beam.run.receipts import mark_submitted
from mmirage_beam.run.staging import staging_dir
from mmirage_beam.settings import (
    ROWS_PER_PARTITION,
    MergeSettings,
    SubmitSettings,
    errors_path_for,  # noqa: F401 (public here too)
    settings_from,
)
from mmirage_beam.transforms.build import BuildRequests, ExtractInputs
from mmirage_beam.transforms.chunking import ChunkRequests
from mmirage_beam.transforms.rows import RenderPlaceholderRows
from mmirage_beam.transforms.submit import SubmitChunks


@dataclass(frozen=True)
class SubmitPlan:
    """What :func:`build_submit_pipeline` wired, for the launcher's summary."""

    run_id: str
    receipts_base: str
    invalid_rows_path: str
    export_file: Optional[str]
    dry_run: bool
    stop_marker: Optional[str] = None
    chunking_parallelism: int = 1


def invalid_rows_path(base: str, run_id: str) -> str:
    """``<receipts base>.invalid_rows.<run_id>.jsonl``."""
    return RunLayout(base, run_id).invalid_rows


def stop_marker_path(base: str, run_id: str) -> str:
    """``<receipts base>.stop.<run_id>``: once it exists, the run submits nothing more."""
    return RunLayout(base, run_id).stop_marker


def default_chunking_parallelism(options: Any) -> int:
    """Chunkers per ``(output, modality)`` when ``chunking_parallelism`` is not set: the
    job's worker count as the runner options give it (``--num_workers`` /
    ``--max_num_workers`` on Dataflow, ``--parallelism`` on Flink, ``--direct_num_workers``
    in multi_processing mode), else 1.

    More chunkers spread the buffering over more workers; each may end with one partly
    filled chunk, so a run has at most ``chunking_parallelism - 1`` more batches per
    ``(output, modality)`` than the greedy minimum.
    """
    if options is None:
        return 1
    opts = options.get_all_options(drop_default=False, retain_unknown_options=False)
    candidates = [opts.get("max_num_workers"), opts.get("num_workers"), opts.get("parallelism")]
    if opts.get("direct_running_mode") == "multi_processing":
        candidates.append(opts.get("direct_num_workers"))
    values = [int(v) for v in candidates if isinstance(v, int) and v > 0]
    return max(values) if values else 1


def _mark_submitted(_impulse: bytes, receipts: int, marker: Optional[dict]) -> int:
    """Impulse, the attempt's receipt count -> the count, after writing the submitted
    marker (``marker``: :func:`mark_submitted`'s keywords; None: a dry run, no marker)."""
    if marker is not None:
        mark_submitted(receipts, **marker)
    return receipts


def _announce_sent_estimate(
    _impulse: bytes, stats: dict[str, int], provider_config: Any, path: str
) -> dict[str, int]:
    """Impulse, the summed token counters -> those of what is sent (less the reused
    requests': :func:`sent_stats`), announced (:func:`announce_estimate`)."""
    return announce_estimate(sent_stats(stats), provider_config, path)


def _sum_counts(counts: Any) -> dict[str, int]:
    """Key-wise sum of ``dict[str, int]`` (per-bundle token counts)."""
    total: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


def _error_line(err: Any) -> bytes:
    return json_line(err.to_json())


class _SelectRequestsFn(beam.DoFn):
    """Keeps the requests a (resumed or resubmission) run must send."""

    def __init__(self, keep_listed: bool) -> None:
        self._keep_listed = keep_listed
        self._skipped = Metrics.counter(METRICS_NAMESPACE, "requests_not_selected")

    def process(self, request: Any, ids: frozenset) -> Any:
        if (request.custom_id in ids) == self._keep_listed:
            yield request
        else:
            self._skipped.inc()


#: the keyword settings of :class:`SubmitRows` and their defaults (a settings object is
#: given instead only with every keyword left at these)
_SUBMIT_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(SubmitSettings) if f.name != "run_id"
}


class SubmitRowsResult(NamedTuple):
    """Outputs of :class:`SubmitRows`.

    Attributes:
        receipts: ``PCollection[dict]``, one receipt dict per submitted (or exported) chunk.
        errors: ``PCollection[RowError]``, every invalid row (also written to the
            invalid-rows file).
    """

    receipts: beam.PCollection
    errors: beam.PCollection


class SubmitRows(beam.PTransform):
    """``PCollection[SourceRow]`` (or ``{"rows": ..., "errors": PCollection[RowError]}``)
    -> :class:`SubmitRowsResult`: everything ``mmirage run`` does after reading.

    Extract inputs, build requests, chunk, then (behind the validation barrier) submit
    each chunk with a durable receipt, or in a dry run export it; invalid rows go to
    ``<base>.invalid_rows.<run_id>.jsonl`` and placeholder rows to each dataset's
    ``output_dir``. Rows read some other way (e.g. a Beam YAML pipeline's rows turned
    into :class:`~mmirage_beam.records.SourceRow`) compose here directly.

    Args: as :func:`build_submit_pipeline`, less the pipeline: ``SubmitRows(config,
    settings)`` with a :class:`~mmirage_beam.settings.SubmitSettings`, or
    ``SubmitRows(config, run_id, export_prompts=..., ...)`` as before (the keywords build
    the settings). ``.settings`` holds them, ``skip_invalid_rows`` decided.

    Raises:
        mmirage_beam.errors.ConfigError: no adapter is registered for the provider, or a
            setting is out of range (``estimate_fraction`` not in (0, 1]).
        TypeError: a settings object and keyword settings were both given.
    """

    def __init__(
        self,
        config: PipelineConfig,
        run_id: Union[str, SubmitSettings],
        export_prompts: Optional[str] = None,
        skip_invalid_rows: Optional[bool] = None,
        attempt: int = 1,
        exclude_custom_ids: frozenset = frozenset(),
        only_custom_ids: Optional[frozenset] = None,
        parent_run_id: Optional[str] = None,
        chunking_parallelism: Optional[int] = None,
        reuse_files: Sequence[str] = (),
        stale_batches: frozenset = frozenset(),
        estimate_fraction: Optional[float] = None,
    ) -> None:
        super().__init__()
        given = dict(
            export_prompts=export_prompts,
            skip_invalid_rows=skip_invalid_rows,
            attempt=attempt,
            exclude_custom_ids=exclude_custom_ids,
            only_custom_ids=only_custom_ids,
            parent_run_id=parent_run_id,
            chunking_parallelism=chunking_parallelism,
            reuse_files=reuse_files,
            stale_batches=stale_batches,
            estimate_fraction=estimate_fraction,
        )
        settings = settings_from(SubmitSettings, run_id, given, _SUBMIT_DEFAULTS)
        self.config = config
        self.settings = settings.resolved(config.execution.skip_invalid_rows)
        self.adapter_cls = BatchAdapterRegistry.get(config.processor.provider)
        self.base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        self.plan: Optional[SubmitPlan] = None

    @property
    def run_id(self) -> str:
        """The run id (``settings.run_id``)."""
        return self.settings.run_id

    @property
    def dry_run(self) -> bool:
        """Whether this is a dry run (``settings.export_prompts`` set)."""
        return self.settings.dry_run

    @property
    def skip(self) -> bool:
        """Whether invalid rows are skipped (the flag, else the config's)."""
        return bool(self.settings.skip_invalid_rows)

    def expand(self, pcoll: Any) -> SubmitRowsResult:
        if isinstance(pcoll, dict):
            rows, read_errors = pcoll["rows"], pcoll.get("errors")
        else:
            rows, read_errors = pcoll, None
        p = rows.pipeline
        config, settings, base = self.config, self.settings, self.base
        run_id, dry_run = settings.run_id, settings.dry_run
        proc = config.processor
        adapter_cls = self.adapter_cls
        bad_rows_path = invalid_rows_path(base, run_id)
        shards = (
            settings.chunking_parallelism
            or config.execution.chunking_parallelism
            or default_chunking_parallelism(p.options)
        )
        stop_marker = None if dry_run else stop_marker_path(base, run_id)
        staging = staging_dir(base, run_id)

        rows = rows | "ProgressRowsRead" >> CountProgress("rows read")
        extracted = rows | "ExtractInputs" >> ExtractInputs(
            config.inputs,
            config.datasets,
            max_image_file_bytes=adapter_cls.max_image_file_bytes,
            image_file_limit=adapter_cls.image_file_limit,
        )
        selection = settings.selection  # tokens of what is sent only
        built = extracted.rows | "BuildRequests" >> BuildRequests(
            config.outputs,
            config.datasets,
            adapter_cls,
            proc,
            count_selection=selection,
            sample_fraction=settings.estimate_fraction,
        )
        requests = built.requests | "ProgressRequests" >> CountProgress("requests built")
        if selection is not None:
            ids, keep_listed = selection
            ids_view = beam.pvalue.AsSingleton(p | "SelectedIds" >> beam.Create([ids]))
            requests = requests | "SelectRequests" >> beam.ParDo(
                _SelectRequestsFn(keep_listed), ids_view
            )
        reused = None
        token_counts = built.tokens
        if settings.reuse_files:  # answered by an earlier run: not chunked (mmirage_beam.reuse)
            from mmirage_beam.transforms.reuse import ReuseAnswers

            split = requests | "ReuseAnswers" >> ReuseAnswers(
                settings.reuse_files,
                adapter_cls,
                proc,
                settings.stale_batches,
                sample_fraction=settings.estimate_fraction,
            )
            requests, reused = split.send, split.reused
            token_counts = (built.tokens, split.tokens) | "AllTokenCounts" >> beam.Flatten()
        chunked = requests | "ChunkRequests" >> ChunkRequests(
            max_chunk_bytes=proc.max_chunk_bytes,
            max_requests_per_chunk=proc.effective_max_requests_per_chunk,
            oversized_request_policy=proc.oversized_request_policy,
            chunk_overhead_bytes=adapter_cls.chunk_overhead_bytes,
            attempt=settings.attempt,
            run_part=(
                f".shard{config.shard_id}of{config.num_shards}" if config.num_shards > 1 else ""
            ),
            shards_per_key=shards,
            staging_dir=f"{staging}/chunks",
        )
        error_sources = [extracted.errors, built.errors, chunked.rejected]
        if read_errors is not None:
            error_sources.insert(0, read_errors)
        errors = tuple(error_sources) | "AllRowErrors" >> beam.Flatten()
        invalid_count = beam.pvalue.AsSingleton(  # no invalid row: no element, 0
            errors | "CountInvalidRows" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        (
            errors
            | "InvalidRowLines" >> beam.Map(_error_line)
            | "WriteInvalidRows" >> WriteSingleFile(bad_rows_path)
        )
        gate = None if self.skip else invalid_count
        submitted = chunked.chunks | "SubmitChunks" >> SubmitChunks(
            adapter_cls,
            proc,
            settings,
            base,
            {o.name: o.output_type for o in config.outputs},
            invalid_row_count=gate,
            concurrency=config.execution.submit_concurrency,
            token_estimate=None
            if dry_run
            else beam.pvalue.AsSingleton(
                # once per job, before the first batch (the submit step's side input)
                p
                | "EstimateOnce" >> beam.Impulse()
                | "AnnounceEstimate"
                >> beam.Map(
                    _announce_sent_estimate,
                    beam.pvalue.AsSingleton(  # no count at all: the sum of none, {}
                        token_counts
                        | "SumTokens" >> beam.CombineGlobally(_sum_counts).without_defaults(),
                        default_value={},
                    ),
                    proc,
                    estimate_file(staging),
                )
            ),
        )
        receipted = submitted.receipts
        if reused is not None:
            from mmirage_beam.transforms.reuse import WriteReusedReceipts

            reused_receipts = reused | "WriteReusedReceipts" >> WriteReusedReceipts(
                proc.provider,
                run_id,
                base,
                settings.attempt,
                {o.name: o.output_type for o in config.outputs},
                getattr(proc, "model", None),
                dry_run,
                gate,
            )
            receipted = (submitted.receipts, reused_receipts) | "AllReceipts" >> beam.Flatten()
        # Every chunk has its receipt: the marker says only finish steps are left, and
        # the placeholder rows are published after it (they claim "submitted").
        # Once, also when no chunk was built (the count's default 0).
        receipt_count = beam.pvalue.AsSingleton(
            receipted | "CountReceipts" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        marked = (
            p
            | "ReceiptedOnce" >> beam.Impulse()
            | "MarkSubmitted"
            >> beam.Map(
                _mark_submitted,
                receipt_count,
                None if dry_run else {"base": base, "run_id": run_id, "attempt": settings.attempt},
            )
        )
        # One element, once the marker is written: a step that removes the marker (the
        # Beam YAML finish) waits on it as a side input.
        self.marked = marked
        all_receipted = beam.pvalue.AsSingleton(marked)
        submitted.receipts | "ProgressChunks" >> CountProgress(
            "chunks exported" if dry_run else "batches submitted", flush_every=1
        )
        export_file = export_file_for(settings.export_prompts, run_id) if dry_run else None
        if export_file:
            submitted.export | "WriteExport" >> ConcatenateFiles(export_file, f"{staging}/export")

        # Placeholder rows are written before the barrier into the staging folder (a
        # file per bundle, never held in memory), and moved into the datasets'
        # output_dir only once the barrier lets the run proceed.
        placeholders = built.rows | "PlaceholderRows" >> RenderPlaceholderRows(
            config.outputs, config.output_schema, config.remove_columns
        )
        dirs = [ds.output_dir.rstrip("/") for ds in config.datasets]
        for i, ds in enumerate(config.datasets):
            if not ds.output_dir or settings.only_custom_ids is not None:
                continue
            out_dir = f"{ds.output_dir.rstrip('/')}/shard_{config.shard_id}"
            # A folder of its own: a resumed run's placeholder files replace all earlier
            # ones of this run id (another attempt may have named them differently).
            own_dir = dirs.count(ds.output_dir.rstrip("/")) == 1
            (
                placeholders
                | f"Dataset{i}Lines" >> beam.FlatMap(lambda kv, i=i: (kv[1],) if kv[0] == i else ())
                | f"WriteDataset{i}Rows"
                >> WriteJsonLinesShards(
                    out_dir,
                    f"placeholders.{run_id}",
                    staging_dir=f"{staging}/placeholders{i}",
                    gate=gate,
                    after=all_receipted,
                    replace_earlier=own_dir,
                )
            )
        self.plan = SubmitPlan(
            run_id, base, bad_rows_path, export_file, dry_run, stop_marker, shards
        )
        return SubmitRowsResult(submitted.receipts, errors)


def build_submit_pipeline(
    p: beam.Pipeline,
    config: PipelineConfig,
    run_id: Union[str, SubmitSettings],
    export_prompts: Optional[str] = None,
    skip_invalid_rows: Optional[bool] = None,
    attempt: int = 1,
    exclude_custom_ids: frozenset = frozenset(),
    only_custom_ids: Optional[frozenset] = None,
    parent_run_id: Optional[str] = None,
    chunking_parallelism: Optional[int] = None,
    reuse_files: Sequence[str] = (),
    stale_batches: frozenset = frozenset(),
    estimate_fraction: Optional[float] = None,
) -> SubmitPlan:
    """Add the whole submit (or dry-run) graph for ``config`` to pipeline ``p``:
    :class:`~mmirage_beam.io.readers.ReadDatasets` then :class:`SubmitRows`.

    Args:
        p: the pipeline to extend.
        config: the validated config.
        run_id: the run's :class:`~mmirage_beam.settings.SubmitSettings` (then no other
            keyword is given), or the run's id with the other settings as keywords
            (file names, receipts, OpenAI batch metadata).
        export_prompts: dry run: write requests here instead of submitting.
        skip_invalid_rows: override ``execution_params.skip_invalid_rows``.
        attempt: the submission attempt of ``run_id`` (resumes count up; chunk ids of a
            later attempt never reuse an earlier one's).
        exclude_custom_ids: requests already submitted in this run (a resume).
        only_custom_ids: send only these requests (a resubmission); placeholder rows
            are not written again.
        parent_run_id: for a resubmission, the run it re-sends failures of.
        chunking_parallelism: chunkers per ``(output, modality)``; default
            ``execution_params.chunking_parallelism``, else
            :func:`default_chunking_parallelism` of the pipeline's options.
        reuse_files: earlier runs' answers files: requests they answered are not sent
            (:mod:`mmirage_beam.reuse`); empty: reuse off.
        stale_batches: earlier batches whose results expired (their answers are sent
            again).
        estimate_fraction: ``--estimate sample``: count the tokens of only this share
            of the requests (in (0, 1], chosen by custom_id) and extrapolate the
            estimate (:func:`mmirage_beam.costs.tokens.sample_estimate`); None: count
            every request (exact). The requests themselves are the same either way.

    Every path in ``config`` must already be absolute or a URI
    (``config.loader.resolve_config_paths``; ``load_config`` does it): workers in other
    processes resolve a relative path in their own working directory.

    Raises:
        mmirage_beam.errors.ConfigError: no adapter is registered for the provider, or
            ``estimate_fraction`` is not in (0, 1].
        TypeError: a settings object and keyword settings were both given.
    """
    submit = SubmitRows(
        config,
        run_id,
        export_prompts=export_prompts,
        skip_invalid_rows=skip_invalid_rows,
        attempt=attempt,
        exclude_custom_ids=exclude_custom_ids,
        only_custom_ids=only_custom_ids,
        parent_run_id=parent_run_id,
        chunking_parallelism=chunking_parallelism,
        reuse_files=reuse_files,
        stale_batches=stale_batches,
        estimate_fraction=estimate_fraction,
    )
    read = p | "ReadDatasets" >> ReadDatasets(
        config.datasets,
        num_shards=config.num_shards,
        shard_id=config.shard_id,
        max_rows=config.row_limit,
    )
    _ = {"rows": read.rows, "errors": read.errors} | "SubmitRows" >> submit
    assert submit.plan is not None
    return submit.plan


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
    ordered write). Args: as :func:`build_merge_pipeline`, less the pipeline:
    ``MergeRows(config, batches, receipts, providers, settings)`` with a
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
    (:class:`~mmirage_beam.transforms.merge.JoinPartitions`)."""

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
        rows = rows | "ProgressRowsRead" >> CountProgress("rows read")
        own_adapter = (providers.get(config.processor.provider) or (None,))[0]
        extracted = rows | "ExtractInputs" >> ExtractInputs(
            config.inputs,
            config.datasets,
            load_images=bool(verifiable),
            lenient=True,
            max_image_file_bytes=getattr(own_adapter, "max_image_file_bytes", None),
            image_file_limit=getattr(own_adapter, "image_file_limit", ""),
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
    """A receipt dict or a :class:`~mmirage_beam.check.discovery.ReceiptEntry` ->
    :class:`_HeldReceipt`."""
    from mmirage_beam.check.discovery import ReceiptEntry

    if isinstance(r, ReceiptEntry) and r.location is not None:
        return _HeldReceipt(r.receipt, r.source_index_range, bool(r.has_request_hashes), r.location)
    full = r.full_receipt() if isinstance(r, ReceiptEntry) else r
    if not isinstance(full.get("custom_id_to_source_index"), dict):
        raise ValueError(
            f"receipt of chunk {full.get('chunk_id')!r} has no custom_id_to_source_index: "
            "pass the ReceiptEntry objects of collect.select_run (their .receipt leaves "
            "the per-request maps out) or whole receipt dicts"
        )
    from mmirage_beam.run.receipts import source_index_range

    index_range = source_index_range(full["custom_id_to_source_index"])
    return _HeldReceipt(full, index_range, bool(full.get("request_hashes")), full)


def _load_receipt(source: Any) -> dict[str, Any]:
    """The whole receipt from a :attr:`_HeldReceipt.source`."""
    from mmirage_beam.run.receipts import ReceiptLocation, read_receipt_at

    return read_receipt_at(source) if isinstance(source, ReceiptLocation) else source


def _expected_from(source: Any) -> Any:
    """The expected-request entries of the receipt at ``source`` (see
    :func:`mmirage_beam.transforms.merge._expected_entries`)."""
    from mmirage_beam.transforms.merge import _expected_entries

    return _expected_entries(_load_receipt(source))


def build_merge_pipeline(
    p: beam.Pipeline,
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
) -> MergePlan:
    """Add the merge graph: fetch results, verify and re-read the source, join, write.

    Args:
        p: the pipeline to extend.
        config: the validated config (datasets, inputs, outputs, output_schema).
        batches: the :class:`~mmirage_beam.run.selection.BatchToFetch` of the merge.
        receipts: their receipts: the
            :class:`~mmirage_beam.check.discovery.ReceiptEntry` of
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
    merge = MergeRows(
        config,
        batches,
        receipts,
        providers,
        output_path,
        num_partitions=num_partitions,
        rows_per_partition=rows_per_partition,
        verify_source=verify_source,
        invalid_rows_files=invalid_rows_files,
        unsubmitted_run=unsubmitted_run,
        errors_path=errors_path,
        answers_path=answers_path,
    )
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
    does not match its schema counts as failed, exactly as merge counts it
    (:func:`mmirage_beam.results.check_answer`), so ``--only all`` re-sends it.
    """
    from mmirage_beam.config.schema import json_schema_for
    from mmirage_beam.results import check_answer
    from mmirage_beam.transforms.fetch import FetchResults

    json_outputs = {
        o.name: json_schema_for(o.output_schema) for o in outputs if o.output_type == "JSON"
    }

    def with_answer_check(r: Any) -> Any:
        if r.error is not None or r.output_name not in json_outputs:
            return r
        _value, err = check_answer("JSON", r.text, json_outputs[r.output_name])
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
