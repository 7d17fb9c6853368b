"""Every endpoint the fake serves, validated against the providers' published contracts.

OpenAI: each JSON body (and each body inside an output or error file line) is validated
with ``jsonschema`` (JSON Schema 2020-12, which OpenAPI 3.1 uses) against the component
schemas vendored in ``tests/spec/openai_schemas.json`` from the official spec
(https://github.com/openai/openai-openapi, ``openapi.json``; commit and date in
``tests/spec/README.md``). ``$ref`` resolves inside that file. One relaxation, listed in
``NULL_AS_ABSENT``: the spec declares some optional Batch and File fields as plain
strings/integers while the live API (and the spec's own example of "The batch object",
with ``"errors": null``, ``"failed_at": null``...) sends ``null`` for them; there, and only
there, ``null`` is accepted as "absent". Required fields are never relaxed.

Anthropic publishes no OpenAPI spec with its SDK, so its bodies are validated against
the SDK's pydantic types in strict JSON mode: ``MessageBatch`` (create, retrieve, cancel,
list items), ``MessageBatchIndividualResponse`` (each results line),
``DeletedMessageBatch`` (delete) and ``ErrorResponse`` (errors).

The admin endpoints (``/_fake/*``) belong to no provider and are not covered.
"""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import ErrorResponse as AnthropicErrorResponse
from anthropic.types.messages import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
)

from mmirage_beam.testing import FakeProviderServer

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

SPEC_PATH = Path(__file__).parents[1] / "spec" / "openai_schemas.json"
SPEC_URI = "urn:openai-openapi"

# (schema, property): optional properties for which null means absent (see docstring).
NULL_AS_ABSENT = {
    "Batch": (
        "model",
        "errors",
        "output_file_id",
        "error_file_id",
        "in_progress_at",
        "finalizing_at",
        "completed_at",
        "failed_at",
        "expired_at",
        "cancelling_at",
        "cancelled_at",
        "usage",
    ),
    "OpenAIFile": ("expires_at", "status_details"),
    "ListBatchesResponse": ("first_id", "last_id"),
    "BatchError": ("param", "line"),
}

# Endpoint of a batch -> schema of its 200 result body.
RESULT_SCHEMAS = {
    "/v1/chat/completions": "CreateChatCompletionResponse",
    "/v1/responses": "Response",
    "/v1/completions": "CreateCompletionResponse",
    "/v1/embeddings": "CreateEmbeddingResponse",
}

SERVED = {
    "files_create",
    "files_list",
    "files_retrieve",
    "files_delete",
    "files_content",
    "batches_create",
    "batches_list",
    "batches_retrieve",
    "batches_cancel",
    "messages_batches_create",
    "messages_batches_list",
    "messages_batches_retrieve",
    "messages_batches_cancel",
    "messages_batches_delete",
    "messages_batches_results",
    "messages_count_tokens",
}


def _load_spec() -> dict[str, Any]:
    doc = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    schemas = doc["components"]["schemas"]
    for name, props in NULL_AS_ABSENT.items():
        schema = schemas[name]
        for prop in props:
            assert prop not in schema.get("required", []), (name, prop)
            original = schema["properties"][prop]
            schema["properties"][prop] = {"anyOf": [original, {"type": "null"}]}
    return doc


SPEC = _load_spec()
_REGISTRY = referencing.Registry().with_resource(
    SPEC_URI,
    referencing.Resource.from_contents(
        SPEC, default_specification=referencing.jsonschema.DRAFT202012
    ),
)


def validate(instance: Any, schema_name: str) -> None:
    """Raises jsonschema.ValidationError unless ``instance`` matches the named schema."""
    assert schema_name in SPEC["components"]["schemas"], schema_name
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"{SPEC_URI}#/components/schemas/{schema_name}"}, registry=_REGISTRY
    )
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        detail = "; ".join(f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors[:5])
        raise AssertionError(f"{schema_name}: {len(errors)} errors: {detail}")


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


def _json(raw: Any) -> Any:
    assert raw.http_response.headers["content-type"].startswith("application/json")
    return raw.http_response.json()


def _unauthenticated(url: str) -> Any:
    """The 401 body of a GET without credentials (the SDKs refuse to send one)."""
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=10)
    assert caught.value.code == 401
    return json.loads(caught.value.read())


def _error_body(exc: Exception) -> Any:
    return exc.response.json()  # type: ignore[attr-defined]


MARKERS = [
    "",
    "FAKE_ERROR:refusal",
    "FAKE_ERROR:length",
    "FAKE_ERROR:content_filter",
    "FAKE_ERROR:empty",
    "FAKE_ERROR:server_error",
    "FAKE_ERROR:invalid_request",
    "FAKE_ERROR:rate_limit",
    "FAKE_ERROR:timeout",
    "FAKE_ERROR:u2028",
    "FAKE_FENCE",
]


