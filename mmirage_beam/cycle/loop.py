"""``mmirage run --wait``: the whole cycle, from rows to a finished dataset, resumable.

Submit (:class:`~mmirage_beam.commands.submit.SubmitCommand`), follow the batches
(:mod:`mmirage_beam.check.watch`), merge
(:class:`~mmirage_beam.commands.merge.MergeCommand`), re-send the retryable failures
as a linked run (:class:`~mmirage_beam.commands.resubmit.ResubmitCommand` from
``OUT.errors.jsonl``, ``only="retryable"``) at most ``retries`` times, merging again
after each, then print one summary. These are the command objects the ``mmirage run``,
``mmirage merge`` and ``mmirage resubmit`` drivers run (:mod:`mmirage_beam.commands`;
the submission is handed in, built from ``mmirage run``'s flags), run in-process with
the same Beam options, so the cycle sends and writes exactly what the commands typed by
hand would; what they did comes back as their typed outcome.

The cycle's state is a small JSON file beside the run record, ``<base>.cycle.<run_id>.json``
(written with :func:`mmirage_beam.io.fs.write_durably` at every step;
:mod:`mmirage_beam.cycle.state` has its fields), and its flags are in
:mod:`mmirage_beam.cycle.flags`.

Ctrl-C (or a lost terminal) leaves the batches running at the provider;
``mmirage run --config C --wait --run-id ID`` reads the state and goes on from the step
it stood at. No step re-sends anything: a resumed submission sends only what has no
receipt, and a resubmission whose run already has receipts is not started again.
A cycle holds the lease ``<base>.lease.cycle-<run_id>`` (:mod:`mmirage_beam.run.lease`), so
two processes never drive one cycle.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import time
from typing import Any, Optional

from apache_beam.io.filesystems import FileSystems

from mmirage_beam.check import watch
from mmirage_beam.commands.merge import MergeCommand
from mmirage_beam.commands.resubmit import ResubmitCommand
from mmirage_beam.commands.submit import SubmitCommand
from mmirage_beam.config.loader import PipelineConfig, load_config
from mmirage_beam.costs.prices import batch_price
from mmirage_beam.costs.report import usage_lines
from mmirage_beam.costs.tokens import INPUT_TOKENS
from mmirage_beam.cycle.flags import (
    DEFAULT_POLL_INTERVAL_SECS,
    FIRST_POLL_INTERVAL_SECS,
    cycle_wanted,
)
from mmirage_beam.cycle.state import (
    DONE,
    MERGED,
    MERGING,
    RETRYING,
    SUBMITTING,
    WAITING,
    CycleState,
    cycle_state_path,
)
from mmirage_beam.errors import ConfigError
from mmirage_beam.ids import check_run_id, new_run_id
from mmirage_beam.launch.interrupts import guarded_call
from mmirage_beam.paths import resolve_path
from mmirage_beam.progress.text import waiting_tokens_text
from mmirage_beam.run import lookup
from mmirage_beam.run.discovery import NoReceiptsError, collect_receipts
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.lease import acquire, cycle_lease
from mmirage_beam.run.receipts import MODALITIES, receipt_path
from mmirage_beam.run.records import MergeRecord
from mmirage_beam.run.selection import linked_runs
from mmirage_beam.run.store import RunStore
from mmirage_beam.settings import errors_path_for

__all__ = ["CycleCommand"]


@dataclasses.dataclass(frozen=True)
class CycleCommand:
    """``mmirage run``'s command: the submission, and the ``--wait`` flags as given.

    Attributes:
        submit: the submission (``mmirage run``'s flags without the cycle's).
        wait: ``--wait``: do the whole cycle whatever the config says.
        output_path: ``--output-path``: the merged file; None: not given.
        retries: ``--retries``: re-sends of the retryable failures; None: not given.
        poll_interval: ``--poll-interval``: seconds between polls; None: not given.
        timeout: ``--timeout``: seconds after which waiting stops; None: no limit.
    """

    submit: SubmitCommand
    wait: bool = False
    output_path: Optional[str] = None
    retries: Optional[int] = None
    poll_interval: Optional[float] = None
    timeout: Optional[float] = None

    @property
    def export_prompts(self) -> Optional[str]:
        """``--export-prompts`` of the submission (a dry run: no cycle)."""
        return self.submit.flags.export_prompts

    def given(self) -> tuple[str, ...]:
        """The cycle's flags as given (``--output-path OUT``, ``--retries N``...), kept in
        the commands a ``--wait`` run names (issue 38: the exit-3 advice dropped them)."""
        words: list[str] = []
        for flag, value in (
            ("--output-path", self.output_path),
            ("--retries", self.retries),
            ("--poll-interval", self.poll_interval),
            ("--timeout", self.timeout),
        ):
            if value is not None:
                words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return tuple(words)

    def run(self) -> int:
        """Submit, and when ``--wait`` or the config (``execution_params.merge`` /
        ``retry``) asks for it, drive the whole cycle (fresh, or resumed with
        ``--run-id``): follow, merge, re-send the retryable failures, merge again.

        Returns:
            0 submitted (without the cycle) or every row succeeded; 1 rows failed (the
            summary names them and the command that continues), a batch could not be
            looked up, or ``--timeout`` stopped the wait; 2 bad usage or config; 3 the
            config was already submitted (nothing sent); 130 stopped by Ctrl-C (the
            batches keep running; ``--wait --run-id`` continues).

        Raises:
            ConfigError: (exit 2) a bad ``--run-id`` or a ``--wait`` flag that does not
                fit (:func:`~mmirage_beam.cycle.flags.cycle_wanted`).
            mmirage_beam.run.lease.RunLocked: (exit 2) another process drives this cycle.
        """
        flags = dataclasses.replace(self.submit.flags, wait=self.wait, wait_args=self.given())
        submit = dataclasses.replace(self.submit, flags=flags)
        config = load_config(flags.config)
        if not cycle_wanted(self, config):
            return submit.run().exit_code
        return _run_cycle(dataclasses.replace(self, submit=submit), config)


@dataclasses.dataclass
class _Context:
    """What every step needs: the command, the config and how to report."""

    command: CycleCommand
    config: PipelineConfig
    base: str
    poll_interval_secs: float
    deadline: Optional[float]  # time.monotonic() after which waiting stops
    stream: Any = None  # None: sys.stdout at the time of each line

    @property
    def submit(self) -> SubmitCommand:
        return self.command.submit

    @property
    def config_path(self) -> str:
        """``--config`` as given."""
        return self.submit.flags.config

    @property
    def beam_args(self) -> list[str]:
        return list(self.submit.flags.beam_args)

    @property
    def verbose(self) -> bool:
        return self.submit.verbose

    @property
    def out(self) -> Any:
        return self.stream or sys.stdout

    def say(self, text: str) -> None:
        print(f"mmirage run --wait: {text}", file=self.out, flush=True)

    def continue_command(self, state: CycleState, retries: Optional[int] = None) -> str:
        parts = ["mmirage run", "--config", self.config_path, "--wait", "--run-id", state.run_id]
        if retries is not None:
            parts += ["--retries", str(retries)]
        return " ".join(parts[:2] + [shlex.quote(p) for p in parts[2:] + self.beam_args])


def _run_cycle(command: CycleCommand, config: PipelineConfig) -> int:
    """Drive the cycle of ``command`` (:meth:`CycleCommand.run`)."""
    flags = command.submit.flags
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    poll = command.poll_interval or DEFAULT_POLL_INTERVAL_SECS
    deadline = None if command.timeout is None else time.monotonic() + command.timeout
    ctx = _Context(command, config, base, poll, deadline)
    fresh = flags.run_id is None
    if fresh:
        run_id = new_run_id()
    else:
        try:
            run_id = check_run_id(flags.run_id)
        except ValueError as exc:
            raise ConfigError("--run-id", str(exc)) from None
    state = None if fresh else CycleState.load(base, run_id)
    if state is None:
        state = CycleState(run_id, _output_path(ctx, run_id), _retries(ctx), runs=[run_id])
        record = None if fresh else RunStore(base, run_id).read_run_record()
        if record is not None and record.finished:
            state.phase = WAITING  # submitted without --wait: follow it from here
    else:
        if command.output_path is not None:
            state.output_path = _output_path(ctx, run_id)
        if command.retries is not None:
            state.retries = command.retries
        if state.phase in (MERGED, DONE):
            # Follow and merge again: a resubmission typed by hand since (linked by its
            # receipts) is waited for and merged too.
            state.phase = WAITING
        ctx.say(
            f"run {run_id}: continuing the cycle at {state.phase!r}"
            + (f" (retry {state.retries_used} of {state.retries})" if state.retries_used else "")
        )
    lease = acquire(base, cycle_lease(run_id))
    lease.start_refreshing()
    try:
        return _drive(ctx, state, fresh)
    except KeyboardInterrupt:
        ctx.say(
            f"stopped at {state.phase!r}; the batches already submitted keep running at the "
            f"provider. Continue the cycle with:\n  {ctx.continue_command(state)}"
        )
        return 130
    finally:
        lease.release()


def _output_path(ctx: _Context, run_id: str) -> str:
    given = ctx.command.output_path or ctx.config.execution.merge_output_path
    if given:
        return resolve_path(given)
    folder = ctx.base.rsplit("/", 1)[0] if "/" in ctx.base else "."
    return resolve_path(f"{folder}/merged.{run_id}.jsonl")


def _retries(ctx: _Context) -> int:
    if ctx.command.retries is not None:
        return ctx.command.retries
    return ctx.config.execution.retries


def _drive(ctx: _Context, state: CycleState, fresh: bool) -> int:
    """The state machine: one step per phase, the state saved after each."""

    def announce(_run_id: str) -> None:  # once held: not before a refusal (exit 3)
        ctx.say(
            f"run {state.run_id}: submit, wait, merge into {state.output_path}, "
            f"at most {state.retries} retr{'y' if state.retries == 1 else 'ies'}"
        )

    merged: Optional[MergeRecord] = None  # the record of the merge just run
    while True:
        if state.phase == SUBMITTING:
            state.save(ctx.base)
            code = ctx.submit.run(
                state.run_id if fresh else None, on_held=announce if fresh else None
            ).exit_code
            if code != 0:
                if fresh and code in (2, 3):  # nothing was sent: no cycle to continue
                    _remove(ctx, state)
                    return code
                if fresh and code == 130 and not _has_record(ctx, state.run_id):
                    _remove(ctx, state)  # stopped before sending: the run was forgotten
                    return code
                if _read_nothing(ctx, state.run_id):  # an empty source: nothing to wait for
                    _remove(ctx, state)
                    ctx.say("no row was read, so there is nothing to wait for or merge")
                    return code
                ctx.say(f"the submission stopped (exit {code}); continue with:")
                print(f"  {ctx.continue_command(state)}", file=ctx.out)
                return code
            fresh = False
            state.phase = WAITING
        elif state.phase == WAITING:
            state.save(ctx.base)
            timed_out = _wait(ctx, state)
            if timed_out:
                ctx.say(
                    "stopped waiting (--timeout); the batches keep running. Continue with:\n"
                    f"  {ctx.continue_command(state)}"
                )
                return 1
            state.phase = MERGING
        elif state.phase == MERGING:
            state.save(ctx.base)
            code, merged = _merge(ctx, state)
            if merged is None:
                ctx.say(f"the merge did not complete (exit {code}); continue with:")
                print(f"  {ctx.continue_command(state)}", file=ctx.out)
                return code or 1
            state.phase = MERGED
        elif state.phase in (MERGED, DONE):
            # The merge just run says what it merged; a resumed cycle reads its record.
            record = merged if merged is not None else _merge_record(ctx, state)
            merged = None
            errors_file = errors_path_for(state.output_path)
            if record is None or not _exists(errors_file):
                state.phase = MERGING  # the merged file or its record is gone: merge again
                continue
            if (record.failed_by_type or {}).get("never_submitted"):
                state.phase = SUBMITTING  # the next resume sends what has no receipt
                state.save(ctx.base)
                return _finish(ctx, state, record)  # not ended: no notification
            if (
                record.retryable
                and state.retries_used < state.retries
                and not _cancelled(ctx, state)
            ):
                state.retry_run = new_run_id()
                state.phase = RETRYING
                continue
            state.phase = DONE
            state.save(ctx.base)
            code = _finish(ctx, state, record)
            _notify(ctx, state)
            return code
        elif state.phase == RETRYING:
            state.save(ctx.base)
            code = _resubmit(ctx, state)
            if code != 0:
                ctx.say(f"the re-send stopped (exit {code}); continue with:")
                print(f"  {ctx.continue_command(state)}", file=ctx.out)
                return code
            state.retries_used += 1
            state.phase = WAITING
            state.retry_run = None
        else:  # pragma: no cover - load() refuses unknown phases
            raise ConfigError("--run-id", f"unknown cycle phase {state.phase!r}")


def _has_record(ctx: _Context, run_id: str) -> bool:
    """Whether the run still has its run record (a run stopped before sending anything
    has none: :meth:`RunStore.forget_unsent`)."""
    from mmirage_beam.run.store import RunStore

    try:
        return RunStore(ctx.base, run_id).read_run_record() is not None
    except Exception:  # cannot tell: keep the cycle's state and its advice
        return True


def _read_nothing(ctx: _Context, run_id: str) -> bool:
    """The run finished its submission having read no row (empty datasets, said by the
    submission): continuing it would read nothing again (issue 38)."""
    from mmirage_beam.run.store import RunStore

    try:
        record = RunStore(ctx.base, run_id).read_run_record()
    except Exception:  # an unreadable record: the usual advice
        return False
    return record is not None and bool(record.finished) and record.rows_read == 0


def _remove(ctx: _Context, state: CycleState) -> None:
    path = cycle_state_path(ctx.base, state.run_id)
    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])
    except Exception:  # best effort: an orphan state file only names a run never sent
        pass


def _exists(path: str) -> bool:
    return FileSystems.exists(path)


def _chain_batches(ctx: _Context, state: CycleState) -> list[Any]:
    """The distinct batches of the run and every run linked to it."""
    try:
        every = collect_receipts(ctx.config)
    except NoReceiptsError:
        return []
    linked, _rank = linked_runs(every.receipts, state.runs)
    return [e for e in every.batches if e.run_id in linked]


def _wait(ctx: _Context, state: CycleState) -> bool:
    """Follow the chain's batches until each has ended; True if ``--timeout`` stopped it."""
    batches = _chain_batches(ctx, state)
    if not batches:
        return False
    timeout = None
    if ctx.deadline is not None:
        timeout = max(0.0, ctx.deadline - time.monotonic())
    first = None if ctx.command.poll_interval else FIRST_POLL_INTERVAL_SECS
    every = f"every {ctx.poll_interval_secs:g}s"
    if first is not None and first < ctx.poll_interval_secs:
        every = f"after {first:g}s, then twice as long each time up to {every}"
    ctx.say(f"waiting for {len(batches)} batch(es), polling {every}")
    tty = ctx.out.isatty() if hasattr(ctx.out, "isatty") else False
    with lookup.BatchStatusChecker({e.provider for e in batches}, ctx.config) as checker:
        tokens = _tokens_note(ctx, state)
        display = (
            watch.RichWatchDisplay(tokens=tokens)
            if tty
            else watch.PlainWatchDisplay(ctx.out, tokens=tokens)
        )
        with display:
            _statuses, timed_out = watch.watch_statuses(
                checker,
                batches,
                interval_secs=ctx.poll_interval_secs,
                first_interval_secs=first,
                timeout_secs=timeout,
                on_poll=display.update,
            )
    return timed_out


