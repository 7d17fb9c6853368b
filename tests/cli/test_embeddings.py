"""``output_type: embedding``: embeddings batches end to end (``mmirage run --wait``
through the real SDKs to the embedded fake, merged to JSONL, Parquet and a HF folder),
the config rules, and the result parsing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mmirage_beam.config import config_from_dict
from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.openai.fake_bodies import embedding_vector
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

ROWS = 6
FAILED = 2  # its text carries FAKE_ERROR:invalid_request (a 400, not retried)
DIMS = 16


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _questions(failed=FAILED) -> list[str]:
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]
    questions = [json.loads(x)["question"] for x in lines]
    if failed is not None:
        questions[failed] += " FAKE_ERROR:invalid_request"
    return questions


def _embedding_config(tmp_path, provider="openai", failed=FAILED, **processor):
    data = tmp_path / "rows.jsonl"
    rows = "".join(json.dumps({"question": q}) + "\n" for q in _questions(failed))
    data.write_text(rows, "utf-8")
    cfg = base_config(tmp_path, provider, **processor)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["outputs"] = [
        {"name": "vec", "type": "batch_api", "output_type": "embedding", "prompt": "{{ question }}"}
    ]
    cfg["processing_params"]["output_schema"] = {"question": "{{ question }}", "vec": "{{ vec }}"}
    return cfg


def _openai(tmp_path, fake, failed=FAILED, **extra):
    return _embedding_config(
        tmp_path,
        "openai",
        failed=failed,
        base_url=fake.openai_base_url,
        model="text-embedding-3-small",
        dimensions=DIMS,
        **extra,
    )


def _check_formats(tmp_path, cfg, expected):
    """The merge as Parquet and as a HF folder, read back by pyarrow and datasets: the
    vectors in order, a failed row's null. The HF column is a fixed-size list<float32>
    of DIMS; so is the Parquet column when every row has its vector, else (pyarrow
    cannot read a null fixed-size list from Parquet) a variable-length list<float32>."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    failed = any(v is None for v in expected)
    code = 1 if failed else 0
    parquet = tmp_path / "merged.parquet"
    argv = ["--config", cfg, "--output-path", str(parquet), "--output-format", "parquet"]
    assert merge_main(argv) == code
    table = pq.read_table(parquet)
    want = pa.list_(pa.float32()) if failed else pa.list_(pa.float32(), DIMS)
    assert table.schema.field("vec").type == want
    vectors = table.column("vec").to_pylist()
    assert len(vectors) == len(expected)
    for got, vector in zip(vectors, expected):
        assert got is None if vector is None else got == pytest.approx(vector, abs=1e-6)

    folder = tmp_path / "merged_hf"
    argv = ["--config", cfg, "--output-path", str(folder), "--output-format", "hf"]
    assert merge_main(argv) == code
    ds = datasets.load_from_disk(str(folder))
    assert ds.data.schema.field("vec").type == pa.list_(pa.float32(), DIMS)
    assert getattr(ds.features["vec"], "length", None) == DIMS
    rows = ds.to_list()
    assert len(rows) == len(expected)
    for got, vector in zip(rows, expected):
        assert (
            got["vec"] is None if vector is None else got["vec"] == pytest.approx(vector, abs=1e-6)
        )


