"""What ``mmirage run`` decides before and after its job, as data.

``pipelines/submit.py`` parses the flags into :class:`SubmitFlags`, then asks
:func:`start_submit` what the run is (the config as the flags change it, the adapter,
the run id, the ``--limit`` line), :func:`hold_run` for the run itself (storage probed,
``run.plans.prepare_submit``: the lease, the "already submitted" check, the resume) and
:func:`submit_settings` for the job's settings (the earlier answers reused); it builds
and runs the job, and asks :func:`check_space` first and :func:`job_failed` or
:func:`finish_run` after. None prints: what the user should read comes back as
:class:`~mmirage_beam.run.plans.Message` values (stderr) or lines (stdout), with the exit
status; the wording is :mod:`mmirage_beam.run.reports`'.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.config.validation import check_notify_secrets, model_warnings
from mmirage_beam.errors import ConfigError, MmirageError
from mmirage_beam.progress.counters import told_estimate
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.run import plans, reports
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.lease import is_held
from mmirage_beam.run.plans import Message, SubmitPlan
from mmirage_beam.run.resume import ResumeState
from mmirage_beam.run.staging import check_free_space, staging_dir, staging_need_bytes
from mmirage_beam.run.storage import (
    check_job_endpoint,
    check_locations,
    config_locations,
    probe_location,
    translation_only,
)
from mmirage_beam.run.store import RunStore
from mmirage_beam.run.submit_flags import SubmitFlags
from mmirage_beam.settings import SubmitSettings

__all__ = [
    "RunHold",
    "SubmitReport",
    "SubmitStart",
    "check_space",
    "finish_run",
    "forgot_unsent",
    "hold_run",
    "job_failed",
    "job_line",
    "nothing_in_flight",
    "resume_command",
    "start_submit",
    "stopped_after_all_sent",
    "stopped_before_sending_text",
    "submit_settings",
]


@dataclasses.dataclass(frozen=True)
class SubmitStart:
    """A run about to be held: what :func:`start_submit` decided.

    Attributes:
        config: the config as the flags change it (``--exact-tokens``, ``--limit``).
        run_id: the run's id (fresh, preset by the caller, or ``--run-id``).
        base: the receipts base (``metadata_output_path`` without ``.jsonl``).
        adapter_cls: the provider's adapter class.
        estimate_fraction: ``--estimate sample``'s share (None: every request counted).
        translate_only: the runner only translates the job (Dataflow ``--dry_run``).
        messages: lines for the driver to print on stderr (the ``--limit`` line).
    """

    config: PipelineConfig
    run_id: str
    base: str
    adapter_cls: type
    estimate_fraction: Optional[float] = None
    translate_only: bool = False
    messages: tuple[Message, ...] = ()


def start_submit(
    config: PipelineConfig, flags: SubmitFlags, options: Any, preset_run_id: Optional[str] = None
) -> SubmitStart:
    """What the run is: the flags checked against the config, the adapter (slurm
    refused, SDK and key checked: ``run.plans.submit_adapter``), the run id
    (``preset_run_id``: a fresh run's id chosen by the caller; ``flags.run_id`` still
    means "resume this run"), the locations the workers use (``options``: the Beam
    pipeline options) and the ``--limit`` line.

    Raises:
        ConfigError, CredentialsError: a bad flag or config, a missing key or SDK.
    """
    fraction = plans.estimate_fraction(flags.estimate, flags.estimate_fraction)
    if flags.exact_tokens:
        processor = dataclasses.replace(config.processor, exact_tokens=True)
        config = dataclasses.replace(config, processor=processor)
    if not flags.dry_run:  # the run's end must be signable before anything is sent
        check_notify_secrets(config)
    adapter_cls = plans.submit_adapter(config, flags.dry_run)
    run_id = plans.choose_run_id(flags.run_id, preset_run_id)
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    check_locations(config_locations(config, export_prompts=flags.export_prompts), options)
    check_job_endpoint(options)
    config, said = plans.with_limit(config, flags.limit, base, run_id, bool(flags.run_id))
    return SubmitStart(config, run_id, base, adapter_cls, fraction, translation_only(options), said)


@dataclasses.dataclass(frozen=True)
class RunHold:
    """The run held for its job (or a dry run, which holds nothing).

    Attributes:
        plan: ``run.plans.prepare_submit``'s plan (None: a dry run or a translation).
        exit_code: not None: the run stops here with this status (3: already
            submitted; ``messages`` say which run).
        messages: lines for the driver to print on stderr.
    """

    plan: Optional[SubmitPlan] = None
    exit_code: Optional[int] = None
    messages: tuple[Message, ...] = ()

    @property
    def resume(self) -> ResumeState:
        """What a resumed run must not send again (nothing for a dry run)."""
        return ResumeState() if self.plan is None else self.plan.resume

    def release(self) -> None:
        """Release the run's lease (nothing for a dry run)."""
        if self.plan is not None:
            self.plan.release()


