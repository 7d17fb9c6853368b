"""``batch_endpoint: /v1/responses``: requests built in the Responses API's own shape
(validated against openai-python's request types), its results parsed into typed
outcomes, and the whole lifecycle (dry run, submit to the fake through the real SDK,
merge) on real data."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from mmirage_beam.config import config_from_dict
from mmirage_beam.images import load_image
from mmirage_beam.providers.openai import OpenAIBatchConfig
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter, normalise_result_line
from mmirage_beam.providers.openai.responses import normalise_responses_body
from mmirage_beam.testing import fake_answer_json, fake_answer_text
from mmirage_beam.transforms.build import build_payload
from pipelines.merge import main as merge_main
from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, IMAGES, base_config, write_config
from tests.sdk_validation import _check_responses_body, validate_export

SCHEMA = {"score": {"type": "int", "min": 1, "max": 5}, "why": "str"}


def _force(value):
    if isinstance(value, dict):
        return {k: _force(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [_force(v) for v in value]
    return value


@functools.cache  # kept alive: pydantic's lazy iterators need it
def _responses_params():
    from openai.types.responses import response_create_params

    return TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)


@functools.cache
def _chat_params():
    from openai.types.chat import completion_create_params

    return TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming)


def _output(name="answer", output_type="plain", schema=None, prompt="{{ q }}"):
    from mmirage_beam.config.loader import OutputConfig

    return OutputConfig(name=name, prompt=prompt, output_type=output_type, output_schema=schema)


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def test_responses_request_text_json_and_images():
    config = OpenAIBatchConfig(batch_endpoint="/v1/responses", model="gpt-4.1-mini")
    adapter = OpenAIBatchAdapter()
    images = [load_image(name, str(IMAGES)) for name in ("chelsea.png", "china.jpg")]
    payload = build_payload("Describe both photographs.", images, _output("grade", "JSON", SCHEMA))
    request = adapter.build_request("grade-multimodal-0", payload, config)
    assert request["url"] == "/v1/responses" and request["method"] == "POST"
    body = request["body"]
    assert set(body) == {"model", "input", "text"}
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Describe both photographs."},
                {"type": "input_image", "image_url": images[0]["url"], "detail": "auto"},
                {"type": "input_image", "image_url": images[1]["url"], "detail": "auto"},
            ],
        }
    ]
    assert images[0]["url"].startswith("data:image/png;base64,")
    assert images[1]["url"].startswith("data:image/jpeg;base64,")
    fmt = body["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["name"] == "grade" and fmt["strict"] is True
    assert fmt["schema"]["properties"]["score"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert fmt["schema"]["required"] == ["score", "why"]
    _force(_responses_params().validate_python(body))
    problems: list[str] = []
    _check_responses_body(_responses_params(), body, problems, "built")
    assert problems == []
    # The chat-shaped body of the same payload is what the Responses API refuses
    # ("Missing required parameter: 'input'"), and the check says so.
    chat = adapter.build_request("c", payload, OpenAIBatchConfig())["body"]
    _check_responses_body(_responses_params(), chat, problems, "chat")
    assert "chat: chat-completions key 'messages' in a Responses body" in problems
    assert "chat: input must be a list of messages" in problems


def test_responses_instructions_max_output_tokens_and_sampling():
    config = OpenAIBatchConfig(
        batch_endpoint="/v1/responses",
        max_tokens=256,
        temperature=0.2,
        top_p=0.9,
        image_detail="low",
    )
    payload = build_payload(
        "What is shown?", [load_image("coffee.webp", str(IMAGES))], _output(prompt="x")
    )
    payload["messages"].insert(0, {"role": "system", "content": "You are terse."})
    body = OpenAIBatchAdapter().build_request("answer-multimodal-1", payload, config)["body"]
    assert body["instructions"] == "You are terse."
    assert body["max_output_tokens"] == 256
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert [m["role"] for m in body["input"]] == ["user"]
    assert body["input"][0]["content"][1]["detail"] == "low"
    assert "text" not in body  # plain output: no format
    _force(_responses_params().validate_python(body))


def test_chat_requests_keep_their_bytes_unless_new_fields_are_set():
    """Old chat runs must still verify at merge: no new keys unless configured."""
    adapter = OpenAIBatchAdapter()
    img = load_image("flower.jpg", str(IMAGES))
    payload = build_payload("Name the flower.", [img], _output())
    body = adapter.build_request("a", payload, OpenAIBatchConfig())["body"]
    assert body == {
        "model": "gpt-4.1-mini",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Name the flower."},
                    {"type": "image_url", "image_url": {"url": img["url"]}},
                ],
            }
        ],
    }
    tuned = OpenAIBatchConfig(max_tokens=64, temperature=1.5, top_p=0.5, image_detail="high")
    body = adapter.build_request("a", payload, tuned)["body"]
    assert body["max_completion_tokens"] == 64
    assert body["temperature"] == 1.5 and body["top_p"] == 0.5
    assert body["messages"][0]["content"][1]["image_url"] == {"detail": "high", "url": img["url"]}
    _force(_chat_params().validate_python(body))


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("max_tokens", 0, ">= 1"),
        ("temperature", 2.5, "[0, 2]"),
        ("top_p", 1.5, "[0, 1]"),
        ("image_detail", "ultra", "auto, low, high, original"),
    ],
)
def test_openai_sampling_fields_are_validated_at_load(tmp_path, field, value, words):
    from mmirage_beam.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config_from_dict(base_config(tmp_path, **{field: value}))
    assert info.value.key == f"processors[0].{field}"
    assert words in info.value.message


def test_responses_max_tokens_below_the_api_minimum_is_refused_at_load(tmp_path):
    from mmirage_beam.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config_from_dict(base_config(tmp_path, batch_endpoint="/v1/responses", max_tokens=15))
    assert info.value.key == "processors[0].max_tokens" and ">= 16" not in info.value.message
    assert "minimum max_output_tokens of 16" in info.value.message
    # Chat completions has no such minimum.
    assert config_from_dict(base_config(tmp_path, max_tokens=15)).processor.max_tokens == 15


def _message(*parts, status="completed", incomplete=None, usage=True):
    body = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-4.1-mini",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": status,
                "content": list(parts),
            },
        ],
        "incomplete_details": incomplete,
        "error": None,
    }
    if usage:
        body["usage"] = {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}
    return body


def _text(text):
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            _message(_text("Hello, "), _text("world.")),
            {"generated_text": "Hello, world.", "input_tokens": 12, "output_tokens": 7},
        ),
        (
            _message({"type": "refusal", "refusal": "I can't help with that."}),
            {
                "error": {
                    "type": "refusal",
                    "message": "I can't help with that.",
                    "status_code": 200,
                },
                "input_tokens": 12,
                "output_tokens": 7,
            },
        ),
        (
            _message(
                _text('{"score": 3, "wh'),
                status="incomplete",
                incomplete={"reason": "max_output_tokens"},
            ),
            {
                "error": {
                    "type": "truncated",
                    "message": "the response is incomplete (max_output_tokens); text so far: "
                    '{"score": 3, "wh',
                    "status_code": 200,
                },
                "input_tokens": 12,
                "output_tokens": 7,
            },
        ),
        (
            _message(status="incomplete", incomplete={"reason": "content_filter"}),
            {
                "error": {
                    "type": "content_filter",
                    "message": "the response is incomplete (content_filter)",
                    "status_code": 200,
                },
                "input_tokens": 12,
                "output_tokens": 7,
            },
        ),
        (
            _message(_text("  "), usage=False),
            {
                "error": {
                    "type": "empty",
                    "message": "the response holds no output text",
                    "status_code": 200,
                }
            },
        ),
        (
            {"object": "response", "status": "completed"},
            {
                "error": {
                    "type": "malformed_response",
                    "message": "the body is not a Response (no output[] list)",
                    "status_code": 200,
                }
            },
        ),
        (
            {**_message(), "status": "failed", "error": {"code": "server_error", "message": "x"}},
            {
                "error": {
                    "type": "server_error",
                    "message": "the response failed: x",
                    "status_code": 200,
                },
                "input_tokens": 12,
                "output_tokens": 7,
            },
        ),
    ],
    ids=["text", "refusal", "truncated", "content_filter", "empty", "malformed", "failed"],
)
def test_normalise_responses_body(body, expected):
    # the body's fields, without a custom_id (the caller adds it)
    assert normalise_responses_body(body).to_json() == {"custom_id": None, **expected}


def test_responses_bodies_are_dispatched_from_result_lines():
    line = {
        "id": "batch_req_1",
        "custom_id": "answer-text-0",
        "response": {"status_code": 200, "request_id": "r", "body": _message(_text("ok"))},
        "error": None,
    }
    assert normalise_result_line(line).to_json() == {
        "custom_id": "answer-text-0",
        "generated_text": "ok",
        "input_tokens": 12,
        "output_tokens": 7,
    }


def _responses_config(tmp_path, fake=None, n_rows=12):
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:n_rows]
    vision = (IMAGES / "vision_questions.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    pics = tmp_path / "vision.jsonl"
    pics.write_text("\n".join(vision) + "\n", encoding="utf-8")
    extra = {"base_url": fake.openai_base_url} if fake is not None else {}
    cfg = base_config(tmp_path, batch_endpoint="/v1/responses", max_tokens=512, **extra)
    cfg["loading_params"]["datasets"] = [
        {"path": str(data), "type": "JSONL", "output_dir": str(tmp_path / "shards")},
        {
            "path": str(pics),
            "type": "JSONL",
            "output_dir": str(tmp_path / "shards"),
            "image_base_path": str(IMAGES),
        },
    ]
    cfg["processing_params"]["inputs"].append(
        {"name": "image", "key": "image", "type": "image", "default": []}
    )
    cfg["processing_params"]["outputs"].append(
        {
            "name": "grade",
            "type": "batch_api",
            "output_type": "JSON",
            "prompt": "Grade the difficulty of: {{ question }}",
            "output_schema": SCHEMA,
        }
    )
    cfg["processing_params"]["output_schema"]["score"] = "{{ grade.score }}"
    return write_config(tmp_path, cfg), [json.loads(x) for x in rows + vision]


def test_dry_run_exports_valid_responses_requests(tmp_path, capsys):
    path, rows = _responses_config(tmp_path)
    code = run_main(
        ["--config", path, "--export-prompts", str(tmp_path / "p.jsonl"), "--run-id", "rsp"]
    )
    assert code == 0, capsys.readouterr().out
    export = tmp_path / "p.rsp.jsonl"
    n, problems = validate_export(export)
    assert problems == [] and n == 2 * len(rows) == 30
    by_id = {ln["request"]["custom_id"]: ln["request"] for ln in _read_jsonl(export)}
    text = by_id["answer-text-0"]
    assert text["url"] == "/v1/responses"
    assert text["body"]["input"][0]["content"] == [
        {"type": "input_text", "text": "Answer concisely:\n" + rows[0]["question"]}
    ]
    assert text["body"]["max_output_tokens"] == 512 and "messages" not in text["body"]
    picture = by_id["grade-multimodal-12"]["body"]
    assert [p["type"] for p in picture["input"][0]["content"]] == ["input_text", "input_image"]
    assert picture["text"]["format"]["name"] == "grade"


def test_responses_lifecycle_against_the_fake(tmp_path, capsys, provider_env):
    """Dry run, then a real submission through the openai SDK, then merge: the fake's
    Responses answers parse into the merged rows, with their tokens."""
    fake = provider_env
    path, rows = _responses_config(tmp_path, fake)
    assert (
        run_main(["--config", path, "--export-prompts", str(tmp_path / "p.jsonl"), "--run-id", "d"])
        == 0
    )
    exported = {
        ln["request"]["custom_id"]: ln["request"] for ln in _read_jsonl(tmp_path / "p.d.jsonl")
    }
    assert run_main(["--config", path, "--run-id", "r1"]) == 0
    held = {h["custom_id"]: h["request"] for h in fake.submitted_requests("openai")}
    assert held == exported
    assert {b["endpoint"] for b in fake.batches("openai")} == {"/v1/responses"}
    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", path, "--output-path", str(out)])
    report = capsys.readouterr().out
    assert code == 0, report
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(len(rows)))
    from mmirage_beam.config.schema import json_schema_for

    for m, row in zip(merged, rows):
        question = row["question"]
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + question)
        grade = fake_answer_json("Grade the difficulty of: " + question, json_schema_for(SCHEMA))
        assert m["score"] == grade["score"]
        assert m["input_tokens"] > 0 and m["output_tokens"] > 0
        assert "mmirage_errors" not in m
    assert "outputs succeeded:   30" in report