def test_openai_embeddings_run_wait_merges_vectors_of_the_requested_dimensions(
    tmp_path, capsys, provider_env
):
    from openai.types import CreateEmbeddingResponse, EmbeddingCreateParams
    from pydantic import TypeAdapter

    fake = provider_env
    cfg = write_config(tmp_path, _openai(tmp_path, fake))
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "0", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 1, text  # the marked row failed and is named

    # Every line sent is an /v1/embeddings request the SDK's own type accepts.
    sent = fake.submitted_requests("openai")
    assert len(sent) == ROWS
    params = TypeAdapter(EmbeddingCreateParams)
    for entry in sent:
        line = entry["request"]
        assert line["url"] == "/v1/embeddings" and line["method"] == "POST"
        assert params.validate_python(line["body"]) == line["body"]
        assert line["body"]["dimensions"] == DIMS and line["body"]["encoding_format"] == "float"

    questions = _questions()
    expected = [None if i == FAILED else embedding_vector(q, DIMS) for i, q in enumerate(questions)]
    # the fake's answer is what the SDK parses as a CreateEmbeddingResponse
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": expected[0]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    CreateEmbeddingResponse.model_validate(body)

    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    for i, m in enumerate(merged):
        assert m["question"] == questions[i]
        if i == FAILED:
            assert m["vec"] is None
            assert m["mmirage_errors"]["vec"]["type"] == "invalid_request_error"
            continue
        assert "mmirage_errors" not in m
        assert m["vec"] == expected[i] and len(m["vec"]) == DIMS
        assert m["input_tokens"] > 0 and m["output_tokens"] == 0
    errors = _read_jsonl(tmp_path / "merged.errors.jsonl")
    assert [(e["source_index"], e["output_name"]) for e in errors] == [(FAILED, "vec")]
    _check_formats(tmp_path, cfg, expected)


def _cfg(tmp_path, provider="openai", **processor):
    processor.setdefault("model", "text-embedding-3-small")
    return _embedding_config(tmp_path, provider, **processor)


def test_embedding_config_sets_the_embeddings_endpoint_and_dimensions(tmp_path):
    config = config_from_dict(_cfg(tmp_path, dimensions=64))
    assert config.processor.batch_endpoint == "/v1/embeddings"
    assert config.outputs[0].output_type == "embedding" and config.outputs[0].dimensions == 64


@pytest.mark.parametrize(
    "change, key, words",
    [
        (
            lambda c: c["processors"][0].update(batch_endpoint="/v1/chat/completions"),
            "processors[0].batch_endpoint",
            "/v1/embeddings",
        ),
        (
            lambda c: c["processors"][0].update(temperature=0.2),
            "processors[0].temperature",
            "text-generation setting",
        ),
        (
            lambda c: c["processors"][0].update(max_tokens=5),
            "processors[0].max_tokens",
            "text-generation setting",
        ),
        (lambda c: c["processors"][0].update(dimensions=0), "processors[0].dimensions", ">= 1"),
        (
            lambda c: c["processors"][0].update(model="text-embedding-ada-002", dimensions=8),
            "processors[0].dimensions",
            "text-embedding-3",
        ),
        (lambda c: c["processors"][0].pop("model"), "processors[0].model", "required"),
        (
            lambda c: c["processors"][0].update(provider="anthropic"),
            "processors[0].provider",
            "no embeddings",
        ),
        (
            lambda c: c["processing_params"]["outputs"][0].update(output_schema=["a"]),
            "processing_params.outputs[0].output_schema",
            "JSON outputs",
        ),
        (
            lambda c: c["processing_params"]["outputs"].append(
                {"name": "answer", "output_type": "plain", "prompt": "{{ question }}"}
            ),
            "processing_params.outputs[1].output_type",
            "mixes",
        ),
        (
            lambda c: (
                c["processing_params"]["inputs"].append(
                    {"name": "img", "key": "img", "type": "image"}
                ),
                c["processing_params"]["outputs"][0].update(prompt="{{ question }} {{ img }}"),
            ),
            "processing_params.outputs[0].prompt",
            "image input 'img'",
        ),
    ],
)
def test_embedding_config_refusals_name_the_key(tmp_path, change, key, words):
    cfg = _cfg(tmp_path)
    change(cfg)
    with pytest.raises(ConfigError) as info:
        config_from_dict(copy.deepcopy(cfg))
    assert info.value.key == key and words in str(info.value), str(info.value)


def test_chat_outputs_refuse_dimensions_and_the_embeddings_endpoint(tmp_path):
    for extra, key in (
        ({"dimensions": 8}, "dimensions"),
        ({"batch_endpoint": "/v1/embeddings"}, "batch_endpoint"),
    ):
        cfg = base_config(tmp_path, "openai", **extra)
        with pytest.raises(ConfigError) as info:
            config_from_dict(cfg)
        assert info.value.key == f"processors[0].{key}", str(info.value)


