"""``SubmitCommand``: render every row into batch requests and submit them (or export
them: a dry run), what ``mmirage run`` runs once its flags are parsed; ``mmirage run
--wait`` runs it as the cycle's first step."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Optional

from mmirage_beam.commands import say, show
from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.jobs import RunOutcome, metric_counters, run_pipeline

if TYPE_CHECKING:  # Beam loads with the plans: only once the flags are parsed
    from mmirage_beam.run.submit_flags import SubmitFlags
    from mmirage_beam.run.submit_plans import RunHold, SubmitStart

__all__ = ["SubmitCommand", "SubmitOutcome"]


@dataclasses.dataclass(frozen=True)
class SubmitOutcome:
    """What a submission did.

    Attributes:
        exit_code: 0 submitted (or exported); 1 rows failed validation or a submission
            failed; 3 already submitted (nothing sent); 130 stopped by Ctrl-C / SIGTERM.
        run_id: the run submitted (or held); None when it stopped before choosing one.
    """

    exit_code: int
    run_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SubmitCommand:
    """``mmirage run``'s inputs: its flags (``--config`` as given, the Beam options
    left over) and ``-v``."""

    flags: SubmitFlags
    verbose: bool = False

    def run(
        self,
        preset_run_id: Optional[str] = None,
        on_held: Optional[Callable[[str], None]] = None,
    ) -> SubmitOutcome:
        """Check the flags against the config, hold the run (its lease), build and run
        the submit job, and print what ``mmirage run`` prints.

        Args:
            preset_run_id: the id of a fresh run chosen by the caller (the cycle);
                ``flags.run_id`` still means "resume this run".
            on_held: called with the run id once the run is held and will be submitted
                (not for a run refused with exit 3): the cycle announces it then.

        Raises:
            mmirage_beam.errors.MmirageError: bad config, a missing key, the run held by
                another live process (exit 2).
        """
        from mmirage_beam.config import load_config
        from mmirage_beam.run.submit_plans import hold_run, start_submit

        flags = self.flags
        config = load_config(flags.config)
        options = beam_options(flags.beam_args, self.verbose)
        start = start_submit(config, flags, options, preset_run_id)
        say(start.messages)
        held = hold_run(start, flags)
        try:
            say(held.messages)
            if held.exit_code is not None:  # already submitted: nothing sent (exit 3)
                return SubmitOutcome(held.exit_code, start.run_id)
            try:
                if on_held is not None:
                    on_held(start.run_id)
                return SubmitOutcome(_submit(start, flags, held, options), start.run_id)
            except KeyboardInterrupt:  # before the job started: nothing was sent
                return SubmitOutcome(_stopped_before_sending(start, flags), start.run_id)
        finally:
            held.release()


def _stopped_before_sending(start: SubmitStart, flags: SubmitFlags) -> int:
    """A Ctrl-C or SIGTERM before the submit job started (while it was being built):
    said as such, and the run record of a run that sent nothing deleted, so that the
    next run of the config is not refused as "already submitted" (issue 38: a generic
    "interrupted" line and an empty run record). Exit 130."""
    from mmirage_beam.run.plans import Message
    from mmirage_beam.run.submit_plans import (
        forgot_unsent,
        resume_command,
        stopped_before_sending_text,
    )

    # a fresh run only: a resumed one (--run-id) keeps its record
    if flags.dry_run or (not flags.run_id and forgot_unsent(start)):
        text = stopped_before_sending_text(start.run_id)
    else:
        text = (
            f"mmirage run {start.run_id}: stopped (Ctrl-C or SIGTERM) before its job "
            f"started; resume it with:\n  {resume_command(start, flags)}"
        )
    say([Message("warning", text)])
    return 130


def _submit(start: SubmitStart, flags: SubmitFlags, held: RunHold, options: Any) -> int:
    """Build and run the submit job of a held run (``run.submit_plans``), then print what
    it says; its exit status."""
    import apache_beam as beam

    from mmirage_beam.costs.prices import processor_price
    from mmirage_beam.progress import counters
    from mmirage_beam.run import submit_plans
    from mmirage_beam.run.staging import staging_area, staging_dir
    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    settings, said = submit_plans.submit_settings(start, flags, held.resume)
    say(said)
    pipeline = beam.Pipeline(options=options)
    plan = build_submit_pipeline(pipeline, start.config, settings)
    say([submit_plans.job_line(start, flags)])
    submit_plans.check_space(start, flags)
    counters.expect(
        price=processor_price(start.config.processor),
        estimate_file=counters.estimate_file(staging_dir(start.base, start.run_id)),
    )
    outcome = RunOutcome()
    try:
        with staging_area(start.base, start.run_id, keep=flags.keep_staged or start.translate_only):
            result = run_pipeline(
                pipeline,
                stop_marker=plan.stop_marker,
                outcome=outcome,
                nothing_in_flight=submit_plans.nothing_in_flight(start, flags),
            )
    except (Exception, KeyboardInterrupt) as exc:  # also Ctrl-C / SIGTERM: say how to resume
        report = submit_plans.job_failed(start, flags, plan, exc, outcome)
    else:
        report = submit_plans.finish_run(start, flags, plan, held, metric_counters(result))
        if outcome.stop_requested and not flags.dry_run:  # the stop came too late to stop
            report = submit_plans.stopped_after_all_sent(start, flags, report)
    say(report.messages)
    show(report.lines)
    return report.exit_code
