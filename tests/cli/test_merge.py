"""mmirage merge end to end: real submissions to the fake provider through the real SDKs,
then the merge pipeline on DirectRunner, with every scripted failure mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.testing import fake_answer_json, fake_answer_text
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, IMAGES, base_config, write_config

PROMPT = "Answer concisely:\n{{ question }}"
FACTS_SCHEMA = {"numbers": "list", "count": {"type": "int", "min": 0, "max": 100}}


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _rows(n, markers=None):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:n]]
    for i, marker in (markers or {}).items():
        rows[i]["question"] += f" {marker}"
    return rows


def _setup(tmp_path, provider, fake, rows, json_output=False, **proc):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, **proc)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    if json_output:
        cfg["processing_params"]["outputs"].append(
            {
                "name": "facts",
                "type": "batch_api",
                "output_type": "JSON",
                "prompt": "Facts of: {{ question }}",
                "output_schema": FACTS_SCHEMA,
            }
        )
        cfg["processing_params"]["output_schema"]["count"] = "{{ facts.count }}"
    return write_config(tmp_path, cfg)


def _submit(cfg_path, run_id="r1"):
    assert submit_main(["--config", cfg_path, "--run-id", run_id]) == 0


def _merge(tmp_path, cfg_path, *extra):
    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg_path, "--output-path", str(out), *extra])
    merged = _read_jsonl(out) if out.exists() else None
    errors_file = tmp_path / "merged.errors.jsonl"
    errors = _read_jsonl(errors_file) if errors_file.exists() else []
    return code, merged, errors


def _json_schema():
    from mmirage_beam.config.schema import json_schema_for

    return json_schema_for(FACTS_SCHEMA)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_merge_text_plain_and_json(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    rows = _rows(60)
    cfg = _setup(tmp_path, provider, fake, rows, json_output=True, max_requests_per_chunk=25)
    fake.script(shuffle_results=True)
    _submit(cfg)
    code, merged, errors = _merge(tmp_path, cfg, "--partitions", "3")
    out = capsys.readouterr().out
    assert code == 0, out
    assert errors == []
    assert [m["source_index"] for m in merged] == list(range(60))
    for i, m in enumerate(merged):
        assert m["question"] == rows[i]["question"]
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + rows[i]["question"])
        facts = fake_answer_json("Facts of: " + rows[i]["question"], _json_schema())
        assert m["count"] == facts["count"] and isinstance(m["count"], int)
        assert m["input_tokens"] > 0 and m["output_tokens"] > 0
        assert "mmirage_errors" not in m
    total_in = sum(m["input_tokens"] for m in merged)
    assert "rows written:        60" in out
    assert f"input tokens:        {total_in:,}" in out
    assert "outputs succeeded:   120" in out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_merge_images(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    keep = [i for i in range(10) if provider == "anthropic" or i != 8]
    lines = (IMAGES / "vision_questions.jsonl").read_text(encoding="utf-8").splitlines()
    data = tmp_path / "vision.jsonl"
    data.write_text("\n".join(lines[i] for i in keep) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_chunk_bytes=2 * 1024 * 1024)
    cfg["loading_params"]["datasets"] = [
        {"path": str(data), "type": "JSONL", "output_dir": "", "image_base_path": str(IMAGES)}
    ]
    cfg["processing_params"]["inputs"].append({"name": "image", "key": "image", "type": "image"})
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }}"
    cfg["processing_params"]["output_schema"]["image"] = "{{ image }}"
    path = write_config(tmp_path, cfg)
    _submit(path)
    code, merged, errors = _merge(tmp_path, path)
    assert code == 0 and errors == []
    src = [json.loads(lines[i]) for i in keep]
    assert [m["source_index"] for m in merged] == list(range(len(keep)))
    for m, row in zip(merged, src):
        assert m["image"] == row["image"]
        assert m["answer"] == fake_answer_text(row["question"])


def test_output_and_error_files_and_retryable(tmp_path, capsys, provider_env):
    fake = provider_env
    markers = {
        3: "FAKE_ERROR:server_error",
        7: "FAKE_ERROR:invalid_request",
        9: "FAKE_ERROR:timeout",
    }
    rows = _rows(12, markers)
    cfg = _setup(tmp_path, "openai", fake, rows)
    _submit(cfg)
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1
    assert [m["source_index"] for m in merged] == list(range(12))  # nothing dropped
    for i, m in enumerate(merged):
        if i in markers:
            assert m["answer"] is None
            assert set(m["mmirage_errors"]) == {"answer"}
        else:
            assert m["answer"] == fake_answer_text("Answer concisely:\n" + rows[i]["question"])
    by_index = {e["source_index"]: e for e in errors}
    assert [e["source_index"] for e in errors] == sorted(markers)  # the errors file is ordered
    assert set(by_index) == set(markers)
    assert by_index[3]["retryable"] is True and by_index[3]["status_code"] == 500
    assert (
        by_index[7]["retryable"] is False and by_index[7]["error_type"] == "invalid_request_error"
    )
    assert by_index[9]["error_type"] == "request_timeout" and by_index[9]["retryable"] is True
    assert all(e["custom_id"] == f"answer-text-{e['source_index']}" for e in errors)
    assert "outputs failed:      3" in out


def test_all_requests_failed_no_output_file(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(5, {i: "FAKE_ERROR:invalid_request" for i in range(5)})
    cfg = _setup(tmp_path, "openai", fake, rows)
    _submit(cfg)
    assert all(b["output_file_id"] is None for b in fake.batches("openai"))
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(merged) == 5 and len(errors) == 5
    assert all(m["answer"] is None and m["mmirage_errors"]["answer"]["type"] for m in merged)


# An expired or cancelled batch keeps its partial results: in test_verdicts.py
# (test_expired_or_cancelled_batch_is_a_failure_everywhere, which also checks check and
# resubmit on the same run).


def test_anthropic_errored_results(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6, {1: "FAKE_ERROR:server_error", 2: "FAKE_ERROR:invalid_request"})
    cfg = _setup(tmp_path, "anthropic", fake, rows)
    _submit(cfg)
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(merged) == 6
    kinds = {e["source_index"]: (e["error_type"], e["retryable"]) for e in errors}
    assert kinds == {1: ("api_error", True), 2: ("invalid_request_error", False)}


def test_unknown_custom_id_is_reported_not_guessed(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(5)
    cfg = _setup(tmp_path, "openai", fake, rows)
    fake.script(unknown_custom_id=True)
    _submit(cfg)
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1 and len(merged) == 5
    assert all("mmirage_errors" not in m for m in merged)
    assert [e["error_type"] for e in errors] == ["unknown_custom_id"]
    assert errors[0]["custom_id"] == "fake_unknown_custom_id"
    assert "unknown custom_ids:  1" in out


def test_json_fence_tolerated_and_non_json_kept_raw(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(4, {1: "FAKE_FENCE", 2: "FAKE_ERROR:not_json"})
    cfg = _setup(tmp_path, "openai", fake, rows, json_output=True)
    _submit(cfg)
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1
    assert (
        merged[1]["count"]
        == fake_answer_json("Facts of: " + rows[1]["question"], _json_schema())["count"]
    )
    assert "mmirage_errors" not in merged[1]
    assert merged[2]["mmirage_errors"]["facts"]["type"] == "invalid_json"
    assert merged[2]["mmirage_errors"]["facts"]["raw_text"]  # the raw answer is kept
    assert merged[2]["count"] is None  # "{{ facts.count }}" renders null, never crashes
    assert [e["error_type"] for e in errors] == ["invalid_json"]


def test_refuses_while_running_and_allow_partial(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6)
    cfg = _setup(tmp_path, "openai", fake, rows)
    fake.script(processing_delay_secs=3600)
    _submit(cfg)
    code, merged, _ = _merge(tmp_path, cfg)
    err = capsys.readouterr().err
    assert code == 1 and merged is None
    assert "have not ended yet" in err and fake.batches("openai")[0]["id"] in err
    code, merged, errors = _merge(tmp_path, cfg, "--allow-partial")
    out = capsys.readouterr().out
    assert code == 1 and len(merged) == 6
    assert all(m["mmirage_errors"]["answer"]["type"] == "pending" for m in merged)
    assert "PARTIAL" in out


def _edit_row_5(tmp_path, rows):
    rows[5]["question"] = "A different question entirely?"
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )


def test_changed_source_marks_only_the_changed_row_and_resubmit_fixes_it(
    tmp_path, capsys, provider_env
):
    from pipelines.resubmit import main as resubmit_main

    fake = provider_env
    rows = _rows(8)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=4)
    _submit(cfg)
    _edit_row_5(tmp_path, rows)  # the dataset is edited after submission
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1 and len(merged) == 8
    for m in merged:
        if m["source_index"] == 5:
            # the configured output_schema shape: fields from the row, the answer null
            assert set(m) >= {"question", "answer", "source_index", "mmirage_errors"}
            assert m["question"] == "A different question entirely?"
            assert m["answer"] is None
            assert m["mmirage_errors"]["answer"]["type"] == "source_changed"
        else:  # rows 4, 6, 7 shared its chunk: their own requests did not change
            assert "mmirage_errors" not in m
            assert m["answer"] == fake_answer_text(
                "Answer concisely:\n" + rows[m["source_index"]]["question"]
            )
    assert "source changed rows: 1" in out
    assert [e["source_index"] for e in errors] == [5]
    _old_receipts_mark_the_chunk(tmp_path, cfg, rows, capsys)
    # The README's advice: resubmit --from the errors file re-sends the changed row.
    errors_file = str(tmp_path / "merged.errors.jsonl")
    assert resubmit_main(["--config", cfg, "--from", errors_file, "--new-run-id", "r2"]) == 0
    assert "re-sending 1 failed request(s)" in capsys.readouterr().err
    code, merged, errors = _merge(tmp_path, cfg, "--run-id", "r1")
    assert code == 0 and errors == [], capsys.readouterr().out
    assert merged[5]["answer"] == fake_answer_text(
        "Answer concisely:\nA different question entirely?"
    )


def _old_receipts_mark_the_chunk(tmp_path, cfg, rows, capsys):
    """Receipts written before per-request hashes are checked per chunk: the same run
    (the source already edited), its receipts rewritten without ``request_hashes`` and
    merged to another file; then the receipts are put back as they were. (Was a test of
    its own, test_changed_source_with_old_receipts_marks_the_chunk, submitting the same
    8 rows again.)"""
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    as_written = receipt.read_bytes()
    old = [json.loads(x) for x in as_written.split(b"\n") if x.strip()]
    for r in old:
        assert len(r.pop("request_hashes")) == 4
    receipt.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    out_path = tmp_path / "old" / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out_path)])
    out = capsys.readouterr().out
    receipt.write_bytes(as_written)
    merged = _read_jsonl(out_path)
    assert code == 1 and len(merged) == 8
    for m in merged:
        if m["source_index"] >= 4:  # rows 4..7 were one chunk: none is joined
            assert m["answer"] is None
            assert m["mmirage_errors"]["answer"]["type"] == "source_changed"
            assert "question" in m  # still the output_schema shape
        else:
            assert m["answer"] == fake_answer_text(
                "Answer concisely:\n" + rows[m["source_index"]]["question"]
            )
    assert "source changed rows: 4" in out


def test_no_receipts_is_exit_2(tmp_path, capsys, provider_env):
    cfg = _setup(tmp_path, "openai", provider_env, _rows(2))
    code, merged, _ = _merge(tmp_path, cfg)
    assert code == 2 and merged is None


def test_rows_skipped_at_submission_are_written_marked(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(7)
    rows[2]["question"] = None  # invalid: the input is null
    cfg = _setup(tmp_path, "openai", fake, rows)
    data = tmp_path / "rows.jsonl"
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[6] = "{this line is not JSON"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert submit_main(["--config", cfg, "--run-id", "r1", "--skip-invalid-rows"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 0 and errors == []
    assert [m["source_index"] for m in merged] == list(range(7))  # nothing dropped
    skipped = merged[2]
    assert skipped["answer"] is None and "question" in skipped["mmirage_skipped"]
    assert merged[6]["answer"] is None and "not valid JSON" in merged[6]["mmirage_skipped"]
    assert all("mmirage_skipped" not in m for i, m in enumerate(merged) if i not in (2, 6))
    assert "skipped at submit:   2" in out


def test_shards_submitted_as_runs_merge_into_one_file(tmp_path, capsys, provider_env):
    import yaml

    fake = provider_env
    rows = _rows(9)
    cfg_path = _setup(tmp_path, "openai", fake, rows)
    cfg = yaml.safe_load(Path(cfg_path).read_text())
    cfg["loading_params"]["num_shards"] = 3
    for shard in range(3):
        cfg["loading_params"]["shard_id"] = shard
        shard_cfg = write_config(tmp_path, cfg, f"shard{shard}.yaml")
        assert submit_main(["--config", shard_cfg, "--run-id", f"s{shard}"]) == 0
    held = sorted(int(h["custom_id"].rsplit("-", 1)[1]) for h in fake.submitted_requests())
    assert held == list(range(9))  # source_index is global across shards
    runs = [a for s in range(3) for a in ("--run-id", f"s{s}")]
    code, merged, errors = _merge(tmp_path, cfg_path, *runs, "--partitions", "2")
    assert code == 0 and errors == []
    assert [m["source_index"] for m in merged] == list(range(9))
    for m in merged:
        question = rows[m["source_index"]]["question"]
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + question)


def test_the_launcher_holds_no_per_request_map_and_rebuilds_count_no_tokens(
    tmp_path, capsys, provider_env
):
    """Issue 10 (merge flat in N): the receipts select_run keeps, and the batches it
    plans, carry no custom_id map or request hashes (each worker reads its receipt back
    from where it is stored); the merge is still complete. Issue 11: the merge's rebuild
    of the requests, which only compares bytes, counts no tokens, so with
    ``exact_tokens: true`` it never calls Anthropic's messages.count_tokens."""
    from mmirage_beam.config import load_config
    from mmirage_beam.run.receipts import read_receipts
    from mmirage_beam.run.selection import select_run

    fake = provider_env
    rows = _rows(40)
    cfg = _setup(tmp_path, "anthropic", fake, rows, max_requests_per_chunk=15, exact_tokens=True)
    _submit(cfg)
    counted_at_submit = fake.call_counts().get("messages_count_tokens", 0)
    assert counted_at_submit > 0  # exact counting was really on

    sel = select_run(load_config(cfg), [], None, "merge")
    assert len(sel.entries) == 3 and len(sel.batches) == 3
    on_disk = {r["chunk_id"]: r for f in {e.path for e in sel.entries} for r in read_receipts(f)}
    for e, b in zip(sel.entries, sel.batches):
        assert "custom_id_to_source_index" not in e.receipt
        assert "request_hashes" not in e.receipt
        assert b.custom_id_to_source_index is None
        full = on_disk[e.chunk_id]
        assert e.full_receipt() == full
        assert b.mapping() == full["custom_id_to_source_index"]
        indices = list(full["custom_id_to_source_index"].values())
        assert e.source_index_range == (min(indices), max(indices))
        assert e.mapped_count == len(indices) and e.has_request_hashes

    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 0, capsys.readouterr()
    assert errors == [] and [m["question"] for m in merged] == [r["question"] for r in rows]
    assert fake.call_counts().get("messages_count_tokens", 0) == counted_at_submit


