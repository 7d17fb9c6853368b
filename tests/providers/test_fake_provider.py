"""The fake batch provider, driven only through the real OpenAI and Anthropic SDKs over HTTP
(plus its admin endpoint and in-process helpers)."""

from __future__ import annotations

import base64
import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from mmirage_beam.providers.anthropic import fake_service as anthropic_fake
from mmirage_beam.providers.openai import fake_service as openai_fake
from mmirage_beam.testing import FakeProviderServer, fake_answer_json, fake_answer_text

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "mmirage_beam" / "examples" / "data" / "images"
LARGE_PNG = REPO / "tests" / "data" / "images" / "astronaut_large_noisy.png"
CHAT = "/v1/chat/completions"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 40},
        "score": {"type": "integer", "minimum": 3, "maximum": 7},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "ok": {"type": "boolean"},
        "label": {"enum": ["yes", "no", "maybe"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3},
        "step": {"$ref": "#/$defs/Step"},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 12}]},
    },
    "required": ["answer", "score"],
    "additionalProperties": False,
    "$defs": {
        "Step": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 100}, "when": {"format": "date"}},
            "required": ["n"],
        }
    },
}


class ManualClock:
    """An injectable clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += secs


# -- helpers -----------------------------------------------------------------------------


def _oa(fake: FakeProviderServer, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("api_key", "sk-test")
    return openai.OpenAI(base_url=fake.openai_base_url, **kwargs)


def _an(fake: FakeProviderServer, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("api_key", "sk-ant-test")
    return anthropic.Anthropic(base_url=fake.anthropic_base_url, **kwargs)


def _chat_line(custom_id: str, prompt: str | list, model: str = "gpt-4o-mini", **body: Any) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": model, "messages": [{"role": "user", "content": prompt}], **body},
    }


def _anthropic_request(custom_id: str, content: str | list, **params: Any) -> dict:
    merged = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": content}],
        **params,
    }
    return {"custom_id": custom_id, "params": merged}


def _upload(oa: openai.OpenAI, lines: list[dict | str], purpose: str = "batch") -> str:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    return oa.files.create(file=("input.jsonl", text.encode("utf-8")), purpose=purpose).id


def _run_openai(oa: openai.OpenAI, lines: list[dict | str], endpoint: str = CHAT) -> Any:
    file_id = _upload(oa, lines)
    created = oa.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h")
    assert created.status == "validating"
    return oa.batches.retrieve(created.id)


def _jsonl(oa: openai.OpenAI, file_id: str) -> list[dict]:
    text = oa.files.content(file_id).text
    assert "\n\n" not in text and text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _by_id(lines: list[dict]) -> dict[str, dict]:
    return {line["custom_id"]: line for line in lines}


def _results(an: anthropic.Anthropic, batch_id: str) -> dict[str, Any]:
    return {r.custom_id: r.result for r in an.messages.batches.results(batch_id)}


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _admin(fake: FakeProviderServer, path: str, payload: dict | None = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(fake.base_url + path, data=data, method="POST" if data else "GET")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        yield server


# -- deterministic answers -----------------------------------------------------------------


def test_fake_answer_text_is_short_and_identifies_the_prompt():
    prompt = "What   is\n 2 + 2 ?" + " pad" * 30
    answer = fake_answer_text(prompt)
    assert answer.startswith("FAKE:") and answer == fake_answer_text(prompt)
    assert answer.split(" ", 1)[1].startswith("What is 2 + 2 ?")
    assert len(answer) <= len("FAKE:") + 12 + 1 + 60
    assert fake_answer_text(prompt + "!") != answer


def test_fake_answer_json_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    value = fake_answer_json("a prompt", SCHEMA)
    jsonschema.validate(value, SCHEMA)
    assert set(value) == set(SCHEMA["properties"])
    assert 3 <= value["score"] <= 7 and 0 < value["ratio"] < 1 and value["step"]["n"] >= 100
    assert len(value["tags"]) == 3 and len(value["note"]) >= 12
    assert value == fake_answer_json("a prompt", SCHEMA)
    assert value != fake_answer_json("another prompt", SCHEMA)
    with pytest.raises(ValueError):
        fake_answer_json("x", {"type": "array", "items": {"type": "string"}})


# -- OpenAI --------------------------------------------------------------------------------


def test_openai_upload_create_retrieve_and_plain_answers(fake):
    oa = _oa(fake)
    prompts = {f"q{i}": f"Question number {i}: what is {i} + {i}?" for i in range(3)}
    lines = [_chat_line(cid, p) for cid, p in prompts.items()]
    file_id = _upload(oa, lines)
    uploaded = oa.files.retrieve(file_id)
    assert uploaded.purpose == "batch" and uploaded.bytes > 0
    batch = _run_openai(oa, lines)
    assert batch.status == "completed" and batch.model == "gpt-4o-mini"
    assert batch.request_counts.total == 3 and batch.request_counts.completed == 3
    assert batch.request_counts.failed == 0
    assert batch.error_file_id is None and batch.output_file_id
    assert batch.completed_at and batch.in_progress_at and batch.finalizing_at
    assert oa.files.retrieve(batch.output_file_id).purpose == "batch_output"
    out = _by_id(_jsonl(oa, batch.output_file_id))
    assert set(out) == set(prompts)
    for cid, prompt in prompts.items():
        line = out[cid]
        assert line["error"] is None and line["response"]["status_code"] == 200
        body = line["response"]["body"]
        assert body["object"] == "chat.completion" and body["model"] == "gpt-4o-mini"
        choice = body["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
        assert choice["message"]["content"] == fake_answer_text(prompt)
        usage = body["usage"]
        assert usage["prompt_tokens"] == len(prompt.split())
        assert usage["completion_tokens"] == len(fake_answer_text(prompt).split())
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    submitted = fake.submitted_requests("openai")
    assert [s["custom_id"] for s in submitted] == list(prompts)
    assert submitted[0]["request"] == lines[0] and submitted[0]["batch_id"] == batch.id
    assert fake.create_counts() == {cid: 1 for cid in prompts}
    assert fake.submitted_requests("anthropic") == []


def test_openai_json_schema_answers_and_markers(fake):
    oa = _oa(fake)
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "strict": True, "schema": SCHEMA},
    }
    prompts = {
        "plain_json": "Give me JSON",
        "not_json": "Give me JSON FAKE_ERROR:not_json",
        "fenced": "Give me JSON FAKE_FENCE",
    }
    lines = [
        _chat_line(cid, [{"type": "text", "text": p}], response_format=fmt)
        for cid, p in prompts.items()
    ]
    out = _by_id(_jsonl(oa, _run_openai(oa, lines).output_file_id))
    content = {
        cid: line["response"]["body"]["choices"][0]["message"]["content"]
        for cid, line in out.items()
    }
    assert json.loads(content["plain_json"]) == fake_answer_json(prompts["plain_json"], SCHEMA)
    assert content["not_json"] == fake_answer_text(prompts["not_json"])
    with pytest.raises(json.JSONDecodeError):
        json.loads(content["not_json"])
    fenced = content["fenced"]
    assert fenced.startswith("```json\n") and fenced.endswith("\n```")
    assert json.loads(fenced[len("```json\n") : -len("\n```")]) == fake_answer_json(
        prompts["fenced"], SCHEMA
    )


def test_openai_responses_endpoint_json_schema(fake):
    oa = _oa(fake)
    line = {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/responses",
        "body": {
            "model": "gpt-4o-mini",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
            "text": {"format": {"type": "json_schema", "name": "A", "schema": SCHEMA}},
        },
    }
    batch = _run_openai(oa, [line], endpoint="/v1/responses")
    body = _jsonl(oa, batch.output_file_id)[0]["response"]["body"]
    assert body["object"] == "response" and body["usage"]["input_tokens"] == 1
    assert json.loads(body["output"][0]["content"][0]["text"]) == fake_answer_json("hello", SCHEMA)


def test_openai_responses_input_may_be_carried_by_a_stored_prompt(fake):
    """``input`` is optional in the Responses API (the SDK's ``responses.create`` takes
    it as ``Omit``) when ``prompt``, ``previous_response_id`` or ``conversation`` stands
    in; with none of them the request gets the 400 line."""
    oa = _oa(fake)

    def line(cid: str, **body: Any) -> dict:
        return {"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": body}

    lines = [
        line("stored", model="gpt-4o-mini", prompt={"id": "pmpt_123", "version": "2"}),
        line("follow", model="gpt-4o-mini", previous_response_id="resp_1"),
        line("nothing", model="gpt-4o-mini"),
    ]
    batch = _run_openai(oa, lines, endpoint="/v1/responses")
    assert {x["custom_id"] for x in _jsonl(oa, batch.output_file_id)} == {"stored", "follow"}
    (refused,) = _jsonl(oa, batch.error_file_id)
    assert refused["custom_id"] == "nothing"
    assert refused["response"]["body"]["error"]["param"] == "input"


def test_openai_list_pagination_newest_first(fake):
    oa = _oa(fake)
    file_id = _upload(oa, [_chat_line("a", "hi")])
    ids = [
        oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h").id
        for _ in range(5)
    ]
    first = oa.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2]
    assert first.has_more is True
    assert first.first_id == ids[4] and first.last_id == ids[3]
    before = fake.call_counts()["batches_list"]
    assert [b.id for b in oa.batches.list(limit=2)] == ids[::-1]
    assert fake.call_counts()["batches_list"] - before == 3
    assert fake.create_counts() == {"a": 5}
    assert [b["id"] for b in fake.batches("openai")] == ids


def test_openai_per_request_errors_fill_both_files(fake):
    oa = _oa(fake)
    png = "data:image/png;base64," + _b64(IMAGES / "chelsea.png")
    bmp = "data:image/png;base64," + _b64(IMAGES / "rocket.bmp")
    lines = [
        _chat_line("ok", "fine question"),
        _chat_line(
            "img",
            [
                {"type": "text", "text": "describe"},
                {"type": "image_url", "image_url": {"url": png}},
            ],
        ),
        _chat_line("se", "x FAKE_ERROR:server_error"),
        _chat_line("ir", "x FAKE_ERROR:invalid_request"),
        _chat_line("rl", "x FAKE_ERROR:rate_limit"),
        _chat_line("to", "x FAKE_ERROR:timeout"),
        {"custom_id": "nomsg", "method": "POST", "url": CHAT, "body": {"model": "gpt-4o-mini"}},
        _chat_line(
            "bmp",
            [
                {"type": "text", "text": "describe"},
                {"type": "image_url", "image_url": {"url": bmp}},
            ],
        ),
    ]
    batch = _run_openai(oa, lines)
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 6)
    out = _by_id(_jsonl(oa, batch.output_file_id))
    assert set(out) == {"ok", "img"}
    assert out["img"]["response"]["body"]["usage"]["prompt_tokens"] == 1 + 10
    err = _by_id(_jsonl(oa, batch.error_file_id))
    assert set(err) == {"se", "ir", "rl", "to", "nomsg", "bmp"}
    statuses = {cid: (line["response"] or {}).get("status_code") for cid, line in err.items()}
    assert statuses == {"se": 500, "ir": 400, "rl": 429, "to": None, "nomsg": 400, "bmp": 400}
    for cid in ("se", "ir", "rl", "nomsg", "bmp"):
        assert err[cid]["error"] is None
        assert set(err[cid]["response"]["body"]["error"]) == {"message", "type", "param", "code"}
    assert err["ir"]["response"]["body"]["error"]["type"] == "invalid_request_error"
    assert err["rl"]["response"]["body"]["error"]["code"] == "rate_limit_exceeded"
    assert err["nomsg"]["response"]["body"]["error"]["param"] == "messages"
    assert err["bmp"]["response"]["body"]["error"]["code"] == "invalid_image_format"
    assert err["to"]["response"] is None and err["to"]["error"]["code"] == "request_timeout"


def test_openai_all_failed_has_no_output_file(fake):
    oa = _oa(fake)
    batch = _run_openai(oa, [_chat_line(f"e{i}", "FAKE_ERROR:server_error") for i in range(2)])
    assert batch.status == "completed" and batch.output_file_id is None
    assert len(_jsonl(oa, batch.error_file_id)) == 2
    assert batch.request_counts.failed == 2


def test_openai_line_level_validation_fails_the_batch(fake):
    oa = _oa(fake)
    lines = [
        _chat_line("a", "one"),
        "{not json",
        _chat_line("a", "dup"),
        {**_chat_line("u", "url"), "url": "/v1/embeddings"},
        _chat_line("m", "other model", model="gpt-4.1-mini"),
    ]
    batch = _run_openai(oa, lines)
    assert batch.status == "failed" and batch.failed_at
    assert batch.output_file_id is None and batch.error_file_id is None
    assert batch.request_counts.total == 0
    assert batch.errors.object == "list"
    found = [(e.code, e.line) for e in batch.errors.data]
    assert found == [
        ("invalid_json_line", 2),
        ("duplicate_custom_id", 3),
        ("url_mismatch", 4),
        ("model_mismatch", 5),
    ]


def test_openai_file_limits_fail_the_batch(fake, monkeypatch):
    oa = _oa(fake)
    monkeypatch.setattr(openai_fake, "OPENAI_MAX_LINES", 2)
    batch = _run_openai(oa, [_chat_line(f"l{i}", "x") for i in range(3)])
    assert batch.status == "failed" and batch.errors.data[0].code == "too_many_tasks"


def test_openai_create_validation_is_http_400(fake):
    oa = _oa(fake, max_retries=0)
    file_id = _upload(oa, [_chat_line("a", "x")])
    other = _upload(oa, [_chat_line("a", "x")], purpose="user_data")
    bad = [
        {"input_file_id": "file-missing"},
        {"input_file_id": other},
        {"endpoint": "/v1/audio/speech"},
        {"completion_window": "48h"},
        {"metadata": {f"k{i}": "v" for i in range(17)}},
        {"metadata": {"k" * 65: "v"}},
        {"metadata": {"k": "v" * 513}},
    ]
    for override in bad:
        kwargs = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
        with pytest.raises(openai.BadRequestError):
            oa.batches.create(**{**kwargs, **override})
    ok = {f"k{i}": "v" * 512 for i in range(16)}
    batch = oa.batches.create(
        input_file_id=file_id, endpoint=CHAT, completion_window="24h", metadata=ok
    )
    assert oa.batches.retrieve(batch.id).metadata == ok
    with pytest.raises(openai.NotFoundError):
        oa.batches.retrieve("batch_missing")


def test_openai_expire_after_requests_gives_partial_results(fake):
    oa = _oa(fake)
    fake.script(expire_after_requests=2)
    batch = _run_openai(oa, [_chat_line(f"r{i}", f"p{i}") for i in range(4)])
    assert batch.status == "expired" and batch.expired_at
    # The requests that never ran are not counted as failed: completed + failed < total.
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (4, 2, 0)
    assert sorted(_by_id(_jsonl(oa, batch.output_file_id))) == ["r0", "r1"]
    err = _by_id(_jsonl(oa, batch.error_file_id))
    assert sorted(err) == ["r2", "r3"]
    assert all(
        e["response"] is None and e["error"]["code"] == "batch_expired" for e in err.values()
    )


def test_openai_cancel_after_requests(fake):
    oa = _oa(fake)
    fake.script(cancel_after_requests=1)
    batch = _run_openai(oa, [_chat_line(f"r{i}", f"p{i}") for i in range(3)])
    assert batch.status == "cancelled" and batch.cancelled_at and batch.cancelling_at
    assert sorted(_by_id(_jsonl(oa, batch.output_file_id))) == ["r0"]
    err = _jsonl(oa, batch.error_file_id)
    assert {e["error"]["code"] for e in err} == {"batch_cancelled"} and len(err) == 2


def test_openai_token_limit_exceeded(fake):
    oa = _oa(fake)
    fake.script(token_limit_exceeded=True)
    batch = _run_openai(oa, [_chat_line("a", "x")])
    assert batch.status == "failed" and batch.errors.data[0].code == "token_limit_exceeded"
    assert batch.output_file_id is None and batch.error_file_id is None
    fake.script(token_limit_exceeded=False, enqueued_token_limit=3)
    assert _run_openai(oa, [_chat_line("b", "one two")]).status == "completed"
    batch = _run_openai(oa, [_chat_line("c", "one two three four")])
    assert batch.errors.data[0].code == "token_limit_exceeded"


def test_openai_empty_error_file_id_shuffle_and_unknown_custom_id(fake):
    oa = _oa(fake)
    ids = [f"r{i}" for i in range(8)]
    fake.script(empty_error_file_id=True, shuffle_results=True, unknown_custom_id=True)
    batch = _run_openai(oa, [_chat_line(cid, cid) for cid in ids])
    assert batch.error_file_id == ""
    got = [line["custom_id"] for line in _jsonl(oa, batch.output_file_id)]
    assert sorted(got) == sorted(ids + ["fake_unknown_custom_id"])
    known = [cid for cid in got if cid in ids]
    assert known != ids
    assert batch.request_counts.total == 8


def test_openai_user_cancel_with_delay_keeps_processed_results():
    clock = ManualClock()
    with FakeProviderServer(processing_delay_secs=3.0, clock=clock) as fake:
        oa = _oa(fake)
        file_id = _upload(oa, [_chat_line(f"r{i}", f"p{i}") for i in range(4)])
        batch = oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
        assert oa.batches.retrieve(batch.id).status == "validating"
        clock.advance(1.5)
        running = oa.batches.retrieve(batch.id)
        assert running.status == "in_progress" and running.request_counts.total == 4
        assert oa.batches.cancel(batch.id).status == "cancelling"
        clock.advance(0.5)
        assert oa.batches.retrieve(batch.id).status == "cancelling"
        clock.advance(0.6)
        done = oa.batches.retrieve(batch.id)
        assert done.status == "cancelled" and done.cancelled_at
        assert sorted(_by_id(_jsonl(oa, done.output_file_id))) == ["r0", "r1"]
        err = _jsonl(oa, done.error_file_id)
        assert {e["error"]["code"] for e in err} == {"batch_cancelled"} and len(err) == 2
        with pytest.raises(openai.ConflictError, match="Cannot cancel a batch with status"):
            oa.batches.cancel(batch.id)


def test_openai_lifecycle_walks_through_every_status():
    clock = ManualClock()
    with FakeProviderServer(processing_delay_secs=3.0, clock=clock) as fake:
        oa = _oa(fake)
        file_id = _upload(oa, [_chat_line("a", "x")])
        batch = oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
        seen = []
        for _ in range(4):
            seen.append(oa.batches.retrieve(batch.id).status)
            clock.advance(1.0)
        assert seen == ["validating", "in_progress", "finalizing", "completed"]


def test_openai_sdk_raw_bytes_upload_is_submitted_polled_and_collected():
    """``files.create(file=b"...", purpose="batch")``: the SDK names a bytes upload
    ``upload`` (no extension), which is how curator's OpenAI batch mode and litellm's
    ``create_file(file=<bytes>)`` upload. The real service accepts it (those clients run
    against it daily), so the fake takes it as JSONL; the batch is then polled through
    every status and its answers collected, with the SDK alone."""
    clock = ManualClock()
    with FakeProviderServer(processing_delay_secs=3.0, clock=clock) as fake:
        oa = _oa(fake)
        prompts = {f"raw{i}": f"Raw bytes question {i}" for i in range(3)}
        data = b"".join(
            json.dumps(_chat_line(cid, prompt)).encode() + b"\n" for cid, prompt in prompts.items()
        )
        uploaded = oa.files.create(file=data, purpose="batch")
        assert uploaded.filename == "upload" and uploaded.bytes == len(data)
        assert oa.files.content(uploaded.id).content == data
        batch = oa.batches.create(input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h")
        seen = []
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            seen.append(batch.status)
            clock.advance(1.0)
            batch = oa.batches.retrieve(batch.id)
        assert seen == ["validating", "in_progress", "finalizing"]
        assert batch.status == "completed" and batch.request_counts.completed == 3
        out = _by_id(_jsonl(oa, batch.output_file_id))
        answers = {
            cid: line["response"]["body"]["choices"][0]["message"]["content"]
            for cid, line in out.items()
        }
        assert answers == {cid: fake_answer_text(prompt) for cid, prompt in prompts.items()}


def test_openai_batch_upload_format_rule():
    """A ``purpose=batch`` upload is JSONL when its name ends in ``.jsonl`` (any case;
    bad lines fail the batch later) or has no extension and JSONL content; any other
    declared format is refused with the real service's error (message, type, ``param``
    and ``code`` null, as quoted in https://github.com/BerriAI/litellm/pull/37527)."""
    with FakeProviderServer() as fake:
        oa = _oa(fake, max_retries=0)
        line = json.dumps(_chat_line("a", "x")).encode()
        for name, data in (
            ("notes.txt", line),
            ("input.json", line),
            ("upload", b"plain text, not JSON\n"),
            ("upload", b"[1, 2]\n"),
            ("upload", b"\xff\xfe binary"),
        ):
            with pytest.raises(openai.BadRequestError) as caught:
                oa.files.create(file=(name, data), purpose="batch")
            assert caught.value.body == {
                "message": "Invalid file format for Batch API. Must be .jsonl",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }, name
        accepted = [
            ("INPUT.JSONL", line),
            ("bad_lines.jsonl", b"not json\n"),
            ("upload", b"\n" + line + b"\n"),
            ("upload", b""),
        ]
        for name, data in accepted:
            assert oa.files.create(file=(name, data), purpose="batch").purpose == "batch"
        # Other purposes take any name and content.
        assert oa.files.create(file=("notes.txt", b"x"), purpose="user_data").bytes == 1


