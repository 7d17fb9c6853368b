"""What ``mmirage run``, ``mmirage resubmit`` and ``mmirage merge`` say once a job ended,
as lines of text.

Each function returns the lines (or one text) for the driver to print; none prints. The
wording is the commands' interface (tests and users read it), so it is kept here once.
"""

from __future__ import annotations

import heapq
import re
import shlex
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from mmirage_beam.run.records import RunRecord

from mmirage_beam.costs.report import estimate_lines, usage_lines
from mmirage_beam.io.filesystems import FileSystems
from mmirage_beam.jsonl import iter_jsonl_file
from mmirage_beam.launch.failures import describe_failure
from mmirage_beam.progress.text import human_bytes
from mmirage_beam.reuse import REUSED_REQUESTS, merge_reuse_lines, savings_lines, sent_stats
from mmirage_beam.run.receipts import consolidate_run, pending_intents, submission_complete
from mmirage_beam.run.selection import finish_pending_lines

__all__ = [
    "MERGE_TRANSLATED",
    "UNUSABLE_ANSWERS",
    "InvalidRows",
    "already_run_message",
    "command_line",
    "estimate_summary_lines",
    "failure_report",
    "merge_failure_message",
    "merge_outcome_lines",
    "merge_totals_lines",
    "merge_unfinished_lines",
    "resubmit_summary_lines",
    "short_error",
    "submit_summary_lines",
]


class InvalidRows:
    """The invalid-rows file's count and its first rows by source_index, read streamed
    (the file can hold every row of the dataset).

    Attributes:
        count: the number of invalid rows.
        first: the first ``keep`` of them (dicts of the file), by source_index.
    """

    def __init__(self, count: int, first: list) -> None:
        self.count = count
        self.first = first

    def __bool__(self) -> bool:
        return self.count > 0

    @classmethod
    def read(cls, path: str, keep: int = 10) -> InvalidRows:
        """The invalid rows of the file at ``path`` (none when it does not exist)."""
        if not FileSystems.exists(path):
            return cls(0, [])
        count = 0
        heap: list = []  # the ``keep`` smallest (key, n, row), as a max-heap on -key
        for n, (_line, e) in enumerate(iter_jsonl_file(path)):
            count += 1
            key = (e.get("source_index") is None, e.get("source_index") or 0)
            item = ((-key[0], -key[1]), -n, e)
            if len(heap) < keep:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
        first = [e for _k, _n, e in sorted(heap, reverse=True)]
        return cls(count, first)


def command_line(words: Sequence[str], beam_args: Sequence[str]) -> str:
    """``words`` then the Beam arguments, shell-quoted: a command to copy."""
    return " ".join([*words, *map(shlex.quote, beam_args)])


