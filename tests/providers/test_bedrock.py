"""``provider: bedrock``: boto3's ``bedrock`` client against the fake control plane
(:mod:`mmirage_beam.providers.bedrock.fake`, checked against botocore's service model)
with S3 on moto's real S3 server; the adapter's submit / check / merge on GSM8K rows; the
idempotent create; the minimum records per job."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from mmirage_beam.errors import ConfigError
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import REPO, write_config
from tests.storage_servers import REGION, S3Server, skip_unless_moto

boto3 = pytest.importorskip("boto3")
ROLE = "arn:aws:iam::123456789012:role/mmirage-batch"
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
LLAMA = "meta.llama3-1-8b-instruct-v1:0"
GSM8K = REPO / "mmirage_beam/examples/data/gsm8k/test.jsonl"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    skip_unless_moto()
    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    assert server.stop() == [], "moto's process group was not reaped"


@pytest.fixture
def bedrock_env(monkeypatch, fake_provider, s3):
    """AWS credentials of the S3 server, its endpoint for every S3 client (the adapter's
    and the fake's: ``AWS_ENDPOINT_URL_S3``), the fake's URL for the configs; the fake's
    minimum records back to Bedrock's 100."""
    for key, value in s3.endpoint_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MMIRAGE_BEDROCK_ENDPOINT_URL", fake_provider.base_url)
    monkeypatch.setenv("MMIRAGE_BEDROCK_S3_URI", s3.uri("runs"))
    fake = fake_provider.registered_fake("bedrock")
    fake.min_records = 100
    return fake_provider


def _client(fake, **config):
    from botocore.config import Config

    return boto3.session.Session().client(
        "bedrock",
        endpoint_url=fake.base_url,
        region_name=REGION,
        config=Config(retries={"total_max_attempts": 1}, **config),
    )


def _records(n: int, model: str = CLAUDE, marker: dict[int, str] | None = None) -> bytes:
    lines = []
    for i in range(n):
        text = f"What is {i} + {i}? " + (marker or {}).get(i, "")
        if model == CLAUDE:
            body = {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": text}],
            }
        else:
            body = {
                "prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                f"{text}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
                "max_gen_len": 64,
            }
        lines.append(json.dumps({"recordId": f"REC{i:05d}", "modelInput": body}))
    return ("\n".join(lines) + "\n").encode()


def _create_args(s3, key: str, token: str = "tok1", model: str = CLAUDE, name: str = "job1"):
    return {
        "jobName": name,
        "roleArn": ROLE,
        "clientRequestToken": token,
        "modelId": model,
        "inputDataConfig": {"s3InputDataConfig": {"s3Uri": s3.uri(key), "s3InputFormat": "JSONL"}},
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": s3.uri("out/")}},
        "timeoutDurationInHours": 24,
    }


def _required_members(op: str, response: dict) -> None:
    """Every member the botocore model marks required is in the parsed answer."""
    shape = boto3.session.Session().client("bedrock", region_name=REGION).meta.service_model
    output = shape.operation_model(op).output_shape
    missing = [m for m in output.required_members if m not in response]
    assert not missing, f"{op} answer lacks {missing}"


def test_sdk_lifecycle_replayed_token_makes_no_second_job(bedrock_env, s3):
    fake = bedrock_env
    s3.client().put_object(Bucket=s3.bucket, Key="in/a.jsonl", Body=_records(120))
    client = _client(fake)
    fake.script(processing_delay_secs=3600)
    args = _create_args(s3, "in/a.jsonl")
    arn = client.create_model_invocation_job(**args)["jobArn"]
    _required_members("CreateModelInvocationJob", {"jobArn": arn})
    # The same token and parameters, twice more: the same job, no second one.
    assert client.create_model_invocation_job(**args)["jobArn"] == arn
    assert client.create_model_invocation_job(**args)["jobArn"] == arn
    jobs = client.list_model_invocation_jobs()["invocationJobSummaries"]
    assert [j["jobArn"] for j in jobs] == [arn]
    assert fake.call_counts()["bedrock_create_job"] == 3
    assert set(fake.create_counts().values()) == {1}  # each record accepted once
    # The same token with other parameters is refused, as AWS's idempotency rule says.
    with pytest.raises(client.exceptions.ConflictException):
        client.create_model_invocation_job(**{**args, "timeoutDurationInHours": 48})
    # A fresh token is a new request: a second job.
    other = client.create_model_invocation_job(**{**args, "clientRequestToken": "tok2"})
    assert other["jobArn"] != arn
    job = client.get_model_invocation_job(jobIdentifier=arn)
    _required_members("GetModelInvocationJob", job)
    assert job["status"] == "Submitted" and job["clientRequestToken"] == "tok1"
    # Stop one: Stopping, then (no delay left) Stopped with nothing processed.
    client.stop_model_invocation_job(jobIdentifier=other["jobArn"])
    assert client.get_model_invocation_job(jobIdentifier=other["jobArn"])["status"] == "Stopping"
    fake.script(processing_delay_secs=0)
    for j in client.list_model_invocation_jobs(sortOrder="Descending")["invocationJobSummaries"]:
        _required_members("ListModelInvocationJobs", {"invocationJobSummaries": []})
        assert {"jobArn", "jobName", "modelId", "roleArn", "submitTime"} <= set(j)


def test_a_finished_job_writes_out_and_manifest_read_back_with_boto3(bedrock_env, s3):
    fake = bedrock_env
    s3.client().put_object(
        Bucket=s3.bucket,
        Key="in/b.jsonl",
        Body=_records(100, LLAMA, {3: "FAKE_ERROR:rate_limit", 5: "FAKE_ERROR:length"}),
    )
    client = _client(fake)
    arn = client.create_model_invocation_job(**_create_args(s3, "in/b.jsonl", model=LLAMA))[
        "jobArn"
    ]
    job = client.get_model_invocation_job(jobIdentifier=arn)
    assert job["status"] == "PartiallyCompleted"
    assert (job["totalRecordCount"], job["successRecordCount"], job["errorRecordCount"]) == (
        100,
        99,
        1,
    )
    job_id = arn.rsplit("/", 1)[-1]
    lines = [json.loads(x) for x in s3.read(f"out/{job_id}/b.jsonl.out").splitlines()]
    manifest = json.loads(s3.read(f"out/{job_id}/manifest.json.out"))
    assert manifest["totalRecordCount"] == manifest["processedRecordCount"] == len(lines) == 100
    assert manifest["errorRecordCount"] == 1 and manifest["inputTokenCount"] > 0
    by_id = {line["recordId"]: line for line in lines}
    assert by_id["REC00003"]["error"]["errorCode"] == 429
    assert by_id["REC00005"]["modelOutput"]["stop_reason"] == "length"
    assert by_id["REC00000"]["modelOutput"]["generation"].startswith("FAKE:")


def test_requests_outside_the_botocore_model_are_refused(bedrock_env, s3):
    fake = bedrock_env
    # botocore's own client-side validation off: the fake's check answers instead.
    client = _client(fake, parameter_validation=False)
    with pytest.raises(client.exceptions.ValidationException) as err:
        client.create_model_invocation_job(**_create_args(s3, "in/x.jsonl", name="bad_name!"))
    assert "jobName" in str(err.value)
    with pytest.raises(client.exceptions.ValidationException):
        client.create_model_invocation_job(
            **{**_create_args(s3, "in/x.jsonl"), "timeoutDurationInHours": 2}
        )
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.get_model_invocation_job(jobIdentifier="abcdefabcdef")
    assert fake.batches() == []  # nothing was created
    # An unsigned request is refused as AWS does.
    req = urllib.request.Request(fake.base_url + "/model-invocation-jobs")
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(req, timeout=10)
    assert http.value.code == 403
    assert http.value.headers["x-amzn-ErrorType"] == "AccessDeniedException"


@pytest.mark.parametrize(
    ("setup", "status", "normalised"),
    [
        ({}, "Completed", "completed"),
        ({"marker": "FAKE_ERROR:server_error"}, "PartiallyCompleted", "completed"),
        ({"records": 5}, "Failed", "failed"),
        ({"script": {"expire_after_requests": 50}}, "Expired", "failed"),
        ({"script": {"cancel_after_requests": 50}}, "Stopped", "failed"),
    ],
)
def test_terminal_states_map_to_the_typed_outcomes(bedrock_env, s3, setup, status, normalised):
    from mmirage_beam.providers.base import opened_adapter
    from mmirage_beam.providers.bedrock import BedrockBatchAdapter, BedrockBatchConfig

    fake = bedrock_env
    fake.script(**setup.get("script", {}))
    marker = {0: setup["marker"]} if "marker" in setup else None
    s3.client().put_object(
        Bucket=s3.bucket, Key="in/t.jsonl", Body=_records(setup.get("records", 120), marker=marker)
    )
    arn = _client(fake).create_model_invocation_job(**_create_args(s3, "in/t.jsonl"))["jobArn"]
    config = BedrockBatchConfig(
        role_arn=ROLE, s3_staging_uri=s3.uri("runs"), endpoint_url=fake.base_url, region=REGION
    )
    with opened_adapter(BedrockBatchAdapter, config, run_id="t1") as adapter:
        result = adapter.check_batch_status(arn, config)
        assert (result.raw_response["status"], result.status) == (status, normalised)
        progress = adapter.describe_batch(result)
        results = list(adapter.retrieve_results(arn, config))
    if status == "Failed":
        assert results == [] and progress.error_code == "batch_failed"
        assert "records" in progress.detail
    elif status in ("Expired", "Stopped"):
        # 50 answered, then the 70 never run, each a retryable error of the job's kind
        assert len(results) == 120 and progress.error_code in ("expired", "cancelled")
        assert (progress.completed, progress.failed, progress.total) == (50, 70, 120)
        never = [r for r in results if r.error is not None]
        assert len(never) == 70 and {r.error.type for r in never} == {progress.error_code}
        assert {r.custom_id for r in never} == {f"REC{i:05d}" for i in range(50, 120)}
    else:
        assert len(results) == 120
    if "marker" in setup:
        (bad,) = [r for r in results if r.error is not None]
        assert (bad.custom_id, bad.error.type, bad.error.status_code) == (
            "REC00000",
            "server_error",
            500,
        )


def _bundled(tmp_path: Path, rows: int, **proc) -> str:
    cfg = yaml.safe_load((REPO / "configs" / "gsm8k_bedrock.yaml").read_text(encoding="utf-8"))
    cfg["processors"][0]["metadata_output_path"] = str(tmp_path / "meta" / "batch_metadata.jsonl")
    cfg["processors"][0].update(proc)
    cfg["loading_params"]["state_dir"] = str(tmp_path / "state")
    src = tmp_path / "rows.jsonl"
    src.write_text("\n".join(GSM8K.read_text(encoding="utf-8").split("\n")[:rows]) + "\n")
    ds = cfg["loading_params"]["datasets"][0]
    ds["path"], ds["output_dir"] = str(src), str(tmp_path / "shards")
    return write_config(tmp_path, cfg)


def _sdk_outputs(s3) -> tuple[dict[str, dict], int]:
    """recordId -> modelOutput of every .out file in the bucket, read back with boto3,
    and the number of lines read."""
    out: dict[str, dict] = {}
    n = 0
    for key in s3.keys("runs/"):
        if key.endswith(".jsonl.out"):
            for raw in s3.read(key).splitlines():
                line = json.loads(raw)
                out[line["recordId"]] = line["modelOutput"]
                n += 1
    return out, n


def test_a_small_run_is_padded_merged_in_order_and_matches_what_boto3_reads(
    tmp_path, capsys, bedrock_env, s3
):
    """20 GSM8K rows: each output's chunk (20 records) is padded to Bedrock's minimum of
    100; the merge keeps the 20 rows, in order, with the answers S3 holds."""
    from mmirage_beam.providers.bedrock.requests import record_id

    fake = bedrock_env
    cfg = _bundled(tmp_path, 20)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--run-id", "b1", "--wait", "--poll-interval", "0.2"]
    assert submit_main([*argv, "--output-path", str(out)]) == 0, capsys.readouterr()
    text = capsys.readouterr()
    assert "batch price anthropic.claude-3-5-haiku-20241022-v1:0: $0.4 in / $2 out" in text.out
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x]
    rows = [json.loads(x) for x in GSM8K.read_text(encoding="utf-8").splitlines()[:20]]
    outputs, lines = _sdk_outputs(s3)
    assert lines == 2 * 100  # 20 records + 80 padding records per job
    assert sorted(r for r in outputs if r.startswith("ZP")) == [f"ZP{i:06d}" for i in range(1, 81)]
    assert [m["source_index"] for m in merged] == list(range(20))
    for i, (row, m) in enumerate(zip(rows, merged)):
        assert m["question"] == row["question"] and "mmirage_errors" not in m
        assert m["solution"] == outputs[record_id(f"solution-text-{i}")]["content"][0]["text"]
        grading = json.loads(outputs[record_id(f"grading-text-{i}")]["content"][0]["text"])
        assert (m["final_answer"], m["difficulty"]) == (
            grading["final_answer"],
            grading["difficulty"],
        )
    jobs = [j for j in fake.registered_fake("bedrock")._state["jobs"].values()]
    assert len(jobs) == 2 and {j.params["jobName"] for j in jobs} == {
        "mmirage-b1-solution-chunk-000001",
        "mmirage-b1-grading-chunk-000001",
    }
    assert check_main(["--config", cfg]) == 0


