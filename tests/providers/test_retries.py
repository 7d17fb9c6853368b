"""Retries of provider calls: the backoff helper on its own (instant, sleeps recorded),
the adapters through the real SDKs over HTTP against the embedded fake, and whole
``mmirage run`` submissions that absorb 429/5xx, adopt an OpenAI batch whose create
answered an error, show Anthropic's documented duplicate window, and stop cleanly (exit
1, receipts kept) when retries are exhausted."""

from __future__ import annotations

import email.utils
import json
import logging
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

from mmirage_beam.config import config_from_dict
from mmirage_beam.errors import MmirageError
from mmirage_beam.providers.anthropic.adapter import AnthropicBatchAdapter
from mmirage_beam.providers.base import BatchSubmissionAdapter
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from mmirage_beam.providers.retrying import (
    ProviderRetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe_error,
    make_retry_filter,
    retry_after_secs,
)
from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

N_ROWS = 30
OPENAI_FILTER = make_retry_filter((openai.APIConnectionError,), (openai.APIStatusError,))
ANTHROPIC_FILTER = make_retry_filter((anthropic.APIConnectionError,), (anthropic.APIStatusError,))


# -- helpers ------------------------------------------------------------------------------


def _status_error(sdk, status: int, headers=None, body=None):
    """A real SDK status error, as the SDK builds it from an HTTP answer."""
    request = httpx2.Request("POST", "http://127.0.0.1/v1/batches")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    if body is None:
        body = {"message": f"status {status}", "type": "server_error"}
    return sdk.APIStatusError(f"Error code: {status}", response=response, body=body)


