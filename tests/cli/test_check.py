"""``mmirage check`` against the embedded fake provider, through the real SDKs over HTTP.

Batches come from real submissions (``pipelines.submit.main``) of the first 40 GSM8K rows
in chunks of 10 requests, so every run has 4 batches; stdout is captured, so the plain
text form of the report is what is asserted.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from mmirage_beam import check as status
from mmirage_beam.providers.base import BatchProgress, BatchSubmissionResult
from pipelines.check import main as check_main
from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, TEST_DATA, base_config, write_config

#: Lookups fail here on purpose (404s, unknown batch ids): retried as often, without the
#: real backoff's seconds of sleep (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fast_provider_retries")

N_ROWS = 40
PER_CHUNK = 10
ORIGINAL = TEST_DATA / "mmirage_original"


def _config(tmp_path: Path, fake, provider: str = "openai", name: str = "config.yaml") -> str:
    data = tmp_path / "gsm8k40.jsonl"
    if not data.exists():
        lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]
        data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=PER_CHUNK)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return write_config(tmp_path, cfg, name)


def _submit(capsys, cfg_path: str, run_id: str) -> Path:
    code = run_main(["--config", cfg_path, "--run-id", run_id])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    receipt = Path(cfg_path).parent / "meta" / f"batch_metadata.text.{run_id}.jsonl"
    assert receipt.exists()
    return receipt


def _check(capsys, *args: str) -> tuple[int, str, str]:
    code = check_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _receipt_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _rows(out: str) -> dict[str, dict[str, str]]:
    """The per-batch lines of the plain report, keyed by provider batch id."""
    names = ("run", "modality", "provider", "batch", "chunk", "status", "provider_status")
    names += ("done", "failed", "total", "age", "detail")
    rows = {}
    for line in out.splitlines():
        cells = line.split(None, len(names) - 1)
        if len(cells) >= len(names) - 1 and cells[1] in ("text", "multimodal", "?"):
            row = dict(zip(names, cells))
            row.setdefault("detail", "")
            rows[row["batch"]] = row
    return rows


def _squeeze(text: str) -> str:
    """``text`` with runs of spaces collapsed (columns are padded to their width)."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def _batch_order(out: str) -> list[str]:
    return list(_rows(out))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_running_batches_are_not_a_failure(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    fake.script(processing_delay_secs=600)
    cfg = _config(tmp_path, fake, provider)
    _submit(capsys, cfg, "run1")
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
    rows = _rows(out)
    assert set(rows) == {b["id"] for b in fake.batches(provider)} and len(rows) == 4
    waiting = "validating" if provider == "openai" else "in_progress"
    for row in rows.values():
        assert (row["run"], row["provider"], row["status"]) == ("run1", provider, "in_progress")
        assert row["provider_status"] == waiting
        assert row["total"] == str(PER_CHUNK) and row["age"].endswith("s")
    summary = _squeeze(out)
    assert f"{provider} 4 batch(es): in_progress 4; requests done 0, failed 0, total 40" in summary
    assert "run run1 4 batch(es): in_progress 4" in summary
    assert "still running" in out
    assert "result: still running (4 batch(es) not finished; nothing failed so far)" in out
    # --watch --timeout stops watching without calling running batches a failure, nor
    # done (issue 38: it exited 0): its own exit status, 75.
    code, out, err = _check(
        capsys, "--config", cfg, "--watch", "--interval", "0.1", "--timeout", "0.25"
    )
    assert code == 75, out + err
    assert "poll 1 " in out and "stopped watching after 0.25s" in out
    assert "4 batch(es) not finished yet" in out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_completed_batches(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    cfg = _config(tmp_path, fake, provider)
    _submit(capsys, cfg, "done1")
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
    rows = _rows(out)
    assert len(rows) == 4
    for row in rows.values():
        assert row["status"] == "completed"
        assert row["provider_status"] == ("completed" if provider == "openai" else "ended")
        assert row["done"] == row["total"] == str(PER_CHUNK) and row["failed"] == "0"
        if provider == "anthropic":
            assert row["detail"] == "succeeded 10"
    assert "4 batch(es): completed 4; requests done 40, failed 0, total 40" in out
    assert "result: ok (every batch completed and the provider reports no failed request" in out
    assert "sk-test-openai" not in out + err and "sk-ant-test" not in out + err


def test_failed_batch_token_limit_exceeded(tmp_path, capsys, provider_env):
    fake = provider_env
    fake.script(token_limit_exceeded=True)
    cfg = _config(tmp_path, fake, "openai")
    _submit(capsys, cfg, "tle")
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 1, out + err
    rows = _rows(out)
    assert len(rows) == 4
    for row in rows.values():
        assert (row["status"], row["provider_status"]) == ("failed", "failed")
        assert row["detail"].startswith("token_limit_exceeded: Enqueued token limit reached")
    assert "openai 4 batch(es): failed 4" in _squeeze(out)
    assert "result: FAILED (4 batch(es) failed at the provider, 0 lookup failure(s)" in out


def test_unresolvable_batch_id_does_not_hide_the_others(tmp_path, capsys, provider_env):
    fake = provider_env
    cfg = _config(tmp_path, fake, "openai")
    receipt = _submit(capsys, cfg, "lost")
    lines = _receipt_lines(receipt)
    lines[1]["provider_batch_id"] = "batch_doesnotexist"
    receipt.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 1, out + err
    rows = _rows(out)
    assert len(rows) == 4
    lost = rows.pop("batch_doesnotexist")
    assert lost["status"] == "lookup_failed"
    # A 404 on a receipted batch is retried once (it may be a replica that has not seen
    # it yet), then final, and said for what it is (issue 38: not "expired", not 6 tries).
    assert lost["detail"].startswith(
        "lookup failed: NotFoundError (HTTP 404: not found on this endpoint or account)"
    )
    assert "No batch found" in lost["detail"]
    assert fake.call_counts()["batches_retrieve"] == 3 + 2  # the lost one: 2 attempts
    assert lost["done"] == lost["failed"] == "-" and lost["total"] == str(PER_CHUNK)
    assert [r["status"] for r in rows.values()] == ["completed"] * 3
    assert "4 batch(es): completed 3, lookup_failed 1; requests done 30, failed 0, total 40" in out
    assert "result: FAILED (0 batch(es) failed at the provider, 1 lookup failure(s)" in out


def test_receipts_of_the_original_mmirage_tool(tmp_path, capsys, provider_env):
    """(a) the shipped receipts: batch ids unknown to the fake, run id from the name."""
    cfg = _config(tmp_path, provider_env, "openai")
    real = ORIGINAL / "batch_metadata.text.3aa41d.jsonl"
    dry = ORIGINAL / "batch_metadata.dry-run.text.3aa41d.jsonl"
    args = ["--config", cfg, "--metadata-path", str(real), "--metadata-path", str(dry)]
    code, out, err = _check(capsys, *args)
    assert code == 1, out + err
    rows = _rows(out)
    assert sorted(rows) == ["batch_orig00001", "batch_orig00002", "batch_orig00003"]
    for row in rows.values():
        assert (row["run"], row["modality"], row["status"]) == ("3aa41d", "text", "lookup_failed")
        assert "(HTTP 404: not found on this endpoint or account)" in row["detail"]
    assert [r["total"] for r in rows.values()] == ["10", "10", "5"]
    assert f"skipped dry-run receipts (nothing was submitted): {dry}" in out
    assert "run 3aa41d 3 batch(es): lookup_failed 3" in _squeeze(out)
    assert "3 lookup failure(s)" in out
    # Found by discovery too, next to a config whose metadata_output_path points there.
    meta = tmp_path / "meta"
    meta.mkdir(exist_ok=True)
    shutil.copy(real, meta)
    shutil.copy(dry, meta)
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 1 and sorted(_rows(out)) == sorted(rows)
    assert "skipped dry-run receipts" in out and dry.name in out
    # --run-id: only that run's dry-run receipts are named (issue 38: every run's were)
    shutil.copy(dry, meta / "batch_metadata.dry-run.text.other1.jsonl")
    code, out, err = _check(capsys, "--config", cfg, "--run-id", "3aa41d")
    assert code == 1 and dry.name in out and "other1" not in out, out


def test_our_receipts_rewritten_to_the_original_format(tmp_path, capsys, provider_env):
    """(b) a real submission's receipts without run_id / output_name / modality."""
    fake = provider_env
    cfg = _config(tmp_path, fake, "openai")
    receipt = _submit(capsys, cfg, "f00d42")
    lines = _receipt_lines(receipt)
    for line in lines:
        for key in ("run_id", "output_name", "modality"):
            del line[key]
    receipt.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    code, out, err = _check(capsys, "--config", cfg, "--metadata-path", str(receipt))
    assert code == 0, out + err
    rows = _rows(out)
    assert set(rows) == {b["id"] for b in fake.batches("openai")}
    for row in rows.values():
        assert (row["run"], row["modality"], row["status"]) == ("f00d42", "text", "completed")
        assert row["done"] == row["total"] == "10"


def test_parts_folder_of_an_unconsolidated_run(tmp_path, capsys, provider_env):
    fake = provider_env
    cfg = _config(tmp_path, fake, "anthropic")
    receipt = _submit(capsys, cfg, "parts")
    parts = Path(str(receipt) + ".parts")
    parts.mkdir()
    for line in _receipt_lines(receipt):
        (parts / f"{line['chunk_id']}.json").write_text(json.dumps(line), encoding="utf-8")
    receipt.unlink()
    for args in (["--metadata-path", str(parts)], []):
        code, out, err = _check(capsys, "--config", cfg, *args)
        assert code == 0, out + err
        assert len(_rows(out)) == 4 and "completed 4" in out


def test_run_id_filter_and_newest_run_first(tmp_path, capsys, provider_env, monkeypatch):
    """Two runs of different providers in one metadata folder; the older run's provider
    is not the config's, so its adapter uses the registered config's defaults (its base
    URL from the SDK's environment variable)."""
    fake = provider_env
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.anthropic_base_url)
    older_cfg = _config(tmp_path, fake, "anthropic", "older.yaml")
    older = _submit(capsys, older_cfg, "older")
    past = time.time() - 3600
    os.utime(older, (past, past))
    cfg = _config(tmp_path, fake, "openai")
    _submit(capsys, cfg, "newer")
    newer_ids = [b["id"] for b in fake.batches("openai")]
    older_ids = [b["id"] for b in fake.batches("anthropic")]

    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err  # the newest run only (issue 38), the other one named
    assert set(_batch_order(out)) == set(newer_ids)
    assert "also found run(s) older" in err
    newer = tmp_path / "meta" / "batch_metadata.text.newer.jsonl"
    code, out, err = _check(
        capsys, "--config", cfg, "--metadata-path", str(newer), "--metadata-path", str(older)
    )
    assert code == 0, out + err
    order = _batch_order(out)
    assert set(order[:4]) == set(newer_ids) and set(order[4:]) == set(older_ids)
    summary = _squeeze(out)
    assert summary.index("run newer 4 batch(es)") < summary.index("run older 4 batch(es)")
    assert "anthropic 4 batch(es): completed 4" in summary
    assert "openai 4 batch(es): completed 4" in summary

    code, out, err = _check(capsys, "--config", cfg, "--run-id", "older")
    assert code == 0, out + err
    rows = _rows(out)
    assert set(rows) == set(older_ids)
    assert {r["provider"] for r in rows.values()} == {"anthropic"}
    assert "run newer" not in out

    code, out, err = _check(capsys, "--config", cfg, "--run-id", "nosuchrun")
    assert code == 2
    assert "no receipt of run 'nosuchrun' found" in err
    assert "batch_metadata.text.nosuchrun.jsonl" in err


def test_no_receipts_lists_the_patterns_tried(tmp_path, capsys, provider_env):
    cfg = _config(tmp_path, provider_env, "openai")
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 2 and out == ""
    base = tmp_path / "meta" / "batch_metadata"
    assert "no receipt found (from processors[0].metadata_output_path)" in err
    for pattern in (f"{base}.text.*.jsonl", f"{base}.multimodal.*.jsonl.parts"):
        assert pattern in err
    code, out, err = _check(
        capsys, "--config", cfg, "--metadata-path", str(tmp_path / "nope.text.x.jsonl")
    )
    assert code == 2 and "--metadata-path" in err and "nope.text.x.jsonl" in err


def test_missing_key_fails_before_any_lookup(tmp_path, capsys, provider_env, monkeypatch):
    fake = provider_env
    cfg = _config(tmp_path, fake, "openai")
    _submit(capsys, cfg, "nokey")
    monkeypatch.delenv("OPENAI_API_KEY")
    before = fake.call_counts().get("batches_retrieve", 0)
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 2
    assert "OPENAI_API_KEY" in err and out == ""
    assert fake.call_counts().get("batches_retrieve", 0) == before


def test_watch_until_every_batch_is_terminal(tmp_path, capsys, provider_env):
    fake = provider_env
    # Batches end 4 s after their creation: on a loaded machine the submission itself
    # took more than 1.5 s, so the first poll already saw them all completed.
    fake.script(processing_delay_secs=4)
    cfg = _config(tmp_path, fake, "openai")
    _submit(capsys, cfg, "watch")
    code, out, err = _check(capsys, "--config", cfg, "--watch", "--interval", "0.2")
    assert code == 0, out + err
    polls = [ln for ln in out.splitlines() if ln.startswith("poll ")]
    assert len(polls) >= 2
    assert polls[0].startswith("poll 1 (") and "in_progress" in polls[0]
    assert polls[-1].endswith("batches 4: completed 4")
    assert "requests done 40/40, failed 0" in polls[-1]
    rows = _rows(out)
    assert [r["status"] for r in rows.values()] == ["completed"] * 4
    assert "result: ok (every batch completed and the provider reports no failed request" in out


def test_rich_report_and_progress_render(tmp_path):
    """The terminal forms: rich tables and the live progress bar (no network)."""
    from rich.console import Console

    entry = status.ReceiptEntry(
        "openai", "batch_[x]", "r1", "text", "c1", "answer", 10, time.time() - 90, "/r", {}
    )
    statuses = [
        status.BatchStatus(entry, "failed", BatchProgress("failed", 0, 0, 0, None, "boom [1]")),
        status.BatchStatus(entry, status.LOOKUP_FAILED, None, "NotFoundError (HTTP 404): x"),
    ]
    receipts = status.ReceiptSet((entry,), ("/r",), ("/r.dry-run.text.r1.jsonl",))
    report = status.build_report(receipts, statuses)
    console = Console(file=io.StringIO(), force_terminal=True, width=250)
    status.print_rich_report(report, console)
    text = console.file.getvalue()
    assert "batch_[x]" in text and "boom [1]" in text and "lookup_failed" in text
    with status.RichWatchDisplay(Console(file=io.StringIO(), force_terminal=True)) as display:
        display.update(statuses, 1, 0.5)
    assert report.exit_code == 1


def test_describe_batch_default_reads_common_fields():
    from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter

    raw = {"id": "b", "status": "running", "created_at": "2026-01-01T00:00:00Z"}
    raw["request_counts"] = {"total": 5, "completed": 2, "failed": 1}
    result = BatchSubmissionResult("b", "in_progress", raw)
    default = super(OpenAIBatchAdapter, OpenAIBatchAdapter()).describe_batch(result)
    assert default == BatchProgress("running", 2, 1, 5, 1767225600.0, "")


def test_check_judges_the_newest_run_not_every_run(tmp_path, capsys, provider_env):
    """Issue 38: an old failed run made every later check FAILED. ``check`` judges the run
    it is asked about, by default the newest (as ``merge`` does), and names the others."""
    fake = provider_env
    fake.script(token_limit_exceeded=True)
    cfg = _config(tmp_path, fake, "openai")
    older = _submit(capsys, cfg, "older")
    past = time.time() - 3600
    os.utime(older, (past, past))
    fake.script(token_limit_exceeded=None)
    _submit(capsys, cfg, "newer")

    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
    assert "run newer 4 batch(es): completed 4" in _squeeze(out) and "run older" not in out
    assert "checking run newer (the newest); also found run(s) older: pass --run-id" in err
    code, out, err = _check(capsys, "--config", cfg, "--run-id", "older")
    assert code == 1, out + err
    assert "result: FAILED (4 batch(es) failed at the provider" in out


def test_reused_receipts_count_their_own_requests(tmp_path, capsys, provider_env):
    """Issue 38: a run whose answers were reused showed the earlier batch's failures (of
    requests it sent again); a reused receipt counts the answers it reuses, all done."""
    fake = provider_env
    cfg_path = _config(tmp_path, fake, "openai")
    data = tmp_path / "gsm8k40.jsonl"
    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()]
    rows[0]["question"] += " FAKE_ERROR:invalid_request"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    from pipelines.merge import main as merge_main

    _submit(capsys, cfg_path, "first")
    merge_main(["--config", cfg_path, "--output-path", str(tmp_path / "m1.jsonl")])
    capsys.readouterr()
    code, out, err = _check(capsys, "--config", cfg_path)
    assert "requests done 39, failed 1, total 40" in out, out + err
    _submit(capsys, cfg_path, "second")  # the 39 answers reused, the failed one sent again
    code, out, err = _check(capsys, "--config", cfg_path)
    assert code == 1, out + err  # the request sent again fails again
    table = _rows(out)
    reused = [r for r in table.values() if r["detail"].startswith("reused:")]
    assert reused and all(r["failed"] == "0" for r in reused), out
    assert sum(int(r["done"]) for r in reused) == 39
    assert "run second 5 batch(es)" in _squeeze(out) and "run first 4" not in _squeeze(out)
    assert "requests done 39, failed 1, total 40" in _squeeze(out)