@pytest.mark.parametrize("kind", ["expire", "cancel"])
def test_an_expired_or_stopped_job_is_a_failure_everywhere(tmp_path, capsys, bedrock_env, kind):
    """check (exit 1), merge and resubmit count the same failures: the records the job
    never ran are retryable ``expired`` / ``cancelled`` errors, the rest merge."""
    from pipelines.resubmit import main as resubmit_main

    fake = bedrock_env
    fake.registered_fake("bedrock").min_records = 1
    cfg = _bundled(tmp_path, 10, min_records_per_job=1)
    raw = yaml.safe_load(Path(cfg).read_text(encoding="utf-8"))
    raw["processing_params"]["outputs"] = raw["processing_params"]["outputs"][:1]
    raw["processing_params"]["output_schema"] = {"solution": "{{ solution }}"}
    cfg = write_config(tmp_path, raw)
    fake.script(**{f"{kind}_after_requests": 6})
    assert submit_main(["--config", cfg, "--run-id", "x1"]) == 0
    capsys.readouterr()
    assert check_main(["--config", cfg]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "requests done 6, failed 4, total 10" in out
    merged_path = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg, "--output-path", str(merged_path)]) == 1
    merged = [json.loads(x) for x in merged_path.read_text(encoding="utf-8").splitlines()]
    assert [m["source_index"] for m in merged] == list(range(10))
    errors = [m["mmirage_errors"]["solution"] for m in merged if "mmirage_errors" in m]
    word = {"expire": "expired", "cancel": "cancelled"}[kind]
    assert len(errors) == 4 and {(e["type"], e["retryable"]) for e in errors} == {(word, True)}
    capsys.readouterr()
    assert resubmit_main(["--config", cfg, "--only", "all", "--new-run-id", "x2"]) == 0
    assert "re-sending 4 failed request(s) (all)" in capsys.readouterr().err