def hold_run(start: SubmitStart, flags: SubmitFlags) -> RunHold:
    """Hold the run for its job: its receipts location probed, then
    ``run.plans.prepare_submit`` (the lease, the "already submitted" check: exit 3, the
    markers, the run record, the resume). A translation or a dry run holds nothing.
    The caller releases what it holds (:meth:`RunHold.release`), whatever happens.

    Raises:
        ConfigError: ``--new-run`` with ``--run-id``; the receipts location is not
            writable.
        RunLocked: another process holds the run (exit 2).
    """
    if start.translate_only:  # Dataflow --dry_run: nothing will run or be written
        return RunHold()
    if not flags.dry_run:
        probe_location(start.base, start.run_id, "processors[0].metadata_output_path")
    if flags.new_run and flags.run_id:
        raise ConfigError("--new-run", "starts a new run; it cannot be used with --run-id")
    if flags.dry_run:
        return RunHold()
    plan = plans.prepare_submit(
        start.config,
        start.run_id,
        adapter_cls=start.adapter_cls,
        resuming=bool(flags.run_id),
        new_run=bool(flags.new_run),
    )
    if plan.earlier is not None:
        earlier_run = str(plan.earlier.run_id)
        text = reports.already_run_message(
            flags.config,
            list(flags.beam_args),
            plan.earlier,
            wait=bool(flags.wait),
            limit=flags.limit,
            wait_args=flags.wait_args if flags.wait else (),
            held=is_held(start.base, earlier_run),
        )
        return RunHold(plan, 3, (Message("error", text),))
    return RunHold(plan, None, plan.messages)


def submit_settings(
    start: SubmitStart, flags: SubmitFlags, resume: ResumeState
) -> tuple[SubmitSettings, tuple[Message, ...]]:
    """The job's ``SubmitSettings`` (the flags, what a resume must not send again, the
    earlier answers reused: ``run.plans.plan_reuse``) and what the reuse found."""
    reuse = plans.plan_reuse(
        start.config,
        start.base,
        start.run_id,
        BatchAdapterRegistry.get(start.config.processor.provider),
        no_reuse=flags.no_reuse,
        dry_run=flags.dry_run,
        translate_only=start.translate_only,
    )
    settings = SubmitSettings(
        start.run_id,
        export_prompts=flags.export_prompts,
        skip_invalid_rows=flags.skip_invalid_rows,
        attempt=resume.attempt,
        exclude_custom_ids=resume.submitted_ids,
        reuse_files=reuse.files,
        stale_batches=reuse.stale,
        estimate_fraction=start.estimate_fraction,
    )
    return settings, reuse.messages


def _sends_nothing(start: SubmitStart, flags: SubmitFlags) -> bool:
    """A dry run, or a job the runner only translates: it holds no run, and is
    announced and stopped as a dry run is."""
    return flags.dry_run or start.translate_only