def test_openai_embedding_result_lines():
    from mmirage_beam.providers.openai.adapter import normalise_result_line
    from mmirage_beam.results import check_answer

    def line(body):
        return {"custom_id": "vec-text-0", "response": {"status_code": 200, "body": body}}

    ok = normalise_result_line(
        line(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -1, 0.5]}],
                "model": "text-embedding-3-small",
                "usage": {"prompt_tokens": 7, "total_tokens": 7},
            }
        )
    )
    assert ok.error is None and (ok.input_tokens, ok.output_tokens) == (7, 0)
    assert check_answer("embedding", ok.generated_text, None, 3) == ([0.25, -1.0, 0.5], None)
    value, err = check_answer("embedding", ok.generated_text, None, 4)
    assert (
        value is None
        and err["type"] == "invalid_embedding"
        and "dimensions asks for 4" in err["message"]
    )
    bad = normalise_result_line(line({"object": "list", "data": [{"embedding": ["x"]}]}))
    assert bad.error is not None and bad.error.type == "malformed_response"


def test_mistral_embeddings_run_wait_merges_vectors_of_the_requested_dimensions(
    tmp_path, capsys, provider_env
):
    """Every row answered: the Parquet column keeps its fixed size too."""
    from mistralai.client.models import EmbeddingRequest

    fake = provider_env
    cfg = _embedding_config(
        tmp_path,
        "mistral",
        failed=None,
        base_url=fake.mistral_base_url,
        model="codestral-embed",
        dimensions=DIMS,
    )
    cfg = write_config(tmp_path, cfg)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "0", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text

    sent = fake.submitted_requests("mistral")
    assert len(sent) == ROWS
    for entry in sent:
        body = entry["request"]["body"]
        assert body["output_dimension"] == DIMS and isinstance(body["input"], str)
        EmbeddingRequest.model_validate({"model": "codestral-embed", **body})
    assert {b["endpoint"] for b in fake.batches("mistral")} == {"/v1/embeddings"}

    expected = [embedding_vector(q, DIMS) for q in _questions(None)]
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    assert [m["vec"] for m in merged] == expected
    assert all("mmirage_errors" not in m and m["output_tokens"] == 0 for m in merged)
    _check_formats(tmp_path, cfg, expected)


def test_mistral_fake_answers_an_embedding_response_the_sdk_reads():
    from mistralai.client.models import EmbeddingResponse

    from mmirage_beam.providers.mistral.fake_bodies import embeddings_response
    from mmirage_beam.providers.mistral.outcomes import normalise_result_line

    body = embeddings_response("mistral-embed", ["hello"], 5, 1)
    EmbeddingResponse.model_validate(body)
    line = {"custom_id": "vec-text-0", "response": {"status_code": 200, "body": body}}
    result = normalise_result_line(line)
    assert result.error is None and json.loads(result.generated_text) == embedding_vector(
        "hello", 5
    )
    assert (result.input_tokens, result.output_tokens) == (1, 0)


def test_gemini_embeddings_run_wait_merges_vectors_of_the_requested_dimensions(
    tmp_path, capsys, provider_env
):
    """Jobs made by google-genai's batches.create_embeddings (asyncBatchEmbedContent,
    file source); the marked row's failure is its null vector and error."""
    from google.genai import types

    fake = provider_env
    cfg = _embedding_config(
        tmp_path,
        "gemini",
        base_url=fake.gemini_base_url,
        model="gemini-embedding-001",
        dimensions=DIMS,
    )
    cfg = write_config(tmp_path, cfg)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "0", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 1, text

    sent = fake.submitted_requests("gemini")
    assert len(sent) == ROWS
    for entry in sent:
        request = entry["request"]["request"]
        assert set(request) == {"content", "output_dimensionality"}
        assert request["output_dimensionality"] == DIMS
        types.Content.model_validate(request["content"])
    kinds = {b["metadata"]["@type"].rsplit(".", 1)[-1] for b in fake.batches("gemini")}
    assert kinds == {"EmbedContentBatch"}

    questions = _questions()
    expected = [None if i == FAILED else embedding_vector(q, DIMS) for i, q in enumerate(questions)]
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    for i, m in enumerate(merged):
        if i == FAILED:
            assert (
                m["vec"] is None and m["mmirage_errors"]["vec"]["type"] == "invalid_request_error"
            )
        else:
            assert m["vec"] == expected[i] and "mmirage_errors" not in m
    _check_formats(tmp_path, cfg, expected)


