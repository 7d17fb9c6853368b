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
from mmirage_beam.testing.fake_provider.store import result_line
from mmirage_beam.testing.fake_provider.wire import new_id


@dataclass(frozen=True)
class HttpFailure:
    """An HTTP-style per-request failure: status and ``{message, type, param, code}``."""

    status: int
    error: dict[str, Any]  # {message, type, param, code}


def oa_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> HttpFailure:
    """A failure whose type is ``invalid_request_error`` (< 500) or ``server_error``."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return HttpFailure(status, {"message": message, "type": kind, "param": param, "code": code})


def _missing_parameter(param: str) -> HttpFailure:
    """400 ``missing_required_parameter`` for a body without ``param``."""
    return oa_error(
        400,
        f"Missing required parameter: '{param}'.",
        param=param,
        code="missing_required_parameter",
    )


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


# Responses-API keys that can stand in for ``input``.
_RESPONSES_CONTEXT_KEYS = ("prompt", "previous_response_id", "conversation")


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
            return _missing_parameter("messages")
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
        # ``input`` is optional in the Responses API (``input: ... | Omit`` in openai
        # 3.57's ``responses.create``): a stored ``prompt``, ``previous_response_id`` or
        # ``conversation`` can carry the conversation instead. With none of them the
        # request is still refused (undocumented; no client sends that).
        given = "input" in body and body["input"] is not None
        context = any(body.get(key) for key in _RESPONSES_CONTEXT_KEYS)
        if (given and not isinstance(body["input"], (str, list))) or not (given or context):
            return _missing_parameter("input")
        text_cfg = body.get("text")
        fmt = text_cfg.get("format") if isinstance(text_cfg, Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return _check_schema(fmt, "text.format", nested=False)
    elif endpoint == "/v1/completions":
        if not isinstance(body.get("prompt"), (str, list)):
            return _missing_parameter("prompt")
    elif endpoint == "/v1/embeddings":
        if not isinstance(body.get("input"), (str, list)):
            return _missing_parameter("input")
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
        items = body.get("input") or []
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


def _chat_message(answer: Answer) -> tuple[dict[str, Any], str]:
    """(message, finish_reason) of a chat completion for ``answer.finish``."""
    content: str | None = answer.text
    refusal = None
    finish_reason = {"length": "length", "content_filter": "content_filter"}.get(
        answer.finish, "stop"
    )
    if answer.finish == "refusal":
        content, refusal = None, answer.text
    elif answer.finish == "content_filter":
        content = None
    message = {"role": "assistant", "content": content, "refusal": refusal, "annotations": []}
    return message, finish_reason


def _responses_output(answer: Answer) -> tuple[list[dict[str, Any]], str, Any]:
    """(output items, status, incomplete_details) of a Responses body."""
    if answer.finish == "empty":
        return [], "completed", None
    status, incomplete = "completed", None
    if answer.finish in ("length", "content_filter"):
        reason = "max_output_tokens" if answer.finish == "length" else "content_filter"
        status, incomplete = "incomplete", {"reason": reason}
    if answer.finish == "refusal":
        content: dict[str, Any] = {"type": "refusal", "refusal": answer.text}
    else:
        content = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
    message = {
        "type": "message",
        "id": new_id("msg_"),
        "status": status,
        "role": "assistant",
        "content": [content],
    }
    return [message], status, incomplete


def success_body(
    endpoint: str, body: Mapping[str, Any], answer: Answer, now: float
) -> dict[str, Any]:
    """The HTTP 200 body of one request, shaped as the endpoint's response object.

    Chat completions validate as the spec's ``CreateChatCompletionResponse`` (and the
    SDK's ``ChatCompletion``), Responses as ``Response`` with every field the spec marks
    required, completions as ``CreateCompletionResponse``, embeddings as
    ``CreateEmbeddingResponse`` (https://github.com/openai/openai-openapi).
    """
    model = body["model"]
    created = int(now)
    usage = {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if endpoint == "/v1/chat/completions":
        message, finish_reason = _chat_message(answer)
        return {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": created,
            "model": model,
            # ``n`` choices (CompletionCreateParamsBase.n: "How many chat completion
            # choices to generate"); the fake's answer is deterministic, so all alike.
            "choices": [
                {
                    "index": i,
                    "message": dict(message),
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
                for i in range(_n(body))
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
    if endpoint == "/v1/responses":
        output, status, incomplete = _responses_output(answer)
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        metadata = body.get("metadata")
        instructions = body.get("instructions")
        text_cfg = body.get("text") if isinstance(body.get("text"), Mapping) else None
        return {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": created,
            "status": status,
            "completed_at": created if status == "completed" else None,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": instructions if isinstance(instructions, str) else None,
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": True,
            "temperature": 1.0 if temperature is None else temperature,
            "text": dict(text_cfg) if text_cfg else {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0 if top_p is None else top_p,
            "truncation": "disabled",
            "usage": {
                "input_tokens": answer.input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": answer.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": answer.input_tokens + answer.output_tokens,
            },
            "metadata": dict(metadata) if isinstance(metadata, Mapping) else {},
        }
    if endpoint == "/v1/completions":
        finish_reason = {"length": "length", "content_filter": "content_filter"}.get(
            answer.finish, "stop"
        )
        return {
            "id": new_id("cmpl-"),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "text": answer.text,
                    "index": i,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
                for i in range(_n(body))
            ],
            "usage": {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
        }
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    size = body.get("dimensions") or EMBEDDING_DIMENSIONS.get(model, 8)
    data = []
    for index, item in enumerate(inputs):
        data.append({"object": "embedding", "index": index, "embedding": _vector(item, size)})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": answer.input_tokens, "total_tokens": answer.input_tokens},
    }


#: Embeddings guide (https://platform.openai.com/docs/guides/embeddings): the default
#: length of each model's vectors; ``dimensions`` shortens text-embedding-3 vectors.
EMBEDDING_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _n(body: Mapping[str, Any]) -> int:
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def _vector(item: Any, size: int) -> list[float]:
    """``size`` deterministic floats in [-0.5, 0.5] from the input's SHA-256 chain."""
    seed = json.dumps(item)
    out: list[float] = []
    block = 0
    while len(out) < size:
        digest = sha256_hex(f"{block}:{seed}")
        out += [round(int(digest[i : i + 4], 16) / 65535 - 0.5, 6) for i in range(0, 64, 4)]
        block += 1
    return out[:size]


def embedding_vector(item: Any, dimensions: Any = None) -> list[float]:
    """The fake's vector of one embeddings input for the services without a default
    length table here (Mistral, Gemini): ``dimensions`` numbers (8 when it is not a
    positive int), the same chain as OpenAI's vectors (:func:`_vector`)."""
    ok = isinstance(dimensions, int) and not isinstance(dimensions, bool) and dimensions > 0
    return _vector(item, dimensions if ok else 8)


def answer_line(custom_id: str, status: int, body: dict[str, Any]) -> dict[str, Any]:
    """A result line with ``response = {status_code, request_id, body}``, ``error: null``."""
    response = {"status_code": status, "request_id": new_id("req_"), "body": body}
    return result_line("batch_req_", custom_id, response, None)


def http_line(custom_id: str, failure: HttpFailure) -> dict[str, Any]:
    """An error-file line with ``response = {status_code, request_id, body: {error}}``."""
    return answer_line(custom_id, failure.status, {"error": dict(failure.error)})


def error_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    """An error-file line with ``response: null`` and ``error = {code, message}``."""
    return result_line("batch_req_", custom_id, None, {"code": code, "message": message})
