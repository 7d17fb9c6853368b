"""provider: vertex: Vertex AI batch prediction through google-genai (``vertexai=True``)
against the fake Vertex service (:mod:`mmirage_beam.providers.vertex.fake`), whose job
files live in a real GCS protocol server (the ``gcp-storage-emulator``, in its own
process: tests/storage_servers.py).

The SDK parses every job the fake answers into its own ``types.BatchJob`` (through its
``_BatchJob_from_vertex`` converter), so a body the SDK cannot read fails here. Tests:
the SDK's create / get / list / cancel and the terminal states; the markers as failed
rows; a lost create answer adopted by ``display_name``; ``mmirage run --wait`` on 20
rows merging every row in order, as the SDK's own readers read the predictions.
"""

from __future__ import annotations

import json
import os

import pytest

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.vertex import VertexBatchAdapter, VertexBatchConfig
from mmirage_beam.providers.vertex.adapter import TOKEN_ENV_VAR, input_uri
from mmirage_beam.providers.vertex.fake import FakeVertexServer
from mmirage_beam.providers.vertex.outcomes import (
    id_from_labels,
    id_labels,
    normalise_prediction_line,
)
from tests.storage_servers import GCSServer, skip_unless_gcs_emulator

PROJECT, LOCATION = "mmirage-test", "us-central1"
TOKEN = "vertex-test-token"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A GCS emulator in its own process, for the module."""
    skip_unless_gcs_emulator()
    server = GCSServer(tmp_path_factory.mktemp("gcs"))
    server.start()
    yield server
    assert server.stop() == [], "the emulator's process group was not reaped"


@pytest.fixture
def vertex(gcs, monkeypatch):
    """The fake Vertex service on the emulator, and the environment a worker needs:
    the emulator for Beam's GCS filesystem, the offline ADC, the fake's token."""
    for name, value in gcs.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(TOKEN_ENV_VAR, TOKEN)
    with FakeVertexServer(gcs.endpoint) as fake:
        yield fake


def _client(fake):
    from google import genai
    from google.genai import types
    from google.oauth2.credentials import Credentials

    return genai.Client(
        vertexai=True,
        project=PROJECT,
        location=LOCATION,
        credentials=Credentials(token=TOKEN),
        http_options=types.HttpOptions(base_url=fake.base_url, api_version="v1"),
    )


def _config(fake, gcs, **cfg):
    return VertexBatchConfig(
        project=PROJECT,
        location=LOCATION,
        gcs_staging_uri=gcs.uri("staging"),
        base_url=fake.base_url,
        **cfg,
    )


def _adapter(fake, gcs, run_id="r1", **cfg):
    config = _config(fake, gcs, **cfg)
    adapter = VertexBatchAdapter({})
    adapter.RETRY_SLEEP = lambda s: None
    adapter.run_id = run_id
    adapter.setup(config)
    return adapter, config


def _payload(text):
    return {"messages": [{"role": "user", "content": text}], "images": []}


def _lines(adapter, config, texts, output="a"):
    return [
        adapter.serialize_request(adapter.build_request(f"{output}-text-{i}", _payload(t), config))
        for i, t in enumerate(texts)
    ]


def _put(gcs, key, lines):
    gcs.client().bucket(gcs.bucket).blob(key).upload_from_string(b"".join(lines))
    return gcs.uri(key)


# -- the SDK against the fake ------------------------------------------------------------------


def test_sdk_create_get_list_cancel_and_terminal_states(vertex, gcs):
    from google.genai import errors, types

    fake = vertex
    client = _client(fake)
    body = {"contents": [{"role": "user", "parts": [{"text": "What is 2 + 2?"}]}]}
    line = json.dumps({"request": {**body, "labels": {"mmirage_id": "q-text-0"}}}).encode() + b"\n"
    src = _put(gcs, "sdk/input.jsonl", [line])
    job = client.batches.create(
        model="gemini-2.5-flash",
        src=src,
        config=types.CreateBatchJobConfig(display_name="sdk-job", dest=gcs.uri("sdk/out")),
    )
    assert isinstance(job, types.BatchJob) and job.state.name == "JOB_STATE_PENDING"
    assert job.name.startswith(f"projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs/")
    assert job.src.gcs_uri == [src] and job.dest.gcs_uri == gcs.uri("sdk/out")
    assert job.model == "publishers/google/models/gemini-2.5-flash"
    got = client.batches.get(name=job.name)
    assert got.state.name == "JOB_STATE_SUCCEEDED"
    assert got.completion_stats.successful_count == 1 and got.completion_stats.failed_count == 0
    folder = got.output_info.gcs_output_directory
    assert folder.startswith(gcs.uri("sdk/out/prediction-model-"))
    (key,) = gcs.keys(folder)
    (row,) = [json.loads(x) for x in gcs.read(key).splitlines()]
    assert row["status"] == "" and row["request"]["labels"] == {"mmirage_id": "q-text-0"}
    answer = types.GenerateContentResponse.model_validate(row["response"])
    assert answer.text.startswith("FAKE:")
    # list: newest first, paged, filtered by display_name
    fake.script(processing_delay_secs=3600)
    running = client.batches.create(
        model="gemini-2.5-flash", src=src, config={"display_name": "slow", "dest": gcs.uri("s")}
    )
    assert running.state.name == "JOB_STATE_PENDING"
    names = [j.name for j in client.batches.list(config={"page_size": 1})]
    assert names == [running.name, job.name]
    (only,) = list(client.batches.list(config={"filter": 'display_name="sdk-job"'}))
    assert only.name == job.name
    # cancel: cancelling, then cancelled; a second cancel of an ended job is refused
    client.batches.cancel(name=running.name)
    assert client.batches.get(name=running.name).state.name == "JOB_STATE_CANCELLING"
    with pytest.raises(errors.ClientError) as refused:
        client.batches.cancel(name=job.name)
    assert refused.value.code == 400
    with pytest.raises(errors.ClientError) as missing:
        client.batches.get(name="123")
    assert missing.value.code == 404


def test_markers_give_failed_rows_and_cancel_keeps_the_processed_ones(vertex, gcs):
    fake = vertex
    adapter, config = _adapter(fake, gcs)
    texts = [
        "plain question",
        "FAKE_ERROR:invalid_request",
        "FAKE_ERROR:server_error",
        "FAKE_ERROR:rate_limit",
        "FAKE_ERROR:length",
        "FAKE_ERROR:refusal",
        "FAKE_ERROR:malformed_line",
        "FAKE_ERROR:truncated_line",
    ]
    batch = adapter.submit_chunk_lines("c1", _lines(adapter, config, texts), config)
    assert batch.input_file_id == input_uri(config, "r1", "c1")
    assert adapter.check_batch_status(batch.batch_id, config).status == "completed"
    got = {r.custom_id: r for r in adapter.retrieve_results(batch.batch_id, config)}
    kinds = {cid: (r.error.type if r.error else "ok") for cid, r in got.items()}
    assert kinds == {
        "a-text-0": "ok",
        "a-text-1": "invalid_request_error",
        "a-text-2": "server_error",
        "a-text-3": "rate_limit_exceeded",
        "a-text-4": "truncated",
        "a-text-5": "content_filter",
        "a-text-6": "malformed_response",
        "a-text-7": "malformed_response",
    }
    assert got["a-text-0"].generated_text.startswith("FAKE:")
    progress = adapter.describe_batch(adapter.check_batch_status(batch.batch_id, config))
    assert (progress.completed, progress.failed, progress.total) == (5, 3, 8)
    # a job cancelled half-way keeps the rows it processed, the rest is incomplete
    fake.script(cancel_after_requests=2)
    stopped = adapter.submit_chunk_lines(
        "c2", _lines(adapter, config, ["x", "y", "z"], "b"), config
    )
    status = adapter.check_batch_status(stopped.batch_id, config)
    assert status.status == "failed" and status.raw_response["state"] == "JOB_STATE_CANCELLED"
    assert sorted(r.custom_id for r in adapter.retrieve_results(stopped.batch_id, config)) == [
        "b-text-0",
        "b-text-1",
    ]
    assert adapter.describe_batch(status).error_code == "batch_cancelled"
    adapter.teardown()


def test_a_lost_create_answer_is_adopted_by_display_name(vertex, gcs, monkeypatch):
    fake = vertex
    adapter, config = _adapter(fake, gcs, run_id="r1")
    fake.script(fail_batch_creates={"nth": 1, "status": 500, "created": True})
    batch = adapter.submit_chunk_lines("c1", _lines(adapter, config, ["p", "q"]), config)
    jobs = fake.jobs()
    assert len(jobs) == 1 and batch.batch_id == jobs[0]["name"]  # adopted, not created again
    assert jobs[0]["displayName"] == "mmirage-r1-c1"
    assert fake.create_counts() == {"a-text-0": 1, "a-text-1": 1}
    for i in range(3):  # other runs' jobs: the lookup pages through them
        adapter.run_id = f"other{i}"
        adapter.submit_chunk_lines("c1", _lines(adapter, config, [f"o{i}"], "b"), config)
    adapter.FIND_BATCH_PAGE_SIZE = 1
    assert adapter.find_batch("r1", "c1").batch_id == batch.batch_id
    assert adapter.find_batch("r1", "c2") is None
    assert sorted(r.custom_id for r in adapter.retrieve_results(batch.batch_id, config)) == [
        "a-text-0",
        "a-text-1",
    ]
    adapter.teardown()


# -- lines, ids and config ----------------------------------------------------------------------


@pytest.mark.parametrize("cid", ["answer-text-0", "Answer-text-12", "x" * 64, "A_b-C"])
def test_custom_ids_round_trip_through_labels(cid):
    labels = id_labels(cid)
    assert all(len(v) <= 63 and v == v.lower() for v in labels.values())
    assert id_from_labels(labels) == cid


def test_prediction_lines_read_status_errors_and_wrong_shapes():
    from mmirage_beam.results import MalformedResult

    request = {"labels": {"mmirage_id": "a-text-0"}, "contents": []}
    status = 'Bad Request: {"error": {"code": 400, "message": "no", "status": "INVALID_ARGUMENT"}}'
    failed = normalise_prediction_line({"status": status, "request": request})
    assert (failed.error.type, failed.error.status_code) == ("invalid_request_error", 400)
    odd = normalise_prediction_line({"status": "something odd", "request": request})
    assert odd.error.type == "unknown_error" and odd.custom_id == "a-text-0"
    with pytest.raises(MalformedResult):
        normalise_prediction_line({"status": "", "request": {"contents": []}})


def test_config_keys_are_checked_naming_the_key():
    good = {"project": "p-1", "location": "us-central1", "gcs_staging_uri": "gs://b/x/"}
    assert VertexBatchConfig(**good).gcs_staging_uri == "gs://b/x"
    for key, bad in (("project", ""), ("location", "US Central"), ("gcs_staging_uri", "/tmp/x")):
        with pytest.raises(ConfigError) as err:
            VertexBatchConfig(**{**good, key: bad})
        assert err.value.key == key


# -- mmirage run --wait ---------------------------------------------------------------------------

ROWS = 20
FLAKY = {3, 11}  # rate-limited the first time the fake sees the prompt, then answered


def test_run_wait_merges_every_row_in_order_as_the_sdk_reads_them(vertex, gcs, tmp_path, capsys):
    """``mmirage run --wait`` on 20 GSM8K rows (two of them flaky: failed once, re-sent by
    the cycle): every row merged, in order, its answer the text google-genai's own
    ``GenerateContentResponse`` reads from the job's predictions file in the emulator."""
    from google.genai import types

    from pipelines.submit import main as submit_main
    from tests.conftest import GSM8K_JSONL, base_config, write_config

    fake = vertex
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]]
    for i in FLAKY:
        rows[i]["question"] += " FAKE_ERROR:flaky"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(
        tmp_path,
        "vertex",
        base_url=fake.base_url,
        project=PROJECT,
        location=LOCATION,
        gcs_staging_uri=gcs.uri("cycle"),
        max_requests_per_chunk=8,
    )
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", write_config(tmp_path, cfg), "--wait", "--retries", "1"]
    code = submit_main([*argv, "--poll-interval", "0.2", "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "every row succeeded" in text
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x]
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    # What the SDK reads back: every job's predictions, through google-genai's types.
    client = _client(fake)
    texts: dict[str, str] = {}
    jobs = list(client.batches.list())
    assert len(jobs) == 4  # 3 chunks of at most 8, then one for the two flaky rows
    for job in jobs:
        assert job.state.name == "JOB_STATE_SUCCEEDED" and job.display_name.startswith("mmirage-")
        for key in gcs.keys(job.output_info.gcs_output_directory):
            for raw in gcs.read(key).splitlines():
                line = json.loads(raw)
                if line["status"] == "":
                    response = types.GenerateContentResponse.model_validate(line["response"])
                    texts[id_from_labels(line["request"]["labels"])] = response.text
    assert len(texts) == ROWS
    assert [m["answer"] for m in merged] == [texts[f"answer-text-{i}"] for i in range(ROWS)]
    sent = fake.create_counts()
    assert {c for c, n in sent.items() if n == 2} == {f"answer-text-{i}" for i in FLAKY}


def test_demo_runs_for_vertex_offline(tmp_path, capsys, monkeypatch):
    """``mmirage demo --provider vertex``: the emulator and the fake in this process,
    submit, watch, merge; the environment it set is put back afterwards."""
    from mmirage_beam.testing.fake_provider.answers import fake_answer_text
    from pipelines.cli import main as cli_main
    from tests.conftest import GSM8K_JSONL

    skip_unless_gcs_emulator()
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    code = cli_main(
        [
            "demo",
            "--provider",
            "vertex",
            "--workdir",
            str(tmp_path),
            "--rows",
            "12",
            "--delay",
            "0.5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    merged = [
        json.loads(x) for x in (tmp_path / "vertex" / "merged.jsonl").read_text().splitlines()
    ]
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:12]]
    assert [m["source_index"] for m in merged] == list(range(12))
    for m, row in zip(merged, rows):
        prompt = (
            "Solve this grade-school maths problem step by step, then give the final number.\n"
            + row["question"]
        )
        assert m["solution"] == fake_answer_text(prompt) and 1 <= m["difficulty"] <= 5
    assert "STORAGE_EMULATOR_HOST" not in os.environ


