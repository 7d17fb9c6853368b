"""The Mistral fake's batch jobs on the endpoints of the mistralai SDK's ``APIEndpoint``
beyond chat, FIM, embeddings and moderations (``providers/mistral/fake_endpoints.py``):
OCR, classifications, chat classifications, conversations and audio transcriptions,
each driven by the real SDK over HTTP, its answers parsed with the SDK's own response
types."""

from __future__ import annotations

import copy
import json

import pytest

from tests.providers.mistral_jobs import job_lines

mistralai = pytest.importorskip("mistralai.client")

CLASSIFIER = "ft:classifier:ministral-3b-latest:a1b2c3d4:20250401:e5f6a7b8"
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "pages": {"type": "integer"}},
    "required": ["title", "pages"],
}

#: endpoint -> (model, a good body, a body whose marker fails it, a body with a key the
#: request type does not have, where that key is, the response type, a model the
#: endpoint does not take)
CASES = {
    "/v1/ocr": (
        "mistral-ocr-latest",
        {
            "document": {"type": "document_url", "document_url": "https://example.com/a.pdf"},
            "pages": [0, 2],
            "document_annotation_format": {
                "type": "json_schema",
                "json_schema": {"name": "doc", "schema": SCHEMA},
            },
        },
        {"document": {"type": "image_url", "image_url": "https://x/FAKE_ERROR:server_error.png"}},
        {"document": {"type": "document_url", "document_url": "https://x/a.pdf"}, "dpi": 300},
        "dpi",
        "OCRResponse",
        "mistral-small-latest",
    ),
    "/v1/classifications": (
        CLASSIFIER,
        {"input": ["a fine text", "x FAKE_ERROR:content_filter"]},
        {"input": "FAKE_ERROR:server_error"},
        {"input": "a text", "labels": ["spam"]},
        "labels",
        "ClassificationResponse",
        "mistral-moderation-latest",
    ),
    "/v1/chat/classifications": (
        CLASSIFIER,
        {"input": [{"messages": [{"role": "user", "content": "hello"}]}] * 2},
        {"input": {"messages": [{"role": "user", "content": "FAKE_ERROR:server_error"}]}},
        {"input": {"messages": [{"role": "user", "content": "hi", "weight": 2}]}},
        "input.messages.0.weight",
        "ClassificationResponse",
        "mistral-small-latest",
    ),
    "/v1/conversations": (
        "mistral-small-latest",
        {
            "inputs": [{"role": "user", "content": "Name a title."}],
            "completion_args": {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "doc", "schema": SCHEMA},
                }
            },
        },
        {"inputs": "FAKE_ERROR:server_error"},
        {"inputs": "hi", "temperature": 0.2},  # belongs in completion_args
        "temperature",
        "ConversationResponse",
        "mistral-embed",
    ),
    "/v1/audio/transcriptions": (
        "voxtral-mini-latest",
        {
            "file_url": "https://example.com/a.mp3",
            "language": "fr",
            "timestamp_granularities": ["segment"],
        },
        {"file_url": "https://example.com/FAKE_ERROR:server_error.mp3"},
        {"file_url": "https://example.com/a.mp3", "response_format": "json"},
        "response_format",
        "TranscriptionResponse",
        "mistral-small-latest",
    ),
}


def _check_answer(endpoint: str, model: str, answer) -> None:
    """What each endpoint's good line answered, beyond parsing as its type."""
    if endpoint == "/v1/ocr":
        assert [p.index for p in answer.pages] == [0, 2]
        assert answer.usage_info.pages_processed == 2
        assert "https://example.com/a.pdf" in answer.pages[0].markdown
        assert set(json.loads(answer.document_annotation)) == {"title", "pages"}
    elif endpoint in ("/v1/classifications", "/v1/chat/classifications"):
        scores = [r["fake_target"].scores["flagged"] for r in answer.results]
        assert scores == ([0.01, 0.99] if endpoint == "/v1/classifications" else [0.01, 0.01])
    elif endpoint == "/v1/conversations":
        (entry,) = answer.outputs
        assert entry.type == "message.output" and entry.model == model
        assert set(json.loads(entry.content)) == {"title", "pages"}
        assert answer.usage.total_tokens > 0
    else:
        assert answer.language == "fr" and "a.mp3" in answer.text
        assert [s.text for s in answer.segments] == [answer.text]
        assert answer.usage.prompt_audio_seconds == 1


