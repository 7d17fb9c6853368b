"""OpenAI request bodies and result lines: the per-request checks of a batch line's
``body``, the prompt read from it, and the result-file lines (success bodies for each
endpoint, HTTP-style failures, and ``response: null`` errors)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.answers import (
    Answer,
    count_parts,
    schema_root_is_object,
    sha256_hex,
    text_parts,
)
from mmirage_beam.testing.fake_provider.media import DATA_URL_RE, b64decode, sniff_image
from mmirage_beam.testing.fake_provider.wire import new_id


@dataclass(frozen=True)
class HttpFailure:
    status: int
    error: dict[str, Any]  # {message, type, param, code}


def oa_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> HttpFailure:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return HttpFailure(status, {"message": message, "type": kind, "param": param, "code": code})


def _check_image_url(url: Any, param: str) -> HttpFailure | None:
    if not isinstance(url, str) or not url:
        return oa_error(400, f"Missing required parameter: '{param}'.", param=param)
    if not url.startswith("data:"):
        return None
    match = DATA_URL_RE.match(url)
    decoded = None
    if match and ";base64" in match.group(2):
        decoded = b64decode(match.group(3))
    if decoded is None or sniff_image(decoded) is None:
        return oa_error(
            400,
            "You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: ['png', 'jpeg', 'gif', 'webp'].",
            param=param,
            code="invalid_image_format",
        )
    return None


def _check_schema(fmt: Any, param: str, *, nested: bool) -> HttpFailure | None:
    """Checks a json_schema response format (chat: nested under ``json_schema``)."""
    spec = fmt.get("json_schema") if nested else fmt
    if not isinstance(spec, Mapping):
        return oa_error(400, f"Missing required parameter: '{param}'.", param=param)
    name = spec.get("name")
    if not isinstance(name, str) or not limits.SCHEMA_NAME_RE.match(name):
        return oa_error(
            400,
            f"Invalid '{param}.name': must match ^[a-zA-Z0-9_-]{{1,64}}$.",
            param=f"{param}.name",
            code="invalid_value",
        )
    if not schema_root_is_object(spec.get("schema")):
        return oa_error(
            400,
            f"Invalid schema for response_format '{name}': schema must be a JSON Schema of "
            "'type: \"object\"'.",
            param=param,
            code="invalid_json_schema",
        )
    return None


def check_body(endpoint: str, body: Any) -> HttpFailure | None:
    """Request-level validation: a failure becomes a 400 line in the error file."""
    if not isinstance(body, Mapping):
        return oa_error(400, "The request body must be a JSON object.", param="body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return oa_error(400, "you must provide a model parameter", param="model")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not 0 <= temperature <= 2
    ):
        return oa_error(
            400,
            "Invalid 'temperature': must be a number between 0 and 2.",
            param="temperature",
            code="invalid_value",
        )
    if endpoint == "/v1/chat/completions":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return oa_error(
                400,
                "Missing required parameter: 'messages'.",
                param="messages",
                code="missing_required_parameter",
            )
        for i, msg in enumerate(messages):
            if not isinstance(msg, Mapping) or msg.get("role") not in (
                "system",
                "developer",
                "user",
                "assistant",
                "tool",
                "function",
            ):
                return oa_error(
                    400, f"Invalid value for 'messages[{i}].role'.", param=f"messages[{i}].role"
                )
            content = msg.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, Mapping) and part.get("type") == "image_url":
                        image = part.get("image_url")
                        url = image.get("url") if isinstance(image, Mapping) else None
                        failure = _check_image_url(url, f"messages[{i}].content[{j}].image_url.url")
                        if failure:
                            return failure
        fmt = body.get("response_format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return _check_schema(fmt, "response_format", nested=True)
    elif endpoint == "/v1/responses":
        if not isinstance(body.get("input"), (str, list)):
            return oa_error(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        text_cfg = body.get("text")
        fmt = text_cfg.get("format") if isinstance(text_cfg, Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return _check_schema(fmt, "text.format", nested=False)
    elif endpoint == "/v1/completions":
        if not isinstance(body.get("prompt"), (str, list)):
            return oa_error(
                400,
                "Missing required parameter: 'prompt'.",
                param="prompt",
                code="missing_required_parameter",
            )
    elif endpoint == "/v1/embeddings":
        if not isinstance(body.get("input"), (str, list)):
            return oa_error(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
    return None


def prompt_of(endpoint: str, body: Mapping[str, Any]) -> tuple[str, int, str, Any]:
    """(prompt text, image count, answer mode, schema) of a validated request body."""
    texts: list[str] = []
    images = 0
    mode, schema = "text", None
    if endpoint == "/v1/chat/completions":
        for msg in body.get("messages") or []:
            if msg.get("role") == "user":
                texts += text_parts(msg.get("content"), ("text",))
            images += count_parts(msg.get("content"), ("image_url",))
        fmt = body.get("response_format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            mode, schema = "json_schema", fmt["json_schema"]["schema"]
        elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
            mode = "json_object"
    elif endpoint == "/v1/responses":
        items = body.get("input")
        if isinstance(items, str):
            texts.append(items)
        else:
            for item in items:
                if isinstance(item, Mapping) and item.get("role", "user") == "user":
                    texts += text_parts(item.get("content"), ("input_text", "text"))
                if isinstance(item, Mapping):
                    images += count_parts(item.get("content"), ("input_image",))
        text_cfg = body.get("text")
        fmt = text_cfg.get("format") if isinstance(text_cfg, Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            mode, schema = "json_schema", fmt["schema"]
        elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
            mode = "json_object"
    else:
        value = body.get("prompt" if endpoint == "/v1/completions" else "input")
        if isinstance(value, str):
            texts.append(value)
        else:
            texts += [str(v) for v in value]
    return "\n".join(texts), images, mode, schema


def success_body(
    endpoint: str, body: Mapping[str, Any], answer: Answer, now: float
) -> dict[str, Any]:
    model = body["model"]
    created = int(now)
    usage = {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }
    if endpoint == "/v1/chat/completions":
        return {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
    if endpoint == "/v1/responses":
        return {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": created,
            "status": "completed",
            "model": model,
            "output": [
                {
                    "type": "message",
                    "id": new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": answer.input_tokens,
                "output_tokens": answer.output_tokens,
                "total_tokens": answer.input_tokens + answer.output_tokens,
            },
        }
    if endpoint == "/v1/completions":
        return {
            "id": new_id("cmpl-"),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"text": answer.text, "index": 0, "logprobs": None, "finish_reason": "stop"}
            ],
            "usage": usage,
        }
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = []
    for index, item in enumerate(inputs):
        digest = sha256_hex(json.dumps(item))
        vector = [round(int(digest[i : i + 4], 16) / 65535 - 0.5, 6) for i in range(0, 32, 4)]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": answer.input_tokens, "total_tokens": answer.input_tokens},
    }


def http_line(custom_id: str, failure: HttpFailure) -> dict[str, Any]:
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id,
        "response": {
            "status_code": failure.status,
            "request_id": new_id("req_"),
            "body": {"error": dict(failure.error)},
        },
        "error": None,
    }


def error_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