# -- verdicts: merge, check and resubmit agree (as tests/transforms/test_verdicts.py) ---------

OUTCOMES = {
    1: ("FAKE_ERROR:invalid_request", "invalid_request_error", False),
    2: ("FAKE_ERROR:server_error", "server_error", True),
    3: ("FAKE_ERROR:rate_limit", "rate_limit_exceeded", True),
    4: ("FAKE_ERROR:timeout", "timeout", True),
    5: ("FAKE_ERROR:length", "truncated", False),
    6: ("FAKE_ERROR:refusal", "content_filter", False),
    7: ("FAKE_ERROR:content_filter", "content_filter", False),
    8: ("FAKE_ERROR:empty", "empty", True),
    9: ("FAKE_ERROR:malformed_line", "malformed_response", True),
    10: ("FAKE_ERROR:truncated_line", "malformed_response", True),
    11: ("FAKE_ERROR:wrong_shape", "malformed_response", True),
    12: ("FAKE_ERROR:invalid_utf8", "malformed_response", True),
}


def _verdict_config(fake, gcs, tmp_path, rows, prefix):
    from tests.conftest import base_config, write_config

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(
        tmp_path,
        "vertex",
        base_url=fake.base_url,
        project=PROJECT,
        location=LOCATION,
        gcs_staging_uri=gcs.uri(prefix),
    )
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return write_config(tmp_path, cfg)