def test_a_lost_create_answer_replays_the_same_token(
    tmp_path, capsys, bedrock_env, s3, fast_provider_retries
):
    """The create makes the job but answers 500: the retry, with the same
    clientRequestToken, gets the same job back; no second job."""
    fake = bedrock_env
    fake.registered_fake("bedrock").min_records = 1
    cfg = _bundled(tmp_path, 6, min_records_per_job=1)
    fake.script(fail_batch_creates={"nth": 1, "created": True, "status": 500})
    assert submit_main(["--config", cfg, "--run-id", "b2"]) == 0
    jobs = list(fake.registered_fake("bedrock")._state["jobs"].values())
    assert len(jobs) == 2  # one per output (solution, grading): no duplicate
    assert fake.call_counts()["bedrock_create_job"] == 3  # the retry replayed the token
    assert "bedrock_list_jobs" not in fake.call_counts()  # ... and looked nothing up
    assert set(fake.create_counts().values()) == {1}
    # A transient not-found on a receipted job (a 404 is final after one retry, as for
    # every provider), and a throttle, are retried.
    fake.script(leading_errors={"status": 404, "count": 1, "paths": ["bedrock_get_job"]})
    assert check_main(["--config", cfg]) == 0
    fake.script(leading_errors={"status": 429, "count": 1, "paths": ["bedrock_get_job"]})
    assert check_main(["--config", cfg]) == 0
    assert fake.script_view()["leading_errors"]["count"] == 0
    # A resumed run finds a chunk's job by its name (a crash lost the receipt).
    from mmirage_beam.config.loader import load_config
    from mmirage_beam.providers.base import opened_adapter
    from mmirage_beam.providers.bedrock import BedrockBatchAdapter

    config = load_config(cfg).processor
    with opened_adapter(BedrockBatchAdapter, config, run_id="b2") as adapter:
        found = adapter.find_batch("b2", "grading-chunk-000001")
        assert found is not None and found.status == "completed"
        assert found.raw["jobName"] == "mmirage-b2-grading-chunk-000001"
        assert adapter.find_batch("b2", "grading-chunk-000002") is None
    assert merge_main(["--config", cfg, "--output-path", str(tmp_path / "m.jsonl")]) == 0