def _tokens_note(ctx: _Context, state: CycleState) -> Any:
    """``(finished, total) -> text``: the chain's estimated input tokens and cost so far
    (its runs' recorded estimates times the share of requests finished)."""
    estimated = 0
    for run_id in state.runs:
        record = RunStore(ctx.base, run_id).read_run_record()
        counts = (record.estimate if record is not None else None) or {}
        estimated += sum(v for k, v in counts.items() if k.partition(":")[0] == INPUT_TOKENS)
    proc = ctx.config.processor
    try:
        price = batch_price(proc.provider, getattr(proc, "model", None), proc)
    except Exception:  # no price: tokens only
        price = None
    return lambda finished, total: waiting_tokens_text(finished, total, estimated, price)


def _merge_record(ctx: _Context, state: CycleState) -> Optional[MergeRecord]:
    """The merge record of the cycle's run, if it names the cycle's merged file."""
    record = RunStore(ctx.base, state.run_id).read_merge_record()
    if record is None or record.output_path != state.output_path:
        return None
    return record


def _merge(ctx: _Context, state: CycleState) -> tuple[int, Optional[MergeRecord]]:
    """Merge the cycle's run (its linked runs come along) into ``state.output_path``, as
    ``mmirage merge --run-id <run>`` would: the exit status and the merge record it
    wrote (None when it refused, failed or could not write it)."""
    from mmirage_beam.io.formats import format_for_path

    command = MergeCommand(
        config_path=ctx.config_path,
        output_path=state.output_path,
        output_format=format_for_path(state.output_path),  # .parquet: Parquet
        run_ids=(state.run_id,),
    )
    verbose = ctx.verbose
    again = [*command.command_line(verbose), *ctx.beam_args]
    code, outcome = guarded_call(lambda: command.run(ctx.beam_args, verbose, again))
    return code, (outcome.record if outcome is not None else None)