def _body(endpoint: str, prompt: str, variant: int) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"final_answer": {"type": "integer"}},
        "required": ["final_answer"],
        "additionalProperties": False,
    }
    if endpoint == "/v1/chat/completions":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}]}
        if variant % 2:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": schema, "strict": True},
            }
    elif endpoint == "/v1/responses":
        body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": prompt}]}]}
        if variant % 2:
            body["text"] = {"format": {"type": "json_schema", "name": "a", "schema": schema}}
            body["instructions"] = "Answer in JSON."
    elif endpoint == "/v1/completions":
        body = {"prompt": prompt}
    else:
        body = {"input": [prompt, "second"]}
    return {"model": "gpt-4o-mini", **body}


@pytest.mark.parametrize("endpoint", sorted(RESULT_SCHEMAS))
def test_openai_files_batches_and_result_bodies_match_the_spec(fake, endpoint):
    oa = _oa(fake)
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": endpoint,
            "body": _body(endpoint, f"Question {i} {marker}", i),
        }
        for i, marker in enumerate(MARKERS)
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()

    uploaded = _json(oa.files.with_raw_response.create(file=("in.jsonl", data), purpose="batch"))
    validate(uploaded, "OpenAIFile")
    validate(_json(oa.files.with_raw_response.retrieve(uploaded["id"])), "OpenAIFile")
    validate(_json(oa.files.with_raw_response.list()), "ListFilesResponse")

    created = _json(
        oa.batches.with_raw_response.create(
            input_file_id=uploaded["id"],
            endpoint=endpoint,  # type: ignore[arg-type]
            completion_window="24h",
            metadata={"run": "spec"},
        )
    )
    validate(created, "Batch")
    batch = _json(oa.batches.with_raw_response.retrieve(created["id"]))
    validate(batch, "Batch")
    assert batch["status"] == "completed"
    validate(_json(oa.batches.with_raw_response.list()), "ListBatchesResponse")
    validate(
        _json(oa.batches.with_raw_response.list(limit=1, after=created["id"])),
        "ListBatchesResponse",
    )

    seen_ok = seen_http_error = 0
    for file_id in (batch["output_file_id"], batch["error_file_id"]):
        validate(_json(oa.files.with_raw_response.retrieve(file_id)), "OpenAIFile")
        content = oa.files.with_raw_response.content(file_id).http_response.content
        for row in content.split(b"\n")[:-1]:
            line = json.loads(row)
            response = line["response"]
            if response is None:  # timeouts: {"code", "message"}, no spec schema
                assert set(line["error"]) == {"code", "message"}
            elif response["status_code"] == 200:
                validate(response["body"], RESULT_SCHEMAS[endpoint])
                seen_ok += 1
            else:
                validate(response["body"], "ErrorResponse")
                seen_http_error += 1
    assert seen_ok >= 1 and seen_http_error >= 1
    validate(_json(oa.files.with_raw_response.delete(uploaded["id"])), "DeleteFileResponse")


def test_openai_cancel_lists_and_error_bodies_match_the_spec():
    clock = [1_800_000_000.0]
    with FakeProviderServer(processing_delay_secs=30, clock=lambda: clock[0]) as fake:
        oa = _oa(fake)
        validate(_json(oa.files.with_raw_response.list()), "ListFilesResponse")
        validate(_json(oa.batches.with_raw_response.list()), "ListBatchesResponse")
        line = {
            "custom_id": "a",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        }
        file_id = oa.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch").id
        batch = oa.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        clock[0] += 15
        cancelling = _json(oa.batches.with_raw_response.cancel(batch.id))
        validate(cancelling, "Batch")
        assert cancelling["status"] == "cancelling"
        clock[0] += 30
        validate(_json(oa.batches.with_raw_response.retrieve(batch.id)), "Batch")

        failures = [
            (openai.ConflictError, lambda: oa.batches.cancel(batch.id)),
            (openai.NotFoundError, lambda: oa.batches.retrieve("batch_missing")),
            (openai.NotFoundError, lambda: oa.files.retrieve("file-missing")),
            (openai.NotFoundError, lambda: oa.files.content("file-missing")),
            (openai.NotFoundError, lambda: oa.files.delete("file-missing")),
            (
                openai.BadRequestError,
                lambda: oa.batches.create(
                    input_file_id=file_id,
                    endpoint="/v1/chat/completions",
                    completion_window="48h",  # type: ignore[arg-type]
                ),
            ),
            (
                openai.BadRequestError,
                lambda: oa.files.create(file=("x.txt", b"{}"), purpose="batch"),
            ),
            (openai.BadRequestError, lambda: oa.batches.list(limit=1000)),
        ]
        for kind, call in failures:
            with pytest.raises(kind) as caught:
                call()
            validate(_error_body(caught.value), "ErrorResponse")
        validate(_unauthenticated(fake.openai_base_url + "/batches"), "ErrorResponse")
        fake.script(leading_errors={"status": 429, "count": 1, "paths": ["batches_list"]})
        with pytest.raises(openai.RateLimitError) as caught:
            oa.batches.list()
        validate(_error_body(caught.value), "ErrorResponse")
        fake.script(leading_errors={"status": 404, "count": 1, "paths": ["batches_retrieve"]})
        with pytest.raises(openai.NotFoundError) as caught:
            oa.batches.retrieve(batch.id)
        validate(_error_body(caught.value), "ErrorResponse")
        # A batch that fails validation carries errors.data in the BatchError shape.
        bad = oa.files.create(file=("bad.jsonl", b"not json\n"), purpose="batch").id
        failed = oa.batches.create(
            input_file_id=bad, endpoint="/v1/chat/completions", completion_window="24h"
        )
        clock[0] += 60
        body = _json(oa.batches.with_raw_response.retrieve(failed.id))
        assert body["status"] == "failed"
        validate(body, "Batch")


