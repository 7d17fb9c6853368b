"""The fake refuses what each service refuses, through the official SDKs: a typo'd model,
an unknown parameter, ``stream`` in a batch line, the reasoning-model and thinking-budget
rules; and it honours ``n``, ``dimensions`` and the system prompt / tools in
``count_tokens`` (rules and sources: mmirage_beam/providers/model_rules.py,
mmirage_beam/providers/<name>/fake_service.py, docs/fake-provider.md)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import anthropic
import openai
import pytest

from mmirage_beam.testing import FakeProviderServer

CHAT = "/v1/chat/completions"


def _oa(fake) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url, max_retries=0)


def _an(fake) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-test", base_url=fake.anthropic_base_url, max_retries=0
    )


def _chat(custom_id: str, model: str = "gpt-4o-mini", **body) -> dict:
    messages = [{"role": "user", "content": f"say {custom_id}"}]
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": model, "messages": messages, **body},
    }


def _openai_results(oa: openai.OpenAI, lines: list[dict], endpoint: str = CHAT) -> dict:
    """custom_id -> the response object of every line (output and error files); one
    batch per model, as OpenAI takes one model per input file."""
    by_model: dict[str, list[dict]] = {}
    for line in lines:
        by_model.setdefault(line["body"]["model"], []).append(line)
    out = {}
    for group in by_model.values():
        data = b"".join(json.dumps(x).encode() + b"\n" for x in group)
        uploaded = oa.files.create(file=("in.jsonl", data), purpose="batch")
        created = oa.batches.create(
            input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h"
        )
        batch = oa.batches.retrieve(created.id)
        assert batch.status == "completed", batch  # a bad line fails alone, as on OpenAI
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                for raw in oa.files.content(file_id).text.splitlines():
                    line = json.loads(raw)
                    out[line["custom_id"]] = line["response"]
    return out


def test_openai_refuses_unknown_models_and_params_line_by_line(fake_provider):
    results = _openai_results(
        _oa(fake_provider),
        [
            _chat("ok"),
            _chat("snapshot", model="gpt-4o-mini-2024-07-18"),
            _chat("finetune", model="ft:gpt-4o-mini-2024-07-18:acme:demo:abc123"),
            _chat("typo", model="gpt-4o-mini-TYPO"),
            _chat("unknown_param", max_tokens_to_sample=5),
            _chat("stream", stream=True),
            _chat("reasoning_max_tokens", model="o3", max_tokens=5),
            _chat("reasoning_temperature", model="gpt-5-mini", temperature=0.2),
            _chat("reasoning_ok", model="o4-mini", max_completion_tokens=5, temperature=1),
            _chat("two", n=2),
        ],
    )
    for ok in ("ok", "snapshot", "finetune", "reasoning_ok", "two"):
        assert results[ok]["status_code"] == 200, (ok, results[ok])
    typo = results["typo"]
    assert typo["status_code"] == 404
    assert typo["body"]["error"]["code"] == "model_not_found"
    assert "`gpt-4o-mini-TYPO` does not exist" in typo["body"]["error"]["message"]
    unknown = results["unknown_param"]["body"]["error"]
    assert results["unknown_param"]["status_code"] == 400
    assert unknown["message"] == "Unrecognized request argument supplied: max_tokens_to_sample"
    assert results["stream"]["status_code"] == 400
    assert results["stream"]["body"]["error"]["param"] == "stream"
    max_tokens = results["reasoning_max_tokens"]["body"]["error"]
    assert (
        max_tokens["code"] == "unsupported_parameter"
        and "max_completion_tokens" in (max_tokens["message"])
    )
    temperature = results["reasoning_temperature"]["body"]["error"]
    assert temperature["code"] == "unsupported_value" and temperature["param"] == "temperature"
    choices = results["two"]["body"]["choices"]
    assert [c["index"] for c in choices] == [0, 1]


def test_openai_responses_unknown_parameter_and_embedding_dimensions(fake_provider):
    oa = _oa(fake_provider)
    responses = _openai_results(
        oa,
        [
            {
                "custom_id": "bad",
                "method": "POST",
                "url": "/v1/responses",
                "body": {"model": "gpt-4.1-mini", "input": "hi", "max_tokens": 5},
            }
        ],
        endpoint="/v1/responses",
    )
    error = responses["bad"]["body"]["error"]
    assert error["code"] == "unknown_parameter" and error["param"] == "max_tokens"

    def embed(custom_id: str, **body) -> dict:
        body = {"model": "text-embedding-3-small", "input": ["a", "b"], **body}
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body}

    embeddings = _openai_results(
        oa,
        [
            embed("short", dimensions=256),
            embed("default"),
            embed("ada", model="text-embedding-ada-002", dimensions=256),
        ],
        endpoint="/v1/embeddings",
    )
    short = embeddings["short"]["body"]["data"]
    assert [len(d["embedding"]) for d in short] == [256, 256]
    assert short[0]["embedding"] != short[1]["embedding"]
    assert len(embeddings["default"]["body"]["data"][0]["embedding"]) == 1536
    assert embeddings["ada"]["status_code"] == 400


def test_models_flag_admits_a_name(fake_provider):
    fake_provider.admit_models("my-private-model")
    results = _openai_results(_oa(fake_provider), [_chat("mine", model="my-private-model")])
    assert results["mine"]["status_code"] == 200


def _anthropic_request(custom_id: str, **params) -> dict:
    base = {
        "model": "claude-haiku-4-5",
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": "hello there"}],
    }
    return {"custom_id": custom_id, "params": {**base, **params}}


def test_anthropic_refusals_are_errored_results(fake_provider):
    an = _an(fake_provider)
    batch = an.messages.batches.create(
        requests=[
            _anthropic_request("ok"),
            _anthropic_request("snapshot", model="claude-haiku-4-5-20251001"),
            _anthropic_request("typo", model="claude-haiku-4-5-TYPO"),
            _anthropic_request("unknown_param", max_tokens_to_sample=5),
            _anthropic_request("stream", stream=True),
            _anthropic_request(
                "budget_over", max_tokens=1000, thinking={"type": "enabled", "budget_tokens": 2000}
            ),
            _anthropic_request("budget_small", thinking={"type": "enabled", "budget_tokens": 500}),
            _anthropic_request(
                "budget_ok", max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 2000}
            ),
        ]
    )
    results = {r.custom_id: r.result for r in an.messages.batches.results(batch.id)}
    for ok in ("ok", "snapshot", "budget_ok"):
        assert results[ok].type == "succeeded", (ok, results[ok])

    def error(custom_id: str):
        assert results[custom_id].type == "errored"
        return results[custom_id].error.error

    assert error("typo").type == "not_found_error"
    assert error("typo").message == "model: claude-haiku-4-5-TYPO"
    assert "max_tokens_to_sample: Extra inputs are not permitted" == error("unknown_param").message
    assert error("stream").message.startswith("stream:")
    assert "`max_tokens` must be greater than `thinking.budget_tokens`" in (
        error("budget_over").message
    )
    assert "greater than or equal to 1024" in error("budget_small").message


def test_anthropic_count_tokens_counts_system_tools_and_images(fake_provider):
    from tests.conftest import REPO

    an = _an(fake_provider)
    messages = [{"role": "user", "content": "count these words"}]
    plain = an.messages.count_tokens(model="claude-haiku-4-5", messages=messages).input_tokens
    with_system = an.messages.count_tokens(
        model="claude-haiku-4-5", messages=messages, system="you are terse"
    ).input_tokens
    tool = {
        "name": "get_weather",
        "description": "weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    with_tools = an.messages.count_tokens(
        model="claude-haiku-4-5", messages=messages, tools=[tool]
    ).input_tokens
    import base64

    data = base64.b64encode(
        (REPO / "mmirage_beam" / "examples" / "data" / "images" / "coffee.webp").read_bytes()
    ).decode()
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/webp", "data": data},
    }
    with_image = an.messages.count_tokens(
        model="claude-haiku-4-5",
        messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "count these words"}]}
        ],
    ).input_tokens
    assert plain < with_system and plain < with_tools and plain < with_image
    with pytest.raises(anthropic.NotFoundError):
        an.messages.count_tokens(model="claude-TYPO", messages=messages)


def test_gemini_and_mistral_refuse_an_unknown_model_at_create(fake_provider):
    from google import genai
    from google.genai import errors, types
    from mistralai.client import Mistral

    fake = fake_provider
    client = genai.Client(
        api_key="gemini-test", http_options=types.HttpOptions(base_url=fake.gemini_base_url)
    )
    line = {"key": "k", "request": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}
    uploaded = client.files.upload(
        file=io.BytesIO(json.dumps(line).encode() + b"\n"), config={"mime_type": "jsonl"}
    )
    with pytest.raises(errors.ClientError) as caught:
        client.batches.create(model="gemini-2.5-flsh", src=uploaded.name)
    assert caught.value.code == 404 and "models/gemini-2.5-flsh is not found" in str(caught.value)
    assert client.batches.create(model="gemini-2.5-flash", src=uploaded.name).name

    mistral = Mistral(api_key="m-test", server_url=fake.mistral_base_url)
    body = {"custom_id": "a", "body": {"messages": [{"role": "user", "content": "hi"}]}}
    file = mistral.files.upload(
        file={"file_name": "in.jsonl", "content": json.dumps(body).encode()}, purpose="batch"
    )
    with pytest.raises(Exception, match="Invalid model: mistral-TYPO"):
        mistral.batch.jobs.create(
            input_files=[file.id], model="mistral-TYPO", endpoint="/v1/chat/completions"
        )
    job = mistral.batch.jobs.create(
        input_files=[file.id], model="mistral-small-latest", endpoint="/v1/chat/completions"
    )
    assert job.id


def test_command_line_models_flag():
    """``mmirage fake-provider --models`` admits a name the SDKs do not list."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmirage_beam.testing.fake_provider", "--models", "acme-1,acme-2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = proc.stdout.readline()
        base = banner.split("listening on ", 1)[1].split(" ", 1)[0]
        oa = openai.OpenAI(api_key="k", base_url=base + "/v1", max_retries=0)
        results = _openai_results(oa, [_chat("a", model="acme-2"), _chat("b", model="acme-3")])
        assert results["a"]["status_code"] == 200 and results["b"]["status_code"] == 404
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_fake_provider_server_models_argument():
    with FakeProviderServer(models=["acme-1"]) as fake:
        results = _openai_results(_oa(fake), [_chat("a", model="acme-1")])
        assert results["a"]["status_code"] == 200
