"""``mmirage merge``'s decisions and report lines as data (run/merge_plans.py, the merge_*
functions of run/reports.py): inputs built directly, no Beam job, no provider."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from mmirage_beam.config import load_config
from mmirage_beam.errors import ConfigError
from mmirage_beam.run import merge_plans, reports
from mmirage_beam.run.discovery import NoReceiptsError
from mmirage_beam.run.fingerprint import new_run_record
from mmirage_beam.run.layout import RunLayout, receipts_base
from mmirage_beam.run.plans import Message
from mmirage_beam.run.selection import RunSelection, Unfinished
from mmirage_beam.run.store import RunStore
from tests.conftest import base_config, write_config


def write_run_record(base: str, run_id: str, fingerprint: str, **fields) -> None:
    RunStore(base, run_id).write_run_record(new_run_record(run_id, fingerprint, **fields))


@pytest.fixture
def config(tmp_path):
    return load_config(write_config(tmp_path, base_config(tmp_path)))


def _base(config) -> str:  # noqa: ANN001
    return receipts_base(config.processor.metadata_output_path, config.state_dir)


def _selection(run="r1", pending=(), lookup_failed=()) -> RunSelection:  # noqa: ANN001
    return RunSelection(run, [run], [], [], list(pending), list(lookup_failed), {}, [run])


def _unfinished(**given) -> Unfinished:  # noqa: ANN003
    fields = {"intents": [], "intent_requests": set(), "states": {}, "short_by": {}}
    return Unfinished(**{**fields, **given})


# -- run/reports.py: what merge says -------------------------------------------------


def test_totals_lines_count_failures_by_type_and_name_the_unusable_answers():
    plan = SimpleNamespace(num_partitions=2, errors_path="/o/m.errors.jsonl")
    stats = {"rows_written": 1234, "outputs_succeeded": 1200, "unknown_custom_ids": 3}
    stats["unreadable_result_lines"] = 1
    errors = [
        {"source_index": 1, "error_type": "refusal"},
        {"source_index": 2, "error_type": "refusal"},
        {"source_index": 3, "error_type": "expired"},
        {"source_index": None, "error_type": "unknown_custom_id"},  # no output: not counted
    ]
    lines = reports.merge_totals_lines(plan, stats, errors, [], False, "/o/m.jsonl")
    assert lines[:5] == [
        "rows written:        1,234",
        "outputs succeeded:   1,200",
        "outputs failed:      3",
        "  expired:           1",
        "  refusal:           2",
    ]
    assert lines[5].startswith("  of these, 2 unusable answer(s) (content_filter, empty, ")
    assert lines[5].endswith("the other 1 failed at the provider or here")
    assert "unknown custom_ids:  2" in lines  # the unreadable line is counted apart
    assert "unreadable lines:    1 (result lines without a recoverable custom_id)" in lines
    assert lines[-2:] == [
        "merged file:         /o/m.jsonl (2 partition(s))",
        "errors file:         /o/m.errors.jsonl",
    ]


def test_totals_lines_say_partial_only_when_allowed_and_no_errors_file_without_errors():
    plan = SimpleNamespace(num_partitions=1, errors_path="/o/m.errors.jsonl")
    pending = [object(), object()]
    lines = reports.merge_totals_lines(plan, {}, [], pending, True, "/o/m.parquet (parquet)")
    assert lines[-2] == "merged file:         /o/m.parquet (parquet) (1 partition(s))"
    assert lines[-1].startswith("PARTIAL: 2 batch(es) still running;")
    assert not any(line.startswith("errors file") for line in lines)
    assert not reports.merge_totals_lines(plan, {}, [], pending, False, "x")[-1].startswith(
        "PARTIAL"
    )


def test_unfinished_lines_name_the_runs_and_how_to_resume():
    unfinished = _unfinished(
        intents=["/m/b.intent.r1.chunk-0.json"],
        intent_requests={"a", "b"},
        states={"r2": {"state": "submitting"}},
        short_by={"r3": 4},
    )
    lines = reports.merge_unfinished_lines(unfinished, 0, 0, "mmirage run --run-id r1")
    assert lines[0].startswith("UNFINISHED: run ")
    assert lines[1:] == [
        "  2 request(s) were being submitted when it stopped and have no receipt",
        "  1 interrupted chunk submission(s) (intents)",
        "  run r2 is recorded as 'submitting', not finished",
        "  run r3 built 4 request(s) more than its receipts hold",
        "Resume it (only what has no receipt is sent), then merge again:\n"
        "  mmirage run --run-id r1",
    ]
    never = reports.merge_unfinished_lines(_unfinished(), 5, 3, "cmd")
    assert never[0] == "UNFINISHED: the merged run stopped before all its chunks were submitted:"
    assert never[1] == (
        "  3 row(s) (5 request(s)) were never submitted; they are in the merged file "
        "marked never_submitted"
    )


def test_outcome_lines_in_order_cancelled_finish_pending_unfinished(config):
    unfinished = _unfinished(finish_pending=["r0"], short_by={"r1": 2})
    errors = [
        {"source_index": 7, "error_type": "never_submitted"},
        {"source_index": 7, "error_type": "never_submitted"},
        {"source_index": 8, "error_type": "refusal"},
    ]
    lines = reports.merge_outcome_lines(
        "cancelled with 'mmirage cancel': run r1", {}, errors, config.processor, unfinished,
        "c.yaml", "RESUME",
    )  # fmt: skip
    assert lines[0] == "cancelled with 'mmirage cancel': run r1"
    assert lines[1].startswith("finish step pending: run r0:")
    assert lines[1].endswith("  mmirage run --config c.yaml --run-id r0")
    assert lines[2] == "UNFINISHED: run r1 stopped before all its chunks were submitted:"
    assert "1 row(s) (2 request(s)) were never submitted" in lines[3]
    assert lines[-1].endswith("\n  RESUME")
    # never-submitted rows of runs that did finish: new in the data, not "UNFINISHED"
    late = reports.merge_outcome_lines(
        None, {}, errors, config.processor, _unfinished(), "c.yaml", "RESUME", ["r2"]
    )
    assert late[0].startswith(
        "NOT SUBMITTED: 1 row(s) (2 request(s)) were not in the data when run r2 was submitted"
    )
    assert late[1] == "  mmirage run --config c.yaml" and "UNFINISHED" not in "".join(late)
    assert (
        reports.merge_outcome_lines(None, {}, [], config.processor, _unfinished(), "c", "R") == []
    )


def test_failure_message_quotes_the_command_to_merge_again():
    text = reports.merge_failure_message(RuntimeError("disk full"), ["--config", "a b.yaml"])
    assert text.startswith("mmirage: error: the merge job failed: ")
    assert "disk full" in text
    assert text.endswith("\n  mmirage merge --config 'a b.yaml'")


# -- run/merge_plans.py: what merge decides ---------------------------------------------


@pytest.mark.parametrize(
    "unfinished, stats, errors, code",
    [
        (_unfinished(), {}, [], 0),
        (_unfinished(), {"rows_with_failures": 1}, [], 1),
        (_unfinished(), {"unknown_custom_ids": 2}, [], 1),
        (_unfinished(), {}, [{"error_type": "never_submitted"}], 1),
        (_unfinished(short_by={"r1": 1}), {}, [], 1),
        (_unfinished(finish_pending=["r1"]), {}, [{"error_type": "refusal"}], 0),
    ],
)
def test_exit_code(unfinished, stats, errors, code):
    assert merge_plans.merge_exit_code(unfinished, stats, errors) == code


def test_results_to_fetch_counts_each_batch_once_and_only_fetched_batches():
    def entry(key, batch, n):  # noqa: ANN001, ANN202
        return SimpleNamespace(key=key, provider_batch_id=batch, request_count=n)

    receipts = [entry("k1", "b1", 10), entry("k1", "b1", 10), entry("k2", "b2", 5)]
    receipts.append(entry("k3", "b3", 7))  # not fetched (still pending)
    batches = [SimpleNamespace(provider_batch_id="b1"), SimpleNamespace(provider_batch_id="b2")]
    assert merge_plans.results_to_fetch(batches, receipts) == 15
    assert merge_plans.results_to_fetch([], receipts) == 0


def test_limit_of_a_limited_run_and_none_otherwise(config):
    base = _base(config)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    write_run_record(base, "r1", "fp", limit=50)
    limited, lines = merge_plans.merge_limit(config, base, ["r1"])
    assert limited.row_limit == 50
    assert lines == (
        "mmirage merge: run r1 was made with --limit 50: merging just its first 50 row(s) "
        "by source_index",
    )
    write_run_record(base, "r2", "fp")
    assert merge_plans.merge_limit(config, base, ["r1", "r2"]) == (config, ())
    assert merge_plans.merge_limit(config, base, ["r9"]) == (config, ())


def test_outputs_jsonl_in_place_parquet_beside_and_a_folder_refused(config, tmp_path):
    out = str(tmp_path / "m.jsonl")
    outputs = merge_plans.merge_outputs(out, "jsonl", config)
    assert (outputs.final, outputs.out) == (out, out)
    assert outputs.errors_path == str(tmp_path / "m.errors.jsonl")
    final = str(tmp_path / "m.parquet")
    parquet = merge_plans.merge_outputs(final, "parquet", config)
    assert parquet.final == final and parquet.out.startswith(final + ".merge-jsonl-")
    assert merge_plans.convert_output(parquet, config, {}) == (parquet.out, ())  # no rows
    open(parquet.out, "w").close()
    parquet.discard()
    assert not os.path.exists(parquet.out)
    with pytest.raises(ConfigError, match="--output-path"):
        merge_plans.merge_outputs(str(tmp_path), "jsonl", config)


def test_settings_carry_the_plan(config, tmp_path, monkeypatch):
    monkeypatch.setattr(merge_plans, "select_run", lambda *a: _selection())
    start = merge_plans.start_merge(
        config, "c.yaml", metadata_paths=[], run_ids=[], allow_partial=False, verify_source=False
    )
    assert start.blocked is None and start.messages == () and start.lines == ()
    assert start.resume_command == "mmirage run --config c.yaml --run-id r1"
    assert start.answers_path == _base(config) + ".answers.r1.jsonl"
    outputs = merge_plans.merge_outputs(str(tmp_path / "m.jsonl"), "jsonl", config)
    settings = merge_plans.merge_settings(start, outputs, 3)
    assert settings.num_partitions == 3 and settings.verify_source is False
    assert settings.unsubmitted_run is None  # never_submitted is told only when verifying
    assert settings.errors_path == outputs.errors_path
    assert settings.answers_path == start.answers_path


def test_a_pending_batch_blocks_the_merge_and_the_messages_say_which(config, monkeypatch):
    pending = [SimpleNamespace(provider_batch_id="batch_1", provider="openai")]
    pending[0].provider_status = "in_progress"
    monkeypatch.setattr(merge_plans, "select_run", lambda *a: _selection(pending=pending))
    start = merge_plans.start_merge(
        config, "c.yaml", metadata_paths=[], run_ids=[], allow_partial=False, verify_source=True
    )
    assert start.blocked == "pending"
    assert [m.text for m in start.messages] == [
        "mmirage: 1 batch(es) have not ended yet; nothing merged (use --allow-partial to "
        "merge what is available):",
        "  batch_1 (openai, in_progress)",
    ]
    allowed = merge_plans.start_merge(
        config, "c.yaml", metadata_paths=[], run_ids=[], allow_partial=True, verify_source=True
    )
    assert allowed.blocked is None


def test_a_failed_lookup_blocks_the_merge(config, monkeypatch):
    sel = _selection(lookup_failed=[object()])
    monkeypatch.setattr(merge_plans, "select_run", lambda *a: sel)
    start = merge_plans.start_merge(
        config, "c.yaml", metadata_paths=[], run_ids=[], allow_partial=True, verify_source=True
    )
    assert start.blocked == "lookup_failed"
    assert start.messages == (
        Message("error", "mmirage: error: some batches cannot be looked up; nothing merged."),
    )


def test_a_run_that_sent_nothing_is_merged_and_said(config, monkeypatch):
    def no_receipts(*_a):  # noqa: ANN002, ANN202
        raise NoReceiptsError("no receipts")

    monkeypatch.setattr(merge_plans, "select_run", no_receipts)
    asked = {"metadata_paths": [], "allow_partial": False, "verify_source": True}
    with pytest.raises(NoReceiptsError):
        merge_plans.start_merge(config, "c.yaml", run_ids=[], **asked)
    base = _base(config)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    write_run_record(base, "r5", "fp", finished=True, requests=0)
    with open(RunLayout(base, "r5").invalid_rows, "w") as f:
        f.write('{"source_index": 0, "reason": "bad"}\n')
    start = merge_plans.start_merge(config, "c.yaml", run_ids=[], **asked)
    assert start.selection.run == "r5" and start.blocked is None
    assert start.messages[0].text == (
        "mmirage merge: run r5 sent nothing (every row was invalid and skipped); its rows "
        "are written marked mmirage_skipped"
    )
    assert start.plan.invalid_rows_files == (RunLayout(base, "r5").invalid_rows,)
    assert merge_plans.nothing_sent_run(config, ["r5", "r6"]) is None


def test_best_effort_steps_return_their_warnings(monkeypatch):
    def fail(*_a):  # noqa: ANN002, ANN202
        raise OSError("denied")

    assert merge_plans.remove_temp_dir(None) == ()
    monkeypatch.setattr(merge_plans, "delete_folder", fail)
    assert merge_plans.remove_temp_dir("/t/x") == (
        Message("warning", "mmirage merge: warning: could not remove /t/x: denied"),
    )
    monkeypatch.setattr(merge_plans, "write_merge_record", fail)
    (warning,), record = merge_plans.record_merge("/m/b", ["r1"], "/o/m.jsonl", {}, [])
    assert record is None
    assert warning.text == "mmirage merge: warning: could not write /m/b.merge.r1.json: denied"
