"""mmirage resubmit: failed requests re-sent as a linked run, merged with the newest
successful result per custom_id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.testing import fake_answer_text
from pipelines.merge import main as merge_main
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

TRANSIENT = {1, 4, 12}  # server errors the first time only
INVALID = {3}  # invalid requests: never resubmitted as "retryable"
EXPIRED = {7, 8, 9, 17, 18, 19}  # each batch of 10 expires after 7 requests


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _setup(tmp_path, fake, provider):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]]
    for i in TRANSIENT:
        rows[i]["question"] += " FAKE_ERROR:transient"
    for i in INVALID:
        rows[i]["question"] += " FAKE_ERROR:invalid_request"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=10)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return rows, write_config(tmp_path, cfg)


def _merge(tmp_path, cfg):
    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out)])
    errors = tmp_path / "merged.errors.jsonl"
    return code, _read_jsonl(out), (_read_jsonl(errors) if errors.exists() else [])


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_resubmit_retryable_from_run(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    rows, cfg = _setup(tmp_path, fake, provider)
    fake.script(expire_after_requests=7)
    assert submit_main(["--config", cfg, "--run-id", "orig"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1
    failed = {e["source_index"] for e in errors}
    assert failed == TRANSIENT | INVALID | EXPIRED

    fake.script(expire_after_requests=None)
    before = len(fake.submitted_requests())
    assert resubmit_main(["--config", cfg, "--run-id", "orig", "--new-run-id", "retry1"]) == 0
    resent = {h["custom_id"] for h in fake.submitted_requests()[before:]}
    # Exactly the expired and server-error requests; never a succeeded or invalid one.
    assert resent == {f"answer-text-{i}" for i in TRANSIENT | EXPIRED}
    receipts = _read_jsonl(tmp_path / "meta" / "batch_metadata.text.retry1.jsonl")
    assert {r["parent_run_id"] for r in receipts} == {"orig"}

    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)  # the newest run, linked to its parent
    assert code == 1
    assert [m["source_index"] for m in merged] == list(range(20))
    for m in merged:
        i = m["source_index"]
        if i in INVALID:
            assert m["answer"] is None
            assert m["mmirage_errors"]["answer"]["type"] == "invalid_request_error"
        else:
            assert "mmirage_errors" not in m, m
            assert m["answer"] == fake_answer_text("Answer concisely:\n" + rows[i]["question"])
    assert [(e["source_index"], e["retryable"]) for e in errors] == [(3, False)]

    # Nothing retryable is left: a second resubmission sends nothing.
    before = len(fake.submitted_requests())
    assert resubmit_main(["--config", cfg]) == 0
    assert "nothing to resubmit" in capsys.readouterr().out
    assert len(fake.submitted_requests()) == before


def test_resubmit_from_errors_file_and_only_all(tmp_path, capsys, provider_env):
    fake = provider_env
    rows, cfg = _setup(tmp_path, fake, "openai")
    assert submit_main(["--config", cfg, "--run-id", "orig"]) == 0
    code, _, errors = _merge(tmp_path, cfg)
    assert {e["run_id"] for e in errors} == {"orig"}
    before = len(fake.submitted_requests())
    errors_file = str(tmp_path / "merged.errors.jsonl")
    assert resubmit_main(["--config", cfg, "--from", errors_file, "--only", "all"]) == 0
    resent = {h["custom_id"] for h in fake.submitted_requests()[before:]}
    assert resent == {f"answer-text-{i}" for i in TRANSIENT | INVALID}


def test_a_new_run_id_that_exists_is_refused_and_its_receipts_kept(tmp_path, capsys, provider_env):
    """Found by a newcomer (issue 36's check): repeating ``resubmit --new-run-id r1``
    picked r1 as the newest run, re-sent its failures as r1 itself (``parent run r1``)
    and rewrote r1's receipts without the batches the first resubmission paid for."""
    fake = provider_env
    _rows, cfg = _setup(tmp_path, fake, "openai")
    assert submit_main(["--config", cfg, "--run-id", "orig"]) == 0
    code, _merged, _errors = _merge(tmp_path, cfg)
    assert code == 1
    argv = ["--config", cfg, "--only", "all", "--new-run-id", "r1"]
    assert resubmit_main(argv) == 0
    receipts = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    first = receipts.read_bytes()
    sent = len(fake.submitted_requests())
    capsys.readouterr()
    assert resubmit_main(argv) == 2
    err = capsys.readouterr().err
    assert "--new-run-id: run r1 already exists" in err, err
    assert receipts.read_bytes() == first
    assert len(fake.submitted_requests()) == sent
