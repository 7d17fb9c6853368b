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
    human_bytes,
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
    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.ids import check_run_id, new_run_id
    from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
    from mmirage_beam.run.layout import receipts_base
    from mmirage_beam.run.storage import (
        check_job_endpoint,
        check_locations,
        config_locations,
        probe_location,
        translation_only,
    )

    config = load_config(args.config)
    estimate_fraction(args)  # a bad --estimate-fraction fails before anything is read
    if args.exact_tokens:
        import dataclasses

        config = dataclasses.replace(
            config, processor=dataclasses.replace(config.processor, exact_tokens=True)
        )
    dry_run = args.export_prompts is not None
    if config.execution.mode == "slurm":
        raise ConfigError(
            "execution_params.mode",
            "slurm is not supported in batch_api mode; use mode: local (Beam runners such "
            "as --runner DataflowRunner or FlinkRunner scale the job instead)",
        )
    provider = config.processor.provider
    adapter_cls = BatchAdapterRegistry.get(provider)
    exact = config.processor.exact_tokens and (
        adapter_cls().exact_token_counter(config.processor) is not None
    )
    if not dry_run or exact:
        adapter_cls.check_dependencies()  # the provider's SDK (an optional extra)
        resolve_credentials(adapter_cls, provider)  # fail before reading any data
    try:
        run_id = check_run_id(args.run_id) if args.run_id is not None else new_run_id()
        run_id = preset_run_id if args.run_id is None and preset_run_id else run_id
    except ValueError as exc:
        raise ConfigError("--run-id", str(exc)) from None

    options = beam_options(beam_args, args.verbose)
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    check_locations(config_locations(config, export_prompts=args.export_prompts), options)
    check_job_endpoint(options)
    config = _with_limit(args, config, base, run_id)
    if translation_only(options):  # Dataflow --dry_run: nothing will run or be written
        return _submit(args, beam_args, config, options, base, run_id, None, translate_only=True)
    if not dry_run:
        probe_location(base, run_id, "processors[0].metadata_output_path")
    if args.new_run and args.run_id:
        raise ConfigError("--new-run", "starts a new run; it cannot be used with --run-id")
    if dry_run:
        return _submit(args, beam_args, config, options, base, run_id, None)
    from mmirage_beam.run.plans import prepare_submit

    run_plan = prepare_submit(
        config,
        run_id,
        adapter_cls=adapter_cls,
        resuming=bool(args.run_id),
        new_run=bool(args.new_run),
    )
    try:
        if run_plan.earlier is not None:
            print(_already_run_message(args, beam_args, run_plan.earlier), file=sys.stderr)
            return 3
        for message in run_plan.messages:
            print(message.text, file=sys.stderr)
        return _submit(args, beam_args, config, options, base, run_id, run_plan)
    finally:
        run_plan.release()


#: ``--estimate sample`` without ``--estimate-fraction``: 1% of the requests
DEFAULT_ESTIMATE_FRACTION = 0.01


def estimate_fraction(args: argparse.Namespace) -> Optional[float]:
    """The share of requests whose tokens are counted: None for ``--estimate exact``
    (every request), else ``--estimate-fraction`` (default
    :data:`DEFAULT_ESTIMATE_FRACTION`).

    Raises:
        ConfigError: ``--estimate-fraction`` is not a number in (0, 1], or is given
            without ``--estimate sample``.
    """
    from mmirage_beam.costs.tokens import check_sample_fraction
    from mmirage_beam.errors import ConfigError

    mode = getattr(args, "estimate", "exact") or "exact"
    given = getattr(args, "estimate_fraction", None)
    if mode == "exact":
        if given is not None:
            raise ConfigError(
                "--estimate-fraction", "only applies with --estimate sample (exact counts all)"
            )
        return None
    return check_sample_fraction(DEFAULT_ESTIMATE_FRACTION if given is None else given)