def test_every_lookup_404_stops_the_watch_at_once_and_quietly(
    tmp_path, capsys, provider_env, caplog
):
    """Issue 38: against the wrong account, every lookup retried its 404 six times, each
    retry a warning, and ``check --watch`` polled on for minutes. A 404 is final after one
    retry, logged at debug only, and a poll where every lookup answered 404 ends the
    watch with what it means."""
    fake = provider_env
    cfg = _config(tmp_path, fake, "openai")
    receipt = _submit(capsys, cfg, "elsewhere")
    lines = _receipt_lines(receipt)
    for i, line in enumerate(lines):
        line["provider_batch_id"] = f"batch_of_another_account_{i}"
    receipt.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    before = fake.call_counts().get("batches_retrieve", 0)
    caplog.set_level("WARNING")
    code, out, err = _check(capsys, "--config", cfg, "--watch", "--interval", "3600")
    assert code == 1, out + err
    assert fake.call_counts()["batches_retrieve"] - before == 4 * 2  # one retry each
    polls = [ln for ln in out.splitlines() if ln.startswith("poll ")]
    assert len(polls) == 1 and "lookup_failed 4" in polls[0]  # no second poll (1 h away)
    assert out.count("not found on this endpoint or account") == 4
    assert "retrying" not in caplog.text + err  # no retry warning per lookup
    assert "does not know some batches" in out  # the advice: key and base_url
