"""What ``mmirage merge`` decides before and after its job, as data.

``pipelines/merge.py`` parses the flags, then asks :func:`start_merge` which run to
merge (``run.plans.prepare_merge``'s :class:`~mmirage_beam.run.plans.MergePlan`, the
config of a ``--limit`` run, what the progress lines expect), :func:`merge_outputs`
where the job writes and :func:`merge_settings` the job's settings; after the job,
:func:`convert_output` (Parquet, HF), :func:`remove_temp_dir` and :func:`finish_merge`
(errors file read, merge record written, the report and the exit status). The Beam
YAML ``MergeBatches`` takes the same steps before its job; a front end that cannot act
after its job says :func:`merge_notes` when the graph is built and records the merge
from a last step inside the job (:func:`record_written_merge`). None prints: what the
user should read comes back as :class:`~mmirage_beam.run.plans.Message` values (stderr)
or lines (stdout); the wording is :mod:`mmirage_beam.run.reports`' ``merge_*``
functions.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any, Callable, Mapping, Optional, Sequence

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.io.filesystems import FileSystems
from mmirage_beam.io.fs import delete_folder
from mmirage_beam.jsonl import iter_file_blocks, iter_raw_lines, read_jsonl
from mmirage_beam.reuse import answers_path
from mmirage_beam.run.cancel import cancelled_note
from mmirage_beam.run.discovery import NoReceiptsError
from mmirage_beam.run.layout import RunLayout, receipts_base
from mmirage_beam.run.ledger import merge_record_path, write_merge_record
from mmirage_beam.run.plans import MergePlan, Message, prepare_merge
from mmirage_beam.run.records import MergeRecord
from mmirage_beam.run.reports import (
    merge_outcome_lines,
    merge_totals_lines,
    merge_unfinished_lines,
)
from mmirage_beam.run.selection import RunSelection, select_run
from mmirage_beam.run.storage import check_output_file
from mmirage_beam.run.store import RunStore
from mmirage_beam.settings import MergeSettings, errors_path_for

__all__ = [
    "MergeOutputs",
    "MergeReport",
    "MergeStart",
    "cancelled_line",
    "convert_output",
    "finish_merge",
    "merge_exit_code",
    "merge_limit",
    "merge_notes",
    "merge_outputs",
    "merge_settings",
    "nothing_sent_run",
    "record_merge",
    "record_written_merge",
    "remove_temp_dir",
    "results_to_fetch",
    "start_merge",
    "written_counts",
]


@dataclasses.dataclass(frozen=True)
class MergeStart:
    """A merge ready to build its job, or one that is blocked.

    Attributes:
        plan: ``run.plans.prepare_merge``'s plan (its ``selection``, receipts,
            unfinished runs; ``blocked``: nothing is to be merged, exit 1).
        config: the config to merge with (``row_limit`` set for a ``--limit`` run).
        resume_command: the command that resumes the run (submits what is missing).
        config_arg: ``--config`` as given (for the commands the report names).
        allow_partial, verify_source: as :func:`start_merge` was asked.
        answers_path: where the merge records its answers for later runs to reuse.
        results_expected: the results the merge fetches (the progress lines' "of N").
        messages: lines for the driver to print on stderr, in order (the run that sent
            nothing; why the merge is blocked).
        lines: lines for the driver to print on stdout before the job (the
            ``--limit`` line).
    """

    plan: MergePlan
    config: PipelineConfig
    resume_command: str
    config_arg: str = ""
    allow_partial: bool = False
    verify_source: bool = True
    answers_path: str = ""
    results_expected: int = 0
    messages: tuple[Message, ...] = ()
    lines: tuple[str, ...] = ()

    @property
    def blocked(self) -> Optional[str]:
        """The plan's ``blocked`` (None: the merge goes ahead)."""
        return self.plan.blocked

    @property
    def selection(self) -> RunSelection:
        """The merged run(s) (``run.selection.RunSelection``)."""
        return self.plan.selection


def start_merge(
    config: PipelineConfig,
    config_arg: str,
    *,
    metadata_paths: Sequence[str],
    run_ids: Sequence[str],
    allow_partial: bool,
    verify_source: bool,
    resume: Optional[Callable[[str], str]] = None,
) -> MergeStart:
    """Select the run to merge (``run.selection.select_run``: its batches looked up at
    their providers; a run that sent nothing when no receipt names it) and plan its merge.

    Args:
        config: the merge's config; ``config_arg``: ``--config`` as given (for commands).
        metadata_paths: ``--metadata-path`` (receipt files named by hand), or empty.
        run_ids: ``--run-id`` (the runs to merge), or empty (the newest).
        allow_partial: merge what is available while batches still run.
        verify_source: rebuild the requests to check the source.
        resume: how to resume a run, given its id (default: the ``mmirage run --config
            C --run-id R`` command); the Beam YAML merge names its own submit step.

    Raises:
        NoReceiptsError: no receipt names the run (and it is not a run that sent nothing).
        CredentialsError: a provider key is missing.
    """
    messages: list[Message] = []
    try:
        sel = select_run(config, metadata_paths, run_ids, "merge")
    except NoReceiptsError:
        # A run that skipped every row (skip_invalid_rows) sent nothing and has no
        # receipt; its rows are still merged, each marked skipped.
        found = None if metadata_paths else nothing_sent_run(config, run_ids)
        if found is None:
            raise
        sel, said = found
        messages.append(said)
    plan = prepare_merge(
        config,
        sel,
        allow_partial=allow_partial,
        verify_source=verify_source,
        receipts_picked=bool(metadata_paths),
    )
    if resume is None:
        resume_command = f"mmirage run --config {config_arg} --run-id {plan.resume_run}"
    else:
        resume_command = resume(plan.resume_run)
    if plan.blocked == "lookup_failed":
        text = "mmirage: error: some batches cannot be looked up; nothing merged."
        messages.append(Message("error", text))
    if plan.blocked == "pending":
        messages.append(
            Message(
                "warning",
                f"mmirage: {len(sel.pending)} batch(es) have not ended yet; nothing merged "
                "(use --allow-partial to merge what is available):",
            )
        )
        for b in sel.pending:
            text = f"  {b.provider_batch_id} ({b.provider}, {b.provider_status})"
            messages.append(Message("warning", text))
        note = cancelled_line(config, sel.linked)
        if note:
            messages.append(Message("info", note))
    asked = dict(config_arg=config_arg, allow_partial=allow_partial, verify_source=verify_source)
    if plan.blocked:
        return MergeStart(plan, config, resume_command, **asked, messages=tuple(messages))
    config, lines = merge_limit(config, plan.base, sel.linked)
    return MergeStart(
        plan,
        config,
        resume_command,
        **asked,
        # named, like the merge record, by the oldest linked run (mmirage_beam.reuse)
        answers_path=answers_path(plan.base, sel.linked[0]),
        results_expected=results_to_fetch(sel.batches, plan.receipts),
        messages=tuple(messages),
        lines=lines,
    )


def nothing_sent_run(
    config: PipelineConfig, run_ids: Sequence[str]
) -> Optional[tuple[RunSelection, Message]]:
    """The selection of a finished run that built no request (every row invalid and
    skipped): the asked run, else the newest such run with an invalid-rows file; and the
    line that says so. None when there is none (or several runs are asked)."""
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    if run_ids:
        if len(run_ids) > 1:
            return None
        found = [(0.0, run_ids[0])]
    else:
        pattern = RunLayout(base, "*").invalid_rows
        found = [
            (m.last_updated_in_seconds, m.path[len(base) + len(".invalid_rows.") : -6])
            for m in FileSystems.match([pattern])[0].metadata_list
        ]
    for _, run in sorted(found, reverse=True):
        state = RunStore(base, run).read_run_state()
        if state is not None and state.is_finished and state.requests_total == 0:
            if FileSystems.exists(RunLayout(base, run).invalid_rows):
                text = (
                    f"mmirage merge: run {run} sent nothing (every row was invalid and "
                    "skipped); its rows are written marked mmirage_skipped"
                )
                return RunSelection(run, [run], [], [], [], [], {}, [run]), Message("info", text)
    return None


def merge_limit(
    config: PipelineConfig, base: str, runs: Sequence[str]
) -> tuple[PipelineConfig, tuple[str, ...]]:
    """A run made with ``mmirage run --limit N`` (every one of ``runs`` recorded with the
    same limit): ``config`` with ``row_limit`` N, so just its first N rows are merged,
    and the line that says so; else ``config`` unchanged and no line."""
    records = [r for r in (RunStore(base, run).read_run_record() for run in runs) if r is not None]
    limits = {r.limit for r in records}
    if len(limits) != 1 or None in limits:
        return config, ()
    limit = int(limits.pop())
    line = (
        f"mmirage merge: run {', '.join(runs)} was made with --limit {limit}: merging just "
        f"its first {limit:,} row(s) by source_index"
    )
    return dataclasses.replace(config, row_limit=limit), (line,)


def results_to_fetch(batches: Sequence[Any], receipts: Sequence[Any]) -> int:
    """The results a merge of ``batches`` (``BatchToFetch``) fetches: the requests of the
    receipts (``ReceiptEntry``, each batch counted once) of the batches fetched."""
    fetching = {b.provider_batch_id for b in batches}
    return sum(
        e.request_count
        for e in {e.key: e for e in receipts}.values()
        if e.provider_batch_id in fetching
    )


@dataclasses.dataclass(frozen=True)
class MergeOutputs:
    """Where a merge writes.

    Attributes:
        final: the file (or, for ``hf``, folder) the user asked for.
        out: the ordered JSONL the job writes: ``final`` itself for JSONL; for Parquet
            and HF a file beside it, converted afterwards (:func:`convert_output`).
        errors_path: the errors file (rewritten, empty when nothing failed).
        output_format: ``jsonl``, ``parquet`` or ``hf``.
    """

    final: str
    out: str
    errors_path: str
    output_format: str = "jsonl"

    def discard(self) -> None:
        """Delete the intermediate JSONL of a Parquet or HF merge, if it is there."""
        if self.out != self.final and FileSystems.exists(self.out):
            FileSystems.delete([self.out])


def merge_outputs(
    output_path: str, output_format: str, config: PipelineConfig, flag: str = "--output-path"
) -> MergeOutputs:
    """Where a merge to ``output_path`` in ``output_format`` writes, each file checked
    writable and not one of the inputs.

    Raises:
        ConfigError: (naming ``flag``, the option that gave ``output_path``) the output
            would destroy a folder, a dataset or a receipt, or an HF folder is not one to
            replace.
    """
    final = out = output_path
    errors_path = errors_path_for(out)
    if output_format == "jsonl":
        check_output_file(flag, out, config, [errors_path])
        return MergeOutputs(final, out, errors_path, output_format)
    # pyarrow loads only for Parquet and HF merges
    from mmirage_beam.io.formats import check_hf_folder

    out = f"{final.rstrip('/')}.merge-jsonl-{uuid.uuid4().hex[:12]}.jsonl"
    if output_format == "hf":
        check_hf_folder(final)
        check_output_file(flag, out, config, [errors_path])
    else:
        check_output_file(flag, final, config, [errors_path])
    return MergeOutputs(final, out, errors_path, output_format)


def merge_settings(
    start: MergeStart, outputs: MergeOutputs, partitions: Optional[int]
) -> MergeSettings:
    """The merge job's ``MergeSettings``: where it writes, its ``--partitions``, and what
    the plan decided (invalid-rows files, never-submitted requests, answers file)."""
    plan = start.plan
    return MergeSettings(
        outputs.out,
        num_partitions=partitions,
        verify_source=start.verify_source,
        invalid_rows_files=list(plan.invalid_rows_files),
        # Requests the source still builds but no receipt holds were never submitted;
        # told apart only when every row this merge reads belongs to the merged run(s).
        unsubmitted_run=(plan.resume_run, start.resume_command) if plan.count_unsubmitted else None,
        errors_path=outputs.errors_path,
        answers_path=start.answers_path,
    )


def convert_output(
    outputs: MergeOutputs, config: PipelineConfig, stats: Mapping[str, int]
) -> tuple[str, tuple[str, ...]]:
    """The merged file as shown in the totals and, for Parquet and HF, the lines of its
    conversion: the ordered JSONL streamed into ``outputs.final``, the same row count
    (``stats``: the job's counters). No JSONL written (no rows): nothing to convert."""
    if outputs.out == outputs.final or not FileSystems.exists(outputs.out):
        return outputs.out, ()
    from mmirage_beam.io.formats import convert_merged_jsonl  # pyarrow: only here

    fmt = outputs.output_format
    rows, as_json = convert_merged_jsonl(
        outputs.out, outputs.final, fmt, config.outputs, config.output_schema
    )
    if rows != stats.get("rows_written", 0):  # pragma: no cover - a broken conversion
        raise RuntimeError(f"converted {rows} rows of {stats.get('rows_written', 0)}")
    lines = tuple(
        f"mmirage merge: column {name!r} holds values of different types; written as JSON text"
        for name in sorted(as_json)
    )
    return f"{outputs.final} ({fmt})", lines


def remove_temp_dir(folder: Optional[str]) -> tuple[Message, ...]:
    """Remove the merge job's temporary folder (best effort: never hides the job's own
    outcome); the warning when it cannot be removed."""
    if folder:
        try:
            delete_folder(folder)
        except Exception as exc:
            text = f"mmirage merge: warning: could not remove {folder}: {exc}"
            return (Message("warning", text),)
    return ()


def record_merge(
    base: str,
    runs: Sequence[str],
    out: str,
    stats: Mapping[str, int],
    errors: Sequence[Mapping[str, Any]],
) -> tuple[tuple[Message, ...], Optional[MergeRecord]]:
    """Write the merge record ``mmirage runs`` and ``mmirage run --wait`` read (best
    effort): ``(messages, the record written)``; the warning and None when it cannot be
    written (the merged file is; only the ledger is stale)."""
    try:
        record = write_merge_record(base, runs, out, stats, errors)
    except Exception as exc:
        text = f"mmirage merge: warning: could not write {merge_record_path(base, runs[0])}: {exc}"
        return (Message("warning", text),), None
    return (), record


def written_counts(out: str, errors: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The counts a written merge's own files show, for a merge record written where the
    job's counters cannot be read (a step of the job itself): ``rows_written`` (the
    lines of the merged JSONL ``out``, streamed), ``rows_with_failures`` (the rows its
    errors file names) and ``unknown_custom_ids`` (its lines that name no row)."""
    rows = 0
    if FileSystems.exists(out):
        with FileSystems.open(out, compression_type="uncompressed") as f:
            rows = sum(1 for line in iter_raw_lines(iter_file_blocks(f)) if line.data.strip())
    named = {e.get("source_index") for e in errors}
    return {
        "rows_written": rows,
        "rows_with_failures": len(named - {None}),
        "unknown_custom_ids": sum(1 for e in errors if e.get("source_index") is None),
    }


def record_written_merge(
    base: str, runs: Sequence[str], out: str, errors_path: str
) -> tuple[Message, ...]:
    """The finish step a merge takes from inside its own job (the Beam YAML
    ``MergeBatches``, once the merged file is written): the errors file read and the
    merge record written (:func:`record_merge`), with :func:`written_counts` as its
    ``stats``; the warning when it cannot be written."""
    errors = read_jsonl(errors_path)
    return record_merge(base, runs, out, written_counts(out, errors), errors)[0]


def merge_notes(start: MergeStart) -> tuple[str, ...]:
    """What a merge can say before its job, for a front end that cannot print after it
    (the Beam YAML ``MergeBatches``): the runs ``mmirage cancel`` cancelled
    (:func:`cancelled_line`) and, for an unfinished run, what is missing and how to resume
    it (``run.reports.merge_unfinished_lines``; the requests never submitted are counted
    only by the job)."""
    sel, unfinished = start.selection, start.plan.unfinished
    note = cancelled_line(start.config, sel.linked)
    lines = [note] if note else []
    if unfinished:
        lines += merge_unfinished_lines(unfinished, 0, None, start.resume_command)
    return tuple(lines)


def cancelled_line(config: PipelineConfig, runs: Sequence[str]) -> Optional[str]:
    """The line naming which of ``runs`` ``mmirage cancel`` cancelled (their rows are
    marked cancelled); None: none."""
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    return cancelled_note(base, runs)


def merge_exit_code(
    unfinished: Any, stats: Mapping[str, int], errors: Sequence[Mapping[str, Any]]
) -> int:
    """A finished merge's exit status: 1 when a merged run is unfinished (``unfinished``:
    ``run.selection.Unfinished``) or requests were never submitted, or a row failed or a
    result's custom_id is unknown; else 0."""
    if unfinished or any(e["error_type"] == "never_submitted" for e in errors):
        return 1
    failed = stats.get("rows_with_failures", 0) or stats.get("unknown_custom_ids", 0)
    return 1 if failed else 0


