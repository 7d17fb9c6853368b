"""What every front end does before and after a run's job, as data.

``mmirage run`` (``pipelines/submit.py``) and the Beam YAML ``SubmitBatches`` call
:func:`prepare_submit` the same way: it takes the run's lease (``RunLocked``, exit 2,
while another process holds it), refuses a fresh run whose config and data an earlier
run already submitted, clears the markers of an earlier attempt, writes the run record
and resolves a resumed run's interrupted chunks. It prints nothing: what the user should
read comes back in :attr:`SubmitPlan.messages`, for the driver to print.

The other steps the drivers decide before or after a job are here too, each returning
data: :func:`submit_adapter` and :func:`choose_run_id` (is the submission possible, under
which id), :func:`estimate_fraction` and :func:`with_limit` (what the flags ask),
:func:`plan_reuse` (which earlier answers are reused), :func:`finish_submit` (receipts
consolidated, run record finished), :func:`prepare_resubmit` (which failures a
resubmission re-sends) and :func:`prepare_merge`. :mod:`mmirage_beam.run.submit_plans`
puts the submit steps in the order ``mmirage run`` takes them, and
:mod:`mmirage_beam.run.merge_plans` the merge steps.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, NamedTuple, Optional

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.costs.tokens import (
    check_sample_fraction,
    extrapolated_counters,
    token_counters,
)
from mmirage_beam.crashpoints import crash_point
from mmirage_beam.errors import ConfigError, CredentialsError
from mmirage_beam.ids import check_run_id, new_run_id
from mmirage_beam.io.filesystems import FileSystems
from mmirage_beam.io.fs import delete_files, list_files, write_durably
from mmirage_beam.jsonl import read_jsonl, read_text_lines
from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
from mmirage_beam.results import resubmittable
from mmirage_beam.reuse import (
    check_staleness,
    earlier_answer_files,
    reuse_wanted,
    sent_stats,
    staleness_lines,
)
from mmirage_beam.run.fingerprint import matching_run_record, new_run_record, run_fingerprint
from mmirage_beam.run.layout import RunLayout, receipts_base
from mmirage_beam.run.lease import Lease, RunLocked, acquire
from mmirage_beam.run.receipts import MODALITIES, consolidate_run
from mmirage_beam.run.records import RunRecord
from mmirage_beam.run.resume import ResumeState, prepare_resume
from mmirage_beam.run.selection import find_unfinished, select_run
from mmirage_beam.run.store import RunStore

FINGERPRINT_WAIT_SECS = 30.0  # how long an identical fresh run waits for the first one


class Message(NamedTuple):
    """One line for the user: ``level`` is ``"info"``, ``"warning"`` or ``"error"``."""

    level: str
    text: str


@dataclasses.dataclass(frozen=True)
class SubmitPlan:
    """A run ready to submit (or, with ``earlier`` set, one with nothing to send).

    Attributes:
        layout: the run's files.
        fingerprint: the run fingerprint (:func:`run_fingerprint`).
        record: the run record as written before the job (``finished: false``).
        resume: what a resumed run must not send again (attempt 1 for a fresh run).
        messages: lines for the driver to print, in order.
        earlier: a fresh run only: the run record of an earlier run of the same config
            and data; nothing was taken nor written, and nothing is to be sent (exit 3).
        leases: the leases this plan holds until :meth:`release`.
    """

    layout: RunLayout
    fingerprint: str
    record: Optional[RunRecord]
    resume: ResumeState
    messages: tuple[Message, ...] = ()
    earlier: Optional[RunRecord] = None
    leases: tuple[Lease, ...] = ()

    @property
    def run_id(self) -> str:
        """The run id."""
        return self.layout.run_id

    def release(self) -> None:
        """Give up the run's lease (idempotent); the driver calls it once the job ended."""
        for lease in reversed(self.leases):
            lease.release()