def _gsm8k(n, markers):
    from tests.conftest import GSM8K_JSONL

    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:n]]
    for i, marker in markers.items():
        rows[i]["question"] += f" {marker}"
    return rows


def _merged(tmp_path, cfg):
    from pipelines.merge import main as merge_main

    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out)])
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x]
    errors_file = tmp_path / "merged.errors.jsonl"
    errors = [json.loads(x) for x in errors_file.read_text(encoding="utf-8").splitlines() if x]
    return code, merged, errors


def test_verdicts_every_outcome_merges_typed_and_resubmit_resends_the_retryable(
    vertex, gcs, tmp_path, capsys, fast_provider_retries
):
    """Every marker's row merged with its type and retryability, every other row
    answered, all in order; ``resubmit`` re-sends exactly the retryable ones."""
    from mmirage_beam.testing import fake_answer_text
    from pipelines.resubmit import main as resubmit_main
    from pipelines.submit import main as submit_main

    fake = vertex
    rows = _gsm8k(14, {i: m for i, (m, _, _) in OUTCOMES.items()})
    cfg = _verdict_config(fake, gcs, tmp_path, rows, "verdicts")
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    code, merged, errors = _merged(tmp_path, cfg)
    assert code == 1 and [m["source_index"] for m in merged] == list(range(14))
    got = {e["source_index"]: (e["error_type"], e["retryable"]) for e in errors}
    assert got == {i: (kind, retry) for i, (_, kind, retry) in OUTCOMES.items()}
    for i in (0, 13):
        prompt = "Answer concisely:\n" + rows[i]["question"]
        assert merged[i]["answer"] == fake_answer_text(prompt)
    capsys.readouterr()
    before = fake.create_counts()
    assert resubmit_main(["--config", cfg, "--run-id", "r1", "--new-run-id", "r2"]) == 0
    resent = {c for c, n in fake.create_counts().items() if n > before.get(c, 0)}
    assert resent == {f"answer-text-{i}" for i, (_, _, retry) in OUTCOMES.items() if retry}


