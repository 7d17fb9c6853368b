"""SubmitRows: everything ``mmirage run`` does after reading, as one PTransform.

    ReadDatasets -> ExtractInputs -> BuildRequests -> ChunkRequests -> SubmitChunks
         \\errors ------\\errors--------\\errors---------\\rejected   |-> receipt parts
          => invalid rows file + invalid_row_count (side input: the barrier) |-> export
    BuildRequests.rows -> RenderPlaceholderRows
        -> <output_dir>/shard_<id>/placeholders.<run_id>-*.jsonl

Nothing is submitted unless ``invalid_row_count`` is 0 (or ``skip_invalid_rows``): the
count is a singleton side input of SubmitChunks, so Beam computes it over every row
before the first chunk is submitted. :func:`build_submit_pipeline` is the whole submit
graph (ReadDatasets, then SubmitRows); ``mmirage_beam`` exports both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.costs.report import estimate_lines
from mmirage_beam.io.readers import ReadDatasets
from mmirage_beam.io.writers import WriteJsonLinesShards, WriteSingleFile
from mmirage_beam.jsonl import json_line
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress.counters import (
    CountProgress,
    announce_estimate,
    estimate_file,
)
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.results import NOT_RESUBMITTABLE, check_answer, resubmittable  # noqa: F401 (public here too)
from mmirage_beam.reuse import sent_stats
from mmirage_beam.run.layout import RunLayout, export_file_for, receipts_base
from mmirage_beam.run.receipts import (
    mark_submitted,
)
from mmirage_beam.run.staging import staging_dir
from mmirage_beam.settings import (
    SubmitSettings,
    errors_path_for,  # noqa: F401 (public here too)
    settings_from,
)
from mmirage_beam.transforms.build import BuildRequests, ExtractInputs
from mmirage_beam.transforms.chunking import ChunkRequests
from mmirage_beam.transforms.reuse import ReuseAnswers, WriteReusedReceipts
from mmirage_beam.transforms.rows import RenderPlaceholderRows
from mmirage_beam.transforms.submit import SubmitChunks, WriteExport

__all__ = [
    "SubmitPlan",
    "SubmitRows",
    "SubmitRowsResult",
    "build_submit_pipeline",
    "default_chunking_parallelism",
    "invalid_rows_path",
    "stop_marker_path",
]


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
    job's worker count as the runner options give it, the largest of ``--num_workers`` /
    ``--max_num_workers`` (Dataflow), ``--parallelism`` (Flink), ``--sdk_worker_parallelism``
    (SDK worker processes per worker node on portable runners: Flink, Spark, Beam's job
    service) and ``--direct_num_workers`` in multi_processing mode; else 1.

    More chunkers spread the buffering over more workers; each may end with one partly
    filled chunk, so a run has at most ``chunking_parallelism - 1`` more batches per
    ``(output, modality)`` than the greedy minimum.
    """
    if options is None:
        return 1
    opts = options.get_all_options(drop_default=False, retain_unknown_options=False)
    candidates = [
        opts.get("max_num_workers"),
        opts.get("num_workers"),
        opts.get("parallelism"),
        opts.get("sdk_worker_parallelism"),  # parsed as a str: Beam declares no type
    ]
    if opts.get("direct_running_mode") == "multi_processing":
        candidates.append(opts.get("direct_num_workers"))
    values = [n for n in map(_positive_int, candidates) if n]
    return max(values) if values else 1


def _positive_int(value: Any) -> int:
    """``value`` as a positive int (an int, or a str of digits), else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and value > 0 else 0


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
    requests': :func:`sent_stats`), announced (:func:`announce_estimate`) with their
    estimate lines (:func:`~mmirage_beam.costs.report.estimate_lines`)."""
    sent = sent_stats(stats)
    announce_estimate(estimate_lines(sent, provider_config) if sent else [], path)
    return sent


def _sum_counts(counts: Any) -> dict[str, int]:
    """Key-wise sum of ``dict[str, int]`` (per-bundle token counts)."""
    total: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