def _with_limit(args, config, base: str, run_id: str):  # noqa: ANN001, ANN202
    """``config`` with ``row_limit`` from ``--limit`` or, resuming, from the run record."""
    import dataclasses

    from mmirage_beam.errors import ConfigError
    from mmirage_beam.run.fingerprint import read_run_record

    limit = args.limit
    if limit is not None and limit < 1:
        raise ConfigError("--limit", f"must be >= 1, got {limit}")
    if limit is None and args.run_id:
        limit = (read_run_record(base, run_id) or {}).get("limit")
    if limit is None:
        return config
    print(
        f"mmirage run {run_id}: --limit {limit}: only the first {limit:,} row(s) by "
        "source_index, as a run of their own (merge writes just those rows)",
        file=sys.stderr,
    )
    return dataclasses.replace(config, row_limit=int(limit))


def _already_run_message(args, beam_args, earlier: dict) -> str:  # noqa: ANN001
    run_id = earlier["run_id"]
    cmd = " ".join(["mmirage run", "--config", args.config, *map(_quote, beam_args)])
    state = "finished" if earlier.get("finished") else "not finished"
    return (
        f"mmirage run: nothing sent: run {run_id} (started {earlier.get('started_at')}, "
        f"{state}) already submitted this config with the same data (fingerprint "
        f"{earlier['fingerprint'][:12]}).\n"
        f"  resume or complete it:    {cmd} --run-id {run_id}\n"
        f"  submit again on purpose:  {cmd} --new-run --no-reuse (pays again for every "
        "request; --new-run alone reuses the answers a merge of it recorded)"
    )


def _submit(args, beam_args, config, options, base, run_id, run_plan, translate_only=False):  # noqa: ANN001
    """The submission itself, once the run id is held (``run_plan``: the
    ``run.plans.SubmitPlan``, None for dry runs)."""
    import apache_beam as beam

    from mmirage_beam.errors import MmirageError
    from mmirage_beam.pipeline import build_submit_pipeline
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.run.resume import ResumeState
    from mmirage_beam.run.staging import (
        check_free_space,
        staging_area,
        staging_dir,
        staging_need_bytes,
    )
    from mmirage_beam.settings import SubmitSettings

    dry_run = run_plan is None
    record = None if dry_run else run_plan.record
    provider = config.processor.provider
    adapter_cls = BatchAdapterRegistry.get(provider)
    resume = ResumeState() if dry_run else run_plan.resume
    reuse_files, stale = _reuse_plan(args, config, base, run_id, adapter_cls, translate_only)
    pipeline = beam.Pipeline(options=options)
    settings = SubmitSettings(
        run_id,
        export_prompts=args.export_prompts,
        skip_invalid_rows=args.skip_invalid_rows,
        attempt=resume.attempt,
        exclude_custom_ids=resume.submitted_ids,
        reuse_files=reuse_files,
        stale_batches=stale,
        estimate_fraction=estimate_fraction(args),
    )
    plan = build_submit_pipeline(pipeline, config, settings)
    what = "dry run (export only)" if dry_run else f"submission to {provider}"
    print(f"mmirage run {run_id}: {what}, config {args.config}", file=sys.stderr)
    resume_cmd = " ".join(
        ["mmirage run", "--config", args.config, "--run-id", run_id, *map(_quote, beam_args)]
    )
    if not args.skip_space_check and not translate_only:
        check_free_space(staging_dir(base, run_id), staging_need_bytes(config, dry_run))
    from mmirage_beam import progress

    progress.expect_run(config.processor, staging=staging_dir(base, run_id))  # price, estimate
    outcome = RunOutcome()
    try:
        with staging_area(base, run_id, keep=args.keep_staged or translate_only):
            result = run_pipeline(
                pipeline,
                stop_marker=plan.stop_marker,
                outcome=outcome,
                # still reading (no chunk submitted or being submitted): stop at once
                nothing_in_flight=lambda: dry_run or _nothing_submitted(base, run_id),
            )
    except (Exception, KeyboardInterrupt) as exc:  # also Ctrl-C / SIGTERM: say how to resume
        code = exc.exit_code if isinstance(exc, MmirageError) else 1
        stopped = isinstance(exc, KeyboardInterrupt) or outcome.stop_requested
        if stopped:
            code, exc = 130, RuntimeError("stopped on request (Ctrl-C or SIGTERM)")
        if dry_run:
            what = "stopped" if stopped else f"error: the dry run failed: {_short(exc)}"
            print(f"mmirage: {what}", file=sys.stderr)
            return code
        print(_failure_report(plan, run_id, exc, resume_cmd, stopped), file=sys.stderr)
        return code

    if translate_only:
        print(
            f"mmirage run {run_id}: the runner only translated the job (--dry_run); nothing "
            "was read, exported or submitted"
        )
        return 0
    stats = counters(result)
    try:
        written = _finish(plan, base, run_id, record, stats, dry_run)
    except Exception as exc:  # every batch exists; only the bookkeeping after it failed
        if dry_run:
            print(f"mmirage: error: the dry run failed: {_short(exc)}", file=sys.stderr)
            return 1
        print(
            f"mmirage: error: run {run_id}: every batch is submitted and receipted, but a "
            f"finish step failed: {_short(exc)}\n"
            f"Complete it (nothing is sent; the provider is not contacted):\n  {resume_cmd}",
            file=sys.stderr,
        )
        return exc.exit_code if isinstance(exc, MmirageError) else 1
    invalid = _InvalidRows.read(plan.invalid_rows_path)
    skipping = bool(args.skip_invalid_rows or config.execution.skip_invalid_rows)
    _print_summary(plan, stats, written, invalid, skipped=skipping)
    from mmirage_beam.costs.report import estimate_lines

    already = stats.get("requests_not_selected", 0)
    from mmirage_beam.reuse import sent_stats

    estimate = estimate_lines(sent_stats(stats), config.processor)  # what is sent
    if already:  # a resume: what it sends now, apart from what earlier attempts sent
        now = max(stats.get("requests", 0) - already - stats.get("requests_reused", 0), 0)
        print(
            f"sent now:            {now:,} request(s); already sent: {already:,} "
            "(earlier attempts, not counted below)"
        )
        if not now:
            estimate = ["tokens and estimated cost: nothing sent now ($0)"]
    for line in estimate:
        print(line)
    from mmirage_beam.reuse import savings_lines

    for line in savings_lines(stats, config.processor, dry_run):
        print(line)
    return 1 if invalid and not skipping else 0


