"""Tokens and cost end to end: real runs against the embedded fake provider through the
real openai and anthropic SDKs (enqueued-token limit, ``--exact-tokens`` with
``messages.count_tokens``, the usage ``check`` shows and ``merge`` prices)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mmirage_beam.costs.tokens import TokenCounter
from mmirage_beam.providers.tokens import count_text
from mmirage_beam.testing.fake_provider.answers import count_words
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

PROMPT = "Answer concisely:\n"
PER_CHUNK = 4


def _similar_rows(n: int) -> list[dict]:
    """``n`` real GSM8K rows of about the same length (so chunk sizes are predictable)."""
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: (len(r["question"].split()), r["question"]))
    mid = len(rows) // 2
    return rows[mid : mid + n]


def _config(tmp_path: Path, provider: str, base_url: str, rows: list[dict], **proc) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(tmp_path, provider, base_url=base_url, **proc)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return write_config(tmp_path, cfg)


def _request_tokens(question: str) -> int:
    """Our count of one plain OpenAI request (gpt-4.1-mini: o200k_base)."""
    return 3 + count_text("user", "o200k_base") + count_text(PROMPT + question, "o200k_base") + 3


def test_enqueued_token_limit_waits_instead_of_failing(tmp_path, capsys, provider_env, monkeypatch):
    """The fake fails a batch that takes the model's enqueued tokens over its limit only
    after accepting it (OpenAI's behaviour); with max_enqueued_tokens the run waits for
    earlier batches to finish and every batch completes."""
    fake = provider_env
    monkeypatch.setenv("MMIRAGE_TOKEN_BUDGET_POLL_SECS", "0.1")
    rows = _similar_rows(3 * PER_CHUNK)
    ours = sorted(_request_tokens(r["question"]) for r in rows)
    words = sorted(count_words(PROMPT + r["question"]) for r in rows)
    limit = sum(ours[-PER_CHUNK:])  # our count of the largest possible chunk
    # Any one chunk fits under the limit, any two exceed it in the fake's own count.
    assert sum(words[: 2 * PER_CHUNK]) > limit >= sum(words[-PER_CHUNK:])
    # Batches stay unfinished long enough for the next ones to be created (they validate
    # for a third of the delay, then a batch over the limit shows as failed).
    fake.script(processing_delay_secs=9, enqueued_token_limit=limit)

    # Without the setting: batches are accepted, then fail with token_limit_exceeded.
    cfg = _config(tmp_path / "a", "openai", fake.openai_base_url, rows, max_requests_per_chunk=4)
    assert submit_main(["--config", cfg, "--run-id", "nolimit"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 30
    while any(b["status"] == "validating" for b in fake.batches("openai")):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    failed = [b for b in fake.batches("openai") if b["status"] == "failed"]
    assert failed and all(b["errors"]["data"][0]["code"] == "token_limit_exceeded" for b in failed)
    fake.reset()
    fake.script(processing_delay_secs=1.0, enqueued_token_limit=limit)

    # With it: the run waits; no batch fails.
    cfg = _config(
        tmp_path / "b",
        "openai",
        fake.openai_base_url,
        rows,
        max_requests_per_chunk=PER_CHUNK,
        max_enqueued_tokens=limit,
    )
    assert submit_main(["--config", cfg, "--run-id", "limited"]) == 0
    out = capsys.readouterr().out
    batches = fake.batches("openai")
    assert len(batches) == 3
    assert all(b["status"] != "failed" for b in batches), [b.get("errors") for b in batches]
    receipts = [
        json.loads(x)
        for x in (tmp_path / "b" / "meta" / "batch_metadata.text.limited.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()
    ]
    assert sorted(r["input_tokens_estimate"] for r in receipts) == sorted(
        sum(_request_tokens(rows[i]["question"]) for i in r["custom_id_to_source_index"].values())
        for r in receipts
    )
    assert "exceed max_enqueued_tokens" in out


def test_anthropic_exact_tokens_through_the_sdk(tmp_path, capsys, provider_env):
    """``--exact-tokens`` counts with messages.count_tokens (the fake's, through the SDK),
    and its numbers are what the provider then reports as used."""
    fake = provider_env
    rows = _similar_rows(6)
    cfg = _config(tmp_path, "anthropic", fake.anthropic_base_url, rows, max_tokens=64)
    counter = TokenCounter("anthropic", exact_tokens=True, base_url=fake.anthropic_base_url)
    params = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT + rows[0]["question"]}],
    }
    assert counter.count({"custom_id": "x", "params": params}).exact
    assert counter.count({"custom_id": "x", "params": params}).input_tokens == count_words(
        PROMPT + rows[0]["question"]
    )
    assert fake.call_counts()["messages_count_tokens"] == 2

    expected = sum(count_words(PROMPT + r["question"]) for r in rows)
    args = ["--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl"), "--exact-tokens"]
    assert submit_main(args) == 0
    out = capsys.readouterr().out
    assert f"answer: 6 request(s), input tokens {expected:,} (exact)" in out
    assert "output tokens at most 384" in out  # 6 x max_tokens 64
    assert "batch price claude-haiku-4-5: $0.5 in / $2.5 out" in out
    # Without the flag, the same dry run is a labelled estimate.
    assert submit_main(["--config", cfg, "--export-prompts", str(tmp_path / "q.jsonl")]) == 0
    assert "(estimate)" in capsys.readouterr().out

    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    merged = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg, "--output-path", str(merged)]) == 0
    out = capsys.readouterr().out
    assert f"answer: input tokens {expected:,}, output tokens" in out
    # Anthropic batch objects report no usage: check has none to show.
    assert check_main(["--config", cfg]) == 0
    assert "used so far" not in capsys.readouterr().out


def test_openai_check_and_merge_report_usage_and_cost(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _similar_rows(8)
    cfg = _config(tmp_path, "openai", fake.openai_base_url, rows, max_tokens=100)
    assert submit_main(["--config", cfg, "--run-id", "u1"]) == 0
    out = capsys.readouterr().out
    ours = sum(_request_tokens(r["question"]) for r in rows)
    assert f"answer: 8 request(s), input tokens {ours:,} (exact), output tokens at most 800" in out
    assert check_main(["--config", cfg]) == 0
    out = capsys.readouterr().out
    used_in = sum(b["usage"]["input_tokens"] for b in fake.batches("openai"))
    assert used_in > 0 and f"{used_in:,} input + " in out and "used so far" in out

    merged_path = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg, "--output-path", str(merged_path)]) == 0
    out = capsys.readouterr().out
    merged = [json.loads(x) for x in merged_path.read_text(encoding="utf-8").splitlines()]
    tin = sum(m["input_tokens"] for m in merged)
    tout = sum(m["output_tokens"] for m in merged)
    cost = (tin * 0.2 + tout * 0.8) / 1_000_000
    assert "tokens used (reported by the provider) and cost:" in out
    assert f"answer: input tokens {tin:,}, output tokens {tout:,}, cost ${cost:,.4f}" in out


@pytest.mark.parametrize("model", ["acme-unpriced-1"])
def test_unknown_model_says_price_unknown(tmp_path, capsys, model):
    cfg = _config(tmp_path, "openai", "", _similar_rows(2), model=model)
    assert submit_main(["--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl")]) == 0
    out = capsys.readouterr().out
    assert f"price unknown for '{model}'" in out and "(estimate)" in out


def test_exact_tokens_needs_the_key_before_anything_is_read(tmp_path, capsys):
    cfg = _config(tmp_path, "anthropic", "", _similar_rows(2))
    args = ["--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl"), "--exact-tokens"]
    assert submit_main(args) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err
    assert not list(tmp_path.glob("p.*.jsonl"))