# -- Anthropic -----------------------------------------------------------------------------


def test_anthropic_create_retrieve_results_and_delete(fake):
    an = _an(fake)
    fmt = {"format": {"type": "json_schema", "schema": SCHEMA}}
    requests = [
        _anthropic_request("plain", "Tell me a fact"),
        _anthropic_request(
            "blocks", [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}]
        ),
        _anthropic_request("json", "Give JSON", output_config=fmt),
    ]
    created = an.messages.batches.create(requests=requests)
    assert created.processing_status == "in_progress" and created.results_url is None
    assert created.request_counts.processing == 3
    batch = an.messages.batches.retrieve(created.id)
    assert batch.processing_status == "ended" and batch.ended_at is not None
    assert batch.results_url == f"{fake.base_url}/v1/messages/batches/{created.id}/results"
    assert batch.request_counts.succeeded == 3 and batch.request_counts.processing == 0
    results = _results(an, created.id)
    assert {cid: r.type for cid, r in results.items()} == dict.fromkeys(results, "succeeded")
    plain = results["plain"].message
    assert plain.content[0].text == fake_answer_text("Tell me a fact")
    assert plain.stop_reason == "end_turn" and plain.model == "claude-haiku-4-5"
    assert plain.usage.input_tokens == 4
    assert plain.usage.output_tokens == len(fake_answer_text("Tell me a fact").split())
    assert results["blocks"].message.content[0].text == fake_answer_text("part one\ntwo")
    assert json.loads(results["json"].message.content[0].text) == fake_answer_json(
        "Give JSON", SCHEMA
    )
    submitted = fake.submitted_requests("anthropic")
    assert [s["request"] for s in submitted] == requests
    deleted = an.messages.batches.delete(created.id)
    assert deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        an.messages.batches.retrieve(created.id)