def _acquire_waiting(base: str, key: str, wait_secs: float) -> Lease:
    """The lease ``key``, waiting up to ``wait_secs`` seconds for a short-lived holder.

    Raises:
        RunLocked: still held after ``wait_secs``.
    """
    deadline = time.monotonic() + wait_secs
    while True:
        try:
            return acquire(base, key)
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def prepare_submit(
    config: PipelineConfig,
    run_id: str,
    *,
    adapter_cls: type,
    resuming: bool,
    new_run: bool = False,
    read_data: bool = True,
    on_lost: Optional[Callable[[dict[str, Any]], None]] = None,
    fingerprint_wait_secs: float = FINGERPRINT_WAIT_SECS,
) -> SubmitPlan:
    """Take run ``run_id`` for a submission (not a dry run) and return its plan.

    Args:
        config: the run's config (``row_limit`` already applied).
        run_id: the run id.
        adapter_cls: the provider's adapter class (resolves a resumed run's intents).
        resuming: the user named the run (``--run-id``, YAML ``run_id``): receipted
            requests are not sent again.
        new_run: submit even if an earlier run sent the same config and data.
        read_data: the run reads the configured datasets (``mmirage run``); False for a
            Beam YAML run (its rows come from the pipeline, so no data fingerprint and
            no look for an earlier identical run).
        on_lost: called if the lease is found lost while refreshing (default: write the
            stop marker, so the job submits nothing more).
        fingerprint_wait_secs: how long a fresh run waits for an identical one started
            together to write its run record, seconds.

    Raises:
        RunLocked: (exit 2) another live process holds the run (nothing was written).
        apache_beam.io.filesystem.BeamIOError / OSError: the receipts place or a data
            file cannot be read or written.
    """
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    store = RunStore(base, run_id)
    layout = store.layout
    fingerprint = run_fingerprint(config, read_data=read_data)
    messages: list[Message] = []
    leases: list[Lease] = []

    def stop_on_lost(_holder: dict[str, Any]) -> None:
        write_durably(layout.stop_marker, b"lease lost\n")

    try:
        if read_data and not resuming and not new_run:
            # Serialises identical fresh runs started together, until the run record of
            # the first one is written (the others then find it).
            leases.append(_acquire_waiting(base, "fp-" + fingerprint[:16], fingerprint_wait_secs))
            earlier = matching_run_record(base, fingerprint)
            if earlier is not None:
                leases.pop().release()
                return SubmitPlan(layout, fingerprint, None, ResumeState(), earlier=earlier)
        leases.append(acquire(base, run_id, on_lost=on_lost or stop_on_lost))
        for lease in leases:
            lease.start_refreshing()
        # left by an earlier stopped attempt; this attempt writes its own submitted marker
        delete_files([layout.stop_marker, layout.submitted_marker])
        started_at = None
        if resuming:
            earlier = store.read_run_record()
            if earlier is not None:
                started_at = earlier.started_at
                if earlier.fingerprint != fingerprint:
                    messages.append(
                        Message(
                            "warning",
                            f"mmirage run {run_id}: warning: the config or the data changed "
                            "since this run started; requests already receipted are not sent "
                            "again, the others are built from the current config and data",
                        )
                    )
        record = store.write_run_record(
            new_run_record(run_id, fingerprint, started_at=started_at, limit=config.row_limit)
        )
        if len(leases) == 2:
            leases.pop(0).release()
        resume = ResumeState()
        if resuming:
            resume = prepare_resume(base, run_id, adapter_cls, config.processor)
            if resume.submitted_ids or resume.attempt > 1:
                messages.append(
                    Message(
                        "info",
                        f"mmirage run {run_id}: resuming (attempt {resume.attempt}): "
                        f"{len(resume.submitted_ids)} request(s) already receipted are not "
                        f"sent again; adopted {len(resume.adopted)} interrupted batch(es), "
                        f"re-sending {len(resume.resent) + len(resume.dropped)} interrupted "
                        "chunk(s)",
                    )
                )
    except BaseException:
        for lease in reversed(leases):
            lease.release()
        raise
    return SubmitPlan(layout, fingerprint, record, resume, tuple(messages), None, tuple(leases))


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """What a merge of a selected run reads, decided before its pipeline is built.

    Attributes:
        selection: the run selection (``run.selection.RunSelection``: receipts, batches
            and their statuses, linked runs).
        base: the receipts base.
        receipts: the ``ReceiptEntry`` of every receipt merged (workers read the maps).
        unfinished: the merged runs that stopped before all their chunks were
            submitted (``run.selection.Unfinished``; falsy when none).
        resume_run: the run to resume to submit what is missing.
        count_unsubmitted: tell requests no receipt holds apart as never submitted
            (only when every row read belongs to the merged runs).
        invalid_rows_files: the linked runs' invalid-rows files that exist.
        blocked: ``"lookup_failed"`` (a batch cannot be looked up) or ``"pending"``
            (a batch has not ended and a partial merge was not allowed): nothing is to
            be merged; None otherwise.
    """

    selection: Any
    base: str
    receipts: tuple[Any, ...]
    unfinished: Any
    resume_run: str
    count_unsubmitted: bool
    invalid_rows_files: tuple[str, ...]
    blocked: Optional[str] = None