def test_gemini_embedding_config_and_result_lines(tmp_path):
    from mmirage_beam.providers.gemini.outcomes import normalise_result_line

    config = config_from_dict(_cfg(tmp_path, "gemini", model="gemini-embedding-001"))
    assert config.processor.embedding_job is True
    cfg = _cfg(tmp_path, "gemini", embedding_job=True)
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processors[0].embedding_job"
    response = {"embedding": {"values": [1, 0.5]}, "tokenCount": "3"}
    ok = normalise_result_line({"key": "k", "response": response})
    assert ok.error is None and json.loads(ok.generated_text) == [1.0, 0.5]
    assert (ok.input_tokens, ok.output_tokens) == (3, 0)
    bad = normalise_result_line({"key": "k", "response": {"embedding": {"values": []}}})
    assert bad.error is not None and bad.error.type == "malformed_response"


def test_dry_run_exports_embeddings_lines_the_sdk_accepts_with_exact_token_counts(tmp_path, capsys):
    from mmirage_beam.providers.openai.tokens import count_openai_request
    from mmirage_beam.providers.tokens import count_text
    from tests.sdk_validation import validate_export

    cfg = write_config(tmp_path, _cfg(tmp_path, dimensions=DIMS))
    argv = ["--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl"), "--run-id", "dry"]
    assert submit_main(argv) == 0, capsys.readouterr().out
    export = tmp_path / "p.dry.jsonl"
    n, problems = validate_export(export)
    assert problems == [] and n == ROWS
    lines = [json.loads(x)["request"] for x in export.read_text("utf-8").splitlines()]
    assert [ln["body"]["input"] for ln in lines] == _questions()
    count = count_openai_request(lines[0])
    assert count.exact and count.max_output_tokens == 0
    assert count.input_tokens == count_text(_questions()[0], "cl100k_base")


def test_a_flaky_embedding_is_resent_by_the_cycle_and_merged(tmp_path, capsys, provider_env):
    """The cycle's resubmission (merge_rows.build_failures_pipeline, which checks
    embedding answers as merge does) re-sends the rate-limited row only."""
    fake = provider_env
    cfg_dict = _openai(tmp_path, fake)
    rows = Path(cfg_dict["loading_params"]["datasets"][0]["path"])
    questions = _questions(None)
    questions[4] += " FAKE_ERROR:flaky"
    rows.write_text("".join(json.dumps({"question": q}) + "\n" for q in questions), "utf-8")
    cfg = write_config(tmp_path, cfg_dict)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "1", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    sent: dict[str, int] = {}
    for entry in fake.submitted_requests("openai"):
        sent[entry["custom_id"]] = sent.get(entry["custom_id"], 0) + 1
    assert {c for c, k in sent.items() if k == 2} == {"vec-text-4"} and len(sent) == ROWS
    merged = _read_jsonl(out)
    assert [m["vec"] for m in merged] == [embedding_vector(q, DIMS) for q in questions]
    assert all("mmirage_errors" not in m for m in merged)


def test_an_added_embedding_output_reuses_the_vectors_already_paid_for(
    tmp_path, capsys, provider_env
):
    fake = provider_env
    cfg = _openai(tmp_path, fake, failed=None)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path, "--run-id", "first"]) == 0
    first = tmp_path / "first.jsonl"  # the merge records the answers a later run reuses
    assert merge_main(["--config", cfg_path, "--output-path", str(first)]) == 0
    cfg["processing_params"]["outputs"].append(
        {"name": "vec2", "output_type": "embedding", "prompt": "Topic: {{ question }}"}
    )
    cfg["processing_params"]["output_schema"]["vec2"] = "{{ vec2 }}"
    write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path, "--run-id", "second"]) == 0
    sent = [e["custom_id"] for e in fake.submitted_requests("openai")]
    assert sorted(sent[ROWS:]) == sorted(f"vec2-text-{i}" for i in range(ROWS))  # vec: reused
    out = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg_path, "--output-path", str(out), "--run-id", "second"]) == 0
    capsys.readouterr()
    questions = _questions(None)
    for q, row in zip(questions, _read_jsonl(out)):
        assert row["vec"] == embedding_vector(q, DIMS)
        assert row["vec2"] == embedding_vector(f"Topic: {q}", DIMS)
        assert row["mmirage_reused_from"] == {"vec": "first"}


