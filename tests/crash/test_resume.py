"""Crash-safe, resumable, exactly-once submission: runs broken on purpose, then resumed
with --run-id, against the fake provider through the real SDKs."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import mmirage_beam.transforms.submit as submit_module
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

N_ROWS = 30


def _config(tmp_path, fake, provider):
    data = tmp_path / "rows.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=5)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return write_config(tmp_path, cfg)


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch):
    """Provider retries without real sleeping (the backoff itself is tested elsewhere)."""
    from mmirage_beam.providers.anthropic import adapter as anthropic_batch
    from mmirage_beam.providers.openai import adapter as openai_batch

    for cls in (openai_batch.OpenAIBatchAdapter, anthropic_batch.AnthropicBatchAdapter):
        for name in dir(cls):
            if name.startswith("RETRY_") and name.endswith("_SECS"):
                monkeypatch.setattr(cls, name, 0.0)


def _receipted_ids(tmp_path, run_id):
    path = tmp_path / "meta" / f"batch_metadata.text.{run_id}.jsonl"
    ids = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        ids.update(list(json.loads(line)["custom_id_to_source_index"]))
    return ids


EXPECTED = {f"answer-text-{i}" for i in range(N_ROWS)}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_permanent_create_failure_then_resume_submits_only_the_rest(
    tmp_path, capsys, provider_env, provider
):
    fake = provider_env
    cfg = _config(tmp_path, fake, provider)
    fake.script(fail_batch_creates={"nth": 3, "permanent": True, "status": 500})
    assert submit_main(["--config", cfg, "--run-id", "crash1"]) == 1
    err = capsys.readouterr().err
    assert f"mmirage run --config {cfg} --run-id crash1" in err
    before = _receipted_ids(tmp_path, "crash1")
    assert 0 < len(before) < N_ROWS  # the batches accepted before the failure are receipted
    assert set(fake.create_counts()) == set(before)

    fake.script(fail_batch_creates=None)
    assert submit_main(["--config", cfg, "--run-id", "crash1"]) == 0
    out = capsys.readouterr().out
    assert f"already submitted:   {len(before)} request(s)" in out
    after = _receipted_ids(tmp_path, "crash1")
    assert set(after) == EXPECTED and set(after.values()) == {1}
    assert set(fake.create_counts()) == EXPECTED
    assert set(fake.create_counts().values()) == {1}  # every custom_id exactly once

    # A second resume of a complete run is a no-op.
    batches = len(fake.batches(provider))
    assert submit_main(["--config", cfg, "--run-id", "crash1"]) == 0
    out = capsys.readouterr().out
    assert "nothing left to submit" in out
    assert len(fake.batches(provider)) == batches
    assert set(fake.create_counts().values()) == {1}


def _crash_before_receipt(monkeypatch, nth: int):
    """Make the nth receipt write fail: the batch exists at the provider, unreceipted."""
    real = submit_module.write_durably
    seen = {"receipts": 0}

    def flaky(path, data):
        if path.endswith(".json"):
            seen["receipts"] += 1
            if seen["receipts"] == nth:
                raise OSError("injected crash between create and receipt write")
        return real(path, data)

    monkeypatch.setattr(submit_module, "write_durably", flaky)
    return real


def test_crash_after_create_is_adopted_on_resume_openai(
    tmp_path, capsys, provider_env, monkeypatch
):
    fake = provider_env
    cfg = _config(tmp_path, fake, "openai")
    real = _crash_before_receipt(monkeypatch, nth=2)
    assert submit_main(["--config", cfg, "--run-id", "crash2"]) == 1
    intents = list((tmp_path / "meta").glob("*.parts/*.intent"))
    assert len(intents) == 1  # the interrupted chunk left its intent
    monkeypatch.setattr(submit_module, "write_durably", real)

    assert submit_main(["--config", cfg, "--run-id", "crash2"]) == 0
    captured = capsys.readouterr()
    assert "adopted 1 interrupted batch(es)" in captured.err
    assert set(fake.create_counts()) == EXPECTED
    assert set(fake.create_counts().values()) == {1}  # the adopted batch was not re-sent
    assert len(fake.batches("openai")) == N_ROWS // 5  # one batch per chunk, none twice
    assert set(_receipted_ids(tmp_path, "crash2")) == EXPECTED
    assert not list((tmp_path / "meta").glob("*.parts/*.intent"))


def test_crash_after_create_anthropic_window_is_documented(
    tmp_path, capsys, provider_env, monkeypatch
):
    """Anthropic batches carry no metadata: the interrupted chunk is sent again (the
    documented window), and the resume says so."""
    fake = provider_env
    cfg = _config(tmp_path, fake, "anthropic")
    real = _crash_before_receipt(monkeypatch, nth=2)
    assert submit_main(["--config", cfg, "--run-id", "crash3"]) == 1
    monkeypatch.setattr(submit_module, "write_durably", real)
    assert submit_main(["--config", cfg, "--run-id", "crash3"]) == 0
    err = capsys.readouterr().err
    assert "re-sending 1 interrupted chunk(s)" in err
    counts = fake.create_counts()
    assert set(counts) == EXPECTED
    assert sorted(Counter(counts.values()).items()) == [(1, N_ROWS - 5), (2, 5)]
