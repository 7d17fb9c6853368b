"""The fake's scripting of what real providers send besides clean answers: refusals, cut
and filtered answers, empty answers, 200s with error or empty bodies, broken result lines
(malformed, truncated, wrong shape, invalid UTF-8), raw U+2028 in error messages and
transient 404s on batch lookup. Driven through the real OpenAI and Anthropic SDKs (raw
bytes are read over HTTP where an SDK would refuse to parse them)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.messages import MessageBatchIndividualResponse
from openai.types.chat import ChatCompletion
from openai.types.responses import Response as ResponsesResponse

from mmirage_beam.testing import FakeProviderServer, fake_answer_json, fake_answer_text

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
REFUSAL = "I'm sorry, but I can't help with that."
SCHEMA = {
    "type": "object",
    "properties": {"final_answer": {"type": "integer"}, "why": {"type": "string"}},
    "required": ["final_answer", "why"],
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


def _chat(custom_id: str, prompt: str, schema: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": prompt}],
    }
    if schema:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
        }
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def _resp(custom_id: str, prompt: str) -> dict[str, Any]:
    body = {"model": "gpt-4o-mini", "input": prompt}
    return {"custom_id": custom_id, "method": "POST", "url": RESPONSES, "body": body}


def _openai_files(fake: FakeProviderServer, lines: list[dict], endpoint: str = CHAT):
    """Runs one OpenAI batch; returns (batch, output bytes, error bytes)."""
    oa = _oa(fake)
    data = "\n".join(json.dumps(line) for line in lines).encode()
    file_id = oa.files.create(file=("in.jsonl", data), purpose="batch").id
    batch = oa.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")
    batch = oa.batches.retrieve(batch.id)
    assert batch.status == "completed"
    out = oa.files.content(batch.output_file_id).content if batch.output_file_id else b""
    err = oa.files.content(batch.error_file_id).content if batch.error_file_id else b""
    return batch, out, err


def _lines_by_id(raw: bytes) -> dict[str, dict]:
    """Parses JSONL split on b"\\n" only (U+2028 inside a line is not a line break)."""
    assert raw.endswith(b"\n") and b"\n\n" not in raw
    return {json.loads(r)["custom_id"]: json.loads(r) for r in raw.split(b"\n") if r}


def _anthropic_raw(fake: FakeProviderServer, requests: list[dict]) -> bytes:
    an = _an(fake)
    batch = an.messages.batches.create(requests=requests)
    batch = an.messages.batches.retrieve(batch.id)
    assert batch.processing_status == "ended"
    request = urllib.request.Request(batch.results_url, headers={"x-api-key": "sk-ant-test"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def _an_req(custom_id: str, prompt: str, schema: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": prompt}],
    }
    if schema:
        params["output_config"] = {"format": {"type": "json_schema", "schema": SCHEMA}}
    return {"custom_id": custom_id, "params": params}


# -- answers that are not usable ---------------------------------------------------------


def test_openai_chat_refusal_length_content_filter_and_empty(fake):
    prompts = {
        "refusal": "Tell me FAKE_ERROR:refusal",
        "length": "Count FAKE_ERROR:length",
        "filtered": "Say FAKE_ERROR:content_filter",
        "empty": "Nothing FAKE_ERROR:empty",
        "ok": "A normal question",
    }
    lines = [_chat(cid, p, schema=(cid == "length")) for cid, p in prompts.items()]
    batch, out, err = _openai_files(fake, lines)
    assert err == b"" and batch.request_counts.completed == 5
    by_id = _lines_by_id(out)
    bodies = {cid: by_id[cid]["response"]["body"] for cid in prompts}
    for cid, body in bodies.items():
        assert by_id[cid]["response"]["status_code"] == 200
        ChatCompletion.model_validate(body)
    refusal = bodies["refusal"]["choices"][0]
    assert refusal["message"]["content"] is None
    assert refusal["message"]["refusal"] == REFUSAL and refusal["finish_reason"] == "stop"
    cut = bodies["length"]["choices"][0]
    full = json.dumps(fake_answer_json(prompts["length"], SCHEMA))
    assert cut["finish_reason"] == "length"
    assert full.startswith(cut["message"]["content"]) and cut["message"]["content"] != full
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut["message"]["content"])
    filtered = bodies["filtered"]["choices"][0]
    assert filtered["finish_reason"] == "content_filter"
    assert filtered["message"]["content"] is None
    assert bodies["empty"]["choices"][0]["message"]["content"] == ""
    ok = bodies["ok"]["choices"][0]
    assert ok["message"]["content"] == fake_answer_text(prompts["ok"])
    assert ok["finish_reason"] == "stop" and ok["message"]["refusal"] is None
    assert bodies["refusal"]["usage"]["prompt_tokens"] > 0


def test_openai_responses_refusal_length_content_filter_and_empty(fake):
    prompts = {
        "refusal": "FAKE_ERROR:refusal please",
        "length": "FAKE_ERROR:length please",
        "filtered": "FAKE_ERROR:content_filter please",
        "empty": "FAKE_ERROR:empty please",
    }
    _, out, _ = _openai_files(fake, [_resp(c, p) for c, p in prompts.items()], RESPONSES)
    by_id = _lines_by_id(out)
    bodies = {
        cid: ResponsesResponse.model_validate(by_id[cid]["response"]["body"]) for cid in prompts
    }
    content = bodies["refusal"].output[0].content[0]
    assert content.type == "refusal" and content.refusal == REFUSAL
    assert bodies["refusal"].status == "completed"
    assert bodies["length"].status == "incomplete"
    assert bodies["length"].incomplete_details.reason == "max_output_tokens"
    text = bodies["length"].output_text
    assert text and fake_answer_text(prompts["length"]).startswith(text)
    assert text != fake_answer_text(prompts["length"])
    assert bodies["filtered"].status == "incomplete"
    assert bodies["filtered"].incomplete_details.reason == "content_filter"
    assert bodies["empty"].output == [] and bodies["empty"].status == "completed"


def test_openai_200_with_error_body_and_with_empty_body(fake):
    lines = [
        _chat("errbody", "x FAKE_ERROR:error_body_200"),
        _chat("empty", "FAKE_ERROR:empty_body_200"),
    ]
    batch, out, err = _openai_files(fake, lines)
    by_id = _lines_by_id(out)
    assert err == b""
    errbody = by_id["errbody"]["response"]
    assert errbody["status_code"] == 200 and set(errbody["body"]) == {"error"}
    assert errbody["body"]["error"]["type"] == "server_error"
    assert set(errbody["body"]["error"]) == {"message", "type", "param", "code"}
    assert by_id["empty"]["response"] == {
        **by_id["empty"]["response"],
        "status_code": 200,
        "body": {},
    }
    # "empty" is not taken for "empty_body_200": the body is {} and not an empty answer.
    assert by_id["empty"]["response"]["body"] == {}


def test_anthropic_refusal_length_content_filter_and_empty(fake):
    prompts = {
        "refusal": "FAKE_ERROR:refusal",
        "length": "FAKE_ERROR:length",
        "filtered": "FAKE_ERROR:content_filter",
        "empty": "FAKE_ERROR:empty",
        "errbody": "FAKE_ERROR:error_body_200",
    }
    raw = _anthropic_raw(fake, [_an_req(c, p, schema=(c == "length")) for c, p in prompts.items()])
    lines = _lines_by_id(raw)
    results = {c: MessageBatchIndividualResponse.model_validate(lines[c]).result for c in prompts}
    assert all(r.type == "succeeded" for r in results.values())
    assert results["refusal"].message.stop_reason == "refusal"
    assert results["refusal"].message.content == []
    cut = results["length"].message
    assert cut.stop_reason == "max_tokens"
    full = json.dumps(fake_answer_json(prompts["length"], SCHEMA))
    assert full.startswith(cut.content[0].text) and cut.content[0].text != full
    # Anthropic has no content-filter finish: a normal answer.
    filtered = results["filtered"].message
    assert filtered.stop_reason == "end_turn"
    assert filtered.content[0].text == fake_answer_text(prompts["filtered"])
    assert results["empty"].message.content == []
    assert results["errbody"].message.content[0].text == fake_answer_text(prompts["errbody"])


# -- broken result lines -----------------------------------------------------------------


BROKEN = ("malformed_line", "truncated_line", "wrong_shape", "invalid_utf8")


def _split_raw(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n") and b"\n\n" not in raw
    return raw[:-1].split(b"\n")


def _check_broken_lines(rows: list[bytes], *, body_key: str, wrong_shape: dict) -> None:
    by_marker: dict[str, bytes] = {}
    good = []
    for row in rows:
        for marker in BROKEN:
            if f'"{marker}"'.encode() in row or row.startswith(
                f'{{"custom_id": "{marker}"'.encode()
            ):
                by_marker[marker] = row
                break
        else:
            good.append(json.loads(row))
    assert set(by_marker) == set(BROKEN) and [g["custom_id"] for g in good] == ["ok"]
    malformed = by_marker["malformed_line"]
    assert malformed == f'{{"custom_id": "malformed_line", "{body_key}": <<garbage'.encode()
    with pytest.raises(json.JSONDecodeError):
        json.loads(by_marker["truncated_line"])
    assert by_marker["truncated_line"].startswith(b'{"')
    assert json.loads(by_marker["wrong_shape"]) == wrong_shape
    invalid = by_marker["invalid_utf8"]
    assert b"\xff\xfe" in invalid
    with pytest.raises(UnicodeDecodeError):
        invalid.decode("utf-8")
    repaired = json.loads(invalid.replace(b"\xff\xfe", b""))
    assert repaired["custom_id"] == "invalid_utf8"


def test_openai_broken_result_lines(fake):
    lines = [_chat(m, f"Question FAKE_ERROR:{m}") for m in BROKEN] + [_chat("ok", "Fine")]
    batch, out, err = _openai_files(fake, lines)
    assert err == b"" and batch.request_counts.completed == 5
    _check_broken_lines(
        _split_raw(out),
        body_key="response",
        wrong_shape={"custom_id": "wrong_shape", "unexpected": True},
    )


def test_anthropic_broken_result_lines(fake):
    requests = [_an_req(m, f"Question FAKE_ERROR:{m}") for m in BROKEN] + [_an_req("ok", "Fine")]
    raw = _anthropic_raw(fake, requests)
    _check_broken_lines(
        _split_raw(raw),
        body_key="result",
        wrong_shape={"custom_id": "wrong_shape", "result": {"type": "mystery"}},
    )


def test_u2028_in_error_messages_is_written_raw(fake):
    separators = ("\u2028", "\u2029", "\u0085")
    _, out, err = _openai_files(fake, [_chat("sep", "FAKE_ERROR:u2028"), _chat("ok", "Fine")])
    assert json.loads(out)["custom_id"] == "ok"
    text = err.decode("utf-8")
    assert all(sep in text for sep in separators) and text.count("\n") == 1
    assert len(text.splitlines()) > 1  # what str.splitlines() would wrongly do
    line = json.loads(text)
    assert line["response"]["status_code"] == 400
    assert line["response"]["body"]["error"]["type"] == "invalid_request_error"
    assert all(sep in line["response"]["body"]["error"]["message"] for sep in separators)

    raw = _anthropic_raw(fake, [_an_req("sep", "FAKE_ERROR:u2028")]).decode("utf-8")
    assert all(sep in raw for sep in separators) and raw.count("\n") == 1
    result = MessageBatchIndividualResponse.model_validate(json.loads(raw)).result
    assert result.type == "errored" and result.error.error.type == "invalid_request_error"
    assert all(sep in result.error.error.message for sep in separators)


# -- transient 404 on batch lookup -------------------------------------------------------


def test_leading_404_on_batch_lookup_in_each_provider_shape(fake):
    oa, an = _oa(fake), _an(fake)
    file_id = oa.files.create(
        file=("in.jsonl", json.dumps(_chat("a", "x")).encode()), purpose="batch"
    ).id
    batch = oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    fake.script(leading_errors={"status": 404, "count": 2, "paths": ["batches_retrieve"]})
    for _ in range(2):
        with pytest.raises(openai.NotFoundError) as caught:
            oa.batches.retrieve(batch.id)
        assert caught.value.body == {
            "message": f"No batch found with id '{batch.id}'.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
        assert "retry-after" not in caught.value.response.headers
    assert oa.batches.retrieve(batch.id).status == "completed"

    created = an.messages.batches.create(requests=[_an_req("a", "x")])
    fake.script(leading_errors={"status": 404, "count": 2, "paths": ["messages_batches_retrieve"]})
    for _ in range(2):
        with pytest.raises(anthropic.NotFoundError) as caught:
            an.messages.batches.retrieve(created.id)
        body = caught.value.response.json()
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
        assert created.id in body["error"]["message"]
    assert an.messages.batches.retrieve(created.id).processing_status == "ended"


def test_leading_502_is_retried_by_the_sdk(fake):
    oa = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url, max_retries=2)
    fake.script(leading_errors={"status": 502, "count": 2, "paths": ["batches_list"]})
    assert oa.batches.list().data == []
    assert fake.call_counts()["batches_list"] == 3
    fake.script(leading_errors={"status": 502, "count": 1, "paths": ["messages_batches_list"]})
    with pytest.raises(anthropic.InternalServerError) as caught:
        _an(fake).messages.batches.list()
    assert caught.value.status_code == 502
    assert caught.value.response.json()["error"]["type"] == "api_error"


# -- flaky: fails once per prompt, then answers ------------------------------------------


def test_flaky_fails_once_per_prompt_then_answers_in_both_providers(fake):
    prompt = "What is 2 + 2? FAKE_ERROR:flaky"
    _batch, out, err = _openai_files(fake, [_chat("a", prompt), _chat("b", "plain")])
    first = _lines_by_id(err)["a"]["response"]
    assert first["status_code"] == 429 and first["body"]["error"]["code"] == "rate_limit_exceeded"
    assert set(_lines_by_id(out)) == {"b"}
    # The same prompt again, under another custom_id and batch: it is answered now.
    _batch, out, err = _openai_files(fake, [_chat("a2", prompt)])
    assert err == b"" and _lines_by_id(out)["a2"]["response"]["status_code"] == 200

    an_prompt = "What is 3 + 3? FAKE_ERROR:flaky"
    first = _lines_by_id(_anthropic_raw(fake, [_an_req("x", an_prompt)]))["x"]["result"]
    assert first["type"] == "errored" and first["error"]["error"]["type"] == "rate_limit_error"
    again = _lines_by_id(_anthropic_raw(fake, [_an_req("x", an_prompt)]))["x"]["result"]
    assert again["type"] == "succeeded"