def test_anthropic_list_pagination(fake):
    an = _an(fake)
    ids = [an.messages.batches.create(requests=[_anthropic_request("a", "x")]).id for _ in range(5)]
    newest = ids[::-1]
    page = an.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == newest[:2] and page.has_more
    assert page.first_id == newest[0] and page.last_id == newest[1]
    assert [b.id for b in an.messages.batches.list(limit=2)] == newest
    older = an.messages.batches.list(before_id=newest[3], limit=2)
    assert [b.id for b in older.data] == newest[1:3] and older.has_more
    assert fake.create_counts() == {"a": 5}


def test_anthropic_bad_custom_ids_and_sizes_are_http_errors(fake, monkeypatch):
    an = _an(fake, max_retries=0)
    for requests in (
        [_anthropic_request("bad id!", "x")],
        [_anthropic_request("x" * 65, "x")],
        [_anthropic_request("dup", "x"), _anthropic_request("dup", "y")],
        [],
    ):
        with pytest.raises(anthropic.BadRequestError) as info:
            an.messages.batches.create(requests=requests)
        assert info.value.body["error"]["type"] == "invalid_request_error"
    monkeypatch.setattr(anthropic_fake, "ANTHROPIC_MAX_REQUESTS", 2)
    with pytest.raises(anthropic.BadRequestError):
        an.messages.batches.create(requests=[_anthropic_request(f"r{i}", "x") for i in range(3)])
    monkeypatch.setattr(anthropic_fake, "ANTHROPIC_MAX_BODY_BYTES", 100)
    with pytest.raises(anthropic.APIStatusError) as info:
        an.messages.batches.create(requests=[_anthropic_request("big", "x" * 200)])
    assert info.value.status_code == 413
    assert info.value.body["error"]["type"] == "request_too_large"
    assert fake.batches() == [] and fake.create_counts() == {}