# -- provider: vertex (a text embedding model's batch prediction job) --------------------------


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A GCS emulator in its own process, for the module's Vertex AI tests."""
    from tests.storage_servers import GCSServer, skip_unless_gcs_emulator

    skip_unless_gcs_emulator()
    server = GCSServer(tmp_path_factory.mktemp("gcs"))
    server.start()
    yield server
    assert server.stop() == [], "the emulator's process group was not reaped"


@pytest.fixture
def vertex(gcs, monkeypatch):
    """The fake Vertex AI service on the emulator, with the environment a worker needs."""
    from mmirage_beam.providers.vertex.adapter import TOKEN_ENV_VAR
    from mmirage_beam.providers.vertex.fake import FakeVertexServer

    for name, value in gcs.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(TOKEN_ENV_VAR, "vertex-test-token")
    with FakeVertexServer(gcs.endpoint) as fake:
        yield fake


def _vertex(tmp_path, fake, gcs, **extra):
    extra.setdefault("model", "text-embedding-005")
    return _embedding_config(
        tmp_path,
        "vertex",
        base_url=fake.base_url,
        project="mmirage-test",
        location="us-central1",
        gcs_staging_uri=gcs.uri("embed"),
        dimensions=DIMS,
        **extra,
    )


def test_vertex_embeddings_run_wait_merges_vectors_of_the_requested_dimensions(
    tmp_path, capsys, vertex, gcs
):
    """Jobs made by google-genai's batches.create (vertexai=True) with the embedding
    model, the dimensions in modelParameters and the custom_id's field named by
    instanceConfig.keyField; the instances are what the docs show plus that field. One
    row is rate-limited once (a 429 in its line's status), re-sent by the cycle in a
    second job, so every row has its vector and Parquet's column is fixed-size."""
    fake = vertex
    cfg_dict = _vertex(tmp_path, fake, gcs, failed=None)
    questions = _questions(None)
    questions[FAILED] += " FAKE_ERROR:flaky"
    rows = Path(cfg_dict["loading_params"]["datasets"][0]["path"])
    rows.write_text("".join(json.dumps({"question": q}) + "\n" for q in questions), "utf-8")
    cfg = write_config(tmp_path, cfg_dict)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "1", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text

    sent = fake.submitted_requests("vertex")
    ids = sorted(e["custom_id"] for e in sent)
    assert ids == sorted([f"vec-text-{i}" for i in range(ROWS)] + [f"vec-text-{FAILED}"])
    for entry in sent:
        i = int(entry["custom_id"].rsplit("-", 1)[1])
        assert entry["request"] == {"mmirage_id": entry["custom_id"], "content": questions[i]}
    jobs = fake.jobs()
    assert len(jobs) == 2  # the first, then the re-sent row's
    lines = []
    for job in jobs:
        assert job["model"] == "publishers/google/models/text-embedding-005"
        assert job["modelParameters"] == {"outputDimensionality": DIMS}
        assert job["instanceConfig"] == {"keyField": "mmirage_id"}
        lines += [
            json.loads(raw)
            for key in gcs.keys(job["outputInfo"]["gcsOutputDirectory"])
            for raw in gcs.read(key).splitlines()
        ]
    # the predictions files hold documented lines: key (keyField), predictions, status
    assert len(lines) == ROWS + 1 and all("instance" not in x for x in lines)
    (limited,) = [x for x in lines if x["status"]]
    assert limited["key"] == f"vec-text-{FAILED}" and '"code": 429' in limited["status"]
    for x in lines:
        if not x["status"]:
            emb = x["predictions"][0]["embeddings"]
            assert len(emb["values"]) == DIMS and emb["statistics"]["token_count"] > 0

    expected = [embedding_vector(q, DIMS) for q in questions]
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    for i, m in enumerate(merged):
        assert m["question"] == questions[i]
        assert m["vec"] == expected[i] and "mmirage_errors" not in m
        assert m["input_tokens"] == len(questions[i].split()) and m["output_tokens"] == 0
    _check_formats(tmp_path, cfg, expected)  # Parquet and HF: fixed-size list<float32>[16]