def _error_line(err: Any) -> bytes:
    return json_line(err.to_json())


#: Placeholder rows travel to their writers in blocks of about this many bytes (1 MiB).
_PLACEHOLDER_BLOCK_BYTES = 1 << 20


class _DatasetLinesFn(beam.DoFn):
    """``(dataset_index, bytes)`` -> the bytes of one dataset (no default argument, so
    Beam fills no parameter per element)."""

    def __init__(self, dataset_index: int) -> None:
        self._dataset_index = dataset_index

    def process(self, element: tuple[int, bytes]) -> Iterator[bytes]:
        if element[0] == self._dataset_index:
            yield element[1]


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

    ``SubmitRows(config, settings)`` with a :class:`~mmirage_beam.settings.SubmitSettings`,
    or ``SubmitRows(config, run_id, export_prompts=..., ...)`` as before (the keywords
    build the settings). ``.settings`` holds them, ``skip_invalid_rows`` decided.

    Args:
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
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(pcoll)  # every SDK worker imports the package at start-up
        if isinstance(pcoll, dict):
            rows, read_errors = pcoll["rows"], pcoll.get("errors")
        else:
            rows, read_errors = pcoll, None
        settings, base = self.settings, self.base
        run_id, dry_run = settings.run_id, settings.dry_run
        shards = (
            settings.chunking_parallelism
            or self.config.execution.chunking_parallelism
            or default_chunking_parallelism(rows.pipeline.options)
        )
        bad_rows_path = invalid_rows_path(base, run_id)

        extracted, built = self._extract_and_build(rows)
        requests, reused, token_counts = self._select_and_reuse(built)
        chunked = self._chunk(requests, shards)
        errors, gate = self._invalid_rows(
            [read_errors, extracted.errors, built.errors, chunked.rejected], bad_rows_path
        )
        submitted = chunked.chunks | "SubmitChunks" >> SubmitChunks(
            self.adapter_cls,
            self.config.processor,
            settings,
            base,
            self._output_types(),
            invalid_row_count=gate,
            concurrency=self.config.execution.submit_concurrency,
            token_estimate=None if dry_run else self._token_estimate(rows.pipeline, token_counts),
        )
        receipted = self._with_reused_receipts(submitted.receipts, reused, gate)
        # One element, once every chunk has its receipt and the marker is written: the
        # placeholder rows wait on it, and so does a step that removes the marker (the
        # Beam YAML finish).
        self.marked = self._marked_once(rows.pipeline, receipted)
        submitted.receipts | "ProgressChunks" >> CountProgress(
            "chunks exported" if dry_run else "batches submitted", flush_every=1
        )
        export_file = export_file_for(settings.export_prompts, run_id) if dry_run else None
        if export_file:
            submitted.export | "WriteExport" >> WriteExport(export_file)
        self._publish_placeholders(built.rows, gate, beam.pvalue.AsSingleton(self.marked))
        stop_marker = None if dry_run else stop_marker_path(base, run_id)
        self.plan = SubmitPlan(
            run_id, base, bad_rows_path, export_file, dry_run, stop_marker, shards
        )
        return SubmitRowsResult(submitted.receipts, errors)

    # The named steps of :meth:`expand`, in its order. Each adds its transforms under
    # the labels it always had, so the graph (and its golden outputs) is unchanged.

    def _output_types(self) -> dict[str, str]:
        """Output name -> its ``output_type`` (``plain``, ``JSON``, ...)."""
        return {o.name: o.output_type for o in self.config.outputs}

    def _extract_and_build(self, rows: beam.PCollection) -> tuple[Any, Any]:
        """``ExtractInputs`` then ``BuildRequests``: ``(extracted, built)``, their results
        (rows with their inputs, then requests, placeholder rows, token counts, errors)."""
        config, settings, adapter_cls = self.config, self.settings, self.adapter_cls
        # progress counted by the steps themselves: no pass-through step per row
        extracted = rows | "ExtractInputs" >> ExtractInputs(
            config.inputs,
            config.datasets,
            max_image_file_bytes=adapter_cls.max_image_file_bytes,
            image_file_limit=adapter_cls.image_file_limit,
            progress="rows read",
        )
        built = extracted.rows | "BuildRequests" >> BuildRequests(
            config.outputs,
            config.datasets,
            adapter_cls,
            config.processor,
            count_selection=settings.selection,  # tokens of what is sent only
            sample_fraction=settings.estimate_fraction,
            # hashed while staged; not carried through the reuse join's shuffle
            canonical=not settings.reuse_files,
            progress="requests built",
        )
        return extracted, built

    def _select_and_reuse(self, built: Any) -> tuple[beam.PCollection, Any, beam.PCollection]:
        """The requests to send: only the selected custom ids (``resubmit``), less those
        an earlier run answered (``reuse_files``). Returns ``(requests, reused or None,
        token counts)``; the reused requests are not chunked (:mod:`mmirage_beam.reuse`)."""
        settings = self.settings
        requests, reused, token_counts = built.requests, None, built.tokens
        if settings.selection is not None:
            ids, keep_listed = settings.selection
            p = requests.pipeline
            ids_view = beam.pvalue.AsSingleton(p | "SelectedIds" >> beam.Create([ids]))
            requests = requests | "SelectRequests" >> beam.ParDo(
                _SelectRequestsFn(keep_listed), ids_view
            )
        if settings.reuse_files:
            split = requests | "ReuseAnswers" >> ReuseAnswers(
                settings.reuse_files,
                self.adapter_cls,
                self.config.processor,
                settings.stale_batches,
                sample_fraction=settings.estimate_fraction,
            )
            requests, reused = split.send, split.reused
            token_counts = (built.tokens, split.tokens) | "AllTokenCounts" >> beam.Flatten()
        return requests, reused, token_counts

    def _chunk(self, requests: beam.PCollection, shards: int) -> Any:
        """``ChunkRequests``: byte- and count-bounded chunks staged under the run's
        staging folder, plus the requests rejected as oversized."""
        config, proc = self.config, self.config.processor
        return requests | "ChunkRequests" >> ChunkRequests(
            max_chunk_bytes=proc.max_chunk_bytes,
            max_requests_per_chunk=proc.effective_max_requests_per_chunk,
            oversized_request_policy=proc.oversized_request_policy,
            chunk_overhead_bytes=self.adapter_cls.chunk_overhead_bytes,
            attempt=self.settings.attempt,
            run_part=(
                f".shard{config.shard_id}of{config.num_shards}" if config.num_shards > 1 else ""
            ),
            shards_per_key=shards,
            staging_dir=f"{staging_dir(self.base, self.settings.run_id)}/chunks",
        )

    def _invalid_rows(
        self, sources: Sequence[Optional[beam.PCollection]], path: str
    ) -> tuple[beam.PCollection, Any]:
        """Every row error (``None`` sources skipped) written to ``path``. Returns
        ``(errors, gate)``: the gate is the invalid-row count as a singleton side input
        (0 when none), or ``None`` when invalid rows are skipped."""
        errors = tuple(s for s in sources if s is not None) | "AllRowErrors" >> beam.Flatten()
        invalid_count = beam.pvalue.AsSingleton(  # no invalid row: no element, 0
            errors | "CountInvalidRows" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        (
            errors
            | "InvalidRowLines" >> beam.Map(_error_line)
            | "WriteInvalidRows" >> WriteSingleFile(path)
        )
        return errors, None if self.skip else invalid_count

    def _token_estimate(self, p: beam.Pipeline, token_counts: beam.PCollection) -> Any:
        """The estimate of what is sent, announced once per job before the first batch
        (a singleton side input of the submit step)."""
        return beam.pvalue.AsSingleton(
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
                self.config.processor,
                estimate_file(staging_dir(self.base, self.settings.run_id)),
            )
        )

    def _with_reused_receipts(
        self, receipts: beam.PCollection, reused: Optional[beam.PCollection], gate: Any
    ) -> beam.PCollection:
        """The submitted chunks' receipts, plus (with reuse) the receipts written for the
        answers an earlier run gave."""
        if reused is None:
            return receipts
        settings = self.settings
        reused_receipts = reused | "WriteReusedReceipts" >> WriteReusedReceipts(
            self.config.processor.provider,
            settings.run_id,
            self.base,
            settings.attempt,
            self._output_types(),
            getattr(self.config.processor, "model", None),
            settings.dry_run,
            gate,
        )
        return (receipts, reused_receipts) | "AllReceipts" >> beam.Flatten()

    def _marked_once(self, p: beam.Pipeline, receipted: beam.PCollection) -> Any:
        """Once every chunk has its receipt (also when no chunk was built: the count's
        default 0), write the submitted marker: only finish steps are left. One element."""
        receipt_count = beam.pvalue.AsSingleton(
            receipted | "CountReceipts" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        settings = self.settings
        marker = (
            None
            if settings.dry_run
            else {"base": self.base, "run_id": settings.run_id, "attempt": settings.attempt}
        )
        return (
            p
            | "ReceiptedOnce" >> beam.Impulse()
            | "MarkSubmitted" >> beam.Map(_mark_submitted, receipt_count, marker)
        )

    def _publish_placeholders(self, built_rows: beam.PCollection, gate: Any, after: Any) -> None:
        """Placeholder rows, written before the barrier into the staging folder (a file
        per bundle, never held in memory) and moved into each dataset's ``output_dir``
        only once the barrier lets the run proceed and every receipt is written
        (``after``: they claim "submitted")."""
        config, settings = self.config, self.settings
        placeholders = built_rows | "PlaceholderRows" >> RenderPlaceholderRows(
            config.outputs,
            config.output_schema,
            config.remove_columns,
            block_bytes=_PLACEHOLDER_BLOCK_BYTES,  # the writers get a few blocks, not rows
        )
        staging = staging_dir(self.base, settings.run_id)
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
                | f"Dataset{i}Lines" >> beam.ParDo(_DatasetLinesFn(i))
                | f"WriteDataset{i}Rows"
                >> WriteJsonLinesShards(
                    out_dir,
                    f"placeholders.{settings.run_id}",
                    staging_dir=f"{staging}/placeholders{i}",
                    gate=gate,
                    after=after,
                    replace_earlier=own_dir,
                )
            )