def test_anthropic_bad_params_and_markers_are_errored_results(fake):
    an = _an(fake)
    # Claude 3.5 Haiku is no longer in anthropic.types.Model: admitted as --models does.
    fake.admit_models("claude-3-5-haiku-20241022")

    def image(path: Path, media_type: str) -> list:
        source = {"type": "base64", "media_type": media_type, "data": _b64(path)}
        return [{"type": "image", "source": source}, {"type": "text", "text": "what is this"}]

    no_tokens = _anthropic_request("no_max_tokens", "x")
    del no_tokens["params"]["max_tokens"]
    no_model = _anthropic_request("no_model", "x")
    del no_model["params"]["model"]
    requests = [
        no_tokens,
        no_model,
        {"custom_id": "no_messages", "params": {"model": "claude-haiku-4-5", "max_tokens": 5}},
        _anthropic_request("temp_and_top_p", "x", temperature=0.5, top_p=0.9),
        # Claude 3 models take both (only the newer ones refuse); see anthropic.py.
        _anthropic_request(
            "both_ok", "x", model="claude-3-5-haiku-20241022", temperature=0.5, top_p=0.9
        ),
        _anthropic_request("temp_high", "x", temperature=1.5),
        _anthropic_request("bmp", image(IMAGES / "rocket.bmp", "image/bmp")),
        _anthropic_request("mismatch", image(IMAGES / "flower_png_bytes.jpg", "image/jpeg")),
        _anthropic_request("too_big", image(LARGE_PNG, "image/png")),
        _anthropic_request("webp", image(IMAGES / "coffee.webp", "image/webp")),
        _anthropic_request("se", "FAKE_ERROR:server_error"),
        _anthropic_request("ir", "FAKE_ERROR:invalid_request"),
        _anthropic_request("rl", "FAKE_ERROR:rate_limit"),
        _anthropic_request("to", "FAKE_ERROR:timeout"),
    ]
    batch = an.messages.batches.create(requests=requests)
    results = _results(an, batch.id)
    assert results["webp"].type == "succeeded" and results["both_ok"].type == "succeeded"
    assert results["webp"].message.usage.input_tokens == 3 + 10
    expected = {
        "no_max_tokens": "invalid_request_error",
        "no_model": "invalid_request_error",
        "no_messages": "invalid_request_error",
        "temp_and_top_p": "invalid_request_error",
        "temp_high": "invalid_request_error",
        "bmp": "invalid_request_error",
        "mismatch": "invalid_request_error",
        "too_big": "invalid_request_error",
        "se": "api_error",
        "ir": "invalid_request_error",
        "rl": "rate_limit_error",
        "to": "timeout_error",
    }
    got = {}
    for cid in expected:
        assert results[cid].type == "errored", cid
        assert results[cid].error.type == "error"
        got[cid] = results[cid].error.error.type
        assert results[cid].error.error.message
    assert got == expected
    assert "does not match" in results["mismatch"].error.error.message
    counts = an.messages.batches.retrieve(batch.id).request_counts
    assert (counts.succeeded, counts.errored) == (2, 12)