def _strict(model: type, raw: bytes | str) -> Any:
    return model.model_validate_json(raw, strict=True)


def test_anthropic_bodies_match_the_sdk_types():
    clock = [1_800_000_000.0]
    with FakeProviderServer(processing_delay_secs=30, clock=lambda: clock[0]) as fake:
        an = _an(fake)
        requests = [
            {
                "custom_id": f"r{i}",
                "params": {
                    "model": "claude-haiku-4-5",
                    "max_tokens": 32,
                    "messages": [{"role": "user", "content": f"Question {i} {marker}"}],
                },
            }
            for i, marker in enumerate(MARKERS)
        ]
        raw = an.messages.batches.with_raw_response.create(requests=requests)
        batch = _strict(MessageBatch, raw.http_response.content)
        second = an.messages.batches.create(requests=requests[:1])
        listed = _json(an.messages.batches.with_raw_response.list(limit=1))
        assert listed["has_more"] is True
        for item in listed["data"]:
            _strict(MessageBatch, json.dumps(item))
        canceling = an.messages.batches.with_raw_response.cancel(second.id)
        assert (
            _strict(MessageBatch, canceling.http_response.content).processing_status == "canceling"
        )
        clock[0] += 60
        for batch_id in (batch.id, second.id):
            got = an.messages.batches.with_raw_response.retrieve(batch_id)
            assert _strict(MessageBatch, got.http_response.content).processing_status == "ended"
            results = an.messages.batches.with_raw_response.results(batch_id).http_response.read()
            rows = [_strict(MessageBatchIndividualResponse, r) for r in results.split(b"\n") if r]
            assert rows
        kinds = {
            r.result.type
            for r in [
                _strict(MessageBatchIndividualResponse, r)
                for r in an.messages.batches.with_raw_response.results(batch.id)
                .http_response.read()
                .split(b"\n")
                if r
            ]
        }
        assert kinds == {"succeeded", "errored"}
        deleted = an.messages.batches.with_raw_response.delete(second.id)
        assert _strict(DeletedMessageBatch, deleted.http_response.content).id == second.id

        failures = [
            (anthropic.NotFoundError, lambda: an.messages.batches.retrieve("msgbatch_missing")),
            (anthropic.BadRequestError, lambda: an.messages.batches.cancel(batch.id)),
            (anthropic.BadRequestError, lambda: an.messages.batches.create(requests=[])),
            (anthropic.BadRequestError, lambda: an.messages.batches.list(limit=5000)),
        ]
        for kind, call in failures:
            with pytest.raises(kind) as caught:
                call()
            _strict(AnthropicErrorResponse, json.dumps(_error_body(caught.value)))
        unauth = _unauthenticated(fake.anthropic_base_url + "/v1/messages/batches")
        _strict(AnthropicErrorResponse, json.dumps(unauth))
        fake.script(leading_errors={"status": 529, "count": 1})
        with pytest.raises(anthropic.APIStatusError) as caught:
            an.messages.batches.list()
        _strict(AnthropicErrorResponse, json.dumps(_error_body(caught.value)))