@pytest.mark.parametrize("endpoint", list(CASES))
def test_sdk_job_of_each_endpoint_answers_in_its_own_type(fake_provider, endpoint):
    """Inline and from an uploaded file: the good line parses as the SDK's response
    type, the marker fails its line (500), an unknown key is refused (400, "Extra
    inputs are not permitted", as the service says), and a model the endpoint does
    not take is refused at the create."""
    model, good, marked, extra, where, response_type, wrong_model = CASES[endpoint]
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    requests = [
        {"custom_id": "good", "body": good},
        {"custom_id": "marked", "body": marked},
        {"custom_id": "extra", "body": extra},
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    uploaded = client.files.upload(file={"file_name": "in.jsonl", "content": data}, purpose="batch")
    inline_job = client.batch.jobs.create(requests=requests, model=model, endpoint=endpoint)
    file_job = client.batch.jobs.create(input_files=[uploaded.id], model=model, endpoint=endpoint)
    for job in (inline_job, file_job):
        done = client.batch.jobs.get(job_id=job.id)
        assert (done.status, done.endpoint, done.succeeded_requests, done.failed_requests) == (
            "SUCCESS",
            endpoint,
            1,
            2,
        )
        lines = job_lines(client, done)
        status = {k: line["response"]["status_code"] for k, line in lines.items()}
        assert status == {"good": 200, "marked": 500, "extra": 400}
        answer_type = getattr(mistralai.models, response_type)
        _check_answer(
            endpoint, model, answer_type.model_validate(lines["good"]["response"]["body"])
        )
        refusal = lines["extra"]["response"]["body"]
        assert (
            refusal["message"] == f"Invalid request body: {where}: Extra inputs are not permitted"
        )
    with pytest.raises(mistralai.errors.SDKError, match=endpoint) as refused:
        client.batch.jobs.create(requests=requests, model=wrong_model, endpoint=endpoint)
    assert refused.value.status_code == 400


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the SDK on /v1/unknown
def test_sdk_ocr_and_transcription_read_uploaded_files(fake_provider):
    """OCR of an uploaded document (``{"type": "file", "file_id"}``) reads its text; a
    transcription of an uploaded file (``file_id``) names it; a file the fake does not
    hold fails its line with 404, and a marker inside the file fails it."""
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    doc = client.files.upload(
        file={"file_name": "scan.txt", "content": b"Invoice 42\nTotal: 10 EUR\n"}, purpose="ocr"
    )
    pdf = client.files.upload(
        file={"file_name": "scan.pdf", "content": b"%PDF-1.7\n\xff\xfe\x00binary"}, purpose="ocr"
    )
    bad_doc = client.files.upload(
        file={"file_name": "bad.txt", "content": b"FAKE_ERROR:rate_limit"}, purpose="ocr"
    )
    audio = client.files.upload(
        file={"file_name": "call.wav", "content": b"RIFF" + bytes(40000)}, purpose="batch"
    )
    ocr = client.batch.jobs.create(
        requests=[
            {"custom_id": "doc", "body": {"document": {"type": "file", "file_id": doc.id}}},
            {"custom_id": "bad", "body": {"document": {"type": "file", "file_id": bad_doc.id}}},
            {"custom_id": "gone", "body": {"document": {"type": "file", "file_id": "nope"}}},
            {"custom_id": "pdf", "body": {"document": {"type": "file", "file_id": pdf.id}}},
            {
                "custom_id": "minus",
                "body": {"document": {"type": "file", "file_id": doc.id}, "pages": [-1]},
            },
        ],
        model="mistral-ocr-2505",
        endpoint="/v1/ocr",
    )
    lines = job_lines(client, client.batch.jobs.get(job_id=ocr.id))
    page = mistralai.models.OCRResponse.model_validate(lines["doc"]["response"]["body"])
    assert page.pages[0].markdown.startswith("Invoice 42\nTotal: 10 EUR")
    assert page.usage_info.doc_size_bytes == 25
    binary = mistralai.models.OCRResponse.model_validate(lines["pdf"]["response"]["body"])
    assert binary.pages[0].markdown.startswith("Fake OCR of scan.pdf")
    assert lines["minus"]["response"]["status_code"] == 400
    assert (lines["bad"]["response"]["status_code"], lines["gone"]["response"]["status_code"]) == (
        429,
        404,
    )
    heard = client.batch.jobs.create(
        requests=[
            {"custom_id": "a", "body": {"file_id": audio.id}},
            {"custom_id": "both", "body": {"file_id": audio.id, "file_url": "https://x/a.mp3"}},
        ],
        model="voxtral-mini-latest",
        endpoint="/v1/audio/transcriptions",
    )
    lines = job_lines(client, client.batch.jobs.get(job_id=heard.id))
    text = mistralai.models.TranscriptionResponse.model_validate(lines["a"]["response"]["body"])
    assert text.text == "Fake transcription of call.wav." and text.usage.prompt_audio_seconds == 2
    assert lines["both"]["response"]["status_code"] == 400
    with pytest.raises(mistralai.errors.SDKError, match="/v1/unknown") as refused:
        client.batch.jobs.create(
            requests=[{"body": {"input": "x"}}], model=CLASSIFIER, endpoint="/v1/unknown"
        )
    assert refused.value.status_code == 400


def test_extra_inputs_names_the_wire_keys_a_request_type_lacks():
    """The service's names are the SDK's aliases: ``inputs`` (the Python name of
    ``ClassificationRequest.input``) is a key the service does not know; ``schema``
    (``JSONSchema``'s alias) is one it does; ``metadata`` takes any key."""
    from mmirage_beam.providers.mistral.fake_bodies import extra_inputs

    def extras(kind: str, payload: dict) -> list[str]:
        return extra_inputs(getattr(mistralai.models, kind).model_validate(payload), payload)

    assert extras("ClassificationRequest", {"model": CLASSIFIER, "inputs": "x"}) == ["inputs"]
    assert (
        extras("ClassificationRequest", {"model": CLASSIFIER, "input": "x", "metadata": {"a": 1}})
        == []
    )
    ocr = copy.deepcopy({**CASES["/v1/ocr"][1], "model": "mistral-ocr-latest"})
    assert extras("OCRRequest", ocr) == []
    ocr["document_annotation_format"]["json_schema"]["strict_mode"] = True
    assert extras("OCRRequest", ocr) == ["document_annotation_format.json_schema.strict_mode"]