def job_line(start: SubmitStart, flags: SubmitFlags) -> Message:
    """The line said as the job starts: the run, what it does, the config."""
    if flags.dry_run:
        what = "dry run (export only)"
    elif start.translate_only:
        what = "job translated only (the runner's --dry_run: nothing runs, nothing is sent)"
    else:
        what = f"submission to {start.config.processor.provider}"
    return Message("info", f"mmirage run {start.run_id}: {what}, config {flags.config}")


def resume_command(start: SubmitStart, flags: SubmitFlags) -> str:
    """The command that resumes (or completes) the run, with the flags that decide what
    it sends (``--skip-invalid-rows``, ``--no-reuse``): without them a resume of a run that
    skipped its invalid rows would refuse to send the rest; and ``--wait`` when the run
    was started with it, so the one resume line keeps the cycle."""
    words = ["mmirage run", "--config", flags.config, *(["--wait"] if flags.wait else [])]
    words += ["--run-id", start.run_id]
    words += ["--skip-invalid-rows"] if flags.skip_invalid_rows else []
    words += ["--no-reuse"] if flags.no_reuse else []
    return reports.command_line(words, list(flags.beam_args))


def check_space(start: SubmitStart, flags: SubmitFlags) -> None:
    """Refuse to start when the local disk for the staged chunks seems too small
    (unless ``--skip-space-check``, or the runner only translates the job).

    Raises:
        MmirageError: not enough free space (the message says how much is needed).
    """
    if not flags.skip_space_check and not start.translate_only:
        need = staging_need_bytes(start.config, flags.dry_run)
        check_free_space(staging_dir(start.base, start.run_id), need)


@dataclasses.dataclass(frozen=True)
class SubmitReport:
    """What a run says once its job ended, and its exit status.

    Attributes:
        messages: lines for the driver to print on stderr.
        lines: lines for stdout.
        exit_code: the process's exit status.
    """

    messages: tuple[Message, ...] = ()
    lines: tuple[str, ...] = ()
    exit_code: int = 0


def stopped_after_all_sent(
    start: SubmitStart, flags: SubmitFlags, report: SubmitReport
) -> SubmitReport:
    """A Ctrl-C or SIGTERM that came when every chunk was already being submitted: the
    job could stop nothing more and ended as usual (its batches sent and receipted, the
    finish steps run), yet the user asked to stop: said, exit 130, so that ``run
    --wait`` goes no further and a script sees the interrupt (issue 38: exit 0, no
    line). A report that already failed keeps its own status."""
    text = (
        f"mmirage run {start.run_id}: stopped (Ctrl-C or SIGTERM), but every chunk was "
        "already being submitted: each batch was sent and is receipted, and the run is "
        "complete; follow it with:\n"
        "  "
        + reports.command_line(
            ["mmirage check", "--config", flags.config, "--run-id", start.run_id, "--watch"],
            list(flags.beam_args),
        )
    )
    code = report.exit_code or 130
    return SubmitReport((*report.messages, Message("warning", text)), report.lines, code)


def stopped_before_sending_text(run_id: str) -> str:
    """What a fresh run stopped before it sent anything says (its record is deleted)."""
    return (
        f"mmirage run {run_id}: stopped (Ctrl-C or SIGTERM) before anything was sent; "
        "nothing to resume: run the same command again to start over"
    )


def forgot_unsent(start: SubmitStart) -> bool:
    """:meth:`RunStore.forget_unsent` of the run; False when the storage cannot say."""
    try:
        return RunStore(start.base, start.run_id).forget_unsent()
    except Exception:  # noqa: BLE001 - keep the record: the usual resume advice
        return False


def nothing_in_flight(start: SubmitStart, flags: SubmitFlags) -> Callable[[], bool]:
    """Whether a stop may end the job at once: a dry run, or a run still reading (no
    chunk submitted or being submitted: ``run.plans.nothing_submitted``)."""
    return lambda: _sends_nothing(start, flags) or plans.nothing_submitted(start.base, start.run_id)