@pytest.mark.parametrize(
    "model, words",
    [
        ("claude-haiku-4-5", "Claude model"),
        ("gemini-embedding-001", "except Gemini embeddings"),
        ("gemini-2.5-flash", "not a Vertex AI text embedding model"),
    ],
)
def test_vertex_embedding_config_refuses_models_it_cannot_embed_with(tmp_path, model, words):
    cfg = _embedding_config(
        tmp_path,
        "vertex",
        model=model,
        project="p",
        location="us-central1",
        gcs_staging_uri="gs://b/x",
    )
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processors[0].model" and words in str(info.value), str(info.value)


def test_vertex_embedding_config_sets_the_job_kind_and_its_limit(tmp_path):
    from mmirage_beam.costs.prices import batch_price

    base = {"project": "p", "location": "us-central1", "gcs_staging_uri": "gs://b/x"}
    config = config_from_dict(_cfg(tmp_path, "vertex", model="text-embedding-005", **base))
    assert config.processor.embedding_job is True
    assert config.processor.max_requests_per_chunk == 30_000
    # the batch price per million tokens: $0.02 per million characters at ~4 per token
    price = batch_price("vertex", "text-embedding-005", config.processor)
    assert (price.input_per_million, price.output_per_million) == (0.08, 0.0)
    for extra, key in (
        ({"max_requests_per_chunk": 30_001}, "max_requests_per_chunk"),
        ({"embedding_job": True}, "embedding_job"),
        ({"temperature": 0.5}, "temperature"),
    ):
        cfg = _cfg(tmp_path, "vertex", model="text-embedding-005", **base, **extra)
        with pytest.raises(ConfigError) as info:
            config_from_dict(cfg)
        assert info.value.key == f"processors[0].{key}", str(info.value)


def test_vertex_embedding_result_lines():
    from mmirage_beam.providers.vertex.outcomes import normalise_prediction_line

    emb = {"statistics": {"token_count": 4, "truncated": False}, "values": [0.5, -1]}
    keyed = normalise_prediction_line(
        {"key": "vec-text-0", "predictions": [{"embeddings": emb}], "status": ""}
    )
    assert keyed.custom_id == "vec-text-0" and json.loads(keyed.generated_text) == [0.5, -1.0]
    assert (keyed.input_tokens, keyed.output_tokens) == (4, 0)
    # keyField not applied: the echoed instance still names the row
    echoed = normalise_prediction_line(
        {
            "instance": {"mmirage_id": "vec-text-1", "content": "x"},
            "predictions": [{"embeddings": emb}],
            "status": "",
        }
    )
    assert echoed.custom_id == "vec-text-1" and echoed.error is None
    error = json.dumps({"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}})
    failed = normalise_prediction_line({"key": "k", "status": f"Too Many Requests: {error}"})
    assert failed.error is not None and failed.error.status_code == 429
    assert failed.error.type == "rate_limit_exceeded"
    error = json.dumps({"error": {"code": 400, "message": "no", "status": "INVALID_ARGUMENT"}})
    refused = normalise_prediction_line({"key": "k", "status": f"Bad Request: {error}"})
    assert refused.error is not None and refused.error.type == "invalid_request_error"
    bad = normalise_prediction_line(
        {"key": "k", "predictions": [{"embeddings": {"values": ["x"]}}], "status": ""}
    )
    assert bad.error is not None and bad.error.type == "malformed_response"