def test_a_receipt_file_rewritten_under_the_merge_is_an_error_not_a_wrong_join(
    tmp_path, provider_env
):
    """A worker reads a batch's map at the location the launcher noted; if the receipt
    file changed in between, the batch id no longer matches and it says so."""
    from mmirage_beam.config import load_config
    from mmirage_beam.run.selection import select_run

    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(30), max_requests_per_chunk=15)
    _submit(cfg)
    sel = select_run(load_config(cfg), [], None, "merge")
    first, second = sel.batches
    path = Path(sel.entries[0].path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(reversed(lines)), encoding="utf-8")  # same bytes, moved
    with pytest.raises(ValueError, match=first.provider_batch_id):
        first.mapping()


def test_a_receipt_without_its_map_is_refused_by_name():
    """MergeRows takes select_run's ReceiptEntry objects or whole receipt dicts; an
    entry's ``.receipt`` alone (the per-request maps left out) is refused with the fix,
    not a KeyError deep in the graph."""
    from mmirage_beam.transforms.merge_rows import _held_receipt

    with pytest.raises(ValueError, match="ReceiptEntry objects of collect.select_run"):
        _held_receipt({"chunk_id": "answer-chunk-000001", "run_id": "r1"})
    held = _held_receipt({"chunk_id": "c", "run_id": "r1", "custom_id_to_source_index": {"a": 7}})
    assert held.index_range == (7, 7) and not held.has_request_hashes