def test_a_small_chunk_is_refused_before_anything_is_uploaded(tmp_path, capsys, bedrock_env, s3):
    fake = bedrock_env
    cfg = _bundled(tmp_path, 20, small_chunk_policy="refuse")
    code = submit_main(["--config", cfg, "--run-id", "b3"])
    err = capsys.readouterr().err
    assert code != 0
    assert "holds 20 records, below Bedrock's minimum of 100" in err
    assert "nothing was uploaded" in err
    assert s3.keys("runs/b3/") == []
    assert fake.call_counts().get("bedrock_create_job", 0) == 0


def test_config_refuses_what_bedrock_would(tmp_path):
    from mmirage_beam.providers.bedrock import BedrockBatchConfig

    ok = {"role_arn": ROLE, "s3_staging_uri": "s3://bucket/p"}
    with pytest.raises(ConfigError, match="max_requests_per_chunk.*below Bedrock's minimum"):
        BedrockBatchConfig(**ok, max_requests_per_chunk=50)
    with pytest.raises(ConfigError, match="timeout_hours"):
        BedrockBatchConfig(**ok, timeout_hours=200)
    with pytest.raises(ConfigError, match="model"):
        BedrockBatchConfig(**ok, model="cohere.command-r-v1:0")
    with pytest.raises(ConfigError, match="s3_staging_uri"):
        BedrockBatchConfig(role_arn=ROLE, s3_staging_uri="gs://bucket")
    with pytest.raises(ConfigError, match="max_requests_per_chunk"):
        BedrockBatchConfig(**ok, max_requests_per_chunk=60_000)
    assert BedrockBatchConfig(**ok, max_requests_per_chunk=50, min_records_per_job=10)