def prepare_merge(
    config: PipelineConfig,
    selection: Any,
    *,
    allow_partial: bool,
    verify_source: bool,
    receipts_picked: bool = False,
) -> MergePlan:
    """The plan of a merge of ``selection`` (``run.selection.select_run``'s answer).

    Args:
        config: the merge's config.
        selection: the selected run(s) with every batch looked up.
        allow_partial: merge what is available while batches still run.
        verify_source: rebuild the requests to check the source (and so tell never
            submitted requests apart).
        receipts_picked: the receipt files were named by hand (they may be a subset,
            so never-submitted requests are not counted).

    Raises:
        apache_beam.io.filesystem.BeamIOError: the receipts place cannot be read.
    """
    from mmirage_beam.io.filesystems import FileSystems

    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    blocked = None
    if selection.lookup_failed:
        blocked = "lookup_failed"
    elif selection.pending and not allow_partial:
        blocked = "pending"
    receipts = tuple(selection.entries)
    unfinished = find_unfinished(base, selection.linked, selection.entries)
    resume_run = (unfinished.runs or selection.starts or [selection.run])[0]
    count_unsubmitted = (
        config.num_shards == 1
        and not receipts_picked
        and verify_source
        and all(e.receipt.get("run_id") for e in receipts)
    )
    invalid = tuple(
        path
        for path in (RunLayout(base, run).invalid_rows for run in selection.linked)
        if FileSystems.exists(path)
    )
    return MergePlan(
        selection, base, receipts, unfinished, resume_run, count_unsubmitted, invalid, blocked
    )


#: ``--estimate sample`` without ``--estimate-fraction``: 1% of the requests
DEFAULT_ESTIMATE_FRACTION = 0.01


def estimate_fraction(mode: Optional[str], given: Any) -> Optional[float]:
    """The share of requests whose tokens are counted: None for ``--estimate exact``
    (``mode``; every request), else ``--estimate-fraction`` (``given``; default
    :data:`DEFAULT_ESTIMATE_FRACTION`).

    Raises:
        ConfigError: ``--estimate-fraction`` is not a number in (0, 1], or is given
            without ``--estimate sample``.
    """
    if (mode or "exact") == "exact":
        if given is not None:
            raise ConfigError(
                "--estimate-fraction", "only applies with --estimate sample (exact counts all)"
            )
        return None
    return check_sample_fraction(DEFAULT_ESTIMATE_FRACTION if given is None else given)


def submit_adapter(config: PipelineConfig, dry_run: bool) -> type:
    """The provider's adapter class for a submission of ``config``, once the run is
    known to be possible: not ``mode: slurm``, the provider's SDK installed and its key
    set (for a dry run only when it counts tokens exactly), before any data is read.

    Raises:
        ConfigError: ``execution_params.mode`` is slurm, or no adapter is registered.
        CredentialsError: the key is missing.
    """
    if config.execution.mode == "slurm":
        raise ConfigError(
            "execution_params.mode",
            "slurm is not supported in batch_api mode; use mode: local (Beam runners such "
            "as --runner DataflowRunner or FlinkRunner scale the job instead)",
        )
    provider = config.processor.provider
    adapter_cls = BatchAdapterRegistry.get(provider)
    exact = (
        config.processor.exact_tokens
        and adapter_cls.counts_tokens_exactly
        and adapter_cls().exact_token_counter(config.processor) is not None
    )
    if not dry_run or exact:
        adapter_cls.check_dependencies()  # the provider's SDK (an optional extra)
        resolve_credentials(adapter_cls, provider)  # fail before reading any data
    return adapter_cls