@pytest.mark.parametrize("kind", ["expire", "cancel"])
def test_expired_or_cancelled_job_keeps_its_processed_rows_and_fails_the_rest(
    vertex, gcs, tmp_path, capsys, kind
):
    from pipelines.check import main as check_main
    from pipelines.resubmit import main as resubmit_main
    from pipelines.submit import main as submit_main

    fake = vertex
    cfg = _verdict_config(fake, gcs, tmp_path, _gsm8k(10, {}), f"stop-{kind}")
    fake.script(**{f"{kind}_after_requests": 6})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    assert check_main(["--config", cfg]) == 1
    out = capsys.readouterr().out
    assert "what this means:" in out and "mmirage resubmit --config" in out
    code, merged, errors = _merged(tmp_path, cfg)
    assert code == 1 and [m["source_index"] for m in merged] == list(range(10))
    assert len([m for m in merged if "mmirage_errors" not in m]) == 6
    word = {"expire": "batch_expired", "cancel": "batch_cancelled"}[kind]
    assert len(errors) == 4 and {e["error_type"] for e in errors} == {word}
    assert all(e["retryable"] for e in errors)
    assert resubmit_main(["--config", cfg, "--only", "all", "--new-run-id", "r2"]) == 0
    assert "re-sending 4 failed request(s) (all)" in capsys.readouterr().err


