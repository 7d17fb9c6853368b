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