def _reuse_plan(args, config, base, run_id, adapter_cls, translate_only):  # noqa: ANN001, ANN202
    """``(earlier answers files, stale batch ids)`` for this run (``((), ...)``: reuse
    off or nothing to reuse); says what it found on stderr (:mod:`mmirage_beam.reuse`)."""
    from mmirage_beam.reuse import (
        check_staleness,
        earlier_answer_files,
        reuse_wanted,
        staleness_lines,
    )

    if not reuse_wanted(getattr(args, "no_reuse", False), config):
        return (), frozenset()
    files = earlier_answer_files(base, run_id)
    if not files:
        return (), frozenset()
    ask = not translate_only
    if args.export_prompts is not None:  # a dry run asks only when the key is there
        from mmirage_beam.errors import CredentialsError
        from mmirage_beam.providers.base import resolve_credentials

        try:
            resolve_credentials(adapter_cls, config.processor.provider)
        except CredentialsError:
            ask = False
    st = check_staleness(files, adapter_cls, config.processor, ask)
    for line in staleness_lines(run_id, st):
        print(line, file=sys.stderr)
    return (files if st.answers else ()), frozenset(st.stale)


def _finish(plan, base: str, run_id: str, record, stats: dict, dry_run: bool) -> list[str]:  # noqa: ANN001
    """The finish steps after a successful submit pipeline: consolidate the receipts,
    then record the run finished (``record``: None for a dry run). Returns the receipt
    files written. A failure here leaves every batch receipted (in parts) and the
    submitted marker in place, so ``--run-id`` completes the run without sending."""
    from mmirage_beam.crashpoints import crash_point
    from mmirage_beam.run.receipts import consolidate_run, submitted_marker_path

    written = list(consolidate_run(plan.receipts_base, run_id, dry_run))
    crash_point("finishing")
    if record is not None:
        from mmirage_beam.costs.tokens import extrapolated_counters, token_counters
        from mmirage_beam.reuse import sent_stats
        from mmirage_beam.run.fingerprint import write_run_record

        write_run_record(
            base,
            run_id,
            record["fingerprint"],
            started_at=record["started_at"],
            finished=True,
            rows_read=stats.get("rows_read", 0) + stats.get("row_errors", 0),
            requests=stats.get("requests", 0),
            chunks_submitted=stats.get("batches_submitted", 0)
            + stats.get("batches_already_receipted", 0),
            # what was sent (not reused); a sampled estimate scaled up to every request
            estimate=token_counters(extrapolated_counters(sent_stats(stats))),
            limit=record.get("limit"),
        )
        _remove_if_exists(submitted_marker_path(base, run_id))  # the record says it now
    return written


