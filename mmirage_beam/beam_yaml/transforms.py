"""The mmirage-beam transforms for Beam YAML pipelines: :class:`SubmitBatches` and
:class:`MergeBatches`.

Both take the schema'd rows (``beam.Row``) of any Beam YAML source (``ReadFromJson``,
``ReadFromParquet``, ...), turn them into :class:`~mmirage_beam.records.SourceRow` at the
boundary and apply the same composite transforms as ``mmirage run`` / ``mmirage merge``
(:class:`~mmirage_beam.transforms.submit_rows.SubmitRows`,
:class:`~mmirage_beam.transforms.merge_rows.MergeRows`),
so receipts, the invalid-rows file, exports and merged files are the very same files.

Reach them from Beam YAML in either way Beam's loader accepts (docs/beam-yaml.md):

* ``type: PyTransform`` with ``constructor: mmirage_beam.beam_yaml.transforms.SubmitBatches``
  and ``kwargs:``, resolved in the running environment;
* a ``providers:`` entry ``type: python`` whose ``transforms:`` map names to these
  constructors; without ``packages:`` Beam resolves them in the running environment too
  (an ``InlineProvider``), with ``packages:`` Beam builds a new virtualenv and pip
  installs them (docs/beam-yaml.md says what that needs).

The rows' ``source_index`` (what merge joins on) is defined by ``index_field``: the named
column holds it (a non-negative integer, unique), or, without ``index_field``, it is the
row's rank in the content order of all rows (see :class:`AssignSourceIndex`).

That boundary is :mod:`mmirage_beam.beam_yaml.rows`, the arguments -> config step
:mod:`mmirage_beam.beam_yaml.config`; their public names are importable from here too.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

import apache_beam as beam

from mmirage_beam.beam_yaml.config import build_config, config_or_raise, yaml_key
from mmirage_beam.beam_yaml.rows import YAML_ROWS_LABEL, AssignSourceIndex, plain_value, row_to_dict
from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.errors import ConfigError, InvalidRowsError, MmirageError, require_int
from mmirage_beam.ids import check_run_id, new_run_id
from mmirage_beam.io.fs import delete_files, delete_folder
from mmirage_beam.jsonl import iter_jsonl_file
from mmirage_beam.paths import resolve_path
from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
from mmirage_beam.records import RowError
from mmirage_beam.run import merge_plans
from mmirage_beam.run.fingerprint import new_run_record
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.plans import prepare_submit
from mmirage_beam.run.receipts import consolidate_run, submitted_marker_path
from mmirage_beam.run.resume import ResumeState
from mmirage_beam.run.staging import staging_dir
from mmirage_beam.run.storage import (
    check_locations,
    config_locations,
    probe_location,
)
from mmirage_beam.run.store import RunStore
from mmirage_beam.settings import SubmitSettings

__all__ = [
    "SubmitBatches",
    "MergeBatches",
    "ReceiptRow",
    "MergedJsonRow",
    # the boundary and the config, from yaml_rows.py and yaml_config.py
    "AssignSourceIndex",
    "YAML_ROWS_LABEL",
    "plain_value",
    "row_to_dict",
    "build_config",
]


_LOG = logging.getLogger(__name__)


# --- submit -----------------------------------------------------------------------------


class ReceiptRow(NamedTuple):
    """One receipt as a Beam YAML row (the full receipt is in the receipt file).

    ``provider_batch_id`` is ``dry-run`` for exported chunks.
    """

    run_id: str
    provider: str
    chunk_id: str
    provider_batch_id: str
    status: str
    output_name: str
    modality: str
    submitted_request_count: int
    total_bytes: int


def _receipt_row(receipt: dict[str, Any]) -> ReceiptRow:
    return ReceiptRow(
        run_id=str(receipt.get("run_id") or ""),
        provider=str(receipt.get("provider") or ""),
        chunk_id=str(receipt.get("chunk_id") or ""),
        provider_batch_id=str(receipt.get("provider_batch_id") or ""),
        status=str(receipt.get("status") or ""),
        output_name=str(receipt.get("output_name") or ""),
        modality=str(receipt.get("modality") or ""),
        submitted_request_count=int(receipt.get("submitted_request_count") or 0),
        total_bytes=int(receipt.get("total_bytes") or 0),
    )


#: invalid rows named in the job's error message (all are in the invalid-rows file).
_SHOWN_ERRORS = 10


def _error_order(e: RowError) -> tuple[bool, int]:
    return (e.source_index is None, e.source_index or 0)


def _error_text(e: RowError) -> str:
    name = f" [{e.input_name}]" if e.input_name else ""
    where = f" ({e.location})" if e.location else ""
    return f"source_index {e.source_index}{name}{where}: {e.reason}"


class _FinishRunFn(beam.DoFn):
    """Runs once every receipt is emitted: consolidates the receipt parts into the
    receipt files (as ``mmirage run`` does after its pipeline), marks the run record
    finished, and fails the job when rows were invalid and not skipped."""

    def __init__(
        self,
        base: str,
        run_id: str,
        dry_run: bool,
        fingerprint: Optional[str],
        started_at: Optional[str],
        skip: bool,
        invalid_rows_path: str,
    ) -> None:
        self._base, self._run_id, self._dry_run = base, run_id, dry_run
        self._fingerprint, self._started_at = fingerprint, started_at
        self._skip, self._invalid_path = skip, invalid_rows_path

    def process(
        self,
        _: Any,
        receipts: int,
        error_count: int,
        first_errors: list[RowError],
        marked: Any = None,
    ) -> Iterable[str]:
        written = consolidate_run(self._base, self._run_id, self._dry_run)
        if self._fingerprint is not None:
            RunStore(self._base, self._run_id).write_run_record(
                new_run_record(
                    self._run_id,
                    self._fingerprint,
                    started_at=self._started_at,
                    finished=True,
                    chunks_submitted=receipts,
                )
            )

            delete_files([submitted_marker_path(self._base, self._run_id)])  # recorded now
        for path, n in sorted(written.items()):
            _LOG.info("mmirage run %s: %d receipt(s) in %s", self._run_id, n, path)
        if error_count and not self._skip:
            lines = "\n  ".join(_error_text(e) for e in sorted(first_errors, key=_error_order))
            raise InvalidRowsError(
                f"{error_count} invalid row(s); nothing was submitted or exported. They are "
                f"listed in {self._invalid_path}; the first:\n  {lines}\nFix them, or set "
                "skip_invalid_rows: true to process the rest."
            )
        yield from written


class SubmitBatches(beam.PTransform):
    """Beam YAML: ``PCollection[beam.Row]`` -> ``PCollection[ReceiptRow]``, one per
    submitted (or, with ``export_prompts``, exported) chunk: ``mmirage run`` on the rows
    of the pipeline.

    The rows get their source_index (:class:`AssignSourceIndex`), then
    :class:`~mmirage_beam.transforms.submit_rows.SubmitRows` builds, validates (nothing is submitted
    while a row is invalid, unless ``skip_invalid_rows``), chunks and submits them with a
    durable receipt part per batch. Once every chunk is done, the parts are consolidated
    into ``<base>.<modality>.<run_id>.jsonl`` exactly as ``mmirage run`` leaves them, so
    ``mmirage check`` and ``mmirage merge`` (or :class:`MergeBatches`) read them.

    Args:
        config, processor, inputs, outputs, output_schema, remove_columns, state_dir,
            image_base_path, output_dir, skip_invalid_rows, chunking_parallelism: see
            :func:`build_config`.
        index_field: the column holding each row's source_index (see
            :class:`AssignSourceIndex`; default: content order).
        run_id: the run's id (default: a fresh one). Running the same pipeline again
            with the same ``run_id`` resumes it: requests already receipted are never
            sent again, interrupted submissions are looked up first
            (:func:`mmirage_beam.run.resume.prepare_resume`).
        export_prompts: dry run: write the provider-ready requests to this ``.jsonl``
            path (``P.<run_id>.jsonl``) or folder, submit nothing, need no API key.
        keep_staged: keep the staged chunk files (``<base>.staged.<run_id>/``) after the
            job, as ``mmirage run --keep-staged``; by default they are removed when the
            launching process exits (the job is over: Beam YAML's main waits for it).

    Unlike ``mmirage run`` (a launcher around the pipeline), this transform takes no
    lease on the run id and makes no "same config and data already submitted" check:
    do not run one ``run_id`` from two processes at once. Nor does it check the free
    space of a local disk for the staged chunks (the rows' size is not known before the
    job reads them).

    Raises:
        ConfigError: a bad argument, naming it (``SubmitBatches.config.outputs[0].prompt``).
        CredentialsError: the provider's API key is not set (not for a dry run).
        InvalidRowsError: (when the job runs) rows were invalid and not skipped.
    """

    def __init__(
        self,
        config: Optional[str] = None,
        processor: Optional[Mapping[str, Any]] = None,
        inputs: Any = None,
        outputs: Any = None,
        output_schema: Any = None,
        remove_columns: Optional[bool] = None,
        state_dir: Optional[str] = None,
        image_base_path: Optional[str] = None,
        output_dir: Optional[str] = None,
        skip_invalid_rows: Optional[bool] = None,
        chunking_parallelism: Optional[int] = None,
        index_field: Optional[str] = None,
        run_id: Optional[str] = None,
        export_prompts: Optional[str] = None,
        keep_staged: bool = False,
    ) -> None:
        super().__init__()

        name = type(self).__name__
        self.config = config_or_raise(
            name,
            config=config,
            processor=processor,
            inputs=inputs,
            outputs=outputs,
            output_schema=output_schema,
            remove_columns=remove_columns,
            state_dir=state_dir,
            image_base_path=image_base_path,
            output_dir=output_dir,
            skip_invalid_rows=skip_invalid_rows,
            chunking_parallelism=chunking_parallelism,
        )
        self.index = AssignSourceIndex(index_field)
        try:
            self.run_id = check_run_id(run_id) if run_id is not None else new_run_id()
        except ValueError as exc:
            raise ConfigError(f"{name}.config.run_id", str(exc)) from None
        if export_prompts is not None and (
            not isinstance(export_prompts, str) or not export_prompts
        ):
            raise ConfigError(f"{name}.config.export_prompts", "must be a path")
        if not isinstance(keep_staged, bool):
            raise ConfigError(f"{name}.config.keep_staged", "must be true or false")
        self.keep_staged = keep_staged
        self.export_prompts = resolve_path(export_prompts) if export_prompts else None
        self.dry_run = self.export_prompts is not None
        provider = self.config.processor.provider
        adapter_cls = BatchAdapterRegistry.get(provider)
        if not self.dry_run:
            resolve_credentials(adapter_cls, provider)  # fail before the job starts
        self._resumed = run_id is not None and not self.dry_run
        self._adapter_cls = adapter_cls
        self.plan: Any = None

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(pcoll)  # every SDK worker imports the package at start-up
        # pipeline.py loads Jinja2 and every transform: only when a YAML graph uses this
        from mmirage_beam.transforms.submit_rows import SubmitRows, invalid_rows_path

        config, run_id, dry_run = self.config, self.run_id, self.dry_run
        p = pcoll.pipeline
        base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        check_locations(_locations(config, export_prompts=self.export_prompts), p.options)
        resume, fingerprint, started_at = ResumeState(), None, None
        if not dry_run:
            probe_location(base, run_id, "processor.metadata_output_path")
            run_plan = _submit_plan(config, run_id, self._adapter_cls, self._resumed)
            for message in run_plan.messages:
                print(message.text, file=sys.stderr)
            resume, fingerprint = run_plan.resume, run_plan.fingerprint
            started_at = run_plan.record.started_at
        _prepare_staging(base, run_id, self.keep_staged)
        settings = SubmitSettings(
            run_id,
            export_prompts=self.export_prompts,
            attempt=resume.attempt,
            exclude_custom_ids=resume.submitted_ids,
        )
        submit = SubmitRows(config, settings)
        indexed = pcoll | "AssignSourceIndex" >> self.index
        submitted = indexed | "SubmitRows" >> submit
        self.plan = submit.plan
        # Empty inputs give no element: the side inputs' defaults stand for them.
        receipt_count = beam.pvalue.AsSingleton(
            submitted.receipts
            | "CountReceipts" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        error_count = beam.pvalue.AsSingleton(
            submitted.errors | "CountErrors" >> beam.combiners.Count.Globally().without_defaults(),
            default_value=0,
        )
        first_errors = beam.pvalue.AsSingleton(
            submitted.errors
            | "FirstErrors"
            >> beam.combiners.Top.Of(
                _SHOWN_ERRORS, key=_error_order, reverse=True
            ).without_defaults(),
            default_value=[],
        )
        _ = (
            p
            | "FinishRunOnce" >> beam.Impulse()
            | "FinishRun"
            >> beam.ParDo(
                _FinishRunFn(
                    base,
                    run_id,
                    dry_run,
                    fingerprint,
                    started_at,
                    submit.skip,
                    invalid_rows_path(base, run_id),
                ),
                receipt_count,
                error_count,
                first_errors,
                # after MarkSubmitted wrote the marker this step removes
                beam.pvalue.AsSingleton(submit.marked),
            )
        )
        action = "exporting to " + str(submit.plan.export_file) if dry_run else "submitting"
        print(
            f"mmirage run {run_id}: Beam YAML rows, {action} ({config.processor.provider}); "
            f"receipts at {base}.*.{run_id}.jsonl",
            file=sys.stderr,
        )
        return submitted.receipts | "ReceiptRows" >> beam.Map(_receipt_row).with_output_types(
            ReceiptRow
        )


_HELD_PLANS: dict[tuple[str, str], Any] = {}


def _submit_plan(config: PipelineConfig, run_id: str, adapter_cls: type, resumed: bool) -> Any:
    """``run.plans.prepare_submit`` as ``mmirage run`` calls it: this (launching) process
    holds the run's lease until it exits, whatever the job's outcome, so a second job on
    the same ``run_id`` is refused (``RunLocked``) while this one runs. Taken once per
    process and run, should the transform be expanded again.

    Raises:
        RunLocked: (exit 2) another process holds the run.
    """
    import atexit

    key = (receipts_base(config.processor.metadata_output_path, config.state_dir), run_id)
    if key not in _HELD_PLANS:
        plan = prepare_submit(
            config, run_id, adapter_cls=adapter_cls, resuming=resumed, read_data=False
        )
        _HELD_PLANS[key] = plan
        atexit.register(plan.release)
    return _HELD_PLANS[key]


def _prepare_staging(base: str, run_id: str, keep: bool) -> None:
    """As ``staging.staging_area`` around ``mmirage run``'s pipeline: leftovers of an
    earlier attempt are removed now (a resumed run rebuilds its chunks), and the folder
    is removed when this (launching) process exits, whatever the job's outcome. Not a
    step of the job: the export and the placeholder rows are published from the folder
    by steps that nothing downstream of SubmitRows can wait for."""
    import atexit

    folder = staging_dir(base, run_id)
    delete_folder(folder)
    if not keep:
        atexit.register(_remove_staging, folder)


def _remove_staging(folder: str) -> None:
    try:
        delete_folder(folder)
    except Exception as exc:  # noqa: BLE001 - the job's outcome matters more
        _LOG.warning("could not remove the staging folder %s: %s", folder, exc)


def _locations(config: PipelineConfig, **flags: Optional[str]) -> dict[str, str]:
    """What the workers write, by Beam YAML argument, for ``storage.check_locations``
    (the rows are the pipeline's: no dataset path is read)."""
    return {
        yaml_key(k).replace("--", "").replace("-", "_"): v
        for k, v in config_locations(config, **flags).items()
        if not k.endswith(".path")
    }


# --- merge ------------------------------------------------------------------------------


class MergedJsonRow(NamedTuple):
    """One merged row as a Beam YAML row: its source_index and the merged JSON object
    (the line written to the merged file, without its newline)."""

    source_index: int
    json: str


class _FinishMergeFn(beam.DoFn):
    """The merged file's path (once :class:`~mmirage_beam.transforms.merge_rows.MergeRows` wrote it,
    in source_index order) -> its rows read back line by line, then the merge recorded
    as ``mmirage merge`` records it after its job (``run.merge_plans.record_written_merge``:
    the merge record beside the receipts, which ``mmirage runs`` and ``mmirage run
    --wait`` read)."""

    def __init__(self, base: str, runs: Sequence[str], outputs: Any) -> None:
        self._base, self._runs = base, list(runs)
        self._out, self._errors_path = outputs.final, outputs.errors_path

    def process(self, path: str) -> Iterator[MergedJsonRow]:
        for line, value in iter_jsonl_file(path):
            yield MergedJsonRow(int(value["source_index"]), line.data.decode("utf-8"))
        for message in merge_plans.record_written_merge(
            self._base, self._runs, self._out, self._errors_path
        ):
            _LOG.warning("%s", message.text)


class MergeBatches(beam.PTransform):
    """Beam YAML: ``PCollection[beam.Row]`` (every row the run was submitted from, read
    the same way) -> ``PCollection[MergedJsonRow]``: ``mmirage merge`` on the rows of
    the pipeline, writing the files ``mmirage merge`` writes: ``output_path``,
    ``OUT.errors.jsonl``, the answers file later runs reuse and the merge record.

    When the pipeline is built, the merge is planned by ``mmirage merge``'s own step,
    ``run.merge_plans.start_merge``: the run's receipts are found (the newest run, or
    ``run_id``; resubmissions linked to it are included; a run that sent nothing is
    merged with every row marked skipped), every batch is looked up at its provider, and
    what is cancelled or unfinished is said on stderr (``merge_notes``); the job's
    settings are ``merge_settings``'. Then :class:`~mmirage_beam.transforms.merge_rows.MergeRows`
    fetches the results, verifies the rows against the receipts and joins them by
    source_index (:class:`AssignSourceIndex` with the same ``index_field`` as the
    submit); its last step reads the merged file back as rows and writes the merge
    record (``record_written_merge``). What ``mmirage merge`` does after its job and a
    step inside the job cannot: the record's ``stats`` are the counts the written files
    show (rows written, rows with failures, unknown custom_ids), not the job's Beam
    counters, which no step of a job can read; the totals and usage lines are not
    printed (they are those counters: Beam metrics of the job, namespace ``mmirage``).

    Args:
        config, processor, inputs, outputs, output_schema, remove_columns, state_dir,
            image_base_path: see :func:`build_config` (as given to the submit).
        output_path: the merged JSONL file (required).
        index_field: as given to :class:`SubmitBatches`.
        run_id: the run to merge, or a list of runs (default: the newest).
        allow_partial: merge while batches still run (their rows are marked pending);
            by default such a merge is refused.
        verify_source: rebuild the requests and compare them with the receipts
            (default true).
        partitions: ranges of the ordered write (default: one per 25,000 rows).

    Raises:
        ConfigError: a bad argument, naming it.
        NoReceiptsError, CredentialsError: (when applied: the constructor only stores
            and validates its arguments; ``expand`` selects the run and looks its
            batches up, ``run.merge_plans.start_merge``) no receipts found; a provider
            key is missing.
        MmirageError: (when applied) batches are still running (without
            ``allow_partial``) or cannot be looked up; nothing is merged (where
            ``mmirage merge`` exits 1; the message is its lines).
    """

    def __init__(
        self,
        output_path: Optional[str] = None,
        config: Optional[str] = None,
        processor: Optional[Mapping[str, Any]] = None,
        inputs: Any = None,
        outputs: Any = None,
        output_schema: Any = None,
        remove_columns: Optional[bool] = None,
        state_dir: Optional[str] = None,
        image_base_path: Optional[str] = None,
        index_field: Optional[str] = None,
        run_id: Union[str, Sequence[str], None] = None,
        allow_partial: bool = False,
        verify_source: bool = True,
        partitions: Optional[int] = None,
    ) -> None:
        super().__init__()

        name = type(self).__name__
        if not isinstance(output_path, str) or not output_path:
            raise ConfigError(f"{name}.config.output_path", "is required: the merged JSONL file")
        for key, value in (("allow_partial", allow_partial), ("verify_source", verify_source)):
            if not isinstance(value, bool):
                raise ConfigError(f"{name}.config.{key}", "must be true or false")
        if partitions is not None:
            partitions = require_int(f"{name}.config.partitions", partitions, 1)
        runs = [run_id] if isinstance(run_id, str) else list(run_id or [])
        config_obj = config_or_raise(
            name,
            config=config,
            processor=processor,
            inputs=inputs,
            outputs=outputs,
            output_schema=output_schema,
            remove_columns=remove_columns,
            state_dir=state_dir,
            image_base_path=image_base_path,
        )
        self.config = config_obj
        self.index = AssignSourceIndex(index_field)
        self.output_path = resolve_path(output_path)
        self.runs = runs or None
        self.allow_partial, self.verify_source, self.partitions = (
            allow_partial,
            verify_source,
            partitions,
        )
        self.selection: Any = None
        self.plan: Any = None

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(pcoll)  # every SDK worker imports the package at start-up
        # pipeline.py loads Jinja2 and every transform: only when a YAML graph uses this
        from mmirage_beam.transforms.merge_rows import MergeRows

        name, config = type(self).__name__, self.config
        outputs = merge_plans.merge_outputs(
            self.output_path, "jsonl", config, flag=f"{name}.config.output_path"
        )
        check_locations(_locations(config, output_path=outputs.out), pcoll.pipeline.options)
        # the run selected, its batches looked up, the merge planned: as `mmirage merge`
        start = merge_plans.start_merge(
            config,
            "",
            metadata_paths=[],
            run_ids=self.runs or [],
            allow_partial=self.allow_partial,
            verify_source=self.verify_source,
            resume=lambda run: f"run the SubmitBatches step again with run_id: {run}",
        )
        if start.blocked:  # `mmirage merge` exits 1; a transform cannot exit
            hint = "MergeBatches: allow_partial: true merges what is available"
            texts = [m.text for m in start.messages]
            raise MmirageError("\n".join(texts + [hint] if start.blocked == "pending" else texts))
        for message in start.messages:
            print(message.text, file=sys.stderr)
        for line in (*start.lines, *merge_plans.merge_notes(start)):
            print(line, file=sys.stderr)
        self.selection, config = start.selection, start.config
        settings = merge_plans.merge_settings(start, outputs, self.partitions)
        receipts = list(start.plan.receipts)
        merge = MergeRows(
            config, start.selection.batches, receipts, start.selection.providers, settings
        )
        indexed = pcoll | "AssignSourceIndex" >> self.index
        # Rows that are not valid (no index) were never submitted: nothing to join them to.
        merged = indexed["rows"] | "MergeRows" >> merge
        self.plan = merge.plan
        # MergeRows emits the merged file's path once it is written; its rows are read
        # back from it, streamed, in source_index order, then the merge is recorded.
        finish = _FinishMergeFn(start.plan.base, start.selection.linked, outputs)
        return merged | "MergedRows" >> beam.ParDo(finish).with_output_types(MergedJsonRow)