def _cancelled(ctx: _Context, state: CycleState) -> bool:
    return any(RunStore(ctx.base, r).read_cancel_record() is not None for r in state.runs)


def _resubmit(ctx: _Context, state: CycleState) -> int:
    """Re-send the merge's retryable failures as run ``state.retry_run``, linked to the
    cycle's run; not again if that run already has receipts (a resumed cycle)."""
    new = state.retry_run
    assert new is not None
    k = state.retries_used + 1
    if RunStore(ctx.base, new).has_started():
        ctx.say(
            f"retry {k} of {state.retries}: run {new} was already started; it is not sent "
            "again (what it did not send is re-sent by the next retry)"
        )
        sent = any(_exists(receipt_path(ctx.base, m, new)) for m in MODALITIES)
    else:
        ctx.say(f"retry {k} of {state.retries}: re-sending the retryable failures as run {new}")
        command = ResubmitCommand(
            config_path=ctx.config_path,
            errors_file=errors_path_for(state.output_path),
            run_id=state.run_id,
            only="retryable",
            new_run_id=new,
        )
        code, outcome = guarded_call(lambda: command.run(ctx.beam_args, ctx.verbose))
        if code != 0 or outcome is None:
            return code
        sent = bool(outcome.receipts)  # what the re-send just wrote
    if sent and new not in state.runs:
        state.runs.append(new)
        state.resent.append(_requests_of(ctx, new))
    return 0