@dataclasses.dataclass(frozen=True)
class MergeReport:
    """What a finished merge says and its exit status.

    Attributes:
        messages: lines for the driver to print on stderr (a merge record not written).
        lines: the totals and what follows them, for stdout.
        exit_code: :func:`merge_exit_code`.
        record: the merge record written (None: it could not be written).
    """

    messages: tuple[Message, ...]
    lines: tuple[str, ...]
    exit_code: int
    record: Optional[MergeRecord] = None


def finish_merge(
    start: MergeStart,
    job_plan: Any,
    outputs: MergeOutputs,
    stats: Mapping[str, int],
    shown: str,
) -> MergeReport:
    """After a merge job that succeeded (``job_plan``: the wired ``pipeline.MergePlan``;
    ``stats``: its counters; ``shown``: the merged file as :func:`convert_output` names
    it): its errors file read, the merge record written (:func:`record_merge`), and
    what it says (``run.reports.merge_totals_lines`` and ``merge_outcome_lines``)."""
    sel, unfinished = start.selection, start.plan.unfinished
    errors = read_jsonl(outputs.errors_path)
    messages, record = record_merge(start.plan.base, sel.linked, outputs.final, stats, errors)
    lines = merge_totals_lines(job_plan, stats, errors, sel.pending, start.allow_partial, shown)
    lines += merge_outcome_lines(
        cancelled_line(start.config, sel.linked),
        stats,
        errors,
        start.config.processor,
        unfinished,
        start.config_arg,
        start.resume_command,
        sel.starts,
    )
    code = merge_exit_code(unfinished, stats, errors)
    return MergeReport(messages, tuple(lines), code, record)
