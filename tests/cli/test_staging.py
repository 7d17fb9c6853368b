"""Staged chunks (issue 10): the bytes staged are the bytes uploaded and hashed; the
staging folder is removed after a run (kept with --keep-staged); a disk too small for
it is refused before anything is read or sent."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from mmirage_beam.run.receipts import request_hash, request_line_hash
from pipelines.submit import main as run_main
from tests.conftest import base_config, write_config


def _receipts(tmp_path: Path, run_id: str) -> list[dict]:
    path = tmp_path / "meta" / f"batch_metadata.text.{run_id}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def _staged_files(tmp_path: Path, run_id: str) -> dict[bytes, Path]:
    folder = tmp_path / "meta" / f"batch_metadata.staged.{run_id}"
    return {
        p.read_bytes(): p
        for p in folder.rglob("*.jsonl")
        if not p.name.endswith(".meta.jsonl") and "chunks" in p.parts
    }


def test_openai_uploads_exactly_the_staged_file_and_its_hash_is_the_receipts(
    tmp_path, provider_env
):
    fake = provider_env
    cfg = base_config(
        tmp_path, base_url=fake.openai_base_url, model="gpt-4.1-mini", max_requests_per_chunk=300
    )
    path = write_config(tmp_path, cfg)
    assert run_main(["--config", path, "--run-id", "staged", "--keep-staged"]) == 0
    receipts = _receipts(tmp_path, "staged")
    assert len(receipts) == 5  # 1319 rows / 300
    staged = _staged_files(tmp_path, "staged")
    client = openai.OpenAI(api_key="sk-test-openai", base_url=fake.openai_base_url)
    inputs = {b["id"]: b["input_file_id"] for b in fake.batches("openai")}
    for receipt in receipts:
        uploaded = client.files.content(inputs[receipt["provider_batch_id"]]).read()
        assert uploaded in staged, f"chunk {receipt['chunk_id']}: upload is no staged file"
        lines = uploaded.splitlines(keepends=True)
        assert len(lines) == receipt["submitted_request_count"]
        assert request_hash(lines) == receipt["request_hash"]
        got = {json.loads(x)["custom_id"]: request_line_hash(x) for x in lines}
        assert got == receipt["request_hashes"]
        assert set(got) == set(receipt["custom_id_to_source_index"])


def test_anthropic_sends_the_staged_requests_in_order(tmp_path, provider_env):
    fake = provider_env
    cfg = base_config(
        tmp_path,
        provider="anthropic",
        base_url=fake.anthropic_base_url,
        model="claude-haiku-4-5",
        max_tokens=256,
        max_requests_per_chunk=700,
    )
    path = write_config(tmp_path, cfg)
    assert run_main(["--config", path, "--run-id", "anth", "--keep-staged"]) == 0
    receipts = _receipts(tmp_path, "anth")
    assert len(receipts) == 2
    staged = [json.loads(x) for data in _staged_files(tmp_path, "anth") for x in data.splitlines()]
    held = fake.submitted_requests("anthropic")
    by_batch: dict[str, list] = {}
    for h in held:
        by_batch.setdefault(h["batch_id"], []).append(h["request"])
    for receipt in receipts:
        sent = by_batch[receipt["provider_batch_id"]]
        assert [r["custom_id"] for r in sent] == list(receipt["custom_id_to_source_index"])
        lines = [json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in sent]
        assert request_hash(lines) == receipt["request_hash"]
    assert sorted(json.dumps(r, sort_keys=True) for r in staged) == sorted(
        json.dumps(h["request"], sort_keys=True) for h in held
    )


def test_the_staging_folder_is_removed_after_a_run(tmp_path):
    cfg = base_config(tmp_path, model="gpt-4.1-mini")
    path = write_config(tmp_path, cfg)
    export = str(tmp_path / "exp.jsonl")
    assert run_main(["--config", path, "--export-prompts", export, "--run-id", "d1"]) == 0
    assert not (tmp_path / "meta" / "batch_metadata.staged.d1").exists()
    assert (tmp_path / "exp.d1.jsonl").stat().st_size > 0
    assert not list((tmp_path / "meta").glob("*staged*"))


def test_a_disk_too_small_for_the_staged_chunks_is_refused_before_sending(
    tmp_path, provider_env, monkeypatch, capsys
):
    import shutil
    from collections import namedtuple

    fake = provider_env
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 4096, 4096))
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, model="gpt-4.1-mini")
    path = write_config(tmp_path, cfg)
    code = run_main(["--config", path, "--run-id", "full"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "not enough free disk for the staged chunks" in err and "--skip-space-check" in err
    assert fake.batches("openai") == []
    assert not (tmp_path / "shards").exists() or not list((tmp_path / "shards").rglob("*.jsonl"))


@pytest.mark.parametrize("flag", ["--skip-space-check"])
def test_the_space_check_can_be_skipped(tmp_path, monkeypatch, flag):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**9, 10**9 - 4096, 4096))
    path = write_config(tmp_path, base_config(tmp_path, model="gpt-4.1-mini"))
    export = str(tmp_path / "exp.jsonl")
    assert run_main(["--config", path, "--export-prompts", export, "--run-id", "s", flag]) == 0


def test_a_real_run_logs_its_token_estimate_before_its_first_batch(tmp_path, provider_env, caplog):
    import logging

    fake = provider_env
    cfg = base_config(
        tmp_path, base_url=fake.openai_base_url, model="gpt-4.1-mini", max_requests_per_chunk=400
    )
    caplog.set_level(logging.INFO, logger="mmirage_beam.transforms.submit")
    caplog.set_level(logging.INFO, logger="mmirage_beam.progress")  # the launcher tells it
    assert run_main(["--config", write_config(tmp_path, cfg), "--run-id", "est"]) == 0
    wanted = ("mmirage_beam.transforms.submit", "mmirage_beam.progress")
    messages = [r.getMessage() for r in caplog.records if r.name in wanted]
    told = [i for i, m in enumerate(messages) if m.startswith("before submitting:")]
    sent = [i for i, m in enumerate(messages) if m.startswith("submitted ")]
    assert len(told) == 1 and len(sent) == 4, messages
    assert told[0] < sent[0]
    assert "answer: 1,319 request(s), input tokens" in messages[told[0]]
    assert "(exact)" in messages[told[0]]


def test_the_canonical_form_encoded_from_the_dict_is_the_lines(tmp_path):
    """Issue 19: BuildRequests encodes the canonical JSON from the request dict; it must
    be what parsing the line gives, or the line is parsed (int keys sort otherwise)."""
    from mmirage_beam.request_hashes import str_keys_only as _str_keys_only
    from mmirage_beam.run.staging import StagedChunkWriter, canonical, read_meta

    req = {"b": [1, 2.5, {"é": "ü’\n"}], "a": None, "c": True, "d": 1e16, "e": -0.0}
    line = (json.dumps(req, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
    assert _str_keys_only(req)
    assert encode(req).encode("ascii") == canonical(line)
    assert not _str_keys_only({"logit_bias": {10: 1, 9: 2}})
    assert not _str_keys_only({"a": [(1, 2)]})
    written = []
    for given in (None, encode(req).encode("ascii")):
        writer = StagedChunkWriter(str(tmp_path / f"c{len(written)}.jsonl"))
        writer.write('id-"1"', 3, line, len(line), given)
        writer.write("id-2", 4, line, len(line) + 5, given)
        written.append((writer.close(), read_meta(writer.path)))
    assert written[0] == written[1]
    assert written[0][0] == request_hash([line, line])
    assert [m.line_hash for m in written[0][1]] == [request_line_hash(line)] * 2
    assert written[0][1][0].custom_id == 'id-"1"'
