"""``mmirage run`` / ``python -m pipelines.submit``: the submit pipeline (or a dry run).

Usage:
    python -m pipelines.submit --config C.yaml [--export-prompts P] [--run-id ID]
        [--skip-invalid-rows] [standard Beam pipeline options, e.g. --runner ...]
    python -m pipelines.submit --config C.yaml --wait [--output-path OUT] [--retries N]
        [--poll-interval SECS] [--timeout SECS] [--run-id ID]

``--wait`` (or ``execution_params.merge`` / ``retry``) does the whole cycle: submit,
follow, merge, re-send the retryable failures (:mod:`mmirage_beam.cycle`, which gives
its exit status).

Exit status: 0 submitted (or exported); 1 rows failed validation (nothing submitted) or a
submission failed; 2 bad flags, bad config, a missing API key, or the run id is held by
another live process (nothing sent); 3 an earlier run with the same fingerprint (config
and data) exists and has not failed: nothing was sent (resume it with ``--run-id``, or
pass ``--new-run`` to submit again on purpose); 130 stopped by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from mmirage_beam.launch import (
    RunOutcome,
    beam_options,
    check_beam_args,
    configure_logging,
    counters,
    guarded,
    own_flags,
    run_pipeline,
)
from mmirage_beam.paths import path_argument


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix of a flag must never pass for the flag
        prog="mmirage run",
        description="Render every row into provider batch requests and submit them in "
        "byte-bounded chunks (or export them with --export-prompts). Unknown flags are "
        "passed to Beam as pipeline options (default runner: DirectRunner). Relative "
        "paths, in the config and on the command line, are relative to the current "
        "directory (as in MMIRAGE); "
        "they are made absolute before the pipeline is built, so workers in other folders "
        "or machines see the same files.",
    )
    ap.add_argument("--config", required=True, help="MMIRAGE-compatible YAML config")
    ap.add_argument(
        "--export-prompts",
        metavar="PATH",
        type=path_argument,
        help="dry run: write provider-ready requests to PATH (.jsonl file, else a folder); "
        "no API key needed, nothing is submitted",
    )
    ap.add_argument("--run-id", help="use this run id instead of a fresh one")
    ap.add_argument(
        "--new-run",
        action="store_true",
        help="submit even when an earlier run of the same config and data exists (by "
        "default such a run is named and nothing is sent; exit 3)",
    )
    ap.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="a cheap trial: only the first N rows by source_index, as a run of its own "
        "(its own fingerprint; resumes and merges of it read only those rows)",
    )
    ap.add_argument(
        "--skip-invalid-rows",
        action="store_true",
        default=None,
        help="submit the valid rows even when some rows are invalid (they are listed in "
        "the invalid-rows file)",
    )
    ap.add_argument(
        "--exact-tokens",
        action="store_true",
        help="count input tokens with the provider's own free counting endpoint where it "
        "has one (needs the provider's key, one call per request; docs/providers.md lists "
        "which providers have one); same as exact_tokens: true in the processor",
    )
    ap.add_argument(
        "--estimate",
        choices=("exact", "sample"),
        default="exact",
        help="how the token and cost estimate counts: exact (default) counts every "
        "request; sample counts only a deterministic share of them (--estimate-fraction, "
        "chosen by custom_id) and extrapolates, with a 95%% error bound in its label: a "
        "faster dry run; the requests themselves are the same",
    )
    ap.add_argument(
        "--estimate-fraction",
        metavar="F",
        default=None,
        help="with --estimate sample: the share of requests counted, 0 < F <= 1 (default 0.01)",
    )
    ap.add_argument(
        "--no-reuse",
        action="store_true",
        help="send every request, even those whose exact body an earlier run under the "
        "same metadata base already answered (by default their answers are reused, not "
        "bought again); same as execution_params.reuse_answers: false",
    )
    ap.add_argument(
        "--keep-staged",
        action="store_true",
        help="keep the staged chunk files (<metadata base>.staged.<run_id>/) after the run "
        "instead of removing them",
    )
    ap.add_argument(
        "--skip-space-check",
        action="store_true",
        help="start even when the local disk for the staged chunks seems too small",
    )
    from mmirage_beam.cycle import add_cycle_arguments

    add_cycle_arguments(ap)
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args, beam_args = ap.parse_known_args(argv)
    args.own_flags = own_flags(ap)
    return args, beam_args


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    configure_logging(args.verbose)
    check_beam_args(beam_args, args.own_flags)

    from mmirage_beam.config import load_config
    from mmirage_beam.cycle import cycle_wanted
    from pipelines.cycle import run_cycle

    if cycle_wanted(args, load_config(args.config)):
        return run_cycle(args, beam_args, lambda run_id: _submit_main(args, beam_args, run_id))
    return _submit_main(args, beam_args)


def _submit_main(args, beam_args, preset_run_id: Optional[str] = None) -> int:  # noqa: ANN001
    """Submit (or export) the run; ``preset_run_id``: the id of a fresh run chosen by the
    caller (``args.run_id`` still means "resume this run")."""
    import dataclasses

    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.run import plans
    from mmirage_beam.run.layout import receipts_base
    from mmirage_beam.run.reports import already_run_message
    from mmirage_beam.run.storage import (
        check_job_endpoint,
        check_locations,
        config_locations,
        probe_location,
        translation_only,
    )

    config = load_config(args.config)
    _estimate_fraction(args)  # a bad --estimate-fraction fails before anything is read
    if args.exact_tokens:
        processor = dataclasses.replace(config.processor, exact_tokens=True)
        config = dataclasses.replace(config, processor=processor)
    dry_run = args.export_prompts is not None
    adapter_cls = plans.submit_adapter(config, dry_run)
    run_id = plans.choose_run_id(args.run_id, preset_run_id)
    options = beam_options(beam_args, args.verbose)
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    check_locations(config_locations(config, export_prompts=args.export_prompts), options)
    check_job_endpoint(options)
    config, said = plans.with_limit(config, args.limit, base, run_id, bool(args.run_id))
    _say(said)
    if translation_only(options):  # Dataflow --dry_run: nothing will run or be written
        return _submit(args, beam_args, config, options, base, run_id, None, translate_only=True)
    if not dry_run:
        probe_location(base, run_id, "processors[0].metadata_output_path")
    if args.new_run and args.run_id:
        raise ConfigError("--new-run", "starts a new run; it cannot be used with --run-id")
    if dry_run:
        return _submit(args, beam_args, config, options, base, run_id, None)
    run_plan = plans.prepare_submit(
        config,
        run_id,
        adapter_cls=adapter_cls,
        resuming=bool(args.run_id),
        new_run=bool(args.new_run),
    )
    try:
        if run_plan.earlier is not None:
            print(already_run_message(args.config, beam_args, run_plan.earlier), file=sys.stderr)
            return 3
        _say(run_plan.messages)
        return _submit(args, beam_args, config, options, base, run_id, run_plan)
    finally:
        run_plan.release()


def _submit(args, beam_args, config, options, base, run_id, run_plan, translate_only=False):  # noqa: ANN001
    """Run the submit job once the run id is held (``run_plan``: the
    ``run.plans.SubmitPlan``, None for dry runs) and print its summary."""
    import apache_beam as beam

    from mmirage_beam import progress
    from mmirage_beam.errors import MmirageError
    from mmirage_beam.pipeline import build_submit_pipeline
    from mmirage_beam.run import plans, reports
    from mmirage_beam.run.resume import ResumeState
    from mmirage_beam.run.staging import (
        check_free_space,
        staging_area,
        staging_dir,
        staging_need_bytes,
    )

    dry_run = run_plan is None
    provider = config.processor.provider
    resume = ResumeState() if dry_run else run_plan.resume
    settings = _settings(args, config, base, run_id, resume, translate_only)
    pipeline = beam.Pipeline(options=options)
    plan = build_submit_pipeline(pipeline, config, settings)
    what = "dry run (export only)" if dry_run else f"submission to {provider}"
    print(f"mmirage run {run_id}: {what}, config {args.config}", file=sys.stderr)
    resume_cmd = reports.command_line(
        ["mmirage run", "--config", args.config, "--run-id", run_id], beam_args
    )
    if not args.skip_space_check and not translate_only:
        check_free_space(staging_dir(base, run_id), staging_need_bytes(config, dry_run))
    progress.expect_run(config.processor, staging=staging_dir(base, run_id))  # price, estimate
    outcome = RunOutcome()
    try:
        with staging_area(base, run_id, keep=args.keep_staged or translate_only):
            result = run_pipeline(
                pipeline,
                stop_marker=plan.stop_marker,
                outcome=outcome,
                # still reading (no chunk submitted or being submitted): stop at once
                nothing_in_flight=lambda: dry_run or plans.nothing_submitted(base, run_id),
            )
    except (Exception, KeyboardInterrupt) as exc:  # also Ctrl-C / SIGTERM: say how to resume
        code = exc.exit_code if isinstance(exc, MmirageError) else 1
        stopped = isinstance(exc, KeyboardInterrupt) or outcome.stop_requested
        if stopped:
            code, exc = 130, RuntimeError("stopped on request (Ctrl-C or SIGTERM)")
        if dry_run:
            what = (
                "stopped" if stopped else f"error: the dry run failed: {reports.short_error(exc)}"
            )
            print(f"mmirage: {what}", file=sys.stderr)
        else:
            print(reports.failure_report(plan, run_id, exc, resume_cmd, stopped), file=sys.stderr)
        return code
    if translate_only:
        print(
            f"mmirage run {run_id}: the runner only translated the job (--dry_run); nothing "
            "was read, exported or submitted"
        )
        return 0
    return _finished(args, config, plan, run_plan, counters(result), resume_cmd)


def _settings(args, config, base, run_id, resume, translate_only):  # noqa: ANN001, ANN202
    """The run's ``SubmitSettings``: the flags, what a resume must not send again, and the
    earlier answers reused (``run.plans.plan_reuse``; what it found is printed)."""
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.run.plans import plan_reuse
    from mmirage_beam.settings import SubmitSettings

    reuse = plan_reuse(
        config,
        base,
        run_id,
        BatchAdapterRegistry.get(config.processor.provider),
        no_reuse=getattr(args, "no_reuse", False),
        dry_run=args.export_prompts is not None,
        translate_only=translate_only,
    )
    _say(reuse.messages)
    return SubmitSettings(
        run_id,
        export_prompts=args.export_prompts,
        skip_invalid_rows=args.skip_invalid_rows,
        attempt=resume.attempt,
        exclude_custom_ids=resume.submitted_ids,
        reuse_files=reuse.files,
        stale_batches=reuse.stale,
        estimate_fraction=_estimate_fraction(args),
    )


def _finished(args, config, plan, run_plan, stats: dict, resume_cmd: str) -> int:  # noqa: ANN001
    """After a successful job: the finish steps (``run.plans.finish_submit``), then the
    summary, the estimate and the savings printed; the exit status."""
    from mmirage_beam.errors import MmirageError
    from mmirage_beam.run import reports
    from mmirage_beam.run.plans import finish_submit

    dry_run, run_id = run_plan is None, plan.run_id
    try:
        record = None if dry_run else run_plan.record
        written = finish_submit(plan.receipts_base, run_id, record, stats, dry_run)
    except Exception as exc:  # every batch exists; only the bookkeeping after it failed
        if dry_run:
            print(
                f"mmirage: error: the dry run failed: {reports.short_error(exc)}", file=sys.stderr
            )
            return 1
        print(
            f"mmirage: error: run {run_id}: every batch is submitted and receipted, but a "
            f"finish step failed: {reports.short_error(exc)}\n"
            f"Complete it (nothing is sent; the provider is not contacted):\n  {resume_cmd}",
            file=sys.stderr,
        )
        return exc.exit_code if isinstance(exc, MmirageError) else 1
    invalid = reports.InvalidRows.read(plan.invalid_rows_path)
    skipping = bool(args.skip_invalid_rows or config.execution.skip_invalid_rows)
    print("\n".join(reports.submit_summary_lines(plan, stats, written, invalid, skipping)))
    for line in reports.estimate_summary_lines(stats, config.processor, dry_run):
        print(line)
    return 1 if invalid and not skipping else 0


def _estimate_fraction(args: argparse.Namespace) -> Optional[float]:
    """``--estimate`` / ``--estimate-fraction`` -> ``run.plans.estimate_fraction``."""
    from mmirage_beam.run.plans import estimate_fraction

    return estimate_fraction(
        getattr(args, "estimate", "exact"), getattr(args, "estimate_fraction", None)
    )


def _say(messages) -> None:  # noqa: ANN001
    """Print a plan's messages (``run.plans.Message``) on stderr, in order."""
    for message in messages:
        print(message.text, file=sys.stderr)


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