def test_anthropic_expire_and_cancel_after_requests(fake):
    an = _an(fake)
    requests = [_anthropic_request(f"r{i}", f"p{i}") for i in range(4)]
    for key, kind in (("expire_after_requests", "expired"), ("cancel_after_requests", "canceled")):
        fake.reset()
        fake.script(**{key: 3})
        batch = an.messages.batches.create(requests=requests)
        ended = an.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended"
        assert ended.request_counts.succeeded == 3
        assert getattr(ended.request_counts, kind) == 1
        assert (ended.cancel_initiated_at is not None) == (kind == "canceled")
        results = _results(an, batch.id)
        assert results["r3"].type == kind
        assert [results[f"r{i}"].type for i in range(3)] == ["succeeded"] * 3


def test_anthropic_user_cancel_delete_and_delay():
    clock = ManualClock()
    with FakeProviderServer(processing_delay_secs=3.0, clock=clock) as fake:
        an = _an(fake, max_retries=0)
        batch = an.messages.batches.create(
            requests=[_anthropic_request(f"r{i}", f"p{i}") for i in range(4)]
        )
        clock.advance(1.0)
        running = an.messages.batches.retrieve(batch.id)
        assert running.processing_status == "in_progress" and running.results_url is None
        assert running.request_counts.processing == 4 and running.request_counts.succeeded == 0
        with pytest.raises(anthropic.AnthropicError):
            list(an.messages.batches.results(batch.id))
        canceling = an.messages.batches.cancel(batch.id)
        assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
        with pytest.raises(anthropic.BadRequestError):
            an.messages.batches.delete(batch.id)
        clock.advance(1.0)
        ended = an.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended"
        assert (ended.request_counts.succeeded, ended.request_counts.canceled) == (2, 2)
        results = _results(an, batch.id)
        assert sorted(cid for cid, r in results.items() if r.type == "canceled") == ["r2", "r3"]
        with pytest.raises(anthropic.BadRequestError):
            an.messages.batches.cancel(batch.id)
        an.messages.batches.delete(batch.id)
        assert an.messages.batches.list().data == []