def job_failed(
    start: SubmitStart, flags: SubmitFlags, job_plan: Any, exc: BaseException, outcome: Any
) -> SubmitReport:
    """A job that failed or was stopped (Ctrl-C, SIGTERM, or a stop request the
    launcher's ``outcome`` saw: exit 130): what was accepted and how to resume (a dry
    run: one line)."""
    code = exc.exit_code if isinstance(exc, MmirageError) else 1
    stopped = isinstance(exc, KeyboardInterrupt) or outcome.stop_requested
    if stopped:
        code, exc = 130, RuntimeError("stopped on request (Ctrl-C or SIGTERM)")
    if _sends_nothing(start, flags):
        what = "stopped" if stopped else f"error: the dry run failed: {reports.short_error(exc)}"
        return SubmitReport((Message("error", f"mmirage: {what}"),), (), code)
    if stopped and not flags.run_id and forgot_unsent(start):
        return SubmitReport(
            (Message("warning", stopped_before_sending_text(start.run_id)),), (), 130
        )
    text = reports.failure_report(
        job_plan, start.run_id, exc, resume_command(start, flags), stopped
    )
    return SubmitReport((Message("error", text),), (), code)


def finish_run(
    start: SubmitStart, flags: SubmitFlags, job_plan: Any, held: RunHold, stats: dict[str, int]
) -> SubmitReport:
    """After a job that succeeded (``job_plan``: the wired ``pipeline.SubmitPlan``;
    ``stats``: its counters): the finish steps (``run.plans.finish_submit``: receipts
    consolidated, run record finished), then the summary and the estimate; exit 1 when
    rows were invalid and not skipped, or when no row was read at all (the datasets are
    empty: said with their paths, nothing was sent). A failed finish step leaves every batch
    receipted: the report says how to complete the run without sending. A job the
    runner only translated (Dataflow ``--dry_run``) says so and finishes nothing."""
    run_id = start.run_id
    if start.translate_only:
        text = (
            f"mmirage run {run_id}: the runner only translated the job (--dry_run); nothing "
            "was read, exported or submitted"
        )
        return SubmitReport((), (text,), 0)
    try:
        record = None if held.plan is None else held.plan.record
        written = plans.finish_submit(job_plan.receipts_base, run_id, record, stats, flags.dry_run)
    except Exception as exc:  # every batch exists; only the bookkeeping after it failed
        if flags.dry_run:
            text = f"mmirage: error: the dry run failed: {reports.short_error(exc)}"
            return SubmitReport((Message("error", text),), (), 1)
        text = (
            f"mmirage: error: run {run_id}: every batch is submitted and receipted, but a "
            f"finish step failed: {reports.short_error(exc)}\n"
            f"Complete it (nothing is sent; the provider is not contacted):\n"
            f"  {resume_command(start, flags)}"
        )
        code = exc.exit_code if isinstance(exc, MmirageError) else 1
        return SubmitReport((Message("error", text),), (), code)
    invalid = reports.InvalidRows.read(job_plan.invalid_rows_path)
    skipping = bool(flags.skip_invalid_rows or start.config.execution.skip_invalid_rows)
    summary = reports.submit_summary_lines(job_plan, stats, written, invalid, skipping)
    estimate = reports.estimate_summary_lines(
        stats, start.config.processor, flags.dry_run, told_estimate()
    )
    # said at load among the log lines: repeated last, where it is read (newcomer trial)
    estimate += [f"warning: {m}" for m in model_warnings()]
    read = stats.get("rows_read", 0) + stats.get("row_errors", 0)
    if read == 0 and start.config.num_shards == 1:  # an empty source (a shard may be empty)
        text = reports.nothing_read_message(run_id, start.config.datasets, flags.dry_run)
        return SubmitReport((Message("error", text),), ("\n".join(summary),), 1)
    empty = reports.empty_datasets_message(run_id, start.config.datasets, stats)
    messages = (Message("warning", empty),) if empty else ()
    code = 1 if invalid and not skipping else 0
    return SubmitReport(messages, ("\n".join(summary), *estimate), code)