def test_anthropic_count_tokens_matches_the_sdk_type():
    """``POST /v1/messages/count_tokens``: ``MessageTokensCount`` (strict), the same
    number a batch reports as ``usage.input_tokens``, and a 400 ``ErrorResponse``."""
    from anthropic.types import MessageTokensCount

    with FakeProviderServer() as fake:
        an = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)
        messages = [{"role": "user", "content": "Count these five words"}]
        system = "five more words counted too"  # the system prompt is input too
        raw = an.messages.with_raw_response.count_tokens(
            model="claude-haiku-4-5", messages=messages, system=system
        )
        assert _strict(MessageTokensCount, raw.http_response.content).input_tokens == 4 + 5
        params = {"model": "claude-haiku-4-5", "max_tokens": 8, "messages": messages}
        batch = an.messages.batches.create(
            requests=[
                {"custom_id": "c1", "params": params},
                {"custom_id": "c2", "params": {**params, "system": system}},
            ]
        )
        usage = {
            r.custom_id: r.result.message.usage.input_tokens
            for r in an.messages.batches.results(batch.id)
        }
        assert usage == {"c1": 4, "c2": 4 + 5}
        with pytest.raises(anthropic.BadRequestError) as caught:
            an.messages.count_tokens(model="claude-haiku-4-5", messages=[])
        _strict(AnthropicErrorResponse, json.dumps(_error_body(caught.value)))


def test_every_served_endpoint_is_covered_here():
    """The fake's routes are exactly the endpoints the tests above drive."""
    with FakeProviderServer() as fake:
        routes = {
            rule.endpoint
            for name in ("openai", "anthropic", "gemini")  # each fake's own route table
            for rule in fake.registered_fake(name)._map.iter_rules()  # noqa: SLF001
        }
    assert {r for r in routes if not r.startswith(("admin_", "gemini_"))} == SERVED
    # Gemini's endpoints are driven by google-genai in tests/providers/test_gemini.py
    gemini_calls = {
        "gemini_files_upload": "files.upload",
        "gemini_files_get": "files.get",
        "gemini_files_download": "files.download",
        "gemini_batches_create": "batches.create",
        "gemini_batches_create_embeddings": "batches.create_embeddings",
        "gemini_batches_list": "batches.list",
        "gemini_batches_get": "batches.get",
        "gemini_batches_cancel": "batches.cancel",
        "gemini_batches_delete": "batches.delete",
        "gemini_count_tokens": "models.count_tokens",
        "gemini_files_list": "files.list",
        "gemini_files_delete": "files.delete",
    }
    assert {r for r in routes if r.startswith("gemini_")} == set(gemini_calls)
    gemini_source = (Path(__file__).parent / "test_gemini.py").read_text(encoding="utf-8")
    assert all(call + "(" in gemini_source for call in gemini_calls.values())
    # Anthropic's Files API is driven by anthropic in tests/providers/test_anthropic_files.py
    files_calls = {
        "upload": "beta.files.upload",
        "list": "beta.files.list",
        "retrieve": "beta.files.retrieve_metadata",
        "delete": "beta.files.delete",
        "download": "beta.files.download",
    }
    files_map = fake.registered_fake("anthropic").files_api._url_map  # noqa: SLF001
    assert {rule.endpoint for rule in files_map.iter_rules()} == set(files_calls)
    files_source = (Path(__file__).parent / "test_anthropic_files.py").read_text(encoding="utf-8")
    assert all(call + "(" in files_source for call in files_calls.values())
    source = Path(__file__).read_text(encoding="utf-8")
    calls = {
        "files_create": "files.with_raw_response.create",
        "files_list": "files.with_raw_response.list",
        "files_retrieve": "files.with_raw_response.retrieve",
        "files_delete": "files.with_raw_response.delete",
        "files_content": "files.with_raw_response.content",
        "batches_create": "batches.with_raw_response.create",
        "batches_list": "batches.with_raw_response.list",
        "batches_retrieve": "batches.with_raw_response.retrieve",
        "batches_cancel": "batches.with_raw_response.cancel",
        "messages_batches_create": "messages.batches.with_raw_response.create",
        "messages_batches_list": "messages.batches.with_raw_response.list",
        "messages_batches_retrieve": "messages.batches.with_raw_response.retrieve",
        "messages_batches_cancel": "messages.batches.with_raw_response.cancel",
        "messages_batches_delete": "messages.batches.with_raw_response.delete",
        "messages_batches_results": "messages.batches.with_raw_response.results",
        "messages_count_tokens": "messages.with_raw_response.count_tokens",
    }
    assert set(calls) == SERVED
    assert all(call + "(" in source for call in calls.values())


def test_the_vendored_schemas_reject_a_broken_body():
    """The validator is live: a Responses body missing a required field fails."""
    body = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": "m",
        "tools": [],
        "output": [],
        "parallel_tool_calls": True,
        "metadata": {},
        "tool_choice": "auto",
        "temperature": 1.0,
        "top_p": 1.0,
    }
    validate(body, "Response")
    for key in ("tools", "top_p", "incomplete_details"):
        broken = copy.deepcopy(body)
        del broken[key]
        with pytest.raises(AssertionError, match="Response"):
            validate(broken, "Response")
    with pytest.raises(AssertionError, match="ListFilesResponse"):
        validate(
            {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False},
            "ListFilesResponse",
        )