def test_anthropic_shuffle_and_unknown_custom_id(fake):
    an = _an(fake)
    fake.script(shuffle_results=True, unknown_custom_id=True)
    ids = [f"r{i}" for i in range(8)]
    batch = an.messages.batches.create(requests=[_anthropic_request(cid, cid) for cid in ids])
    got = [r.custom_id for r in an.messages.batches.results(batch.id)]
    assert sorted(got) == sorted(ids + ["fake_unknown_custom_id"])
    assert [cid for cid in got if cid in ids] != ids
    assert an.messages.batches.retrieve(batch.id).request_counts.succeeded == 8


def test_real_clock_delay_goes_from_in_progress_to_completed():
    with FakeProviderServer(processing_delay_secs=0.5) as fake:
        oa, an = _oa(fake), _an(fake)
        file_id = _upload(oa, [_chat_line("a", "x")])
        ob = oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
        ab = an.messages.batches.create(requests=[_anthropic_request("a", "x")])
        assert oa.batches.retrieve(ob.id).status in ("validating", "in_progress")
        assert an.messages.batches.retrieve(ab.id).processing_status == "in_progress"
        time.sleep(0.6)
        assert oa.batches.retrieve(ob.id).status == "completed"
        assert an.messages.batches.retrieve(ab.id).processing_status == "ended"


