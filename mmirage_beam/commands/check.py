"""``CheckCommand``: the provider status of a run's batches (what ``mmirage check`` runs
once its flags are parsed).

Its steps, each returning a typed record that says what to print:

1. :meth:`CheckCommand.start`: the flags checked, the receipts of the run asked about
   found and judged as ``merge`` judges them (nothing is asked of a provider);
2. :meth:`CheckCommand.look`: every batch looked up once, or until all are terminal
   (``--watch``, shown live);
3. :meth:`CheckCommand.finish`: the report, its verdict, the advice and the runs' states;
4. :meth:`CheckCommand.notify`: with ``--watch``, the config's webhooks told how the runs
   ended (never the exit status).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional, Sequence

from mmirage_beam.errors import ConfigError
from mmirage_beam.ids import check_run_id

if TYPE_CHECKING:
    from mmirage_beam.check.report import StatusReport
    from mmirage_beam.config.loader import PipelineConfig
    from mmirage_beam.run.lookup import BatchStatus

__all__ = [
    "WATCH_TIMED_OUT",
    "CheckCommand",
    "CheckLook",
    "CheckReport",
    "CheckStart",
    "NotifyReport",
]

#: ``check --watch --timeout`` stopped watching while batches still ran (sysexits'
#: EX_TEMPFAIL: "try again later"); 0 would say the run is done.
WATCH_TIMED_OUT = 75


@dataclasses.dataclass(frozen=True)
class CheckStart:
    """The receipts a check judges.

    Attributes:
        config: the loaded config; None when only receipt files were given.
        receipts: the judged runs' receipts (a ``run.discovery.ReceiptSet``).
        messages: what to say on stderr before the lookups (the other runs found).
    """

    config: Optional[PipelineConfig]
    receipts: Any
    messages: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class CheckLook:
    """What the lookups found.

    Attributes:
        statuses: one status per distinct batch, from the last poll.
        timed_out: ``--watch --timeout`` stopped watching.
        interrupted: a Ctrl-C stopped watching (the statuses are the last poll's).
        running_at_start: the runs with a batch not ended at the first poll.
    """

    statuses: tuple[BatchStatus, ...]
    timed_out: bool = False
    interrupted: bool = False
    running_at_start: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What ``mmirage check`` prints and its exit status.

    Attributes:
        summary: the report per batch, per provider and per run, with its verdict.
        before: the lines before the table (why watching stopped).
        after: the lines after it: what the failures mean, the runs' states, the
            cancelled note (none after a Ctrl-C).
        exit_code: 0 done or running without failures; 1 failed; 75 watching timed out
            with batches running; 130 Ctrl-C.
    """

    summary: StatusReport
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    exit_code: int = 0


@dataclasses.dataclass(frozen=True)
class NotifyReport:
    """What telling the webhooks did: ``lines`` for stdout (each event sent), ``warnings``
    for stderr (a webhook not reached, a run's notify warnings)."""

    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class CheckCommand:
    """``mmirage check``'s inputs.

    Attributes:
        config_path: the config the run was submitted with; None with ``metadata_paths``.
        metadata_paths: receipt files (or ``.parts`` folders) read instead of the
            config's ``metadata_output_path``.
        run_id: only this run's receipts; None: the newest run and its resubmissions.
        watch: poll until every batch is terminal.
        interval_secs: seconds between polls (``watch``).
        timeout_secs: stop watching after this many seconds; None: no limit.
    """

    config_path: Optional[str] = None
    metadata_paths: tuple[str, ...] = ()
    run_id: Optional[str] = None
    watch: bool = False
    interval_secs: float = 60.0
    timeout_secs: Optional[float] = None

    def start(self) -> CheckStart:
        """Check the flags, load the config and find the receipts of the run asked about
        (default: the newest and its resubmissions, as ``merge`` selects).

        Raises:
            mmirage_beam.errors.ConfigError: a malformed ``--run-id``, a bad
                ``--interval`` / ``--timeout`` or a bad config (exit 2).
            mmirage_beam.run.discovery.NoReceiptsError: no receipt found (exit 2).
        """
        from mmirage_beam.config import load_config
        from mmirage_beam.run.discovery import collect_receipts
        from mmirage_beam.run.selection import judged_runs

        if self.run_id is not None:
            try:
                check_run_id(self.run_id)
            except ValueError as exc:
                raise ConfigError("--run-id", str(exc)) from None
        if not self.interval_secs > 0:
            raise ConfigError("--interval", f"must be > 0 seconds, got {self.interval_secs}")
        if self.timeout_secs is not None and self.timeout_secs < 0:
            raise ConfigError("--timeout", f"must be >= 0 seconds, got {self.timeout_secs}")
        config = load_config(self.config_path) if self.config_path is not None else None
        found = collect_receipts(config, self.metadata_paths, run_id=self.run_id)
        judged = judged_runs(found, newest_only=self.run_id is None and not self.metadata_paths)
        messages = ()
        if judged.others:
            messages = (
                f"mmirage check: checking run {', '.join(judged.runs)} (the newest); also "
                f"found run(s) {', '.join(judged.others)}: pass --run-id to check another",
            )
        return CheckStart(config, judged.receipts, messages)

    def look(self, started: CheckStart, tty: bool) -> CheckLook:
        """Look every batch up once, or until all are terminal (``watch``: shown live, a
        rich table when ``tty``, a line a poll otherwise).

        Raises:
            mmirage_beam.errors.CredentialsError: a provider key is missing (exit 2).
            KeyboardInterrupt: a Ctrl-C before the first poll ended.
        """
        from mmirage_beam.check.watch import statuses_of
        from mmirage_beam.run.lookup import BatchStatusChecker

        receipts = started.receipts
        running: set[str] = set()

        def first_poll(polled: Sequence[BatchStatus], poll: int, _elapsed: float) -> None:
            if poll == 1:
                running.update(s.receipt.run_id for s in polled if not s.terminal)

        with BatchStatusChecker(receipts.providers, started.config) as checker:
            statuses, timed_out, interrupted = statuses_of(
                checker,
                receipts.batches,
                watch=self.watch,
                interval_secs=self.interval_secs,
                timeout_secs=self.timeout_secs,
                tty=tty,
                also_on_poll=first_poll,
            )
        return CheckLook(tuple(statuses), timed_out, interrupted, tuple(sorted(running)))

    def finish(self, started: CheckStart, looked: CheckLook) -> CheckReport:
        """The report and its verdict (a run that stopped midway is never "ok", as in
        merge), what the failures mean and the command that fixes them, and the runs'
        states from the files beside the receipts (no provider call)."""
        from mmirage_beam.check.advice import advice_lines
        from mmirage_beam.check.report import build_report
        from mmirage_beam.run.cancel import cancelled_note
        from mmirage_beam.run.lookup import not_terminal
        from mmirage_beam.run.selection import RunStates, run_states
        from mmirage_beam.run.store import RunStore

        config, receipts = started.config, started.receipts
        states = RunStates([], ())
        note = None
        cancelled: tuple[str, ...] = ()
        if config is not None:
            base = _base(config)
            if not self.metadata_paths:
                states = run_states(base, receipts, self.config_path)
            note = cancelled_note(base, receipts.run_ids)
            cancelled = tuple(
                r for r in receipts.run_ids if RunStore(base, r).read_cancel_record() is not None
            )
        built = build_report(receipts, list(looked.statuses))
        summary = dataclasses.replace(
            built, unfinished_runs=states.unfinished, cancelled_runs=cancelled
        )
        waiting = len(not_terminal(looked.statuses))
        if looked.interrupted:
            return CheckReport(
                summary,
                before=(
                    f"stopped watching (Ctrl-C): {waiting} batch(es) not finished yet keep "
                    "running at the provider; the table is the last poll's",
                ),
                exit_code=130,
            )
        before = ()
        if looked.timed_out:
            before = (
                f"stopped watching after {self.timeout_secs:g}s (--timeout): {waiting} "
                "batch(es) not finished yet",
            )
        after = (
            *advice_lines(summary, self.config_path),
            *states.lines,
            *([note] if note else []),
        )
        exit_code = summary.exit_code
        if looked.timed_out and waiting and not exit_code:
            exit_code = WATCH_TIMED_OUT  # stopped watching, not finished: not done, not failed
        return CheckReport(summary, before, after, exit_code)

    def notify(self, started: CheckStart, looked: CheckLook) -> NotifyReport:
        """With ``watch``, tell the config's webhooks (``execution_params.notify``) how
        each run ended, each once: every run named by ``run_id``; without it only the
        runs this watch saw running, so that turning notify on never reports every run
        of the past (``mmirage_beam.notify``); nothing after a Ctrl-C. A webhook's
        failure is a warning, never raised."""
        config = started.config
        if not self.watch or looked.interrupted or config is None or not config.execution.notify:
            return NotifyReport()
        from mmirage_beam.notify import notify_run

        base = _base(config)
        watched = started.receipts.run_ids if self.run_id else looked.running_at_start
        lines: list[str] = []
        warnings: list[str] = []
        for run_id in watched:
            mine = [s for s in looked.statuses if s.receipt.run_id == run_id]
            if not run_id or run_id == "?" or not mine:
                continue
            try:
                result = notify_run(
                    base, run_id, config, statuses=mine, config_arg=self.config_path
                )
            except Exception as exc:  # the check's verdict stands whatever the webhook does
                warnings.append(f"notify: run {run_id}: not sent ({type(exc).__name__}: {exc})")
                continue
            lines += [
                f"notify: event '{d.event}' of run {run_id} sent to {d.url}"
                for d in result.deliveries
                if d.status == "delivered"
            ]
            warnings += [f"run {run_id}: {warning}" for warning in result.warnings]
        return NotifyReport(tuple(lines), tuple(warnings))


def _base(config: PipelineConfig) -> str:
    """The receipts' base path of ``config``'s runs."""
    from mmirage_beam.run.layout import receipts_base

    return receipts_base(config.processor.metadata_output_path, config.state_dir)