def short_error(exc: BaseException) -> str:
    """One line of ``exc``'s message: the last line that says something (its type's name
    when none does). A portable runner's job failure (``Pipeline ... failed in state
    FAILED: <the engine's error>``) gives its first line, which names the engine's
    error; the lines after it are the engine's trace, whose last line can be a lone
    ``>`` (Flink's)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines()]
    lines = [ln for ln in lines if any(c.isalnum() for c in ln)]
    if not lines:
        return type(exc).__name__
    if _JOB_FAILED.match(lines[0]):
        return lines[0] if len(lines[0]) <= 500 else lines[0][:497] + "..."
    return lines[-1]


_JOB_FAILED = re.compile(r"^Pipeline \S+ failed in state (FAILED|CANCELLED|UNKNOWN)")


def nothing_read_message(run_id: str, datasets: Sequence[Any], dry_run: bool) -> str:
    """A job that read no row at all: which datasets were empty (``datasets``: the
    config's ``DatasetConfig`` records, each with ``path`` and ``type``)."""
    where = "; ".join(
        f"loading_params.datasets[{i}]: {getattr(d, 'type', '?')} {getattr(d, 'path', '?')}"
        for i, d in enumerate(datasets)
    )
    sent = "nothing was exported" if dry_run else "nothing was sent"
    return (
        f"mmirage: error: run {run_id}: no row was read: the datasets hold no rows "
        f"({where}); {sent}. Check each dataset's path (a glob or folder that matches "
        "no file, or files with no rows)."
    )


def empty_datasets_message(
    run_id: str, datasets: Sequence[Any], stats: Mapping[str, int]
) -> Optional[str]:
    """The datasets that read no row while others did (the job's ``empty_dataset:<i>``
    counters, :data:`mmirage_beam.io.readers.EMPTY_DATASET_PREFIX`), each with its path;
    None when every dataset read rows."""
    from mmirage_beam.io.readers import EMPTY_DATASET_PREFIX

    empty = sorted(
        int(k[len(EMPTY_DATASET_PREFIX) :])
        for k, v in stats.items()
        if k.startswith(EMPTY_DATASET_PREFIX) and v and k[len(EMPTY_DATASET_PREFIX) :].isdigit()
    )
    if not empty:
        return None
    where = "; ".join(
        f"loading_params.datasets[{i}]: {getattr(datasets[i], 'type', '?')} "
        f"{getattr(datasets[i], 'path', '?')}"
        for i in empty
        if i < len(datasets)
    )
    return (
        f"mmirage run {run_id}: warning: {len(empty)} dataset(s) read 0 rows ({where}); "
        "check their paths (a glob or folder that matches no file, or files with no rows)"
    )


def already_run_message(
    config_path: str,
    beam_args: Sequence[str],
    earlier: RunRecord,
    wait: bool = False,
    held: bool = False,
    limit: Optional[int] = None,
    wait_args: Sequence[str] = (),
) -> str:
    """Exit 3: an earlier run (``earlier``, its run record) submitted the same config
    and data; how to resume it or to submit again on purpose. ``wait``: the command was
    ``run --wait``, so the commands named keep ``--wait``. ``held``: a live process holds
    the earlier run's lease (it is being submitted now), so resuming it would be refused:
    the advice is to follow it instead. ``limit``: the run's ``--limit``, kept in the
    commands named, as are ``wait_args`` (the cycle's ``--output-path``, ``--retries``...
    as given)."""
    run_id = earlier.run_id
    words = ["mmirage run", "--config", config_path, *(["--wait"] if wait else [])]
    # a --limit run: "submit again" must not send the whole dataset
    words += ["--limit", str(limit)] if limit is not None else []
    words += [shlex.quote(w) for w in wait_args]
    cmd = command_line(words, beam_args)
    state = "finished" if earlier.finished else "not finished"
    head = (
        f"mmirage run: nothing sent: run {run_id} (started {earlier.started_at}, "
        f"{state}) already submitted this config with the same data (fingerprint "
        f"{str(earlier.fingerprint)[:12]}).\n"
    )
    if held:
        follow = command_line(["mmirage check", "--config", config_path, "--watch"], ())
        return head + (
            f"  another process is submitting it right now (it holds the run's lease); "
            f"follow it with:  {follow} --run-id {run_id}\n"
            f"  once that process has ended, resume or complete it:  {cmd} --run-id {run_id}"
        )
    return head + (
        f"  resume or complete it:    {cmd} --run-id {run_id}\n"
        f"  submit again on purpose:  {cmd} --new-run --no-reuse (pays again for every "
        "request; --new-run alone reuses the answers a merge of it recorded)"
    )


def failure_report(
    plan: Any, run_id: str, exc: BaseException, resume_cmd: str, stopped: bool = False
) -> str:
    """What was accepted when a submit job failed or stopped (``plan``: the wired
    ``pipeline.SubmitPlan``), derived from what is recorded once the job has stopped,
    and how to resume."""
    lines = [
        f"mmirage run {run_id}: stopped (Ctrl-C or SIGTERM)"
        if stopped
        else f"mmirage: error: the pipeline failed: {describe_failure(exc)}"
    ]
    try:
        kept = [f"{p} ({n})" for p, n in consolidate_run(plan.receipts_base, run_id).items()]
        in_flight = pending_intents(plan.receipts_base, run_id)
    except Exception as storage_exc:  # the receipts location itself is failing
        lines.append(
            f"The receipts at {plan.receipts_base}.* cannot be read back ({storage_exc}); "
            "every accepted batch's receipt part was written before it was reported, so "
            "fix the storage, then resume with:"
        )
        lines.append(f"  {resume_cmd}")
        return "\n".join(lines)
    if not in_flight and submission_complete(plan.receipts_base, run_id):
        lines.append(
            f"Every batch of run {run_id} is submitted and receipted ({', '.join(kept)}); "
            "only a finish step failed (placeholder rows, receipts consolidation or the "
            "run record). Complete it (nothing is sent; the provider is not contacted):"
        )
        lines.append(f"  {resume_cmd}")
        return "\n".join(lines)
    before = "it stopped" if stopped else "the failure"  # a Ctrl-C is no failure
    lines.append(
        f"Receipts of the batches accepted before {before}: " + ", ".join(kept)
        if kept
        else "No batch had been accepted."
    )
    if in_flight:
        lines.append(
            f"{len(in_flight)} chunk(s) were being submitted when the run stopped and have "
            "no receipt: the provider may have accepted them. The resume below looks each "
            "one up before sending anything again (see docs/failure-modes.md)."
        )
    else:
        lines.append("Every accepted batch has its receipt; nothing will be sent twice.")
    lines.append(f"Resume the run with:\n  {resume_cmd}")
    return "\n".join(lines)


def submit_summary_lines(
    plan: Any,
    stats: Mapping[str, int],
    receipts: Sequence[str],
    invalid: InvalidRows,
    skipped: bool,
) -> list[str]:
    """The summary of a finished submit job (``plan``: the wired
    ``pipeline.SubmitPlan``; ``stats``: the job's counters; ``receipts``: the receipt
    files written), then its invalid rows, if any."""
    lines = [
        f"run id:              {plan.run_id}",
        f"rows read:           {stats.get('rows_read', 0) + stats.get('row_errors', 0):,}"
        + (f" ({stats['row_errors']:,} unreadable)" if stats.get("row_errors") else ""),
        f"invalid rows:        {invalid.count:,}",
        f"requests:            {stats.get('requests', 0):,}",
        f"chunks:              {stats.get('chunks', 0):,}",
        f"request bytes:       {stats.get('request_bytes', 0):,} "
        f"({human_bytes(stats.get('request_bytes', 0))})",
    ]
    if plan.dry_run:
        lines.append(f"batches exported:    {stats.get('batches_submitted', 0):,}")
        if invalid and not skipped:
            lines.append("exported prompts:    none (invalid rows stopped the dry run)")
        elif not _exists(plan.export_file):  # no request was built: no file (issue 38)
            lines.append(f"exported prompts:    none ({_why_no_export(stats)})")
        else:
            lines.append(f"exported prompts:    {plan.export_file}")
            reused = int(stats.get(REUSED_REQUESTS, 0))
            if reused:  # not in the file: say so, and how to export them too
                lines.append(
                    f"  not exported:      {reused:,} request(s) that would reuse an earlier "
                    "answer (--no-reuse exports every request)"
                )
    else:
        lines.append(f"batches submitted:   {stats.get('batches_submitted', 0):,}")
        if stats.get("batches_already_receipted"):
            lines.append(f"  already receipted: {stats['batches_already_receipted']:,}")
        if stats.get("requests_not_selected"):
            lines.append(
                f"already submitted:   {stats['requests_not_selected']:,} request(s) "
                "(earlier attempts of this run; not sent again)"
            )
        if not stats.get("batches_submitted") and stats.get("requests_not_selected"):
            lines.append("nothing left to submit: every request of this run has a receipt")
    lines.append("receipts:            " + (", ".join(receipts) if receipts else "none"))
    if invalid:
        lines += ["", f"{invalid.count} invalid row(s), all listed in {plan.invalid_rows_path}:"]
        for e in invalid.first:
            where = f" ({e['location']})" if e.get("location") else ""
            name = f" [{e['input_name']}]" if e.get("input_name") else ""
            lines.append(
                f"  source_index {e['source_index']}{name} {e['dataset_path']}{where}: "
                f"{e['reason']}"
            )
        if invalid.count > len(invalid.first):
            lines.append(f"  ... and {invalid.count - len(invalid.first)} more")
        rows = stats.get("rows_read", 0) + stats.get("row_errors", 0)
        reasons = {(e.get("input_name"), e.get("reason")) for e in invalid.first}
        key_typo = None
        if invalid.count == rows > 1 and len(reasons) == 1:
            ((name, reason),) = reasons
            if name and "the row has no key" in str(reason):  # a typo'd key, not bad rows
                key_typo = name
        if key_typo:
            lines.append(
                f"Every row was refused for the same missing key: fix the key of input "
                f"{key_typo!r} in processing_params.inputs, not the rows. Nothing was "
                "submitted."
            )
        elif skipped:
            lines.append("These rows were skipped (skip_invalid_rows); the rest was processed.")
        else:
            lines.append(
                "Nothing was submitted. Fix these rows, or rerun with --skip-invalid-rows."
            )
    return lines


def estimate_summary_lines(
    stats: Mapping[str, int],
    provider_config: Any,
    dry_run: bool,
    told: Optional[Sequence[str]] = None,
) -> list[str]:
    """The tokens and estimated cost of what the job sent, a resume's "sent now" line
    before them, then what reused answers saved. When ``told`` (the lines logged before
    the first batch, :func:`mmirage_beam.progress.counters.told_estimate`) are the same
    estimate, one line says so with the total instead of printing them twice."""
    lines: list[str] = []
    already = stats.get("requests_not_selected", 0)
    estimate = estimate_lines(sent_stats(stats), provider_config)  # what is sent
    if already:  # a resume: what it sends now, apart from what earlier attempts sent
        now = max(stats.get("requests", 0) - already - stats.get("requests_reused", 0), 0)
        lines.append(
            f"sent now:            {now:,} request(s); already sent: {already:,} "
            "(earlier attempts, not counted below)"
        )
        if not now:
            estimate = ["tokens and estimated cost: nothing sent now ($0)"]
    if estimate and estimate == told and len(estimate) > 2:
        # the same lines were logged before the first batch: say so, keep the price, the
        # total (or the one output's line) and what follows it (max_enqueued_tokens)
        at = next((i for i, x in enumerate(estimate) if x.startswith("  total: ")), 2)
        estimate = [
            "tokens and estimated cost (as logged before submitting):",
            estimate[1],
            *estimate[at:],
        ]
    lines += estimate
    lines += savings_lines(stats, provider_config, dry_run)
    return lines


def resubmit_summary_lines(
    plan: Any,
    new_run: str,
    parent: Optional[str],
    stats: Mapping[str, int],
    receipts: Sequence[str],
    selected: int,
    only: str,
    config_path: str,
) -> list[str]:
    """The summary of a finished resubmission (``plan``: the wired
    ``pipeline.SubmitPlan``; ``selected``: the failed requests chosen by ``--only``)."""
    lines = [
        f"resubmission run:    {new_run} (parent run {parent})",
        f"requests re-sent:    {stats.get('requests_submitted', 0)} of the {selected} "
        f"failed request(s) selected by --only {only}",
        f"batches submitted:   {stats.get('batches_submitted', 0)}",
        "receipts:            " + (", ".join(receipts) if receipts else "none"),
    ]
    missing = selected - stats.get("requests_submitted", 0)
    if missing:
        lines.append(
            f"{missing} failed request(s) could not be rebuilt (their rows are invalid now, "
            f"see {plan.invalid_rows_path}, or no longer exist)"
        )
    lines.append(
        f"Then merge as usual: mmirage merge --config {config_path} --output-path OUT.jsonl"
    )
    return lines


#: what ``mmirage merge`` says when the runner only translated its job (exit 0)
MERGE_TRANSLATED = "mmirage merge: the runner only translated the job (--dry_run); nothing merged"

#: outcomes of requests the provider answered (check counts them done) whose answer is
#: not usable: merge's own verdicts (docs/commands.md, the outcome table)
UNUSABLE_ANSWERS = frozenset(
    {"refusal", "truncated", "content_filter", "empty", "invalid_json", "schema_mismatch"}
)


def merge_failure_message(exc: BaseException, given: Sequence[str]) -> str:
    """A merge job failed (a worker died, storage failed...): why, and the command
    (``given``: the merge's arguments) that merges again."""
    again = " ".join(shlex.quote(a) for a in ["mmirage", "merge", *given])
    return (
        f"mmirage: error: the merge job failed: {describe_failure(exc)}\n"
        "Merge again with the same command (it writes the merged files anew, each "
        "whole or not at all; it sends nothing to the provider):\n"
        f"  {again}"
    )


def merge_totals_lines(
    plan: Any,
    stats: Mapping[str, int],
    errors: Sequence[Mapping[str, Any]],
    pending: Sequence[Any],
    allow_partial: bool,
    shown: str,
) -> list[str]:
    """The totals of a finished merge job (``plan``: the wired ``pipeline.MergePlan``;
    ``errors``: the errors file's records; ``pending``: the batches still running;
    ``shown``: the merged file as named to the user)."""
    by_type: dict[str, int] = {}
    for e in errors:
        if e.get("source_index") is None:  # unknown ids and unreadable lines: no output
            continue
        by_type[e["error_type"]] = by_type.get(e["error_type"], 0) + 1
    unreadable = stats.get("unreadable_result_lines", 0)
    lines = [
        f"rows written:        {stats.get('rows_written', 0):,}",
        f"outputs succeeded:   {stats.get('outputs_succeeded', 0):,}",
        f"outputs failed:      {sum(by_type.values()):,}",
    ]
    for kind, n in sorted(by_type.items()):
        lines.append(f"  {kind + ':':<18} {n:,}")
    unusable = sum(n for kind, n in by_type.items() if kind in UNUSABLE_ANSWERS)
    if unusable:
        lines.append(
            f"  of these, {unusable:,} unusable answer(s) ({', '.join(sorted(UNUSABLE_ANSWERS))}"
            "): the provider returned them as successes, so mmirage check counts them done; "
            f"the other {sum(by_type.values()) - unusable:,} failed at the provider or here"
        )
    lines += [
        f"skipped at submit:   {stats.get('rows_skipped_invalid', 0):,} (invalid rows)",
        f"missing source rows: {stats.get('missing_source_rows', 0):,}",
        f"source changed rows: {stats.get('source_changed_rows', 0):,}",
        f"unknown custom_ids:  {stats.get('unknown_custom_ids', 0) - unreadable:,}",
        f"unreadable lines:    {unreadable:,} (result lines without a recoverable custom_id)",
        f"input tokens:        {stats.get('input_tokens', 0):,}",
        f"output tokens:       {stats.get('output_tokens', 0):,}",
        f"merged file:         {shown} ({plan.num_partitions} partition(s))",
    ]
    if errors:
        lines.append(f"errors file:         {plan.errors_path}")
    if pending and allow_partial:
        lines.append(
            f"PARTIAL: {len(pending)} batch(es) still running; their rows carry "
            "mmirage_errors of type 'pending'. Merge again once they have ended."
        )
    return lines


def merge_outcome_lines(
    cancelled: Optional[str],
    stats: Mapping[str, int],
    errors: Sequence[Mapping[str, Any]],
    provider_config: Any,
    unfinished: Any,
    config_arg: str,
    resume_command: str,
    runs: Sequence[str] = (),
) -> list[str]:
    """What a merge says after its totals: the runs cancelled (``cancelled``, a line or
    None), the usage, the reused answers, the runs whose finish steps are pending and
    what is unfinished (``unfinished``: ``run.selection.Unfinished``). Rows never
    submitted by runs that did finish (``runs``, the merged runs) were not in the data
    when they were submitted: said so, not "UNFINISHED" (issue 38)."""
    lines = [cancelled] if cancelled else []
    lines += [*usage_lines(stats, provider_config), *merge_reuse_lines(stats)]
    if unfinished.finish_pending:
        lines += finish_pending_lines(unfinished.finish_pending, config_arg)
    never = [e for e in errors if e["error_type"] == "never_submitted"]
    rows = len({e["source_index"] for e in never})
    if unfinished:
        lines += merge_unfinished_lines(unfinished, len(never), rows, resume_command)
    elif never:
        who = f"run {', '.join(runs)}" if runs else "the merged run"
        lines += [
            f"NOT SUBMITTED: {rows} row(s) ({len(never)} request(s)) were not in the data when "
            f"{who} was submitted (rows added or changed since); they are in the merged "
            "file marked never_submitted. Send them with a new run (the answers merged "
            "here are reused: only those rows are sent), then merge it:",
            f"  mmirage run --config {config_arg}",
        ]
    return lines


def merge_unfinished_lines(
    unfinished: Any, never_requests: int, never_rows: Optional[int], resume_command: str
) -> list[str]:
    """The run stopped before every chunk was submitted: never say it is complete.
    ``never_rows`` None: the requests were counted from the run record, not merged."""
    who = f"run {', '.join(unfinished.runs)}" if unfinished.runs else "the merged run"
    lines = [f"UNFINISHED: {who} stopped before all its chunks were submitted:"]
    if never_requests and never_rows is None:
        lines.append(
            f"  never_submitted: {never_requests} request(s) were never submitted; "
            "mmirage merge writes their rows marked never_submitted"
        )
    elif never_requests:
        lines.append(
            f"  {never_rows} row(s) ({never_requests} request(s)) were never submitted; "
            "they are in the merged file marked never_submitted"
        )
    elif unfinished.intent_requests:
        lines.append(
            f"  {len(unfinished.intent_requests)} request(s) were being submitted when it "
            "stopped and have no receipt"
        )
    if unfinished.intents:
        lines.append(f"  {len(unfinished.intents)} interrupted chunk submission(s) (intents)")
    for run, record in sorted(unfinished.states.items()):
        lines.append(
            f"  run {run} is recorded as {record.get('state')!r}, not finished"
            + ("; mmirage merge counts the requests never submitted" if never_rows is None else "")
        )
    for run, n in sorted(unfinished.short_by.items()):
        lines.append(f"  run {run} built {n} request(s) more than its receipts hold")
    lines.append(
        f"Resume it (only what has no receipt is sent), then merge again:\n  {resume_command}"
    )
    return lines


def _exists(path: Optional[str]) -> bool:
    if not path:
        return False
    try:
        return FileSystems.exists(path)
    except Exception:  # noqa: BLE001 - a store that cannot say: name the path as before
        return True


def _why_no_export(stats: Mapping[str, int]) -> str:
    """Why a dry run wrote no export file: no row read, or no request left to export."""
    if not stats.get("rows_read", 0) and not stats.get("row_errors", 0):
        return "no row was read"
    reused = int(stats.get(REUSED_REQUESTS, 0))
    if reused:
        return (
            f"each of the {reused:,} request(s) would reuse an earlier answer; --no-reuse "
            "exports every request"
        )
    return "no request was built"