# -- both: scripted HTTP failures, auth, admin --------------------------------------------


def test_leading_errors_are_absorbed_by_sdk_retries(fake):
    oa, an = _oa(fake), _an(fake)
    file_id = _upload(oa, [_chat_line("a", "x")])
    fake.script(
        leading_errors={
            "status": 429,
            "count": 2,
            "retry_after_ms": 10,
            "paths": ["batches_create"],
        }
    )
    started = time.monotonic()
    oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    assert time.monotonic() - started < 2
    assert fake.call_counts()["batches_create"] == 3
    fake.script(leading_errors={"status": 529, "count": 2, "paths": ["messages_batches_create"]})
    an.messages.batches.create(requests=[_anthropic_request("a", "x")])
    assert fake.call_counts()["messages_batches_create"] == 3
    fake.script(leading_errors={"status": 503, "count": 5})
    with pytest.raises(openai.InternalServerError) as info:
        oa.files.list()
    assert info.value.response.headers["retry-after-ms"] == "10"
    assert info.value.response.headers["retry-after"] == "1"
    assert fake.call_counts()["files_list"] == 3
    fake.script(leading_errors=None)
    assert len(oa.files.list().data) == 1


def test_fail_batch_creates_nth_permanent_and_duplicate_creation(fake):
    oa, an = _oa(fake), _an(fake)
    file_id = _upload(oa, [_chat_line("a", "x")])
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 500})
    oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    with pytest.raises(openai.InternalServerError):
        oa.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")
    with pytest.raises(anthropic.InternalServerError):
        an.messages.batches.create(requests=[_anthropic_request("b", "x")])
    assert fake.call_counts()["batches_create"] == 4
    assert fake.call_counts()["messages_batches_create"] == 3
    assert fake.create_counts() == {"a": 1}
    fake.script(fail_batch_creates={"nth": 1, "created": True})
    an.messages.batches.create(requests=[_anthropic_request("b", "x")])
    assert fake.create_counts() == {"a": 1, "b": 2}
    assert len(fake.batches("anthropic")) == 2


