"""``provider: mistral`` end to end: the bundled GSM8K config run -> check -> merge
against the embedded fake through the real mistralai SDK, adoption of a job whose create
answer was lost, the config's limits, and the fake's bodies against the SDK's own
pydantic types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import REPO, write_config

mistralai = pytest.importorskip("mistralai.client")


@pytest.fixture
def mistral_env(monkeypatch, fake_provider):
    monkeypatch.setenv("MISTRAL_API_KEY", "test-mistral-key")
    monkeypatch.setenv("MMIRAGE_MISTRAL_BASE_URL", fake_provider.mistral_base_url)
    return fake_provider


def _bundled(tmp_path: Path, rows: int | None = None) -> str:
    cfg = yaml.safe_load((REPO / "configs" / "gsm8k_mistral.yaml").read_text(encoding="utf-8"))
    proc = cfg["processors"][0]
    proc["metadata_output_path"] = str(tmp_path / "meta" / "batch_metadata.jsonl")
    cfg["loading_params"]["state_dir"] = str(tmp_path / "state")
    for ds in cfg["loading_params"]["datasets"]:
        src = REPO / ds["path"]
        if rows is not None:
            lines = src.read_text(encoding="utf-8").split("\n")[:rows]
            src = tmp_path / "rows.jsonl"
            src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        ds["path"] = str(src)
        ds["output_dir"] = str(tmp_path / "shards")
    return write_config(tmp_path, cfg)


def _sdk_texts(fake) -> dict[str, str]:
    """custom_id -> the answer text, read back from the fake with the mistralai SDK."""
    client = mistralai.Mistral(api_key="k", server_url=fake.mistral_base_url)
    texts: dict[str, str] = {}
    jobs = client.batch.jobs.list(page_size=100)
    assert jobs.total == len(jobs.data)
    for job in jobs.data:
        assert job.status == "SUCCESS"
        response = client.files.download(file_id=job.output_file)
        for raw in response.read().split(b"\n"):
            if raw:
                line = json.loads(raw)
                body = mistralai.models.ChatCompletionResponse.model_validate(
                    line["response"]["body"]
                )
                texts[line["custom_id"]] = body.choices[0].message.content
    return texts


def test_bundled_gsm8k_run_check_merge_matches_what_the_sdk_reads(tmp_path, capsys, mistral_env):
    fake = mistral_env
    cfg = _bundled(tmp_path)
    assert submit_main(["--config", cfg, "--run-id", "m1"]) == 0
    out = capsys.readouterr().out
    assert "batch price mistral-small-latest: $0.05 in / $0.15 out per million tokens" in out
    assert "(estimate)" in out
    assert check_main(["--config", cfg]) == 0
    capsys.readouterr()
    merged_path = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg, "--output-path", str(merged_path)]) == 0
    merged = [json.loads(x) for x in merged_path.read_text(encoding="utf-8").split("\n") if x]
    source = (REPO / "mmirage_beam/examples/data/gsm8k/test.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(x) for x in source.split("\n") if x.strip()]
    texts = _sdk_texts(fake)
    assert len(merged) == len(rows) == 1319 and len(texts) == 2 * 1319
    for i, (row, m) in enumerate(zip(rows, merged)):
        assert m["source_index"] == i and m["question"] == row["question"]
        assert m["solution"] == texts[f"solution-text-{i}"]
        grading = json.loads(texts[f"grading-text-{i}"])
        assert m["final_answer"] == grading["final_answer"]
        assert m["difficulty"] == grading["difficulty"]
        assert m["input_tokens"] > 0 and m["output_tokens"] > 0
    # Every request went out once, as one line {custom_id, body} without a model.
    assert set(fake.create_counts().values()) == {1}
    (req,) = [r for r in fake.submitted_requests("mistral") if r["custom_id"] == "grading-text-0"]
    assert set(req["request"]) == {"custom_id", "body"} and "model" not in req["request"]["body"]
    assert req["request"]["body"]["response_format"]["type"] == "json_schema"


def test_a_lost_create_answer_is_adopted_by_metadata(tmp_path, capsys, mistral_env):
    """The create succeeds on the fake but answers 500: the retry finds the job by its
    run-tagged metadata instead of creating a second one."""
    fake = mistral_env
    cfg = _bundled(tmp_path, rows=6)
    fake.script(fail_batch_creates={"nth": 1, "created": True, "status": 500})
    assert submit_main(["--config", cfg, "--run-id", "m2"]) == 0
    assert "adopted" in capsys.readouterr().err
    jobs = fake.batches("mistral")  # one per output (solution, grading): no duplicate
    assert sorted(j["metadata"]["mmirage_chunk_id"] for j in jobs) == [
        "grading-chunk-000001",
        "solution-chunk-000001",
    ]
    assert {j["metadata"]["mmirage_run_id"] for j in jobs} == {"m2"}
    assert set(fake.create_counts().values()) == {1}
    assert fake.call_counts()["mistral_jobs_create"] == 2  # the retry looked, not created
    assert fake.call_counts()["mistral_jobs_list"] == 1
    # Transient 404s on a receipted job and a 503 on a download are retried.
    fake.script(leading_errors={"status": 404, "count": 2, "paths": ["mistral_jobs_get"]})
    assert check_main(["--config", cfg]) == 0
    fake.script(leading_errors={"status": 503, "count": 1, "paths": ["mistral_files_download"]})
    assert merge_main(["--config", cfg, "--output-path", str(tmp_path / "m.jsonl")]) == 0
    assert fake.script_view()["leading_errors"]["count"] == 0


def test_limits_are_the_stricter_page_and_lowerable(tmp_path):
    from mmirage_beam.config.loader import config_from_dict
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.providers.mistral import MistralBatchConfig

    assert MistralBatchConfig.PROVIDER_MAX_REQUESTS_PER_BATCH == 100_000
    assert MistralBatchConfig.PROVIDER_MAX_BATCH_BYTES == 512_000_000
    assert "known-limitations" in MistralBatchConfig.PROVIDER_LIMITS_SOURCE
    assert MistralBatchConfig(max_requests_per_chunk=10).effective_max_requests_per_chunk == 10
    with pytest.raises(ConfigError, match="max_requests_per_chunk.*100000"):
        MistralBatchConfig(max_requests_per_chunk=100_001)
    with pytest.raises(ConfigError, match="max_chunk_bytes"):
        MistralBatchConfig(max_chunk_bytes=512_000_001)
    with pytest.raises(ConfigError, match="metadata.mmirage_run_id"):
        MistralBatchConfig(metadata={"mmirage_run_id": "x"})
    cfg = yaml.safe_load(Path(_bundled(tmp_path)).read_text(encoding="utf-8"))
    cfg["processors"][0]["completion_window"] = "24h"  # OpenAI's key: refused by name
    with pytest.raises(ConfigError, match="completion_window"):
        config_from_dict(cfg)


def test_a_missing_sdk_names_the_extra(monkeypatch):
    import sys

    from mmirage_beam.providers.base import resolve_credentials
    from mmirage_beam.providers.mistral import MissingExtraError, MistralBatchAdapter

    monkeypatch.setitem(sys.modules, "mistralai.client", None)  # import fails
    with pytest.raises(MissingExtraError, match=r"mmirage-beam\[mistral\]") as exc:
        resolve_credentials(MistralBatchAdapter, "mistral", {"MISTRAL_API_KEY": "k"})
    assert exc.value.exit_code == 2


def test_the_fake_answers_in_the_sdk_types(fake_provider):
    """Every Mistral endpoint the fake serves, driven by the SDK (which parses each
    answer with its pydantic models), and the raw JSON validated against them too."""
    import urllib.error
    import urllib.request

    models = mistralai.models
    fake = fake_provider
    client = mistralai.Mistral(api_key="k", server_url=fake.mistral_base_url)
    lines = [
        {"custom_id": "ok", "body": {"messages": [{"role": "user", "content": "hi"}]}},
        {
            "custom_id": "cut",
            "body": {"messages": [{"role": "user", "content": "FAKE_ERROR:length"}]},
        },
        {
            "custom_id": "err",
            "body": {"messages": [{"role": "user", "content": "FAKE_ERROR:server_error"}]},
        },
        {"custom_id": "bad", "body": {"messages": "not a list"}},
    ]
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    uploaded = client.files.upload(file={"file_name": "in.jsonl", "content": data}, purpose="batch")
    job = client.batch.jobs.create(
        input_files=[uploaded.id],
        model="mistral-small-latest",
        endpoint="/v1/chat/completions",
        metadata={"k": "v"},
    )
    assert job.status == "QUEUED"
    job = client.batch.jobs.get(job_id=job.id)
    assert (job.status, job.succeeded_requests, job.failed_requests) == ("SUCCESS", 2, 2)
    assert client.batch.jobs.list(metadata={"k": "v"}).total == 1
    assert client.batch.jobs.list(metadata={"k": "w"}).total == 0
    assert client.files.retrieve(file_id=uploaded.id).num_lines == 4
    assert client.files.list().total == 3

    def get(path: str) -> bytes:
        req = urllib.request.Request(
            fake.mistral_base_url + path, headers={"Authorization": "Bearer k"}
        )
        with urllib.request.urlopen(req) as r:
            return r.read()

    models.BatchJob.model_validate_json(get(f"/v1/batch/jobs/{job.id}"), strict=False)
    models.ListBatchJobsResponse.model_validate_json(get("/v1/batch/jobs"))
    models.ListFilesResponse.model_validate_json(get("/v1/files"))
    models.GetFileResponse.model_validate_json(get(f"/v1/files/{uploaded.id}"))
    outcomes = {}
    for fid in (job.output_file, job.error_file):
        for raw in get(f"/v1/files/{fid}/content").split(b"\n"):
            if raw:
                line = json.loads(raw)
                status = line["response"]["status_code"]
                if status == 200:
                    models.ChatCompletionResponse.model_validate(line["response"]["body"])
                outcomes[line["custom_id"]] = status
    assert outcomes == {"ok": 200, "cut": 200, "err": 500, "bad": 400}
    cancelled = client.batch.jobs.cancel(job_id=job.id)  # ended: stays SUCCESS
    assert cancelled.status == "SUCCESS"
    assert client.batch.jobs.delete(job_id=job.id).deleted
    with pytest.raises(mistralai.errors.SDKError) as exc:
        client.batch.jobs.get(job_id=job.id)
    assert exc.value.status_code == 404
    assert json.loads(exc.value.body)["object"] == "error"
    with pytest.raises(mistralai.errors.SDKError) as exc:
        client.batch.jobs.create(
            input_files=["nope"], model="mistral-small-latest", endpoint="/v1/chat/completions"
        )
    assert exc.value.status_code == 404
    with pytest.raises(urllib.error.HTTPError) as no_key:
        urllib.request.urlopen(fake.mistral_base_url + "/v1/batch/jobs")
    assert no_key.value.code == 401


# -- inline jobs, the other endpoints, signed URLs, agent jobs ------------------------------


def _chat(text):
    return {"messages": [{"role": "user", "content": text}]}


def _result_lines(client, job) -> dict[str, dict]:
    out = {}
    for fid in (job.output_file, job.error_file):
        if fid:
            for raw in client.files.download(file_id=fid).read().split(b"\n"):
                if raw:
                    out[json.loads(raw)["custom_id"]] = json.loads(raw)
    return out


def test_sdk_inline_job_runs_the_state_machine_like_a_file():
    """jobs.create(requests=[...]): QUEUED, RUNNING, SUCCESS, its lines answered in the
    output and error files (and in ``outputs`` with jobs.get(inline=True)), each marker
    failing its request exactly as the same line of an uploaded file does."""
    from mmirage_beam.testing import FakeProviderServer

    clock = [1000.0]
    texts = {"ok": "hi there", "err": "x FAKE_ERROR:server_error", "bad": "FAKE_ERROR:rate_limit"}
    requests = [{"custom_id": k, "body": _chat(t)} for k, t in texts.items()]
    requests.append({"body": _chat("no id given")})  # custom_id is optional
    with FakeProviderServer(processing_delay_secs=30, clock=lambda: clock[0]) as fake:
        client = mistralai.Mistral(api_key="k", server_url=fake.mistral_base_url)
        job = client.batch.jobs.create(
            requests=requests, model="mistral-small-latest", endpoint="/v1/chat/completions"
        )
        assert (job.status, job.input_files, job.total_requests) == ("QUEUED", [], 4)
        clock[0] += 15
        assert client.batch.jobs.get(job_id=job.id).status == "RUNNING"
        clock[0] += 16
        done = client.batch.jobs.get(job_id=job.id)
        assert (done.status, done.succeeded_requests, done.failed_requests) == ("SUCCESS", 2, 2)
        inline = _result_lines(client, done)
        status = {k: v["response"]["status_code"] for k, v in inline.items()}
        assert status == {"ok": 200, "err": 500, "bad": 429, "3": 200}
        with_outputs = client.batch.jobs.get(job_id=job.id, inline=True)
        assert sorted(o["custom_id"] for o in with_outputs.outputs) == sorted(status)
        assert client.batch.jobs.get(job_id=job.id).outputs is None
        # the same lines from a file: the same outcomes and bodies
        data = b"".join(json.dumps(r).encode() + b"\n" for r in requests[:3])
        uploaded = client.files.upload(
            file={"file_name": "in.jsonl", "content": data}, purpose="batch"
        )
        file_job = client.batch.jobs.create(
            input_files=[uploaded.id], model="mistral-small-latest", endpoint="/v1/chat/completions"
        )
        clock[0] += 31
        from_file = _result_lines(client, client.batch.jobs.get(job_id=file_job.id))
        for key in texts:
            assert from_file[key]["response"]["status_code"] == status[key]
        assert (
            from_file["ok"]["response"]["body"]["choices"][0]["message"]["content"]
            == inline["ok"]["response"]["body"]["choices"][0]["message"]["content"]
        )
        assert [r["custom_id"] for r in fake.submitted_requests("mistral")[:4]] == [
            "ok",
            "err",
            "bad",
            "3",
        ]
        # scripted cancellation: the rest of the requests are "cancelled" lines
        fake.script(cancel_after_requests=1)
        cancelled = client.batch.jobs.create(
            requests=requests[:2], model="mistral-small-latest", endpoint="/v1/chat/completions"
        )
        clock[0] += 31
        ended = client.batch.jobs.get(job_id=cancelled.id)
        assert ended.status == "CANCELLED"
        codes = {k: (v["error"] or {}).get("code") for k, v in _result_lines(client, ended).items()}
        assert codes == {"ok": None, "err": "cancelled"}
        with pytest.raises(mistralai.errors.SDKError, match="exactly one of input_files"):
            client.batch.jobs.create(
                requests=requests,
                input_files=[uploaded.id],
                model="mistral-small-latest",
                endpoint="/v1/chat/completions",
            )


@pytest.mark.parametrize(
    ("endpoint", "model", "body", "response_type"),
    [
        (
            "/v1/fim/completions",
            "codestral-latest",
            {"prompt": "def add(a, b):", "suffix": "return c"},
            "FIMCompletionResponse",
        ),
        ("/v1/moderations", "mistral-moderation-latest", {"input": ["one", "two"]}, None),
        (
            "/v1/chat/moderations",
            "mistral-moderation-latest",
            {"input": [{"role": "user", "content": "one"}]},
            None,
        ),
    ],
)
def test_sdk_jobs_of_the_other_endpoints_answer_in_their_own_shapes(
    fake_provider, endpoint, model, body, response_type
):
    """FIM completions, moderations and chat moderations, each answered as the SDK's own
    response type (FIMCompletionResponse, ModerationResponse), markers included."""
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    marked = json.loads(json.dumps(body).replace("one", "one FAKE_ERROR:invalid_request"))
    if endpoint == "/v1/fim/completions":
        marked["prompt"] += " FAKE_ERROR:invalid_request"
    requests = [{"custom_id": "a", "body": body}, {"custom_id": "b", "body": marked}]
    if endpoint == "/v1/moderations":
        requests.append({"custom_id": "c", "body": {"input": "x FAKE_ERROR:content_filter"}})
    job = client.batch.jobs.create(requests=requests, model=model, endpoint=endpoint)
    job = client.batch.jobs.get(job_id=job.id)
    assert job.status == "SUCCESS" and job.failed_requests == 1
    lines = _result_lines(client, job)
    assert lines["b"]["response"]["status_code"] == 400
    answer = lines["a"]["response"]["body"]
    if response_type == "FIMCompletionResponse":
        fim = mistralai.models.FIMCompletionResponse.model_validate(answer)
        assert fim.model == model and fim.choices[0].message.content
    else:
        moderation = mistralai.models.ModerationResponse.model_validate(answer)
        assert len(moderation.results) == (2 if endpoint == "/v1/moderations" else 1)
        assert not any(any(r.categories.values()) for r in moderation.results)
    if endpoint == "/v1/moderations":
        flagged = mistralai.models.ModerationResponse.model_validate(lines["c"]["response"]["body"])
        assert flagged.results[0].categories["dangerous_and_criminal_content"] is True
    with pytest.raises(mistralai.errors.SDKError, match="/v1/ocr") as refused:
        client.batch.jobs.create(requests=requests, model=model, endpoint="/v1/ocr")
    assert refused.value.status_code == 400


def test_sdk_signed_url_downloads_without_the_key_until_it_expires():
    import httpx

    from mmirage_beam.testing import FakeProviderServer

    clock = [1000.0]
    with FakeProviderServer(clock=lambda: clock[0]) as fake:
        client = mistralai.Mistral(api_key="k", server_url=fake.mistral_base_url)
        uploaded = client.files.upload(
            file={"file_name": "in.jsonl", "content": b'{"a": 1}\n'}, purpose="batch"
        )
        signed = client.files.get_signed_url(file_id=uploaded.id, expiry=1)
        assert httpx.get(signed.url).content == b'{"a": 1}\n'  # no Authorization header
        assert httpx.get(signed.url.replace("signature=", "signature=0")).status_code == 403
        clock[0] += 3601
        assert httpx.get(signed.url).status_code == 403
        with pytest.raises(mistralai.errors.SDKError) as bad_expiry:
            client.files.get_signed_url(file_id=uploaded.id, expiry=169)
        assert bad_expiry.value.status_code == 422
        with pytest.raises(mistralai.errors.SDKError) as missing:
            client.files.get_signed_url(file_id="nope")
        assert missing.value.status_code == 404
        assert fake.call_counts()["mistral_files_signed_url"] == 3


def test_sdk_agent_job_has_no_model_and_answers_as_its_agent(fake_provider):
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    requests = [
        {"custom_id": "a", "body": _chat("hello agent")},
        {"custom_id": "b", "body": {"messages": "not a list"}},
    ]
    job = client.batch.jobs.create(
        requests=requests, agent_id="ag_0123", endpoint="/v1/chat/completions"
    )
    assert (job.model, job.agent_id) == (None, "ag_0123")
    done = client.batch.jobs.get(job_id=job.id)
    lines = _result_lines(client, done)
    body = mistralai.models.ChatCompletionResponse.model_validate(lines["a"]["response"]["body"])
    assert body.model == "ag_0123" and body.choices[0].message.content
    assert lines["b"]["response"]["status_code"] == 400
    assert [j.id for j in client.batch.jobs.list(agent_id="ag_0123").data] == [job.id]
    assert client.batch.jobs.list(agent_id="ag_other").total == 0
    for kwargs in ({}, {"model": "mistral-small-latest", "agent_id": "ag_0123"}):
        with pytest.raises(mistralai.errors.SDKError, match="model and agent_id"):
            client.batch.jobs.create(requests=requests, endpoint="/v1/chat/completions", **kwargs)