def _remove_if_exists(path: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])
    except Exception:  # best effort: a stale marker is removed by the next attempt
        pass


def _nothing_submitted(base: str, run_id: str) -> bool:
    """Whether this attempt of ``run_id`` has not started a chunk yet: no intent and no
    receipt part in its ``.parts`` folders (an earlier attempt's are consolidated)."""
    from mmirage_beam.io.fs import list_files
    from mmirage_beam.run.layout import parts_dir
    from mmirage_beam.run.receipts import MODALITIES, receipt_path

    return not any(list_files(parts_dir(receipt_path(base, m, run_id))) for m in MODALITIES)


def _failure_report(  # noqa: ANN001
    plan, run_id: str, exc: BaseException, resume_cmd: str, stopped: bool = False
) -> str:
    """What was accepted, derived from what is recorded once the job has stopped."""
    from mmirage_beam.launch import describe_failure
    from mmirage_beam.run.receipts import consolidate_run, pending_intents

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
    from mmirage_beam.run.receipts import submission_complete

    if not in_flight and submission_complete(plan.receipts_base, run_id):
        lines.append(
            f"Every batch of run {run_id} is submitted and receipted ({', '.join(kept)}); "
            "only a finish step failed (placeholder rows, receipts consolidation or the "
            "run record). Complete it (nothing is sent; the provider is not contacted):"
        )
        lines.append(f"  {resume_cmd}")
        return "\n".join(lines)
    lines.append(
        "Receipts of the batches accepted before the failure: " + ", ".join(kept)
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


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


class _InvalidRows:
    """The invalid-rows file's count and its first rows by source_index, read streamed
    (the file can hold every row of the dataset)."""

    def __init__(self, count: int, first: list) -> None:
        self.count = count
        self.first = first

    def __bool__(self) -> bool:
        return self.count > 0

    @classmethod
    def read(cls, path: str, keep: int = 10) -> _InvalidRows:
        import heapq

        from apache_beam.io.filesystems import FileSystems

        from mmirage_beam.jsonl import iter_jsonl_file

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


def _print_summary(plan, stats, receipts, invalid, skipped: bool) -> None:  # noqa: ANN001
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
        else:
            lines.append(f"exported prompts:    {plan.export_file}")
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
    print("\n".join(lines))
    if invalid:
        print(f"\n{invalid.count} invalid row(s), all listed in {plan.invalid_rows_path}:")
        for e in invalid.first:
            where = f" ({e['location']})" if e.get("location") else ""
            name = f" [{e['input_name']}]" if e.get("input_name") else ""
            print(
                f"  source_index {e['source_index']}{name} {e['dataset_path']}{where}: "
                f"{e['reason']}"
            )
        if invalid.count > len(invalid.first):
            print(f"  ... and {invalid.count - len(invalid.first)} more")
        if skipped:
            print("These rows were skipped (skip_invalid_rows); the rest was processed.")
        else:
            print("Nothing was submitted. Fix these rows, or rerun with --skip-invalid-rows.")


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
