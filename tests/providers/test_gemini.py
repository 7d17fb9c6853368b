"""provider: gemini: the adapter through google-genai against the embedded fake.

One CLI run of the bundled ``configs/gsm8k_gemini.yaml`` (``mmirage run`` as a
subprocess, then ``check`` and ``merge``), whose merged rows must hold, in order, the
text the SDK itself downloads from the fake; the rest is in-process: result lines,
adoption of a lost create, exact tokens, the fake's protocol rules, config errors.
(The every-outcome merge and the transient-404 lookup are in tests/transforms/test_verdicts.py;
the crash case in tests/crash/test_crash_suite.py.)
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.gemini import GeminiBatchConfig
from mmirage_beam.providers.gemini.adapter import (
    GeminiBatchAdapter,
    display_name,
    normalise_result_line,
)
from mmirage_beam.results import MalformedResult
from tests.conftest import REPO


def _client(fake):
    from google import genai
    from google.genai import types

    return genai.Client(
        api_key="gemini-test", http_options=types.HttpOptions(base_url=fake.gemini_base_url)
    )


def _adapter(fake, **cfg):
    config = GeminiBatchConfig(base_url=fake.gemini_base_url, **cfg)
    adapter = GeminiBatchAdapter({"api_key": "gemini-test"})
    adapter.RETRY_SLEEP = lambda s: None
    adapter.setup(config)
    return adapter, config


def _line(key, text="What is 2 + 2?", **request):
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}], **request}
    return (json.dumps({"key": key, "request": body}) + "\n").encode()


# -- the bundled config, end to end ----------------------------------------------------------


def test_gsm8k_config_run_check_merge_matches_what_the_sdk_reads(tmp_path, monkeypatch, capsys):
    from mmirage_beam.testing import FakeProviderServer
    from pipelines.check import main as check_main
    from pipelines.merge import main as merge_main

    os.symlink(REPO / "mmirage_beam", tmp_path / "mmirage_beam")  # the config's data path
    config = str(REPO / "configs" / "gsm8k_gemini.yaml")
    with FakeProviderServer() as fake:
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            GEMINI_API_KEY="gemini-test",
            MMIRAGE_GEMINI_BASE_URL=fake.gemini_base_url,
        )
        run = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "run", "--config", config, "--run-id", "g1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "batches submitted:   6" in run.stdout
        # cl100k proxy, labelled: logged before the first batch (the summary then says
        # "as logged before submitting" and keeps the total)
        assert "input tokens 106,809 (estimate)" in run.stderr
        assert "tokens and estimated cost (as logged before submitting):" in run.stdout
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("GEMINI_API_KEY", "gemini-test")
        monkeypatch.setenv("MMIRAGE_GEMINI_BASE_URL", fake.gemini_base_url)
        assert check_main(["--config", config]) == 0
        out = tmp_path / "merged.jsonl"
        assert merge_main(["--config", config, "--output-path", str(out)]) == 0
        # What google-genai itself reads back: every job's responses file, or its inlined
        # responses (a chunk under INLINE_MAX_BYTES is sent inline, without an upload).
        from google.genai import types

        client = _client(fake)
        texts, usage = {}, {}
        for job in client.batches.list(config={"page_size": 2}):
            assert job.state.name == "JOB_STATE_SUCCEEDED"
            assert job.display_name.startswith("mmirage-g1-")
            if job.dest.inlined_responses:
                for answer in job.dest.inlined_responses:
                    texts[answer.metadata["key"]] = answer.response.text
                    usage[answer.metadata["key"]] = answer.response.usage_metadata
                continue
            for raw in client.files.download(file=job.dest.file_name).split(b"\n"):
                if raw:
                    line = json.loads(raw)
                    response = types.GenerateContentResponse.model_validate(line["response"])
                    texts[line["key"]] = response.text
                    usage[line["key"]] = response.usage_metadata
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").split("\n") if x]
    assert len(texts) == 2 * 1319 and len(merged) == 1319
    assert [m["source_index"] for m in merged] == list(range(1319))
    for i, m in enumerate(merged):
        assert m["solution"] == texts[f"solution-text-{i}"]
        grading = json.loads(texts[f"grading-text-{i}"])
        assert (m["final_answer"], m["difficulty"]) == (
            grading["final_answer"],
            grading["difficulty"],
        )
        expected_in = sum(
            usage[f"{o}-text-{i}"].prompt_token_count for o in ("solution", "grading")
        )
        assert m["input_tokens"] == expected_in


# -- result lines ---------------------------------------------------------------------------


def _response(text=None, finish="STOP", **extra):
    candidate = {"finishReason": finish}
    if text is not None:
        candidate["content"] = {"role": "model", "parts": [{"text": text}]}
    return {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3},
        **extra,
    }


@pytest.mark.parametrize(
    "finish,kind",
    [
        ("MAX_TOKENS", "truncated"),
        ("SAFETY", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("RECITATION", "content_filter"),
    ],
)
def test_finish_reasons_are_typed_outcomes_with_tokens(finish, kind):
    got = normalise_result_line(
        {"key": "k", "response": _response("half an ans", finish)}
    ).to_json()
    assert got["error"]["type"] == kind and finish in got["error"]["message"]
    assert got["error"]["raw_text"] == "half an ans"
    assert (got["input_tokens"], got["output_tokens"]) == (7, 3)
    if finish == "RECITATION":
        assert "reciting" in got["error"]["message"]


def test_result_lines_text_errors_and_wrong_shapes():
    ok = normalise_result_line({"key": "k", "response": _response("four")}).to_json()
    assert ok == {"custom_id": "k", "generated_text": "four", "input_tokens": 7, "output_tokens": 3}
    # snake_case (the SDK's own dumps) reads the same; thought parts are not the answer
    snake = {
        "candidates": [
            {
                "content": {"parts": [{"text": "hmm", "thought": True}, {"text": "four"}]},
                "finish_reason": "STOP",
            }
        ],
        "usage_metadata": {"prompt_token_count": 1, "candidates_token_count": 1},
    }
    assert normalise_result_line({"key": "k", "response": snake}).generated_text == "four"
    empty = normalise_result_line({"key": "k", "response": _response("")}).to_json()
    assert empty["error"]["type"] == "empty"
    blocked = normalise_result_line(
        {"key": "k", "response": {"promptFeedback": {"blockReason": "SAFETY"}}}
    ).to_json()
    assert blocked["error"]["type"] == "content_filter" and "SAFETY" in blocked["error"]["message"]
    err = normalise_result_line(
        {"key": "k", "error": {"code": 500, "message": "boom", "status": "INTERNAL"}}
    ).to_json()
    assert err["error"] == {"type": "server_error", "message": "INTERNAL: boom", "status_code": 500}
    rpc = normalise_result_line(
        {"key": "k", "error": {"code": 8, "message": "slow down"}}
    ).to_json()
    assert rpc["error"]["type"] == "rate_limit_exceeded"
    for bad in ([], {"response": {}}, {"key": "k"}, {"key": "k", "response": {"candidates": 1}}):
        with pytest.raises(MalformedResult):
            normalise_result_line(bad)


# -- submission, adoption, status, results ---------------------------------------------------


def test_a_create_stored_but_answered_500_is_adopted_not_sent_twice(fake_provider):
    fake = fake_provider
    adapter, config = _adapter(fake)
    adapter.run_id = "r1"
    fake.script(fail_batch_creates={"nth": 1, "status": 500, "created": True})
    batch = adapter.submit_chunk_lines("c1", [_line("a-text-0"), _line("a-text-1")], config)
    jobs = fake.batches("gemini")
    assert len(jobs) == 1 and batch.batch_id == jobs[0]["name"]  # adopted, not created again
    assert batch.to_json()["display_name"] == display_name("r1", "c1")
    assert batch.created_at and batch.adoption is None  # adopted by metadata: nothing to confirm
    assert fake.create_counts() == {"a-text-0": 1, "a-text-1": 1}
    # the lookup a resume does finds it too, through several pages
    for i in range(3):
        adapter.run_id = f"other{i}"
        adapter.submit_chunk_lines("c1", [_line(f"b-text-{i}")], config)
    adapter.FIND_BATCH_PAGE_SIZE = 1
    assert adapter.find_batch("r1", "c1").batch_id == batch.batch_id
    assert adapter.find_batch("r1", "c2") is None
    status = adapter.check_batch_status(batch.batch_id, config)
    assert status.status == "completed"
    results = {r.custom_id: r for r in adapter.retrieve_results(batch.batch_id, config)}
    assert sorted(results) == ["a-text-0", "a-text-1"]
    assert all(r.generated_text.startswith("FAKE:") for r in results.values())
    adapter.teardown()


def test_expired_job_has_no_results_and_every_request_is_a_retryable_failure(
    fake_provider, monkeypatch
):
    from mmirage_beam.providers.gemini import adapter as gemini_adapter

    fake = fake_provider
    monkeypatch.setattr(gemini_adapter, "INLINE_MAX_BYTES", 0)  # upload even a small chunk
    adapter, config = _adapter(fake)
    fake.script(expire_after_requests=1)
    batch = adapter.submit_chunk_lines("c1", [_line("a-text-0"), _line("a-text-1")], config)
    assert batch.input_file_id.startswith("files/")  # the file uploaded for it
    status = adapter.check_batch_status(batch.batch_id, config)
    progress = adapter.describe_batch(status)
    assert status.status == "failed" and progress.provider_status == "JOB_STATE_EXPIRED"
    assert progress.error_code == "batch_expired" and "48 hours" in progress.detail
    assert list(adapter.retrieve_results(batch.batch_id, config)) == []


def test_images_are_inline_data_and_urls_are_refused(fake_provider):
    from mmirage_beam.errors import RequestBuildError
    from mmirage_beam.images import load_image

    adapter, config = _adapter(fake_provider)
    image = load_image("astronaut_large_noisy.png", str(REPO / "tests" / "data" / "images"))
    payload = {"messages": [{"role": "user", "content": "Describe it."}], "images": [image]}
    line = adapter.build_request("d-multimodal-0", payload, config)
    part = line["request"]["contents"][0]["parts"][1]["inline_data"]
    assert part["mime_type"] == "image/png" and part["data"] == image["data"]
    batch = adapter.submit_chunk_lines("c1", [adapter.serialize_request(line)], config)
    (result,) = adapter.retrieve_results(batch.batch_id, config)
    assert result.input_tokens == 2 + 10  # the fake: words + 10 per image
    url = {**image, "data": None, "url": "https://example.com/a.png"}
    with pytest.raises(RequestBuildError, match="inline data only"):
        adapter.build_request("d-multimodal-1", {**payload, "images": [url]}, config)


def test_exact_tokens_come_from_count_tokens(fake_provider, monkeypatch):
    from mmirage_beam.costs.tokens import TokenCounter

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test")
    adapter, config = _adapter(fake_provider, max_tokens=64)
    line = adapter.build_request(
        "a-text-0", {"messages": [{"role": "user", "content": "one two three"}]}, config
    )
    estimate = TokenCounter("gemini", config.model).count(line)
    assert not estimate.exact and estimate.max_output_tokens == 64 and estimate.input_tokens > 0
    counter = TokenCounter(
        "gemini", config.model, exact_tokens=True, base_url=fake_provider.gemini_base_url
    )
    assert counter.count(line) == (3, 64, True, (), False)  # the usage the batch reports
    assert fake_provider.call_counts()["gemini_count_tokens"] == 1


# -- the fake's protocol and validation ------------------------------------------------------


def test_fake_refuses_what_the_service_refuses(fake_provider):
    import httpx
    from google.genai import errors

    fake = fake_provider
    client = _client(fake)
    no_key = httpx.get(f"{fake.base_url}/v1beta/batches")
    assert no_key.status_code == 401 and no_key.json()["error"]["status"] == "UNAUTHENTICATED"
    start = httpx.post(
        f"{fake.base_url}/upload/v1beta/files",
        headers={
            "x-goog-api-key": "k",
            "X-Goog-Upload-Protocol": "resumable",
            "X-Goog-Upload-Command": "start",
            "X-Goog-Upload-Header-Content-Length": "4",
        },
        json={"file": {"mimeType": "jsonl"}},
    )
    url = start.headers["x-goog-upload-url"]
    bad_offset = httpx.post(
        url, headers={"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "2"}
    )
    assert bad_offset.status_code == 400 and "Offset" in bad_offset.json()["error"]["message"]
    uploaded = client.files.upload(file=io.BytesIO(_line("k")), config={"mime_type": "jsonl"})
    with pytest.raises(errors.ClientError, match="Only generated files"):
        client.files.download(file=uploaded.name)
    # a request with an unknown field: validated with the SDK's types, an error line
    bad = client.files.upload(
        file=io.BytesIO(_line("k1", generationConfig={"maxTokens": 5}) + _line("k2")),
        config={"mime_type": "jsonl"},
    )
    job = client.batches.create(model="gemini-2.5-flash", src=bad.name)
    lines = client.files.download(file=client.batches.get(name=job.name).dest.file_name)
    first, second = (json.loads(x) for x in lines.split(b"\n") if x)
    assert first["error"]["status"] == "INVALID_ARGUMENT" and "maxTokens" in str(first)
    assert second["response"]["candidates"][0]["finishReason"] == "STOP"
    # a line without a key fails the whole job
    keyless = client.files.upload(
        file=io.BytesIO(b'{"request": {"contents": []}}\n'), config={"mime_type": "jsonl"}
    )
    failed = client.batches.create(model="gemini-2.5-flash", src=keyless.name)
    assert client.batches.get(name=failed.name).state.name == "JOB_STATE_FAILED"
    # so does a line that is not JSON, named by its number (blank lines counted)
    not_json = client.files.upload(
        file=io.BytesIO(_line("k") + b"\n{not json\n"), config={"mime_type": "jsonl"}
    )
    failed = client.batches.create(model="gemini-2.5-flash", src=not_json.name).name
    assert client.batches.get(name=failed).state.name == "JOB_STATE_FAILED"
    operation = httpx.get(f"{fake.base_url}/v1beta/{failed}", headers={"x-goog-api-key": "k"})
    assert operation.json()["error"]["message"] == "Line 3 of the input file is not JSON."
    # list pages: files.list takes 1..100, batches.list 1..1000
    for path, size, most in (("files", 101, 100), ("batches", 0, 1000)):
        page = httpx.get(
            f"{fake.base_url}/v1beta/{path}",
            params={"pageSize": size},
            headers={"x-goog-api-key": "k"},
        )
        assert page.status_code == 400
        assert page.json()["error"]["message"] == f"pageSize must be in 1..{most}."


def test_sdk_create_embeddings_answers_vectors_of_their_output_dimensionality(fake_provider):
    """An embeddings job (asyncBatchEmbedContent) as google-genai makes and reads it:
    one vector per line, of its output_dimensionality (8 without), a marked line's
    failure and a line without content refused, each as an SDK type."""
    from google.genai import types

    from mmirage_beam.providers.openai.fake_bodies import embedding_vector

    client = _client(fake_provider)

    def line(key, request):
        return (json.dumps({"key": key, "request": request}) + "\n").encode()

    def content(text):
        return {"content": {"parts": [{"text": text}]}}

    data = (
        line("four", {**content("first text"), "output_dimensionality": 4})
        + line("eight", content("second text"))
        + line("bad", content("third FAKE_ERROR:invalid_request"))
        + line("empty", {"output_dimensionality": 4})
    )
    uploaded = client.files.upload(file=io.BytesIO(data), config={"mime_type": "jsonl"})
    with pytest.warns(Warning, match="experimental"):
        job = client.batches.create_embeddings(
            model="gemini-embedding-001", src={"file_name": uploaded.name}
        )
    job = client.batches.get(name=job.name)
    assert job.state.name == "JOB_STATE_SUCCEEDED"
    lines = client.files.download(file=job.dest.file_name)
    by_key = {x["key"]: x for x in (json.loads(r) for r in lines.split(b"\n") if r)}
    for key, text, n in (("four", "first text", 4), ("eight", "second text", 8)):
        response = types.SingleEmbedContentResponse.model_validate(by_key[key]["response"])
        assert response.embedding.values == embedding_vector(text, n)
        assert response.token_count == 2
        assert normalise_result_line(by_key[key]).input_tokens == 2
    assert by_key["bad"]["error"]["status"] == "INVALID_ARGUMENT"
    assert by_key["empty"]["error"]["status"] == "INVALID_ARGUMENT"


def test_config_is_checked_at_load_and_the_sdk_extra_is_named(monkeypatch):
    with pytest.raises(ConfigError, match="vertexai"):
        GeminiBatchConfig(vertexai=True)
    with pytest.raises(ConfigError, match="temperature"):
        GeminiBatchConfig(temperature=3)
    monkeypatch.setitem(sys.modules, "google.genai", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"mmirage-beam\[gemini\]"):
        GeminiBatchAdapter().setup(GeminiBatchConfig())


def test_the_key_falls_back_to_google_api_key(monkeypatch):
    from mmirage_beam.providers.base import resolve_credentials

    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    assert resolve_credentials(GeminiBatchAdapter, "gemini") == {"api_key": "g-key"}


def test_demo_runs_for_gemini(tmp_path, capsys):
    from pipelines.cli import main as cli_main

    argv = ["demo", "--provider", "gemini", "--workdir", str(tmp_path), "--rows", "4"]
    code = cli_main([*argv, "--delay", "0"])
    assert code == 0, capsys.readouterr().out
    merged = (tmp_path / "gemini" / "merged.jsonl").read_text().splitlines()
    assert [json.loads(x)["source_index"] for x in merged] == [0, 1, 2, 3]


def test_sdk_get_cancel_delete_and_count_tokens(fake_provider):
    from google.genai import errors

    fake = fake_provider
    fake.script(processing_delay_secs=30)
    client = _client(fake)
    uploaded = client.files.upload(file=io.BytesIO(_line("k")), config={"mime_type": "jsonl"})
    assert client.files.get(name=uploaded.name).size_bytes == len(_line("k"))
    job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name)
    client.batches.cancel(name=job.name)
    assert client.batches.get(name=job.name).state.name in (
        "JOB_STATE_RUNNING",
        "JOB_STATE_CANCELLED",
    )
    client.batches.delete(name=job.name)
    with pytest.raises(errors.ClientError) as gone:
        client.batches.get(name=job.name)
    assert gone.value.code == 404
    contents = [{"role": "user", "parts": [{"text": "one two three"}]}]
    assert client.models.count_tokens(model="gemini-2.5-flash", contents=contents).total_tokens == 3


def test_a_run_without_the_sdk_stops_before_reading_data(tmp_path, monkeypatch, capsys):
    from pipelines.submit import main as submit_main
    from tests.conftest import base_config, write_config

    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test")
    monkeypatch.setitem(sys.modules, "google.genai", None)  # as if not installed
    cfg = write_config(tmp_path, base_config(tmp_path, "gemini"))
    assert submit_main(["--config", cfg]) == 2
    assert "pip install 'mmirage-beam[gemini]'" in capsys.readouterr().err


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_both_api_versions_are_served_beside_openai_v1(fake_provider, api_version):
    """google-genai 2.x calls v1beta, 3.x v1 (GOOGLE_AI_API_DEFAULT_VERSION): the whole
    lifecycle works under either, and OpenAI's /v1/files and /v1/batches on the same port
    still answer OpenAI's objects."""
    import openai
    from google import genai
    from google.genai import types

    fake = fake_provider
    client = genai.Client(
        api_key="gemini-test",
        http_options=types.HttpOptions(base_url=fake.gemini_base_url, api_version=api_version),
    )
    uploaded = client.files.upload(
        file=io.BytesIO(_line("k1") + _line("k2")), config={"mime_type": "jsonl"}
    )
    assert client.files.get(name=uploaded.name).size_bytes == len(_line("k1") + _line("k2"))
    job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name)
    done = client.batches.get(name=job.name)
    assert done.state.name == "JOB_STATE_SUCCEEDED"
    lines = client.files.download(file=done.dest.file_name).split(b"\n")
    assert sorted(json.loads(x)["key"] for x in lines if x) == ["k1", "k2"]
    assert any(j.name == job.name for j in client.batches.list())
    contents = [{"role": "user", "parts": [{"text": "one two three"}]}]
    assert client.models.count_tokens(model="gemini-2.5-flash", contents=contents).total_tokens == 3

    oai = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url)
    line = {
        "custom_id": "o1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    }
    file = oai.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    assert file.id.startswith("file-") and oai.files.retrieve(file.id).id == file.id
    batch = oai.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert oai.batches.retrieve(batch.id).status == "completed"
    assert [b.id for b in oai.batches.list()] == [batch.id]
    counts = fake.call_counts()
    assert counts["gemini_batches_get"] >= 1 and counts["batches_retrieve"] == 1


# -- inline batches, files.list / files.delete, the download path ---------------------------


def _inline(text, **extra):
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


def test_sdk_inline_batch_runs_the_state_machine_and_answers_in_order():
    """batches.create(src=[InlinedRequest]) as google-genai sends it: PENDING, RUNNING,
    then SUCCEEDED with dest.inlined_responses in request order, each with its metadata;
    a FAKE_ERROR marker fails its request exactly as the same line of a file does."""
    from google.genai import types

    from mmirage_beam.testing import FakeProviderServer

    clock = [1000.0]
    texts = ["one two", "x FAKE_ERROR:invalid_request", "y FAKE_ERROR:server_error", "three"]
    with FakeProviderServer(processing_delay_secs=30, clock=lambda: clock[0]) as fake:
        client = _client(fake)
        src = [_inline(t, metadata={"row": str(i)}) for i, t in enumerate(texts)]
        job = client.batches.create(model="gemini-2.5-flash", src=src)
        assert job.state.name == "JOB_STATE_PENDING" and job.dest is None
        clock[0] += 15
        assert client.batches.get(name=job.name).state.name == "JOB_STATE_RUNNING"
        clock[0] += 16
        done = client.batches.get(name=job.name)
        assert done.state.name == "JOB_STATE_SUCCEEDED" and done.dest.file_name is None
        answers = done.dest.inlined_responses
        assert [a.metadata for a in answers] == [{"row": str(i)} for i in range(4)]
        assert answers[0].response.usage_metadata.prompt_token_count == 2
        assert answers[0].response.text and answers[3].response.text
        assert (answers[1].error.code, answers[2].error.code) == (400, 500)
        assert answers[1].response is None and answers[2].response is None
        # the same requests in a file: the same outcomes
        data = b"".join(_line(f"k{i}", t) for i, t in enumerate(texts))
        uploaded = client.files.upload(file=io.BytesIO(data), config={"mime_type": "jsonl"})
        file_job = client.batches.create(model="gemini-2.5-flash", src=uploaded.name)
        clock[0] += 31
        lines = client.files.download(file=client.batches.get(name=file_job.name).dest.file_name)
        by_key = {x["key"]: x for x in (json.loads(r) for r in lines.split(b"\n") if r)}
        for i, answer in enumerate(answers):
            line = by_key[f"k{i}"]
            if answer.error is None:
                assert "error" not in line
                assert types.GenerateContentResponse.model_validate(line["response"]).text == (
                    answer.response.text
                )
            else:
                assert (answer.error.code, answer.error.message) == (
                    line["error"]["code"],
                    line["error"]["message"],
                )
        recorded = fake.submitted_requests("gemini")
        assert [r["request"]["metadata"] for r in recorded[:4]] == [m["metadata"] for m in src]
        # scripted expiry: no responses, as with a file
        fake.script(expire_after_requests=1)
        expired = client.batches.create(model="gemini-2.5-flash", src=src[:2])
        clock[0] += 31
        gone = client.batches.get(name=expired.name)
        assert gone.state.name == "JOB_STATE_EXPIRED" and gone.dest is None


def test_inline_requests_over_the_size_limit_or_empty_are_refused(fake_provider, monkeypatch):
    from google.genai import errors

    from mmirage_beam.providers.gemini import fake as gemini

    client = _client(fake_provider)
    monkeypatch.setattr(gemini, "MAX_INLINE_BYTES", 2000)  # the service's is 20 MB
    with pytest.raises(errors.ClientError, match="upload a file instead") as big:
        client.batches.create(model="gemini-2.5-flash", src=[_inline("word " * 500)])
    assert big.value.code == 400
    job = client.batches.create(model="gemini-2.5-flash", src=[_inline("small")])
    assert client.batches.get(name=job.name).dest.inlined_responses[0].response.text
    with pytest.raises(errors.ClientError, match="model"):
        client.batches.create(model="no-such-model", src=[_inline("small")])


def test_sdk_files_list_and_delete_and_the_download_path(fake_provider):
    """files.list pages newest first, files.delete forgets the file (404 after), and a
    generated file's downloadUri (/download/v1beta/...:download?alt=media, the path
    litellm reads) answers its bytes."""
    import httpx
    from google.genai import errors

    client = _client(fake_provider)
    names = [
        client.files.upload(file=io.BytesIO(_line(f"k{i}")), config={"mime_type": "jsonl"}).name
        for i in range(3)
    ]
    assert [f.name for f in client.files.list(config={"page_size": 2})] == names[::-1]
    client.files.delete(name=names[1])
    assert [f.name for f in client.files.list()] == [names[2], names[0]]
    with pytest.raises(errors.ClientError) as gone:
        client.files.get(name=names[1])
    assert gone.value.code == 404
    with pytest.raises(errors.ClientError) as again:
        client.files.delete(name=names[1])
    assert again.value.code == 404
    job = client.batches.create(model="gemini-2.5-flash", src=names[0])
    result = client.files.get(name=client.batches.get(name=job.name).dest.file_name)
    assert result.download_uri.startswith(f"{fake_provider.base_url}/download/v1beta/files/")
    via_uri = httpx.get(result.download_uri, headers={"x-goog-api-key": "gemini-test"})
    assert via_uri.status_code == 200
    assert via_uri.content == client.files.download(file=result.name)
    assert json.loads(via_uri.content)["key"] == "k0"
    assert httpx.get(result.download_uri).status_code == 401


def test_a_small_chunk_goes_inline_without_an_upload_and_a_large_one_is_uploaded(
    fake_provider, monkeypatch
):
    """The adapter sends a chunk of at most INLINE_MAX_BYTES inline (no files.upload),
    reads its answers from dest.inlined_responses by their metadata key (markers and
    the generation config included), adopts a lost inline create like a file one, and
    uploads a larger chunk."""
    from mmirage_beam.providers.gemini import adapter as gemini_adapter

    fake = fake_provider
    adapter, config = _adapter(fake, max_tokens=3)
    adapter.run_id = "r1"
    fake.script(fail_batch_creates={"nth": 1, "status": 500, "created": True})
    lines = [
        _line("a-text-0", "one two three four five"),
        _line("a-text-1", "FAKE_ERROR:rate_limit"),
    ]
    lines.append(
        _line("a-text-2", "x", generation_config={"response_mime_type": "application/json"})
    )
    batch = adapter.submit_chunk_lines("c1", lines, config)
    assert batch.input_file_id is None and len(fake.batches("gemini")) == 1  # adopted
    assert "gemini_files_upload" not in fake.call_counts()
    sent = fake.submitted_requests("gemini")
    assert [r["request"]["metadata"] for r in sent] == [{"key": f"a-text-{i}"} for i in range(3)]
    assert sent[2]["request"]["request"]["generationConfig"]["responseMimeType"] == (
        "application/json"
    )
    results = {r.custom_id: r for r in adapter.retrieve_results(batch.batch_id, config)}
    assert sorted(results) == ["a-text-0", "a-text-1", "a-text-2"]
    assert results["a-text-0"].generated_text.startswith("FAKE:")
    assert results["a-text-0"].input_tokens == 5
    assert results["a-text-1"].error.status_code == 429
    assert json.loads(results["a-text-2"].generated_text) is not None  # JSON mode honoured
    monkeypatch.setattr(gemini_adapter, "INLINE_MAX_BYTES", len(b"".join(lines)) - 1)
    uploaded = adapter.submit_chunk_lines("c2", lines, config)
    assert uploaded.input_file_id.startswith("files/")
    assert fake.call_counts()["gemini_files_upload"] >= 1
    assert sorted(r.custom_id for r in adapter.retrieve_results(uploaded.batch_id, config)) == [
        "a-text-0",
        "a-text-1",
        "a-text-2",
    ]
    adapter.teardown()


def test_sdk_inline_embeddings_batch_answers_vectors_and_markers(fake_provider):
    """batches.create_embeddings(src={"inlined_requests": ...}): the vectors in
    dest.inlined_embed_content_responses, in order, of the config's
    output_dimensionality, a marked text failing as in a file."""
    from mmirage_beam.providers.openai.fake_bodies import embedding_vector

    client = _client(fake_provider)
    texts = ["first text", "x FAKE_ERROR:invalid_request", "third one here"]
    src = {
        "inlined_requests": {
            "contents": [{"parts": [{"text": t}]} for t in texts],
            "config": {"output_dimensionality": 4},
        }
    }
    with pytest.warns(Warning, match="experimental"):
        job = client.batches.create_embeddings(model="gemini-embedding-001", src=src)
    done = client.batches.get(name=job.name)
    assert done.state.name == "JOB_STATE_SUCCEEDED" and done.dest.file_name is None
    first, marked, third = done.dest.inlined_embed_content_responses
    assert first.response.embedding.values == embedding_vector("first text", 4)
    assert third.response.embedding.values == embedding_vector("third one here", 4)
    assert (first.response.token_count, third.response.token_count) == (2, 3)
    assert marked.response is None and marked.error.code == 400