def build_submit_pipeline(
    p: beam.Pipeline,
    config: PipelineConfig,
    run_id: Union[str, SubmitSettings],
    **settings: Any,
) -> SubmitPlan:
    """Add the whole submit (or dry-run) graph for ``config`` to pipeline ``p``:
    :class:`~mmirage_beam.io.readers.ReadDatasets` then :class:`SubmitRows`.

    Args:
        p: the pipeline to extend.
        config: the validated config.
        run_id: the run's :class:`~mmirage_beam.settings.SubmitSettings` (then no other
            keyword is given), or the run's id with the other settings as keywords.
        settings: :class:`SubmitRows`' keywords (``export_prompts``, ``attempt``,
            ``exclude_custom_ids``...), as it documents them.

    Every path in ``config`` must already be absolute or a URI
    (``config.loader.resolve_config_paths``; ``load_config`` does it): workers in other
    processes resolve a relative path in their own working directory.

    Raises:
        mmirage_beam.errors.ConfigError: no adapter is registered for the provider, or
            ``estimate_fraction`` is not in (0, 1].
        TypeError: a settings object and keyword settings were both given, or an
            unknown keyword.
    """
    submit = SubmitRows(config, run_id, **settings)
    read = p | "ReadDatasets" >> ReadDatasets(
        config.datasets,
        num_shards=config.num_shards,
        shard_id=config.shard_id,
        max_rows=config.row_limit,
    )
    _ = {"rows": read.rows, "errors": read.errors} | "SubmitRows" >> submit
    assert submit.plan is not None
    return submit.plan