# -- Claude on Vertex AI ----------------------------------------------------------------------


def test_claude_lines_carry_custom_id_and_anthropic_bodies_with_typed_outcomes(vertex, gcs):
    """``model: claude-...``: ``{"custom_id", "request": Anthropic params without model,
    anthropic_version}`` lines, a job on ``publishers/anthropic/models/...``, results read
    as Anthropic messages, markers as failed or typed rows."""
    fake = vertex
    adapter, config = _adapter(fake, gcs, model="claude-haiku-4-5", max_tokens=64)
    texts = ["plain", "FAKE_ERROR:invalid_request", "FAKE_ERROR:rate_limit", "FAKE_ERROR:length"]
    texts += ["FAKE_ERROR:refusal", "FAKE_ERROR:malformed_line"]
    line = adapter.build_request("a-text-0", _payload("plain"), config)
    assert line == {
        "custom_id": "a-text-0",
        "request": {
            "anthropic_version": "vertex-2023-10-16",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "plain"}],
        },
    }
    assert adapter.request_without_id(line) == {"request": line["request"]}
    batch = adapter.submit_chunk_lines("c1", _lines(adapter, config, texts), config)
    (job,) = fake.jobs()
    assert job["model"] == "publishers/anthropic/models/claude-haiku-4-5"
    assert adapter.check_batch_status(batch.batch_id, config).status == "completed"
    got = {r.custom_id: r for r in adapter.retrieve_results(batch.batch_id, config)}
    kinds = {cid: (r.error.type if r.error else "ok") for cid, r in got.items()}
    assert kinds == {
        "a-text-0": "ok",
        "a-text-1": "invalid_request_error",
        "a-text-2": "rate_limit_exceeded",
        "a-text-3": "truncated",
        "a-text-4": "refusal",
        "a-text-5": "malformed_response",
    }
    from mmirage_beam.testing.fake_provider.answers import fake_answer_text

    assert got["a-text-0"].generated_text == fake_answer_text("plain")
    assert got["a-text-0"].input_tokens == 1
    adapter.teardown()