def _failing(errors, result="ok"):
    """A call that raises ``errors`` in turn, then returns ``result``; counts calls."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    fn.calls = calls
    return fn


def _run(fn, sleeps, retry_filter=OPENAI_FILTER, **policy):
    return call_with_retries(
        fn,
        what="OpenAI batches.create (chunk c1)",
        retry_filter=retry_filter,
        policy=RetryPolicy(**policy),
        sleep=sleeps.append,
        rand=lambda: 1.0,
    )


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _small_config(tmp_path, provider, fake, **processor):
    """The first N_ROWS rows of GSM8K, 10 requests per chunk unless told otherwise."""
    data = tmp_path / "gsm8k30.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    processor.setdefault("base_url", base_url)
    processor.setdefault("max_requests_per_chunk", 10)
    cfg = base_config(tmp_path, provider, **processor)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return cfg


def _receipts(tmp_path, run_id):
    return _read_jsonl(tmp_path / "meta" / f"batch_metadata.text.{run_id}.jsonl")


def _check_receipts(receipts, fake, provider, run_id):
    """Every receipt names a real batch of the fake holding exactly its custom_ids."""
    held = fake.submitted_requests(provider)
    batch_ids = {b["id"] for b in fake.batches(provider)}
    for r in receipts:
        assert r["provider"] == provider and r["run_id"] == run_id
        assert r["provider_batch_id"] in batch_ids
        in_batch = {h["custom_id"] for h in held if h["batch_id"] == r["provider_batch_id"]}
        assert in_batch == set(r["custom_id_to_source_index"])
        for cid, idx in r["custom_id_to_source_index"].items():
            assert cid == f"answer-text-{idx}"


@pytest.fixture
def fast_retries(monkeypatch):
    """Tiny backoff for every adapter (the fake's retry-after-ms is 10 ms anyway)."""
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_INITIAL_DELAY_SECS", 0.001)
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_MAX_DELAY_SECS", 0.004)


def _adapter(cls, tmp_path, fake, run_id="run1", **processor):
    provider = "openai" if cls is OpenAIBatchAdapter else "anthropic"
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    processor.setdefault("base_url", base_url)
    config = config_from_dict(base_config(tmp_path, provider, **processor)).processor
    adapter = cls({"api_key": "sk-test-key"})
    adapter.run_id = run_id
    adapter.setup(config)
    return adapter, config


def _lines(adapter, config, ids):
    return [
        adapter.serialize_request(
            adapter.build_request(
                f"answer-text-{i}", {"messages": [{"role": "user", "content": f"q{i}"}]}, config
            )
        )
        for i in ids
    ]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the helper alone ---------------------------------------------------------------------


def test_retry_after_ms_is_slept_exactly():
    sleeps: list[float] = []
    err = _status_error(openai, 429, {"retry-after-ms": "250", "retry-after": "1"})
    fn = _failing([err, err, err])
    assert _run(fn, sleeps) == "ok"
    assert sleeps == [0.25, 0.25, 0.25]  # retry-after-ms wins over retry-after
    assert len(fn.calls) == 4


def test_retry_after_seconds_http_date_and_cap():
    sleeps: list[float] = []
    date = email.utils.formatdate(timeval=None, usegmt=True)  # now: wait ~0 s
    errors = [
        _status_error(openai, 503, {"retry-after": "2"}),
        _status_error(openai, 503, {"retry-after": date}),
        _status_error(openai, 503, {"retry-after-ms": "900000"}),  # 15 min: capped
        _status_error(openai, 503, {"retry-after-ms": "junk"}),  # unreadable: backoff
    ]
    assert _run(_failing(errors), sleeps, max_retry_after_secs=120.0) == "ok"
    assert sleeps[0] == 2.0
    assert 0.0 <= sleeps[1] <= 1.0
    assert sleeps[2] == 120.0
    assert sleeps[3] == 0.5 * 2**3  # the 4th retry's full-jitter ceiling (rand = 1.0)
    assert retry_after_secs(_status_error(openai, 429)) is None


def test_full_jitter_backoff_is_capped():
    sleeps: list[float] = []
    err = openai.APIConnectionError(request=httpx2.Request("GET", "http://127.0.0.1/"))
    assert _run(_failing([err] * 7), sleeps, max_attempts=8) == "ok"
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    policy = RetryPolicy()
    assert policy.backoff_secs(1, lambda: 0.5) == 0.25  # uniform(0, ceiling)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
@pytest.mark.parametrize("sdk", [openai, anthropic])
def test_retryable_statuses(sdk, status):
    retry_filter = OPENAI_FILTER if sdk is openai else ANTHROPIC_FILTER
    assert retry_filter(_status_error(sdk, status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_non_retryable_statuses_raise_at_once(status):
    sleeps: list[float] = []
    err = _status_error(anthropic, status)
    fn = _failing([err])
    with pytest.raises(anthropic.APIStatusError) as info:
        _run(fn, sleeps, retry_filter=ANTHROPIC_FILTER)
    assert info.value is err and sleeps == [] and len(fn.calls) == 1


def test_filter_per_service_and_x_should_retry():
    assert not OPENAI_FILTER(_status_error(anthropic, 500))  # another SDK's error
    assert not OPENAI_FILTER(ValueError("bug"))
    assert OPENAI_FILTER(ConnectionRefusedError())
    assert OPENAI_FILTER(httpx2.ReadError("stream cut"))
    assert not OPENAI_FILTER(_status_error(openai, 500, {"x-should-retry": "false"}))
    assert OPENAI_FILTER(_status_error(openai, 400, {"x-should-retry": "true"}))


def test_the_retry_filter_never_imports_an_http_client():
    """CI once failed a concurrent submission with "partially initialized module 'httpx'
    has no attribute 'TimeoutException'": the filter imported legacy ``httpx`` on one
    submit thread while the SDK on another looked it up in ``sys.modules``. In a fresh
    interpreter, judging a connection error must leave ``httpx`` unloaded."""
    code = (
        "import sys, openai\n"
        "from mmirage_beam.providers.retrying import make_retry_filter\n"
        "f = make_retry_filter((openai.APIConnectionError,), (openai.APIStatusError,))\n"
        "assert f(ConnectionResetError()) and not f(ValueError())\n"
        "print('httpx' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_exhausted_error_names_call_attempts_and_last_status(caplog):
    sleeps: list[float] = []
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    err = _status_error(anthropic, 529, {"retry-after-ms": "5"}, body=body)
    with caplog.at_level(logging.WARNING, logger="mmirage_beam"):
        with pytest.raises(ProviderRetriesExhausted) as info:
            _run(_failing([err] * 9), sleeps, retry_filter=ANTHROPIC_FILTER, max_attempts=4)
    exc = info.value
    assert str(exc) == (
        "OpenAI batches.create (chunk c1) failed after 4 attempts; "
        "last error: HTTP 529 overloaded_error: Overloaded"
    )
    assert isinstance(exc, MmirageError) and exc.exit_code == 1
    assert (exc.call, exc.attempts, exc.status_code) == ("OpenAI batches.create (chunk c1)", 4, 529)
    assert exc.__cause__ is err and sleeps == [0.005] * 3
    # Beam re-creates a worker error with the step name appended; pickle round-trips it.
    beam_copy = type(exc)(exc.args[0] + " [while running 'Submit']")
    assert "after 4 attempts" in str(beam_copy)
    assert pickle.loads(pickle.dumps(exc)).attempts == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "attempt 1 of 4" in warnings[0].getMessage()
    assert "HTTP 529 overloaded_error" in warnings[0].getMessage()


def test_describe_error_connection():
    err = openai.APIConnectionError(request=httpx2.Request("GET", "http://127.0.0.1/"))
    assert describe_error(err) == "APIConnectionError: Connection error."


# -- adapters against the fake, through the real SDKs -------------------------------------


def test_clients_have_sdk_retries_off(tmp_path, provider_env):
    for cls in (OpenAIBatchAdapter, AnthropicBatchAdapter):
        adapter, _ = _adapter(cls, tmp_path, provider_env)
        assert adapter._client.max_retries == 0
        adapter.teardown()


def test_adapter_sleeps_what_the_fake_asks(tmp_path, provider_env, monkeypatch):
    fake = provider_env
    sleeps: list[float] = []
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_SLEEP", sleeps.append)
    adapter, config = _adapter(OpenAIBatchAdapter, tmp_path, fake)
    batch = adapter.submit_chunk_lines("c0", _lines(adapter, config, range(3)), config)
    fake.script(
        leading_errors={
            "status": 429,
            "count": 3,
            "retry_after_ms": 37,
            "paths": ["batches_retrieve"],
        }
    )
    assert adapter.check_batch_status(batch.batch_id, config).status == "completed"
    assert sleeps == [0.037] * 3
    assert fake.call_counts()["batches_retrieve"] == 4
    # Result downloads retry too: the batch read and each file read.
    fake.script(leading_errors={"status": 503, "count": 1, "paths": ["files_content"]})
    assert len(list(adapter.retrieve_results(batch.batch_id, config))) == 3  # streamed
    adapter.teardown()


def test_anthropic_results_download_retried(tmp_path, provider_env, fast_retries):
    fake = provider_env
    adapter, config = _adapter(AnthropicBatchAdapter, tmp_path, fake)
    batch = adapter.submit_chunk_lines("c0", _lines(adapter, config, range(4)), config)
    fake.script(leading_errors={"status": 529, "count": 2, "paths": ["messages_batches_results"]})
    results = list(adapter.retrieve_results(batch.batch_id, config))  # streamed
    assert sorted(r.custom_id for r in results) == [f"answer-text-{i}" for i in range(4)]
    assert fake.call_counts()["messages_batches_results"] == 3
    adapter.teardown()


def test_find_batch_matches_run_and_chunk_across_pages(tmp_path, provider_env, monkeypatch):
    fake = provider_env
    monkeypatch.setattr(OpenAIBatchAdapter, "FIND_BATCH_PAGE_SIZE", 2)
    adapter, config = _adapter(OpenAIBatchAdapter, tmp_path, fake, run_id="runA")
    first = adapter.submit_chunk_lines("c0", _lines(adapter, config, [0]), config)
    adapter.run_id = "runB"
    for i in range(1, 6):  # five newer batches of another run, one with the same chunk id
        adapter.submit_chunk_lines(f"c{i % 5}", _lines(adapter, config, [i]), config)
    before = fake.call_counts().get("batches_list", 0)
    found = adapter.find_batch("runA", "c0")
    assert found is not None and found.batch_id == first.batch_id
    assert found.to_json()["metadata"] == {"mmirage_chunk_id": "c0", "mmirage_run_id": "runA"}
    assert found.created_at == first.created_at and first.input_file_id
    assert fake.call_counts()["batches_list"] - before == 3  # 6 batches, 2 per page
    assert adapter.find_batch("runA", "c9") is None
    # created_after bounds the paging: batches older than it are not looked at.
    before = fake.call_counts()["batches_list"]
    future = fake.batches("openai")[-1]["created_at"] + 3600
    assert adapter.find_batch("runA", "c0", created_after=future) is None
    assert fake.call_counts()["batches_list"] - before == 1
    adapter.teardown()
    anthropic_adapter, _ = _adapter(AnthropicBatchAdapter, tmp_path, fake)
    assert anthropic_adapter.find_batch("runA", "c0") is None  # no batch metadata


def test_connection_refused_is_retried_then_a_clear_error(tmp_path, monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_SLEEP", sleeps.append)
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_MAX_ATTEMPTS", 4)
    closed = f"http://127.0.0.1:{_closed_port()}"
    for cls, base_url, call in [
        (OpenAIBatchAdapter, closed + "/v1", "OpenAI files.create (chunk c0)"),
        (AnthropicBatchAdapter, closed, "Anthropic messages.batches.create (chunk c0)"),
    ]:
        sleeps.clear()
        config = config_from_dict(
            base_config(
                tmp_path, "openai" if cls is OpenAIBatchAdapter else "anthropic", base_url=base_url
            )
        ).processor
        adapter = cls({"api_key": "sk-test-key"})
        adapter.run_id = "r"
        adapter.setup(config)
        with pytest.raises(ProviderRetriesExhausted) as info:
            adapter.submit_chunk_lines("c0", _lines(adapter, config, [0]), config)
        assert str(info.value) == (
            f"{call} failed after 4 attempts; last error: APIConnectionError: Connection error."
        )
        assert len(sleeps) == 3 and all(0 <= s <= 0.5 * 2**i for i, s in enumerate(sleeps))
        assert "sk-test-key" not in str(info.value)
        adapter.teardown()


# -- whole runs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "provider, path, status",
    [
        ("openai", "files_create", 429),
        ("openai", "batches_create", 429),
        ("anthropic", "messages_batches_create", 429),
        ("openai", "batches_create", 500),
        ("openai", "files_create", 503),
        ("anthropic", "messages_batches_create", 529),
        ("anthropic", "messages_batches_create", 500),
    ],
)
def test_leading_errors_are_absorbed(tmp_path, capsys, provider_env, provider, path, status):
    fake = provider_env
    cfg = _small_config(tmp_path, provider, fake)
    fake.script(
        leading_errors={"status": status, "count": 3, "retry_after_ms": 10, "paths": [path]}
    )
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "lead"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    counts = fake.create_counts()
    assert sorted(counts) == sorted(f"answer-text-{i}" for i in range(N_ROWS))
    assert set(counts.values()) == {1}  # every custom_id submitted exactly once
    receipts = _receipts(tmp_path, "lead")
    assert len(receipts) == len(fake.batches(provider)) == N_ROWS // 10
    _check_receipts(receipts, fake, provider, "lead")
    calls = fake.call_counts()
    assert calls[path] == len(receipts) + 3  # the three answered errors were retried
    # Only a retried OpenAI create looks for an earlier attempt's batch (it found none).
    assert calls.get("batches_list", 0) == (3 if path == "batches_create" else 0)
    assert err.count(f"HTTP {status}") == 3 and "retrying in 0.010 s" in err


def test_openai_create_that_answered_500_is_adopted(tmp_path, capsys, provider_env):
    fake = provider_env
    cfg = _small_config(tmp_path, "openai", fake, max_requests_per_chunk=100)
    fake.script(fail_batch_creates={"nth": 1, "created": True, "permanent": False})
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "adopt"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    batches = fake.batches("openai")
    assert len(batches) == 1  # the retry adopted the batch instead of creating another
    assert set(fake.create_counts().values()) == {1}
    assert len(fake.create_counts()) == N_ROWS
    (receipt,) = _receipts(tmp_path, "adopt")
    assert receipt["provider_batch_id"] == batches[0]["id"]
    assert batches[0]["metadata"]["mmirage_chunk_id"] == receipt["chunk_id"]
    _check_receipts([receipt], fake, "openai", "adopt")
    calls = fake.call_counts()
    assert (calls["batches_create"], calls["batches_list"]) == (1, 1)
    assert f"adopted {batches[0]['id']}" in err


def test_anthropic_create_that_answered_500_is_adopted(tmp_path, capsys, provider_env):
    """Anthropic batches carry no metadata, but the retry of a create that was stored and
    answered 500 first lists the batches created since its first attempt: the one with
    exactly the chunk's request count, named by no receipt, is adopted (not re-created)."""
    fake = provider_env
    cfg = _small_config(tmp_path, "anthropic", fake, max_requests_per_chunk=100)
    fake.script(fail_batch_creates={"nth": 1, "created": True, "permanent": False})
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "dup"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    (batch,) = fake.batches("anthropic")
    (receipt,) = _receipts(tmp_path, "dup")
    assert receipt["provider_batch_id"] == batch["id"]
    assert receipt["adoption"] == {"method": "created_at+request_count", "confirmed": False}
    assert fake.call_counts()["messages_batches_create"] == 1
    assert fake.call_counts()["messages_batches_list"] == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_permanent_create_failure_stops_the_run_with_receipts_kept(
    tmp_path, capsys, provider_env, fast_retries, monkeypatch, provider
):
    fake = provider_env
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_MAX_ATTEMPTS", 3)
    cfg = _small_config(tmp_path, provider, fake)
    # One chunk at a time, so the create calls can be counted exactly (with more, the
    # chunks already in flight finish their own attempts before the run stops).
    cfg["execution_params"]["submit_concurrency"] = 1
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 503})
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "perm"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    call = "OpenAI batches.create" if provider == "openai" else "Anthropic messages.batches.create"
    assert f"{call} (chunk " in err
    assert "failed after 3 attempts; last error: HTTP 503" in err
    receipts = _receipts(tmp_path, "perm")
    assert len(receipts) == 1 == len(fake.batches(provider))
    _check_receipts(receipts, fake, provider, "perm")
    assert set(fake.create_counts().values()) == {1}
    create = "batches_create" if provider == "openai" else "messages_batches_create"
    assert fake.call_counts()[create] == 1 + 3


def test_connection_refused_run_exits_1(tmp_path, capsys, provider_env, fast_retries):
    cfg = _small_config(
        tmp_path, "openai", provider_env, base_url=f"http://127.0.0.1:{_closed_port()}/v1"
    )
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "refused"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "OpenAI files.create (chunk " in err
    assert "failed after 6 attempts; last error: APIConnectionError: Connection error." in err
    assert "sk-test-openai" not in out + err