def test_missing_auth_is_401_in_each_provider_shape(fake):
    with pytest.raises(openai.AuthenticationError) as oa_info:
        _oa(fake).batches.list(extra_headers={"Authorization": openai.Omit()})
    assert oa_info.value.body["type"] == "invalid_request_error"
    with pytest.raises(anthropic.AuthenticationError) as an_info:
        _an(fake).messages.batches.list(extra_headers={"Authorization": anthropic.Omit()})
    assert an_info.value.body["error"]["type"] == "authentication_error"
    req = urllib.request.Request(fake.base_url + "/v1/messages/batches", headers={"x-api-key": "k"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert json.loads(resp.read())["data"] == []


def test_admin_endpoints_script_state_and_reset(fake):
    assert _admin(fake, "/_fake/script", {"unknown_custom_id": True})["unknown_custom_id"] is True
    an = _an(fake)
    batch = an.messages.batches.create(requests=[_anthropic_request("a", "x")])
    assert "fake_unknown_custom_id" in _results(an, batch.id)
    state = _admin(fake, "/_fake/state")
    assert state["create_counts"] == {"a": 1}
    assert state["submitted_requests"][0]["custom_id"] == "a"
    assert state["batches"][0]["id"] == batch.id
    with pytest.raises(urllib.error.HTTPError) as info:
        _admin(fake, "/_fake/script", {"no_such_key": 1})
    assert info.value.code == 400
    info.value.close()
    assert _admin(fake, "/_fake/reset", {}) == {"ok": True}
    state = _admin(fake, "/_fake/state")
    assert state["create_counts"] == {} and state["batches"] == []
    assert state["script"]["unknown_custom_id"] is False
    with pytest.raises(ValueError):
        fake.script(expire_after_requests=1, cancel_after_requests=1)
    with pytest.raises(ValueError):
        FakeProviderServer(host="0.0.0.0")


def test_cli_serves_until_terminated():
    script = json.dumps({"unknown_custom_id": True})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmirage_beam.testing.fake_provider",
            "--port",
            "0",
            "--script",
            script,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        banner = lines.get(timeout=15)
        pattern = r"fake provider listening on (http://127\.0\.0\.1:\d+) "
        match = re.match(
            pattern + r"\(OpenAI: \1/v1, Anthropic: \1, Gemini: \1, Mistral: \1/mistral, "
            r"Azure OpenAI: \1/azure/openai/v1, Groq: \1/groq/openai/v1, "
            r"Together: \1/together/v1\)$",
            banner.strip(),
        )
        assert match, banner
        base_url = match.group(1)
        an = anthropic.Anthropic(api_key="sk-ant-test", base_url=base_url)
        batch = an.messages.batches.create(requests=[_anthropic_request("cli", "hello")])
        results = _results(an, batch.id)
        assert results["cli"].message.content[0].text == fake_answer_text("hello")
        assert "fake_unknown_custom_id" in results
        oa = openai.OpenAI(api_key="sk-test", base_url=base_url + "/v1")
        assert oa.batches.list().data == []
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()
        proc.stderr.close()