def test_record_ids_and_job_names_follow_the_model():
    import re

    from mmirage_beam.providers.bedrock.requests import (
        JOB_NAME_RE,
        client_request_token,
        custom_id_of,
        job_name,
        record_id,
    )

    for cid in ("solution-text-0", "a_b-Z-ZZ_9", "x" * 64):
        rid = record_id(cid)
        assert rid.isalnum() and custom_id_of(rid) == cid
    assert custom_id_of("ZP000001") is None
    long = job_name("r" * 32, "very-long-output-name-chunk-000001-and-more")
    assert len(long) <= 63 and JOB_NAME_RE.fullmatch(long)
    assert job_name("r" * 32, "a" * 40) != job_name("r" * 32, "a" * 41)
    token = client_request_token("run", "chunk")
    assert token == client_request_token("run", "chunk") != client_request_token("run", "c2")
    assert re.fullmatch(r"[a-zA-Z0-9]{1,256}(-*[a-zA-Z0-9]){0,256}", token)


# -- every outcome in one output file (as tests/transforms/test_verdicts.py does for the
# other providers) ------------------------------------------------------------------------

_EVERY = {
    "FAKE_ERROR:refusal": "refusal",
    "FAKE_ERROR:length": "truncated",  # a cut JSON answer: truncated, not invalid_json
    "FAKE_ERROR:empty": "empty",
    "FAKE_ERROR:malformed_line": "malformed_response",
    "FAKE_ERROR:truncated_line": "malformed_response",
    "FAKE_ERROR:wrong_shape": "malformed_response",
    "FAKE_ERROR:invalid_utf8": "malformed_response",
    "FAKE_ERROR:u2028": "invalid_request_error",
    "FAKE_ERROR:not_json": "invalid_json",
    "FAKE_ERROR:error_body_200": "malformed_response",
    "FAKE_ERROR:empty_body_200": "malformed_response",
    "FAKE_ERROR:server_error": "server_error",
    "FAKE_ERROR:rate_limit": "rate_limit_error",
    "FAKE_ERROR:timeout": "request_timeout",
}
_RETRYABLE = {"malformed_response", "empty", "server_error", "rate_limit_error", "request_timeout"}


