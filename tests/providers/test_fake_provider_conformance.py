"""The fake against the providers' published contracts, through the real SDKs: every body
validates as the SDK's own pydantic model in strict mode (``model_validate_json(...,
strict=True)``: no coercion; JSON mode so Anthropic's RFC 3339 strings are datetimes),
and the behaviours the OpenAI API reference documents (409 on cancelling a finished
batch, upload limits and file expiry, the batch endpoint enum, request-id headers)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.messages import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
)
from openai.types import Batch, FileDeleted, FileObject
from openai.types.chat import ChatCompletion
from openai.types.completion import Completion
from openai.types.create_embedding_response import CreateEmbeddingResponse
from openai.types.responses import Response as ResponsesResponse

from mmirage_beam.testing import FakeProviderServer

CHAT = "/v1/chat/completions"
DAY = 24 * 60 * 60
SCHEMA = {
    "type": "object",
    "properties": {"final_answer": {"type": "integer"}},
    "required": ["final_answer"],
    "additionalProperties": False,
}


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        yield server


def _oa(fake: FakeProviderServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url, max_retries=0)


def _an(fake: FakeProviderServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-test", base_url=fake.anthropic_base_url, max_retries=0
    )


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _upload(oa: openai.OpenAI, lines: list[dict], name: str = "in.jsonl") -> FileObject:
    data = "\n".join(json.dumps(line) for line in lines).encode()
    return oa.files.create(file=(name, data), purpose="batch")


def _strict(model: type, raw: bytes | str) -> Any:
    return model.model_validate_json(raw, strict=True)


def _outputs(oa: openai.OpenAI, lines: list[dict], endpoint: str) -> tuple[Batch, list[dict]]:
    file_id = _upload(oa, lines).id
    batch = oa.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")
    raw = oa.batches.with_raw_response.retrieve(batch.id).http_response.content
    batch = _strict(Batch, raw)
    assert batch.status == "completed"
    out = oa.files.content(batch.output_file_id).content
    return batch, [json.loads(row) for row in out.split(b"\n") if row]


# -- bodies validate as the SDKs' own models -----------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "body", "model"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "Hi"}]}, ChatCompletion),
        (
            CHAT,
            {
                "messages": [{"role": "user", "content": "Hi"}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "a", "schema": SCHEMA, "strict": True},
                },
            },
            ChatCompletion,
        ),
        ("/v1/responses", {"input": "Hi"}, ResponsesResponse),
        (
            "/v1/responses",
            {
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
                "instructions": "Be brief.",
                "temperature": 0.2,
                "metadata": {"k": "v"},
                "max_output_tokens": 50,
                "text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}},
            },
            ResponsesResponse,
        ),
        ("/v1/completions", {"prompt": "Hi"}, Completion),
        ("/v1/embeddings", {"input": ["Hi", "there"]}, CreateEmbeddingResponse),
    ],
)
def test_openai_result_bodies_validate_as_sdk_models(fake, endpoint, body, model):
    markers = ["", " FAKE_ERROR:refusal", " FAKE_ERROR:length", " FAKE_ERROR:content_filter"]
    markers += [" FAKE_ERROR:empty"]
    lines = []
    for i, marker in enumerate(markers):
        b = json.loads(json.dumps({"model": "gpt-4o-mini", **body}))
        for key in ("prompt", "input"):
            if isinstance(b.get(key), str):
                b[key] += marker
        if "messages" in b:
            b["messages"][0]["content"] += marker
        if isinstance(b.get("input"), list) and isinstance(b["input"][0], dict):
            b["input"][0]["content"][0]["text"] += marker
        lines.append(_line(f"r{i}", endpoint, b))
    _, outputs = _outputs(_oa(fake), lines, endpoint)
    assert len(outputs) == len(markers)
    for out in outputs:
        parsed = _strict(model, json.dumps(out["response"]["body"]))
        assert parsed.model == "gpt-4o-mini"
    if model is ResponsesResponse:
        first = _strict(model, json.dumps(outputs[0]["response"]["body"]))
        assert first.output_text and first.usage.input_tokens_details.cached_tokens == 0
        assert first.tools == [] and first.tool_choice == "auto" and first.error is None
        content = first.output[0].content[0]
        assert content.type == "output_text" and content.logprobs == []
        if "instructions" in body:
            assert first.instructions == "Be brief." and first.temperature == 0.2
            assert first.metadata == {"k": "v"} and first.max_output_tokens == 50


def test_openai_files_and_batches_validate_as_sdk_models(fake):
    oa = _oa(fake)
    raw = oa.files.with_raw_response.create(
        file=(
            "in.jsonl",
            json.dumps(
                _line(
                    "a",
                    CHAT,
                    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]},
                )
            ).encode(),
        ),
        purpose="batch",
    )
    uploaded = _strict(FileObject, raw.http_response.content)
    assert raw.parse()._request_id == raw.http_response.headers["x-request-id"]
    listed = oa.files.with_raw_response.list().http_response.json()
    assert [_strict(FileObject, json.dumps(f)).id for f in listed["data"]] == [uploaded.id]
    created = oa.batches.with_raw_response.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
    )
    batch = _strict(Batch, created.http_response.content)
    pages = oa.batches.with_raw_response.list().http_response.json()
    assert [_strict(Batch, json.dumps(b)).id for b in pages["data"]] == [batch.id]
    deleted = oa.files.with_raw_response.delete(uploaded.id).http_response.content
    assert _strict(FileDeleted, deleted).deleted is True


def test_anthropic_bodies_validate_as_sdk_models(fake):
    an = _an(fake)
    requests = [
        {
            "custom_id": c,
            "params": {
                "model": "claude-haiku-4-5",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": p}],
            },
        }
        for c, p in [
            ("ok", "Hi"),
            ("bad", "FAKE_ERROR:invalid_request"),
            ("no", "FAKE_ERROR:refusal"),
        ]
    ]
    created = an.messages.batches.with_raw_response.create(requests=requests)
    batch = _strict(MessageBatch, created.http_response.content)
    assert created.parse()._request_id == created.http_response.headers["request-id"]
    done = _strict(
        MessageBatch, an.messages.batches.with_raw_response.retrieve(batch.id).http_response.content
    )
    assert done.processing_status == "ended" and done.results_url
    listed = an.messages.batches.with_raw_response.list().http_response.json()
    assert [_strict(MessageBatch, json.dumps(b)).id for b in listed["data"]] == [batch.id]
    raw = an.messages.batches.with_raw_response.results(batch.id).http_response.read()
    results = [_strict(MessageBatchIndividualResponse, row) for row in raw.split(b"\n") if row]
    assert [r.result.type for r in results] == ["succeeded", "errored", "succeeded"]
    deleted = an.messages.batches.with_raw_response.delete(batch.id).http_response.content
    assert _strict(DeletedMessageBatch, deleted).type == "message_batch_deleted"


def test_every_response_carries_a_request_id(fake):
    oa, an = _oa(fake), _an(fake)
    page = oa.batches.list()
    raw = oa.batches.with_raw_response.list()
    assert raw.http_response.headers["x-request-id"].startswith("req_")
    assert raw.request_id == raw.http_response.headers["x-request-id"]
    assert page.data == []
    uploaded = _upload(
        oa,
        [
            _line(
                "a", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
            )
        ],
    )
    assert uploaded._request_id and uploaded._request_id.startswith("req_")
    batch = oa.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    assert batch._request_id and batch._request_id != uploaded._request_id
    with pytest.raises(openai.NotFoundError) as caught:
        oa.batches.retrieve("batch_missing")
    assert caught.value.request_id and caught.value.request_id.startswith("req_")
    mb = an.messages.batches.create(
        requests=[
            {
                "custom_id": "a",
                "params": {
                    "model": "claude-haiku-4-5",
                    "max_tokens": 4,
                    "messages": [{"role": "user", "content": "x"}],
                },
            }
        ]
    )
    assert mb._request_id and mb._request_id.startswith("req_")
    assert an.messages.batches.retrieve(mb.id)._request_id
    with pytest.raises(anthropic.NotFoundError) as caught_an:
        an.messages.batches.retrieve("msgbatch_missing")
    assert caught_an.value.request_id and caught_an.value.request_id.startswith("req_")


# -- OpenAI behaviours ------------------------------------------------------------------


def test_cancelling_a_finished_openai_batch_is_409(fake):
    oa = _oa(fake)
    uploaded = _upload(
        oa,
        [
            _line(
                "a", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
            )
        ],
    )
    batch = oa.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
    assert oa.batches.retrieve(batch.id).status == "completed"
    with pytest.raises(openai.ConflictError) as caught:
        oa.batches.cancel(batch.id)
    assert caught.value.status_code == 409
    assert caught.value.message.endswith("Cannot cancel a batch with status 'completed'.")


def test_expired_batch_does_not_count_unrun_requests_as_failed(fake):
    oa = _oa(fake)
    fake.script(expire_after_requests=1)
    lines = [
        _line("ok", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}),
        _line(
            "bad", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "y"}]}
        ),
        _line(
            "late", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "z"}]}
        ),
    ]
    batch = oa.batches.create(
        input_file_id=_upload(oa, lines).id, endpoint=CHAT, completion_window="24h"
    )
    batch = oa.batches.retrieve(batch.id)
    assert batch.status == "expired"
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (3, 1, 0)
    assert counts.completed + counts.failed < counts.total
    errors = [
        json.loads(r) for r in oa.files.content(batch.error_file_id).content.split(b"\n") if r
    ]
    assert {e["custom_id"]: e["error"]["code"] for e in errors} == {
        "bad": "batch_expired",
        "late": "batch_expired",
    }


def test_upload_limits_and_file_expiry():
    with FakeProviderServer(max_batch_file_bytes=100) as fake:
        oa = _oa(fake)
        with pytest.raises(openai.BadRequestError) as caught:
            oa.files.create(file=("big.jsonl", b"x" * 101), purpose="batch")
        assert caught.value.status_code == 400 and "File is too large." in caught.value.message
        assert oa.files.list().data == []
        ok = oa.files.create(file=("small.jsonl", b"x" * 100), purpose="batch")
        assert ok.bytes == 100 and ok.expires_at == ok.created_at + 30 * DAY
        with pytest.raises(openai.BadRequestError, match=r"\.jsonl"):
            oa.files.create(file=("input.json", b"{}"), purpose="batch")
        other = oa.files.create(file=("notes.txt", b"x" * 500), purpose="user_data")
        assert other.expires_at is None


def test_output_expires_after_is_validated_and_honoured(fake):
    oa = _oa(fake)
    lines = [
        _line("ok", CHAT, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}),
        _line(
            "err",
            CHAT,
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "FAKE_ERROR:server_error"}],
            },
        ),
    ]
    file_id = _upload(oa, lines).id
    for bad in (
        {"anchor": "created_at", "seconds": 3599},
        {"anchor": "created_at", "seconds": 2_592_001},
        {"anchor": "completed_at", "seconds": 7200},
        {"anchor": "created_at"},
    ):
        with pytest.raises(openai.BadRequestError, match="output_expires_after"):
            oa.batches.create(
                input_file_id=file_id,
                endpoint=CHAT,
                completion_window="24h",
                output_expires_after=bad,  # type: ignore[arg-type]
            )
    batch = oa.batches.create(
        input_file_id=file_id,
        endpoint=CHAT,
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 7200},
    )
    batch = oa.batches.retrieve(batch.id)
    for file_id in (batch.output_file_id, batch.error_file_id):
        made = oa.files.retrieve(file_id)
        assert made.purpose == "batch_output" and made.expires_at == made.created_at + 7200
    default = oa.batches.create(
        input_file_id=_upload(oa, lines[:1]).id, endpoint=CHAT, completion_window="24h"
    )
    out = oa.files.retrieve(oa.batches.retrieve(default.id).output_file_id)
    assert out.expires_at == out.created_at + 30 * DAY


@pytest.mark.parametrize(
    "endpoint", ["/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos"]
)
def test_other_batch_endpoints_are_accepted_with_a_clear_per_line_error(fake, endpoint):
    oa = _oa(fake)
    file_id = _upload(oa, [_line("a", endpoint, {"model": "m", "input": "x", "prompt": "x"})]).id
    batch = oa.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    batch = oa.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.endpoint == endpoint
    assert batch.output_file_id is None
    (line,) = [
        json.loads(r) for r in oa.files.content(batch.error_file_id).content.split(b"\n") if r
    ]
    assert line["response"]["status_code"] == 400
    error = line["response"]["body"]["error"]
    assert error["code"] == "unsupported_endpoint" and endpoint in error["message"]


def test_empty_file_list_ids_are_strings(fake):
    oa = _oa(fake)
    body = oa.files.with_raw_response.list().http_response.json()
    assert body == {"object": "list", "data": [], "first_id": "", "last_id": "", "has_more": False}