def test_claude_run_wait_merges_every_row_in_order(vertex, gcs, tmp_path, capsys):
    from mmirage_beam.testing.fake_provider.answers import fake_answer_text
    from pipelines.submit import main as submit_main
    from tests.conftest import base_config, write_config

    fake = vertex
    rows = _gsm8k(12, {4: "FAKE_ERROR:flaky"})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(
        tmp_path,
        "vertex",
        model="claude-haiku-4-5",
        base_url=fake.base_url,
        project=PROJECT,
        location=LOCATION,
        gcs_staging_uri=gcs.uri("claude-cycle"),
        max_requests_per_chunk=5,
    )
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", write_config(tmp_path, cfg), "--wait", "--retries", "1"]
    code = submit_main([*argv, "--poll-interval", "0.2", "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x]
    assert [m["source_index"] for m in merged] == list(range(12))
    for m, row in zip(merged, rows):
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + row["question"])
    assert fake.create_counts()["answer-text-4"] == 2


def test_the_fake_refuses_what_the_service_documents(vertex, gcs):
    """Labels outside the documented rules make a failed row (400); a line that is not
    JSON, or an input file that does not exist, fails the job (``error``), which the
    adapter reports as ``batch_failed``; a BigQuery source and a call without a token
    are refused."""
    import httpx
    from google.genai import errors

    fake = vertex
    client = _client(fake)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    good = json.dumps({"request": {**body, "labels": {"mmirage_id": "ok-1"}}}).encode()
    upper = json.dumps({"request": {**body, "labels": {"mmirage_id": "Not-OK"}}}).encode()
    src = _put(gcs, "refuse/labels.jsonl", [good + b"\n", upper + b"\n"])
    job = client.batches.create(model="gemini-2.5-flash", src=src, config={"dest": gcs.uri("r1")})
    job = client.batches.get(name=job.name)
    assert (job.completion_stats.successful_count, job.completion_stats.failed_count) == (1, 1)
    rows = [
        json.loads(x)
        for k in gcs.keys(job.output_info.gcs_output_directory)
        for x in gcs.read(k).splitlines()
    ]
    (bad,) = [r for r in rows if r["status"]]
    assert bad["status"].startswith("Bad Request: ") and '"code": 400' in bad["status"]
    assert "response" not in bad
    adapter, config = _adapter(fake, gcs)
    for name, lines in (("notjson", [b"{not json\n"]), ("missing", None)):
        uri = (
            gcs.uri(f"refuse/{name}.jsonl")
            if lines is None
            else _put(gcs, f"refuse/{name}.jsonl", lines)
        )
        failed = client.batches.create(
            model="gemini-2.5-flash", src=uri, config={"dest": gcs.uri(name)}
        )
        status = adapter.check_batch_status(failed.name, config)
        assert status.status == "failed" and status.raw_response["state"] == "JOB_STATE_FAILED"
        progress = adapter.describe_batch(status)
        assert progress.error_code == "batch_failed" and progress.detail
        assert list(adapter.retrieve_results(failed.name, config)) == []
    with pytest.raises(errors.ClientError) as bq:
        client.batches.create(
            model="gemini-2.5-flash", src="bq://p.d.t", config={"dest": gcs.uri("x")}
        )
    assert bq.value.code == 400
    unauthenticated = httpx.get(
        f"{fake.base_url}/v1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs"
    )
    assert unauthenticated.status_code == 401
    adapter.teardown()


def test_mmirage_cancel_cancels_each_job_once(vertex, gcs, tmp_path, capsys):
    """``mmirage cancel --yes`` of a run still processing: every job asked once
    (``batchPredictionJobs/{id}:cancel``), then ``JOB_STATE_CANCELLING`` / ``CANCELLED``;
    a second cancel sends nothing."""
    from pipelines.cancel import main as cancel_main
    from pipelines.submit import main as submit_main

    fake = vertex
    cfg = _verdict_config(fake, gcs, tmp_path, _gsm8k(6, {}), "cancel")
    fake.script(processing_delay_secs=3600)
    assert submit_main(["--config", cfg, "--run-id", "slow"]) == 0
    capsys.readouterr()
    assert cancel_main(["--config", cfg, "--yes"]) == 0
    assert "was JOB_STATE_PENDING): now JOB_STATE_CANCELLING" in capsys.readouterr().out
    assert fake.call_counts()["vertex_cancel"] == 1
    assert [j["state"] for j in fake.jobs()] == ["JOB_STATE_CANCELLING"]
    assert cancel_main(["--config", cfg, "--yes"]) == 0
    assert "not cancelled again" in capsys.readouterr().out
    assert fake.call_counts()["vertex_cancel"] == 1


def test_exact_tokens_come_from_vertex_count_tokens(vertex, gcs):
    """``--exact-tokens``: Vertex AI's ``countTokens`` through the SDK (contents and the
    generation config), the number a job's ``promptTokenCount`` reports; none for
    Claude (the estimate stays)."""
    import pickle

    fake = vertex
    adapter, config = _adapter(fake, gcs, max_tokens=32)
    counter = pickle.loads(pickle.dumps(adapter.exact_token_counter(config)))
    plain = adapter.build_request("a-text-0", _payload("What is two plus two?"), config)
    assert counter(plain) == 5
    payload = {**_payload("Name a colour"), "json_schema": {"type": "object"}}
    payload["json_schema"]["properties"] = {"colour": {"type": "string"}}
    assert counter(adapter.build_request("a-text-1", payload, config)) == 3
    assert fake.call_counts()["vertex_count_tokens"] == 2
    claude = _config(fake, gcs, model="claude-haiku-4-5")
    assert adapter.exact_token_counter(claude) is None
    adapter.teardown()


def test_the_fake_embeds_text_embedding_instances_and_refuses_bad_ones(vertex, gcs):
    """A text embedding job through the SDK's batches.create: without
    ``instanceConfig.keyField`` the output echoes ``instance`` and an extra instance field
    is a failed row (the fake's strictness); a bad ``outputDimensionality`` is a 400."""
    from google.genai import errors

    client = _client(vertex)
    lines = [
        json.dumps({"content": "a question"}).encode() + b"\n",
        json.dumps({"content": "b", "mmirage_id": "x"}).encode() + b"\n",
        json.dumps({"content": "c FAKE_ERROR:server_error"}).encode() + b"\n",
    ]
    src = _put(gcs, "embed/plain.jsonl", lines)
    extra = {"modelParameters": {"outputDimensionality": 4}}
    config = {"dest": gcs.uri("e1"), "http_options": {"extra_body": extra}}
    job = client.batches.create(model="text-embedding-005", src=src, config=config)
    job = client.batches.get(name=job.name)
    assert (job.completion_stats.successful_count, job.completion_stats.failed_count) == (1, 2)
    rows = [
        json.loads(x)
        for k in gcs.keys(job.output_info.gcs_output_directory)
        for x in gcs.read(k).splitlines()
    ]
    by_content = {r["instance"]["content"]: r for r in rows}
    ok = by_content["a question"]
    assert ok["status"] == "" and len(ok["predictions"][0]["embeddings"]["values"]) == 4
    assert (
        "'mmirage_id'" in by_content["b"]["status"] and '"code": 400' in by_content["b"]["status"]
    )
    assert '"code": 500' in by_content["c FAKE_ERROR:server_error"]["status"]
    bad = {"dest": gcs.uri("e2"), "http_options": {"extra_body": {"modelParameters": {}}}}
    bad["http_options"]["extra_body"]["modelParameters"]["outputDimensionality"] = 0
    with pytest.raises(errors.ClientError) as info:
        client.batches.create(model="text-embedding-005", src=src, config=bad)
    assert info.value.code == 400


def test_fake_provider_command_starts_vertex_with_its_emulator():
    """``mmirage fake-provider --with vertex``: beside the shared fake, the GCS emulator and
    Vertex AI's fake (a server of its own), whose processor keys are printed; it answers
    in Vertex's error shape and everything stops on SIGTERM."""
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    skip_unless_gcs_emulator()
    cmd = [sys.executable, "-m", "mmirage_beam.testing.fake_provider", "--port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--with", "vertex"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()  # blocks until the fake prints (or exits)
        while line and not line.startswith("  with vertex: "):
            line = proc.stdout.readline()
        assert line, proc.stderr.read()
        keys = json.loads(line.split(": ", 1)[1])
        assert keys["project"] == "mmirage-demo" and keys["gcs_staging_uri"].startswith("gs://")
        jobs = (
            f"{keys['base_url']}/v1/projects/mmirage-demo/locations/us-central1/batchPredictionJobs"
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(jobs, timeout=30)
        assert info.value.code == 401
        assert json.loads(info.value.read())["error"]["status"] == "UNAUTHENTICATED"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0