def _requests_of(ctx: _Context, run_id: str) -> int:
    """Requests the receipts of ``run_id`` hold."""
    try:
        return sum(e.request_count for e in collect_receipts(ctx.config, (), run_id).batches)
    except NoReceiptsError:
        return 0


def _notify(ctx: _Context, state: CycleState) -> None:
    """Tell ``execution_params.notify``'s webhooks how the run ended
    (:func:`mmirage_beam.notify.notify_run`: each event once, whatever the restarts); a
    failure is a warning and never changes the exit status."""
    if not ctx.config.execution.notify:
        return
    from mmirage_beam.notify import notify_run

    try:
        result = notify_run(ctx.base, state.run_id, ctx.config, config_arg=ctx.config_path)
    except NoReceiptsError:  # no batch was sent (every row skipped): no batch event
        ctx.say("notify: nothing sent (the run sent no batch)")
        return
    except Exception as exc:  # the run's outcome stands whatever the webhook does
        ctx.say(f"notify: not sent ({type(exc).__name__}: {exc})")
        return
    for d in result.deliveries:
        if d.status == "delivered":
            ctx.say(f"notify: event '{d.event}' sent to {d.url}")
    for warning in result.warnings:
        ctx.say(warning)


def _finish(ctx: _Context, state: CycleState, record: MergeRecord) -> int:
    """The one summary at the end, and the exit status."""
    stats = record.stats or {}
    by_type = record.failed_by_type or {}
    rows = int(stats.get("rows_written", 0))
    failed_rows = int(stats.get("rows_with_failures", 0))
    # rows skipped as invalid at submit (skip_invalid_rows) were never sent: not succeeded
    skipped = int(stats.get("rows_skipped_invalid", 0))
    failed = sum(by_type.values())
    lines = [
        "",
        f"cycle summary, run {state.run_id}"
        + (f" (+ resubmissions {', '.join(state.runs[1:])})" if state.runs[1:] else ""),
        f"  rows:              {rows:,}",
        f"  rows succeeded:    {max(rows - failed_rows - skipped, 0):,}",
    ]
    if skipped:
        lines.append(f"  rows skipped:      {skipped:,} (invalid at submit, never sent)")
    lines += [
        f"  outputs succeeded: {int(stats.get('outputs_succeeded', 0)):,}",
        f"  outputs failed:    {failed:,}",
    ]
    for kind, n in sorted(by_type.items()):
        lines.append(f"    {kind + ':':<22} {n:,}")
    resent = (
        f" (re-sent {' + '.join(f'{n:,}' for n in state.resent)} request(s))"
        if state.resent
        else ""
    )
    lines.append(f"  retries used:      {state.retries_used} of {state.retries}{resent}")
    lines.append(f"  merged file:       {state.output_path}")
    lines += ["  " + line for line in usage_lines(stats, ctx.config.processor)]
    print("\n".join(lines), file=ctx.out)
    unknown = int(stats.get("unknown_custom_ids", 0))
    if not failed and not failed_rows and not unknown and not skipped:
        ctx.say("every row succeeded")
        return 0
    errors_file = errors_path_for(state.output_path)
    retryable = int(record.retryable or 0)
    left = []
    if failed or failed_rows:
        left.append(
            f"{failed:,} output(s) failed in {failed_rows:,} row(s), listed in {errors_file}"
        )
    if skipped:
        invalid = RunStore(ctx.base, state.run_id).invalid_rows_path
        left.append(
            f"{skipped:,} row(s) were skipped as invalid at submit (skip_invalid_rows) and "
            f"never sent: they are listed, with why, in {invalid}, and marked "
            "mmirage_skipped in the merged file; fix them in the source and send them in a "
            "new run"
        )
    if by_type.get("never_submitted"):
        left.append(
            "the run stopped before submitting every row; send the rest (nothing is sent "
            f"twice) and go on with:\n  {ctx.continue_command(state)}"
        )
    elif retryable and _cancelled(ctx, state):
        left.append(
            f"{retryable:,} are retryable, but the run was cancelled (mmirage cancel), so "
            "they were not re-sent; re-send them on purpose with:\n  "
            f"mmirage resubmit --config {shlex.quote(ctx.config_path)} --from "
            f"{shlex.quote(errors_file)} --run-id {state.run_id}\n  and merge again: "
            f"{ctx.continue_command(state)}"
        )
    elif retryable:
        left.append(
            f"{retryable:,} are retryable ("
            f"{'the 1 retry is' if state.retries == 1 else f'the {state.retries} retries are'}"
            " used up); re-send them with:\n  "
            f"{ctx.continue_command(state, state.retries_used + 1)}"
        )
    if failed - retryable > 0:
        left.append(
            f"{failed - retryable:,} are not retryable (e.g. invalid requests): fix the rows "
            "or the config, then re-send them with:\n  "
            f"mmirage resubmit --config {shlex.quote(ctx.config_path)} --from "
            f"{shlex.quote(errors_file)} --only all\n  and merge again: "
            f"{ctx.continue_command(state)}"
        )
    ctx.say("not every row succeeded: " + "\n  ".join(left))
    return 1