@pytest.mark.parametrize("model", [CLAUDE, LLAMA])
def test_verdicts_merge_of_every_outcome(tmp_path, capsys, bedrock_env, s3, model):
    """One output file mixing every outcome, shuffled: every row written, in order, with
    typed errors (Llama has no refusal: its refusal row is an answer), exit 1."""
    from tests.conftest import base_config

    fake = bedrock_env
    expected = dict(_EVERY)
    if model == LLAMA:
        del expected["FAKE_ERROR:refusal"]
    markers = {i + 1: m for i, m in enumerate(expected)}
    n = len(markers) + 3
    rows = [json.loads(x) for x in GSM8K.read_text(encoding="utf-8").split("\n")[:n]]
    for i, marker in markers.items():
        rows[i]["question"] += f" {marker}"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(
        tmp_path,
        "bedrock",
        model=model,
        role_arn=ROLE,
        s3_staging_uri=s3.uri("verdicts"),
        endpoint_url=fake.base_url,
        region=REGION,
    )
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["outputs"][0].update(
        output_type="JSON", output_schema={"value": "str"}
    )
    cfg["processing_params"]["output_schema"]["answer"] = "{{ answer.value }}"
    cfg = write_config(tmp_path, cfg)
    fake.script(shuffle_results=True)
    assert submit_main(["--config", cfg, "--run-id", "v1"]) == 0
    capsys.readouterr()
    out_path = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out_path)])
    out = " ".join(capsys.readouterr().out.split())
    merged = [json.loads(x) for x in out_path.read_bytes().split(b"\n") if x.strip()]
    errors_path = tmp_path / "merged.errors.jsonl"
    errors = [json.loads(x) for x in errors_path.read_bytes().split(b"\n") if x.strip()]
    assert code == 1, out
    assert [m["source_index"] for m in merged] == list(range(n))
    by_index = {e["source_index"]: e for e in errors}
    assert sorted(by_index) == sorted(markers), errors
    for i, m in enumerate(merged):
        if i not in markers:
            assert "mmirage_errors" not in m and isinstance(m["answer"], str)
            continue
        kind = expected[markers[i]]
        err = m["mmirage_errors"]["answer"]
        assert err["type"] == kind == by_index[i]["error_type"], (markers[i], err)
        assert err["retryable"] is (kind in _RETRYABLE), (markers[i], err)
        if kind == "malformed_response":
            assert "line " in err["message"] and "byte offset" in err["message"]
    u2028 = by_index[next(i for i, mk in markers.items() if mk == "FAKE_ERROR:u2028")]
    assert "\u2028" in u2028["message"]
    assert f"rows written: {n}" in out and "outputs succeeded: 3" in out
    assert "unknown custom_ids: 0" in out and "unreadable lines: 0" in out


def test_demo_runs_offline_against_the_fakes(tmp_path, capsys, monkeypatch, caplog):
    """``mmirage demo --provider bedrock``: the fake control plane and moto's S3 in
    this process, no account; 20 rows (padded to the minimum) merged in order. moto's
    request lines stay out of the demo's output (werkzeug logged each one at INFO)."""
    pytest.importorskip("moto.server")
    from pipelines.cli import main as cli_main

    for key in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    argv = ["demo", "--provider", "bedrock", "--workdir", str(tmp_path), "--rows", "20"]
    code = cli_main([*argv, "--delay", "0.5"])
    out = capsys.readouterr().out
    assert code == 0, out
    merged = [
        json.loads(x) for x in (tmp_path / "bedrock" / "merged.jsonl").read_text().splitlines()
    ]
    rows = [json.loads(x) for x in GSM8K.read_text(encoding="utf-8").splitlines()[:20]]
    assert [m["source_index"] for m in merged] == list(range(20))
    assert [m["question"] for m in merged] == [r["question"] for r in rows]
    assert all(m["solution"].startswith("FAKE:") and 1 <= m["difficulty"] <= 5 for m in merged)
    assert "rows written:        20" in out
    assert "AWS_ENDPOINT_URL_S3" not in os.environ  # restored
    noise = [r.getMessage() for r in caplog.records if r.name == "werkzeug"]
    assert noise == []