def choose_run_id(given: Optional[str], preset: Optional[str], flag: str = "--run-id") -> str:
    """The run id: ``given`` (checked; the user named the run), else ``preset`` (a fresh
    id chosen by the caller), else a fresh one.

    Raises:
        ConfigError: ``given`` is not a valid run id (the message names ``flag``).
    """
    try:
        run_id = check_run_id(given) if given is not None else new_run_id()
    except ValueError as exc:
        raise ConfigError(flag, str(exc)) from None
    return preset if given is None and preset else run_id


def with_limit(
    config: PipelineConfig, limit: Optional[int], base: str, run_id: str, resuming: bool
) -> tuple[PipelineConfig, tuple[Message, ...]]:
    """``config`` with ``row_limit`` from ``--limit`` (``limit``) or, ``resuming``, from
    the run record, and the line that says so.

    Raises:
        ConfigError: ``limit`` is below 1.
    """
    if limit is not None and limit < 1:
        raise ConfigError("--limit", f"must be >= 1, got {limit}")
    if limit is None and resuming:
        record = RunStore(base, run_id).read_run_record()
        limit = record.limit if record is not None else None
    if limit is None:
        return config, ()
    text = (
        f"mmirage run {run_id}: --limit {limit}: only the first {limit:,} row(s) by "
        "source_index, as a run of their own (merge writes just those rows)"
    )
    return dataclasses.replace(config, row_limit=int(limit)), (Message("info", text),)


@dataclasses.dataclass(frozen=True)
class ReusePlan:
    """The earlier answers a run reuses (:mod:`mmirage_beam.reuse`).

    Attributes:
        files: the earlier answers files to read (empty: reuse off or nothing to reuse).
        stale: earlier batch ids whose results expired (their answers are sent again).
        messages: what was found, for the driver to print.
    """

    files: tuple[str, ...] = ()
    stale: frozenset[str] = frozenset()
    messages: tuple[Message, ...] = ()


def plan_reuse(
    config: PipelineConfig,
    base: str,
    run_id: str,
    adapter_cls: type,
    *,
    no_reuse: bool,
    dry_run: bool,
    translate_only: bool,
) -> ReusePlan:
    """Which earlier answers run ``run_id`` reuses: none with ``no_reuse`` (or
    ``reuse_answers: false``); else the answers files under ``base``, their batches'
    staleness asked of the provider (not when the runner only translates the job, nor
    in a dry run without the provider's key)."""
    if not reuse_wanted(no_reuse, config):
        return ReusePlan()
    files = earlier_answer_files(base, run_id)
    if not files:
        return ReusePlan()
    ask = not translate_only
    if dry_run:  # a dry run asks only when the key is there
        try:
            resolve_credentials(adapter_cls, config.processor.provider)
        except CredentialsError:
            ask = False
    st = check_staleness(files, adapter_cls, config.processor, ask)
    messages = tuple(Message("info", line) for line in staleness_lines(run_id, st))
    return ReusePlan(tuple(files) if st.answers else (), frozenset(st.stale), messages)


def finish_submit(
    base: str, run_id: str, record: Optional[RunRecord], stats: dict[str, int], dry_run: bool
) -> list[str]:
    """The finish steps after a successful submit job: consolidate the receipts, then
    record the run finished (``record``: the plan's run record, None for a dry run) and
    remove the submitted marker. Returns the receipt files written.

    A failure here leaves every batch receipted (in parts) and the submitted marker in
    place, so ``--run-id`` completes the run without sending.
    """
    written = list(consolidate_run(base, run_id, dry_run))
    crash_point("finishing")
    if record is not None:
        finished = new_run_record(
            run_id,
            str(record.fingerprint),
            started_at=record.started_at,
            finished=True,
            rows_read=stats.get("rows_read", 0) + stats.get("row_errors", 0),
            requests=stats.get("requests", 0),
            chunks_submitted=stats.get("batches_submitted", 0)
            + stats.get("batches_already_receipted", 0),
            # what was sent (not reused); a sampled estimate scaled up to every request
            estimate=token_counters(extrapolated_counters(sent_stats(stats))),
            limit=record.limit,
        )
        RunStore(base, run_id).write_run_record(finished)
        try:  # the record says it now; a stale marker is removed by the next attempt
            delete_files([RunLayout(base, run_id).submitted_marker])
        except Exception:
            pass
    return written


