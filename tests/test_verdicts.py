"""Verdicts that can be trusted: check, merge and resubmit agree, across providers, through
transient failures, for unfinished runs and for text holding any Unicode.

Real submissions (``pipelines.submit.main``) through the real SDKs to the embedded fake,
then the real ``check`` / ``merge`` / ``resubmit`` drivers on the DirectRunner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.testing import fake_answer_text
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

PROMPT = "Answer concisely:\n"


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_bytes().split(b"\n") if x.strip()]


def _rows(n, markers=None):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:n]]
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
        cfg["processing_params"]["outputs"][0].update(
            output_type="JSON", output_schema={"value": "str"}
        )
        cfg["processing_params"]["output_schema"]["answer"] = "{{ answer.value }}"
    return write_config(tmp_path, cfg)


def _merge(tmp_path, cfg, *extra):
    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out), *extra])
    merged = _read_jsonl(out) if out.exists() else None
    errors_file = tmp_path / "merged.errors.jsonl"
    return code, merged, (_read_jsonl(errors_file) if errors_file.exists() else [])


def _check(capsys, *args):
    code = check_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- consistent verdicts ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["expire", "cancel"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_expired_or_cancelled_batch_is_a_failure_everywhere(
    tmp_path, capsys, provider_env, provider, kind
):
    """check (exit 1, advice), merge and ``resubmit --only all`` count the same failures,
    whichever the provider, and never from completed + failed == total."""
    fake = provider_env
    cfg = _setup(tmp_path, provider, fake, _rows(10))
    fake.script(**{f"{kind}_after_requests": 6})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 1, out + err
    assert " failed " in out
    assert "requests done 6, failed 4, total 10" in " ".join(out.split())
    assert "what this means:" in out and "mmirage resubmit --config" in out
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(merged) == 10
    assert len(errors) == 4 and all(e["retryable"] for e in errors)
    failed_ids = {e["custom_id"] for e in errors}
    assert resubmit_main(["--config", cfg, "--only", "all", "--new-run-id", "r2"]) == 0
    err = capsys.readouterr().err
    assert "re-sending 4 failed request(s) (all)" in err
    sent = {r["custom_id"] for r in fake.submitted_requests(provider)}
    assert failed_ids <= sent


def test_only_all_resends_invalid_json_like_merge_counts_it(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6, {2: "FAKE_ERROR:not_json", 4: "FAKE_ERROR:not_json"})
    cfg = _setup(tmp_path, "openai", fake, rows, json_output=True)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1
    assert sorted((e["source_index"], e["error_type"]) for e in errors) == [
        (2, "invalid_json"),
        (4, "invalid_json"),
    ]
    capsys.readouterr()
    # From the provider's results (no errors file): the same two, only under --only all.
    assert resubmit_main(["--config", cfg, "--run-id", "r1"]) == 0
    assert "nothing to resubmit" in capsys.readouterr().out
    assert resubmit_main(["--config", cfg, "--run-id", "r1", "--only", "all"]) == 0
    assert "re-sending 2 failed request(s) (all)" in capsys.readouterr().err


# -- transient lookups ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_transient_404_on_lookup_is_retried(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    rows = _rows(4)
    cfg = _setup(tmp_path, provider, fake, rows)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    endpoint = "batches_retrieve" if provider == "openai" else "messages_batches_retrieve"
    fake.script(leading_errors={"status": 404, "count": 2, "paths": [endpoint]})
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
    assert "result: ok (every batch completed)" in out
    fake.script(leading_errors={"status": 404, "count": 2, "paths": [endpoint]})
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 0 and errors == []
    assert [m["answer"] for m in merged] == [fake_answer_text(PROMPT + r["question"]) for r in rows]


def test_watch_keeps_watching_through_a_failed_lookup(tmp_path, capsys, provider_env):
    """More 404s than one lookup's retries: that poll fails, the watch goes on."""
    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(4))
    fake.script(processing_delay_secs=0.6)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    fake.script(leading_errors={"status": 404, "count": 7, "paths": ["batches_retrieve"]})
    code, out, err = _check(capsys, "--config", cfg, "--watch", "--interval", "0.3")
    assert code == 0, out + err
    polls = [ln for ln in out.split("\n") if ln.startswith("poll ")]
    assert "lookup_failed 1" in polls[0]
    assert len(polls) >= 2 and "completed 1" in polls[-1]
    assert "result: ok (every batch completed)" in out


# -- unfinished runs ------------------------------------------------------------------------


def test_merge_of_an_unfinished_run_says_so_and_exits_1(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=2)
    # The first create succeeds, every later one is refused: the run stops part-way.
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 400})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) != 0
    receipted = {r["custom_id"] for r in fake.submitted_requests("openai")}
    assert 0 < len(receipted) < 6
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1
    never = 6 - len(receipted)
    assert f"{never} row(s) ({never} request(s)) were never submitted" in out
    assert f"mmirage run --config {cfg} --run-id r1" in out
    assert [m["source_index"] for m in merged] == list(range(6))  # every row written
    marked = [m for m in merged if "mmirage_errors" in m]
    assert len(marked) == never
    assert {m["mmirage_errors"]["answer"]["type"] for m in marked} == {"never_submitted"}
    assert sum(1 for e in errors if e["error_type"] == "never_submitted") == never
    assert f"never_submitted:   {never}" in out
    # The resume sends the rest; then the merge is complete.
    fake.script(fail_batch_creates=None)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 0 and errors == [], out
    assert "UNFINISHED" not in out


def test_leftover_intent_means_unfinished(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(4)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=2)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    lines = _read_jsonl(receipt)
    # As if the run had stopped while submitting the second chunk.
    receipt.write_text(json.dumps(lines[0]) + "\n", encoding="utf-8")
    parts = Path(str(receipt) + ".parts")
    parts.mkdir()
    (parts / f"{lines[1]['chunk_id']}.intent").write_text(json.dumps(lines[1]), "utf-8")
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1
    assert "UNFINISHED: run r1" in out and "1 interrupted chunk submission(s)" in out
    assert "2 row(s) (2 request(s)) were never submitted" in out


# -- Unicode ------------------------------------------------------------------------------


def test_resubmit_from_an_errors_file_with_u2028(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(5, {1: "FAKE_ERROR:server_error", 3: "FAKE_ERROR:server_error"})
    cfg = _setup(tmp_path, "openai", fake, rows)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(errors) == 2
    # A provider message holding raw line separators, as real ones can.
    errors_file = tmp_path / "merged.errors.jsonl"
    for e in errors:
        e["message"] = "boom\u2028second line\u2029third\u0085fourth\x1cfifth"
    errors_file.write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors), encoding="utf-8"
    )
    assert len(errors_file.read_text(encoding="utf-8").splitlines()) > 2  # the old trap
    capsys.readouterr()
    code = resubmit_main(["--config", cfg, "--from", str(errors_file), "--new-run-id", "r2"])
    assert code == 0
    assert "re-sending 2 failed request(s) (retryable)" in capsys.readouterr().err


def test_receipts_with_u2028_are_read_whole(tmp_path, capsys, provider_env):
    from mmirage_beam.receipts import read_receipts

    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(3))
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    (r,) = _read_jsonl(receipt)
    r["model_params_snapshot"]["note"] = "a\u2028b\u0085c"
    receipt.write_text(json.dumps(r, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_receipts(str(receipt))[0]["model_params_snapshot"]["note"] == "a\u2028b\u0085c"
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
