"""``mmirage merge`` / ``python -m pipelines.merge``: join results back onto the rows.

Usage:
    python -m pipelines.merge --config C.yaml --output-path OUT.jsonl
        [--output-format jsonl|parquet|hf] [--metadata-path R ...] [--run-id ID]
        [--allow-partial] [--no-verify-source] [--partitions N] [standard Beam pipeline options]

Exit status: 0 merged and every request succeeded; 1 merged with failed requests, or
refused because batches are still running (without --allow-partial), or the source
changed; 2 bad flags, bad config, no receipts or a missing API key.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Optional, Sequence

from mmirage_beam.launch import (
    beam_options,
    check_beam_args,
    configure_logging,
    counters,
    guarded,
    own_flags,
    read_jsonl,
    run_pipeline,
)
from mmirage_beam.paths import path_argument


def parse_args(argv: Optional[Sequence[str]]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix of a flag must never pass for the flag
        prog="mmirage merge",
        description="Fetch the results of a run's batches and join them onto the source "
        "rows by source_index, in order, into one JSONL file. Unknown flags are Beam "
        "pipeline options (default runner: DirectRunner). Relative paths, in the config "
        "and on the command line, are relative to the current directory (as in MMIRAGE); "
        "they are made absolute before the pipeline is built, so workers in other folders "
        "or machines see the same files.",
    )
    ap.add_argument("--config", required=True, help="the config the run was submitted with")
    ap.add_argument(
        "--output-path",
        required=True,
        type=path_argument,
        help="merged JSONL file to write (relative paths: to the current directory)",
    )
    ap.add_argument(
        "--output-format",
        choices=("jsonl", "parquet", "hf"),
        default="jsonl",
        help="jsonl (default); parquet: one Parquet file; hf: a folder that "
        "datasets.load_from_disk opens. The errors file stays JSONL (OUT.errors.jsonl)",
    )
    ap.add_argument(
        "--metadata-path",
        action="append",
        type=path_argument,
        default=[],
        metavar="R",
        help="receipt file (repeatable); default: found from metadata_output_path",
    )
    ap.add_argument(
        "--run-id",
        action="append",
        default=[],
        help="merge this run (default: the newest); repeat it to merge several runs into "
        "one file, e.g. the runs of num_shards shards",
    )
    ap.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge while batches are still running; their rows are marked pending",
    )
    ap.add_argument(
        "--no-verify-source",
        action="store_true",
        help="skip rebuilding the requests to check that the source did not change",
    )
    ap.add_argument(
        "--partitions",
        type=int,
        help="range partitions of the ordered write (default: one per 25,000 rows, the most "
        "one worker holds while it joins)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args, beam_args = ap.parse_known_args(argv)
    args.own_flags = own_flags(ap)
    return args, beam_args


def _main(argv: Optional[Sequence[str]] = None) -> int:
    args, beam_args = parse_args(argv)
    configure_logging(args.verbose)
    check_beam_args(beam_args, args.own_flags)
    # Beam and the modules that build the job load only now: --help and a bad flag
    # answer without the seconds Beam's import takes.
    import apache_beam as beam

    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.pipeline import build_merge_pipeline
    from mmirage_beam.run.storage import check_job_endpoint, check_locations, config_locations
    from mmirage_beam.settings import MergeSettings

    if args.partitions is not None and args.partitions < 1:
        raise ConfigError("--partitions", "must be >= 1")
    config = load_config(args.config)
    chosen = _choose_run(args, config)
    if chosen is None:
        return 1
    sel, merge_plan = chosen
    config = _limited(config, merge_plan.base, sel.linked)
    resume_command = f"mmirage run --config {args.config} --run-id {merge_plan.resume_run}"
    final, out, errors_path = _output_paths(args, config)
    options = beam_options(beam_args, args.verbose)
    check_locations(config_locations(config, output_path=out), options)
    check_job_endpoint(options)
    pipeline = beam.Pipeline(options=options)
    receipts = list(merge_plan.receipts)  # ReceiptEntry: the workers read the per-request maps
    settings = MergeSettings(
        out,
        num_partitions=args.partitions,
        verify_source=not args.no_verify_source,
        invalid_rows_files=list(merge_plan.invalid_rows_files),
        # Requests the source still builds but no receipt holds were never submitted;
        # told apart only when every row this merge reads belongs to the merged run(s).
        unsubmitted_run=(
            (merge_plan.resume_run, resume_command) if merge_plan.count_unsubmitted else None
        ),
        errors_path=errors_path,
        answers_path=_answers_path(merge_plan.base, sel.linked),
    )
    plan = build_merge_pipeline(pipeline, config, sel.batches, receipts, sel.providers, settings)
    _expect_progress(config, sel.batches, receipts)
    ran = _run_merge(pipeline, plan, options, out, final, args, config, argv)
    if ran is None:
        return 1
    if ran == "translated":
        print("mmirage merge: the runner only translated the job (--dry_run); nothing merged")
        return 0
    stats, shown = ran
    errors = read_jsonl(errors_path)
    _record_merge(merge_plan.base, sel.linked, final, stats, errors)
    _print_totals(plan, stats, errors, sel.pending, args.allow_partial, shown)
    return _print_outcome(args, config, sel, merge_plan, stats, errors, resume_command)


def _choose_run(args, config):  # noqa: ANN001, ANN202
    """The run to merge and its :class:`~mmirage_beam.run.plans.MergePlan`, or None (the
    reason printed) when the plan is blocked: a batch cannot be looked up, or batches
    are still running without ``--allow-partial``.

    Raises:
        NoReceiptsError: no receipt names the run (and it is not a run that sent nothing).
    """
    from mmirage_beam.check.discovery import NoReceiptsError
    from mmirage_beam.run.plans import prepare_merge
    from mmirage_beam.run.selection import select_run

    try:
        sel = select_run(config, args.metadata_path, args.run_id, "merge")
    except NoReceiptsError:
        # A run that skipped every row (skip_invalid_rows) sent nothing and has no
        # receipt; its rows are still merged, each marked skipped.
        sel = None if args.metadata_path else _nothing_sent_run(config, args.run_id)
        if sel is None:
            raise
    merge_plan = prepare_merge(
        config,
        sel,
        allow_partial=args.allow_partial,
        verify_source=not args.no_verify_source,
        receipts_picked=bool(args.metadata_path),
    )
    if merge_plan.blocked == "lookup_failed":
        print("mmirage: error: some batches cannot be looked up; nothing merged.", file=sys.stderr)
        return None
    if merge_plan.blocked == "pending":
        print(
            f"mmirage: {len(sel.pending)} batch(es) have not ended yet; nothing merged "
            "(use --allow-partial to merge what is available):",
            file=sys.stderr,
        )
        for b in sel.pending:
            print(f"  {b.provider_batch_id} ({b.provider}, {b.provider_status})", file=sys.stderr)
        _print_cancelled(config, sel.linked, sys.stderr)
        return None
    return sel, merge_plan


def _output_paths(args, config) -> tuple[str, str, str]:  # noqa: ANN001
    """``(final, out, errors_path)``: the file the user asked for, the ordered JSONL the
    job writes (``final`` itself for JSONL; beside it, converted afterwards, for Parquet
    and HF) and the errors file; each checked writable and not one of the inputs."""
    from mmirage_beam.pipeline import errors_path_for
    from mmirage_beam.run.storage import check_output_file

    final = out = args.output_path
    errors_path = errors_path_for(out)  # rewritten (empty when nothing failed) by the merge
    if args.output_format == "jsonl":
        check_output_file("--output-path", out, config, [errors_path])
        return final, out, errors_path
    import uuid

    from mmirage_beam.io.formats import check_hf_folder

    out = f"{final.rstrip('/')}.merge-jsonl-{uuid.uuid4().hex[:12]}.jsonl"
    if args.output_format == "hf":
        check_hf_folder(final)
        check_output_file("--output-path", out, config, [errors_path])
    else:
        check_output_file("--output-path", final, config, [errors_path])
    return final, out, errors_path


def _expect_progress(config, batches, receipts) -> None:  # noqa: ANN001
    """Tell the progress lines how many results the merge fetches ("of N")."""
    from mmirage_beam import progress

    fetching = {b.provider_batch_id for b in batches}
    fetched = sum(
        e.request_count
        for e in {e.key: e for e in receipts}.values()
        if e.provider_batch_id in fetching
    )
    progress.expect_run(config.processor, totals={"results fetched": fetched or None})


def _run_merge(pipeline, plan, options, out, final, args, config, argv):  # noqa: ANN001, ANN202
    """Run the merge job: ``(counters, the merged file as shown)``, ``"translated"`` when
    the runner only translated it, or None when the job failed (what to run again is
    printed). Temporary files are removed either way."""
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.launch import describe_failure
    from mmirage_beam.run.storage import translation_only

    try:
        result = run_pipeline(pipeline)
        if translation_only(options):
            return "translated"
        stats = counters(result)
        shown = out
        if out != final and FileSystems.exists(out):  # no rows written: no file, as JSONL
            shown = _convert(out, final, args.output_format, config, stats)
        return stats, shown
    except Exception as exc:  # the runner's job failed (a worker died, storage failed...)
        given = list(argv) if argv is not None else sys.argv[1:]
        again = " ".join(shlex.quote(a) for a in ["mmirage", "merge", *given])
        print(
            f"mmirage: error: the merge job failed: {describe_failure(exc)}\n"
            "Merge again with the same command (it writes the merged files anew, each "
            "whole or not at all; it sends nothing to the provider):\n"
            f"  {again}",
            file=sys.stderr,
        )
        return None
    finally:  # the job removes its temporary files once written; after a failure, here
        _remove_temp_dir(plan.temp_dir)
        if out != final and FileSystems.exists(out):
            FileSystems.delete([out])


def _print_outcome(args, config, sel, merge_plan, stats, errors, resume_command) -> int:  # noqa: ANN001
    """The lines after the totals (cancelled runs, usage, reuse, what is unfinished) and
    the exit status: 1 when the run is unfinished or a row failed, else 0."""
    from mmirage_beam.costs.report import usage_lines
    from mmirage_beam.reuse import merge_reuse_lines
    from mmirage_beam.run.selection import finish_pending_lines

    _print_cancelled(config, sel.linked, sys.stdout)
    for line in [*usage_lines(stats, config.processor), *merge_reuse_lines(stats)]:
        print(line)
    unfinished = merge_plan.unfinished
    never_rows = {e["source_index"] for e in errors if e["error_type"] == "never_submitted"}
    never_requests = sum(1 for e in errors if e["error_type"] == "never_submitted")
    if unfinished.finish_pending:
        print("\n".join(finish_pending_lines(unfinished.finish_pending, args.config)))
    if unfinished or never_requests:
        _print_unfinished(unfinished, never_requests, len(never_rows), resume_command)
        return 1
    failed = stats.get("rows_with_failures", 0) or stats.get("unknown_custom_ids", 0)
    return 1 if failed else 0


def _answers_path(base: str, runs) -> str:  # noqa: ANN001
    """Where the merge records its answers for later runs to reuse: named, like the
    merge record, by the oldest linked run (:mod:`mmirage_beam.reuse`)."""
    from mmirage_beam.reuse import answers_path

    return answers_path(base, runs[0])


def _limited(config, base, runs):  # noqa: ANN001, ANN202
    """A run made with ``mmirage run --limit N``: merge just its first N rows, and say so."""
    import dataclasses

    from mmirage_beam.run.fingerprint import read_run_record

    records = [r for r in (read_run_record(base, run) for run in runs) if r is not None]
    limits = {r.get("limit") for r in records}
    if len(limits) != 1 or None in limits:
        return config
    limit = int(limits.pop())
    print(
        f"mmirage merge: run {', '.join(runs)} was made with --limit {limit}: merging just "
        f"its first {limit:,} row(s) by source_index"
    )
    return dataclasses.replace(config, row_limit=limit)


def _print_cancelled(config, runs, stream) -> None:  # noqa: ANN001
    """Say which runs 'mmirage cancel' cancelled (their rows are marked cancelled)."""
    from mmirage_beam.run.cancel import cancelled_note
    from mmirage_beam.run.layout import receipts_base

    note = cancelled_note(
        receipts_base(config.processor.metadata_output_path, config.state_dir), runs
    )
    if note:
        print(note, file=stream)


def _record_merge(base, runs, out, stats, errors) -> None:  # noqa: ANN001
    """The merge record ``mmirage runs`` and ``mmirage run --wait`` read (best effort)."""
    from mmirage_beam.run.ledger import merge_record_path, write_merge_record

    try:
        write_merge_record(base, runs, out, stats, errors)
    except Exception as exc:  # the merged file is written; only the ledger is stale
        where = merge_record_path(base, runs[0])
        print(f"mmirage merge: warning: could not write {where}: {exc}", file=sys.stderr)


def _nothing_sent_run(config, run_ids):  # noqa: ANN001, ANN202
    """The :class:`~mmirage_beam.run.selection.RunSelection` of a finished run that built no
    request (every row invalid and skipped): the asked run, else the newest such run
    with an invalid-rows file; None when there is none."""
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.pipeline import invalid_rows_path
    from mmirage_beam.run.fingerprint import read_run_state
    from mmirage_beam.run.layout import receipts_base
    from mmirage_beam.run.selection import RunSelection

    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    if run_ids:
        if len(run_ids) > 1:
            return None
        found = [(0.0, run_ids[0])]
    else:
        pattern = invalid_rows_path(base, "*")
        found = [
            (m.last_updated_in_seconds, m.path[len(base) + len(".invalid_rows.") : -6])
            for m in FileSystems.match([pattern])[0].metadata_list
        ]
    for _, run in sorted(found, reverse=True):
        state = read_run_state(base, run) or {}
        if state.get("state") == "finished" and state.get("requests_total") == 0:
            if FileSystems.exists(invalid_rows_path(base, run)):
                print(
                    f"mmirage merge: run {run} sent nothing (every row was invalid and "
                    "skipped); its rows are written marked mmirage_skipped",
                    file=sys.stderr,
                )
                return RunSelection(run, [run], [], [], [], [], {}, [run])
    return None


def _convert(jsonl_path: str, final: str, fmt: str, config, stats) -> str:  # noqa: ANN001
    """The ordered JSONL merge -> ``final`` in ``fmt``, streamed; the same row count."""
    from mmirage_beam.io.formats import convert_merged_jsonl

    rows, as_json = convert_merged_jsonl(
        jsonl_path, final, fmt, config.outputs, config.output_schema
    )
    if rows != stats.get("rows_written", 0):  # pragma: no cover - a broken conversion
        raise RuntimeError(f"converted {rows} rows of {stats.get('rows_written', 0)}")
    for name in sorted(as_json):
        print(
            f"mmirage merge: column {name!r} holds values of different types; written as JSON text"
        )
    return f"{final} ({fmt})"


def _remove_temp_dir(folder) -> None:  # noqa: ANN001
    from mmirage_beam.io.fs import delete_folder

    if folder:
        try:
            delete_folder(folder)
        except Exception as exc:  # best effort: never hide the job's own outcome
            print(f"mmirage merge: warning: could not remove {folder}: {exc}", file=sys.stderr)


def _print_unfinished(unfinished, never_requests, never_rows, resume_command) -> None:  # noqa: ANN001
    """The run stopped before every chunk was submitted: never say it is complete."""
    who = f"run {', '.join(unfinished.runs)}" if unfinished.runs else "the merged run"
    lines = [f"UNFINISHED: {who} stopped before all its chunks were submitted:"]
    if never_requests and never_rows is None:  # check: counted from the run record
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
    print("\n".join(lines))


#: outcomes of requests the provider answered (check counts them done) whose answer is
#: not usable: merge's own verdicts (docs/commands.md, the outcome table)
UNUSABLE_ANSWERS = frozenset(
    {"refusal", "truncated", "content_filter", "empty", "invalid_json", "schema_mismatch"}
)


def _print_totals(plan, stats, errors, pending, allow_partial, shown) -> None:  # noqa: ANN001
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
    print("\n".join(lines))


main = guarded(_main)

if __name__ == "__main__":
    sys.exit(main())