def nothing_submitted(base: str, run_id: str) -> bool:
    """Whether this attempt of ``run_id`` has not started a chunk yet: no intent and no
    receipt part in its ``.parts`` folders (an earlier attempt's are consolidated)."""
    layout = RunLayout(base, run_id)
    return not any(list_files(layout.parts(m)) for m in MODALITIES)


@dataclasses.dataclass(frozen=True)
class ResubmitPlan:
    """What a resubmission re-sends, decided before its submit job.

    Attributes:
        parent: the run whose failures are re-sent.
        ids: the failed custom_ids to re-send; None: to be fetched from the parent's
            results (``selection`` holds its batches; :func:`read_failed_ids` reads the
            job's answer).
        source: where the failures come from, for the messages.
        selection: the parent run's selection (``run.selection.RunSelection``) when the
            ids are fetched; None otherwise.
        messages: lines for the driver to print (stderr).
        blocked: ``"lookup_failed"`` (a batch cannot be looked up: nothing is re-sent,
            exit 1); None otherwise.
    """

    parent: Optional[str]
    ids: Optional[frozenset[str]]
    source: str
    selection: Any = None
    messages: tuple[Message, ...] = ()
    blocked: Optional[str] = None


def prepare_resubmit(
    config: PipelineConfig, *, errors_file: Optional[str], run_id: Optional[str], only: str
) -> ResubmitPlan:
    """The failures a resubmission re-sends: those of a merge's errors file
    (``errors_file``, ``--from``) resubmittable under ``only``, or (without it) those of
    run ``run_id`` (default: the newest), whose results are then fetched.

    Raises:
        ConfigError: ``errors_file`` is missing or not a merge errors file; no run has
            receipts.
    """
    if not errors_file:
        sel = select_run(config, [], run_id, "resubmit")
        if sel.lookup_failed:
            return ResubmitPlan(sel.run, None, "", sel, blocked="lookup_failed")
        messages = ()
        if sel.pending:
            text = (
                f"mmirage resubmit: {len(sel.pending)} batch(es) have not ended; their "
                "requests are not resubmitted (they may still succeed)"
            )
            messages = (Message("info", text),)
        return ResubmitPlan(sel.run, None, f"the results of run {sel.run}", sel, messages)
    try:
        errors = read_jsonl(errors_file)
    except (OSError, ValueError) as exc:  # a folder, not JSON lines, not UTF-8
        raise ConfigError("--from", f"{errors_file} is not an errors file: {exc}") from None
    if not errors and not FileSystems.exists(errors_file):
        raise ConfigError("--from", f"{errors_file} does not exist")
    if any(
        not isinstance(e, dict) or "custom_id" not in e or "error_type" not in e for e in errors
    ):
        raise ConfigError(
            "--from",
            f"{errors_file} is not a merge errors file (OUT.errors.jsonl): its lines "
            "need custom_id and error_type",
        )
    runs = {e.get("run_id") for e in errors if e.get("run_id")}
    parent = run_id or (sorted(runs)[-1] if len(runs) == 1 else None)
    if parent is None:
        parent = select_run(config, [], None, "resubmit").run
    ids = frozenset(e["custom_id"] for e in errors if resubmittable(e, only))
    return ResubmitPlan(parent, ids, errors_file)


def read_failed_ids(ids_path: str) -> frozenset[str]:
    """The custom_ids the failures job wrote to ``ids_path`` (one a line), then the file
    removed."""
    ids = frozenset(read_text_lines(ids_path))  # split on "\n" only
    if FileSystems.exists(ids_path):
        FileSystems.delete([ids_path])
    return ids