def test_bodies_of_both_families_images_and_json():
    """Claude: Messages body, base64 images, output_config for JSON; Llama: the chat
    template, the schema in the prompt, no images."""
    from mmirage_beam.errors import RequestBuildError
    from mmirage_beam.providers.bedrock import BedrockBatchAdapter, BedrockBatchConfig
    from mmirage_beam.providers.bedrock.requests import LLAMA_JSON_INSTRUCTION

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    image = {"source": "a.png", "url": None, "media_type": "image/png", "data": "iVBORw0KGgo="}
    payload = {
        "messages": [{"role": "user", "content": "How many?"}],
        "images": [image],
        "output_name": "count",
        "json_schema": schema,
    }
    adapter = BedrockBatchAdapter()
    claude = BedrockBatchConfig(role_arn=ROLE, s3_staging_uri="s3://bkt/p", temperature=0.5)
    rec = adapter.build_request("count-text-7", payload, claude)
    assert rec["recordId"] == "countZDtextZD7"
    body = rec["modelInput"]
    assert body["anthropic_version"] == "bedrock-2023-05-31" and body["max_tokens"] == 1024
    assert body["temperature"] == 0.5 and "model" not in body
    assert body["messages"][0]["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert adapter.request_without_id(rec) == {"modelInput": body}
    count = adapter.count_request_tokens(rec)
    assert count.input_tokens > 0 and count.max_output_tokens == 1024 and not count.exact
    with pytest.raises(RequestBuildError, match="base64 images only"):
        adapter.build_request("c-1", {**payload, "images": [{**image, "data": None}]}, claude)
    llama = BedrockBatchConfig(role_arn=ROLE, s3_staging_uri="s3://bkt/p", model=LLAMA)
    with pytest.raises(RequestBuildError, match="text only"):
        adapter.build_request("c-1", payload, llama)
    body = adapter.build_request("c-1", {**payload, "images": []}, llama)["modelInput"]
    assert body["prompt"].startswith("<|begin_of_text|><|start_header_id|>user")
    assert LLAMA_JSON_INSTRUCTION in body["prompt"] and body["max_gen_len"] == 1024


def test_the_manifest_counts_are_checked_against_the_output(bedrock_env, s3, caplog):
    from mmirage_beam.providers.base import opened_adapter
    from mmirage_beam.providers.bedrock import BedrockBatchAdapter, BedrockBatchConfig

    fake = bedrock_env
    s3.client().put_object(Bucket=s3.bucket, Key="in/m.jsonl", Body=_records(100))
    arn = _client(fake).create_model_invocation_job(**_create_args(s3, "in/m.jsonl"))["jobArn"]
    config = BedrockBatchConfig(
        role_arn=ROLE, s3_staging_uri=s3.uri("runs"), endpoint_url=fake.base_url, region=REGION
    )
    with opened_adapter(BedrockBatchAdapter, config, run_id="m1") as adapter:
        assert adapter.check_batch_status(arn, config).status == "completed"
        assert len(list(adapter.retrieve_results(arn, config))) == 100
        assert "manifest.json.out counts" not in caplog.text
        key = f"out/{arn.rsplit('/', 1)[-1]}/manifest.json.out"
        manifest = json.loads(s3.read(key))
        s3.client().put_object(
            Bucket=s3.bucket, Key=key, Body=json.dumps({**manifest, "processedRecordCount": 101})
        )
        assert len(list(adapter.retrieve_results(arn, config))) == 100
    assert "manifest.json.out counts 101 processed records, the output holds 100 lines" in (
        caplog.text
    )
