"""What the fake Mistral batch API writes: its flat error object, a result file's
lines (a chat completion, an HTTP error, a request that never ran), the scripted
failures, and request checks with the mistralai SDK's own pydantic types
(:func:`refusal`, every endpoint's line check).
:mod:`~mmirage_beam.providers.mistral.fake` serves them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from mmirage_beam.testing.fake_provider import scripting
from mmirage_beam.testing.fake_provider.answers import count_parts, text_parts
from mmirage_beam.testing.fake_provider.store import Item, failed_response_item, result_line
from mmirage_beam.testing.fake_provider.wire import ApiError

__all__ = [
    "api_error",
    "error_body",
    "prompt_of",
    "completion_body",
    "embeddings_response",
    "moderation_response",
    "MODERATION_CATEGORIES",
    "http_line",
    "error_line",
    "FAILURES",
    "scripted_error",
    "validate_with_sdk",
    "extra_inputs",
    "refusal",
]


def api_error(status: int, message: str, kind: str | None = None, **extra: Any) -> ApiError:
    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    return ApiError(status, kind, message, **extra)


def error_body(err: ApiError) -> dict[str, Any]:
    """Mistral's error object for ``err``."""
    return {
        "object": "error",
        "message": err.message,
        "type": err.error_type,
        "param": err.param,
        "code": err.code,
    }


def prompt_of(body: Mapping[str, Any]) -> tuple[str, int, str, Any]:
    """(prompt text, image count, answer mode, schema) of a chat-completion body."""
    texts: list[str] = []
    images = 0
    for msg in body.get("messages") or []:
        if isinstance(msg, Mapping) and msg.get("role") == "user":
            texts += text_parts(msg.get("content"), ("text",))
            images += count_parts(msg.get("content"), ("image_url",))
    fmt = body.get("response_format")
    mode, schema = "text", None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        mode, schema = "json_schema", (fmt.get("json_schema") or {}).get("schema")
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        mode = "json_object"
    return "\n".join(texts), images, mode, schema


def completion_body(model: str, answer: Any, now: float) -> dict[str, Any]:
    """A ``ChatCompletionResponse`` body for ``answer``."""
    finish = {"length": "length"}.get(answer.finish, "stop")
    return {
        "id": uuid.uuid4().hex,
        "object": "chat.completion",
        "model": model,
        "created": int(now),
        "usage": {
            "prompt_tokens": answer.input_tokens,
            "completion_tokens": answer.output_tokens,
            "total_tokens": answer.input_tokens + answer.output_tokens,
        },
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": answer.text,
                    "tool_calls": None,
                    "prefix": False,
                },
                "finish_reason": finish,
            }
        ],
    }


def embeddings_response(
    model: str, inputs: list[Any], dimensions: Any, tokens: int
) -> dict[str, Any]:
    """An ``EmbeddingResponse`` body (mistralai 3.7: ``{"id", "object", "model",
    "usage", "data": [{"object": "embedding", "embedding", "index"}]}``), one vector of
    ``dimensions`` numbers per input (8 when unset; the same vectors as the OpenAI fake's,
    :func:`~mmirage_beam.providers.openai.fake_bodies.embedding_vector`)."""
    from mmirage_beam.providers.openai.fake_bodies import embedding_vector

    return {
        "id": uuid.uuid4().hex,
        "object": "list",
        "model": model,
        "usage": {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens},
        "data": [
            {"object": "embedding", "embedding": embedding_vector(item, dimensions), "index": i}
            for i, item in enumerate(inputs)
        ],
    }


#: Mistral's moderation categories (moderation docs,
#: https://docs.mistral.ai/capabilities/guardrailing: "sexual", "hate_and_discrimination",
#: "violence_and_threats", "dangerous_and_criminal_content", "selfharm", "health",
#: "financial", "law", "pii").
MODERATION_CATEGORIES = (
    "sexual",
    "hate_and_discrimination",
    "violence_and_threats",
    "dangerous_and_criminal_content",
    "selfharm",
    "health",
    "financial",
    "law",
    "pii",
)


def moderation_response(model: str, flagged: list[bool]) -> dict[str, Any]:
    """A ``ModerationResponse`` body (mistralai 3.7: ``{"id", "model", "results":
    [{"categories": {name: bool}, "category_scores": {name: float}}]}``), the answer of
    ``/v1/moderations`` (one result per input text) and ``/v1/chat/moderations`` (one
    per conversation): ``flagged`` holds one bool per text or conversation. Checked
    with that SDK type. A flagged text (its
    ``FAKE_ERROR:content_filter`` marker) is ``dangerous_and_criminal_content`` at
    0.99; every other score is 0.001 per category."""
    results = []
    for hit in flagged:
        scores = {name: 0.001 for name in MODERATION_CATEGORIES}
        if hit:
            scores["dangerous_and_criminal_content"] = 0.99
        results.append(
            {
                "categories": {name: score > 0.5 for name, score in scores.items()},
                "category_scores": scores,
            }
        )
    body = {"id": uuid.uuid4().hex, "model": model, "results": results}
    validate_response("ModerationResponse", body)
    return body


def validate_response(model_name: str, body: Mapping[str, Any]) -> None:
    """Raises ValueError unless ``body`` validates as the mistralai SDK's
    ``model_name`` (a response type); without the SDK nothing is checked."""
    try:
        from mistralai.client import models
    except ImportError:  # pragma: no cover - the SDK is a test dependency
        return
    getattr(models, model_name).model_validate(dict(body))


def http_line(cid: str, status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    response = {"status_code": status, "body": error_body(api_error(status, message, kind))}
    return result_line("batch-req-", cid, response, None)


def error_line(cid: str, code: str, message: str) -> dict[str, Any]:
    return result_line("batch-req-", cid, None, {"message": message, "code": code})


#: marker -> (HTTP status, error type, message) of a failed request's line.
FAILURES: dict[str, tuple[int, str, str]] = {
    "server_error": (500, "server_error", "Internal server error (FAKE_ERROR:server_error)."),
    "invalid_request": (
        400,
        "invalid_request_error",
        "Scripted invalid request (FAKE_ERROR:invalid_request).",
    ),
    "rate_limit": (429, "rate_limit_error", "Rate limit exceeded (FAKE_ERROR:rate_limit)."),
    "u2028": (400, "invalid_request_error", scripting.U2028_MESSAGE),
}


def scripted_error(
    status: int, retry_after_ms: int, what: str, args: Mapping[str, str] | None = None
) -> ApiError:
    """A scripted HTTP error (404s name the object of the URL), with retry headers."""
    if status == 404:
        what_id = (args or {}).get("job_id") or (args or {}).get("file_id") or ""
        return api_error(404, f"Object {what_id} not found.", code="1000")
    headers = {
        "retry-after-ms": str(retry_after_ms),
        "retry-after": str(math.ceil(retry_after_ms / 1000)),
    }
    kind = "rate_limit_error" if status == 429 else None
    return api_error(
        status, f"Scripted {status} from the fake provider ({what}).", kind, headers=headers
    )


def validate_with_sdk(model_name: str, payload: Any, raise_: bool = True) -> str | None:
    """Validate ``payload`` with the mistralai SDK's pydantic model ``model_name``
    (the service's own request types). Without the SDK nothing is checked.

    Returns the reason it is refused (``raise_=False``), else None.

    Raises:
        ApiError: 422 with the validation errors, when ``raise_``.
    """
    try:
        from mistralai.client import models
    except ImportError:  # pragma: no cover - the SDK is a test dependency
        return None
    _instance, reason = _validated(getattr(models, model_name), payload)
    if reason is not None and raise_:
        raise api_error(422, f"Validation error: {reason}")
    return reason


def _validated(model: Any, payload: Any) -> tuple[Any, str | None]:
    """``payload`` validated as the SDK's pydantic ``model``: (the instance, None), or
    (None, the first error as ``"<loc>: <msg>"``)."""
    import pydantic

    try:
        return model.model_validate(payload), None
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return None, f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def extra_inputs(instance: Any, data: Any, loc: tuple[str, ...] = ()) -> list[str]:
    """The dotted paths of the keys of ``data`` (a JSON body) that ``instance`` (the
    SDK's pydantic model ``data`` validated as) has no field for, at every depth (the
    union member pydantic chose decides the fields); ``Dict[str, Any]`` fields (such
    as ``metadata``) take any key. A field's wire name is its alias (``input`` of
    ``ClassificationRequest``, ``schema`` of ``JSONSchema``): the SDK's Python name,
    which its models also accept (``populate_by_name``), is not the service's."""
    import pydantic

    found: list[str] = []
    if isinstance(instance, pydantic.BaseModel) and isinstance(data, Mapping):
        fields = {(info.alias or name): name for name, info in type(instance).model_fields.items()}
        for key, value in data.items():
            if key not in fields:
                found.append(".".join((*loc, str(key))))
            else:
                found += extra_inputs(getattr(instance, fields[key], None), value, (*loc, key))
    elif isinstance(instance, list) and isinstance(data, list):
        for i, (item, raw) in enumerate(zip(instance, data)):
            found += extra_inputs(item, raw, (*loc, str(i)))
    elif isinstance(instance, dict) and isinstance(data, Mapping):
        for key, value in data.items():
            if key in instance:
                found += extra_inputs(instance[key], value, (*loc, str(key)))
    return found


#: the refusal of ``stream: true`` in a batch line (the wording is **undocumented**).
STREAM_REFUSAL = "stream: streaming is not supported in batch requests"


def refusal(kind: str, payload: Mapping[str, Any]) -> str | None:
    """Why the service refuses ``payload`` (a batch line's body, the job's ``model`` or
    ``agent_id`` put in) as the mistralai request type ``kind``
    (``"ChatCompletionRequest"``...), else None; every endpoint's lines are judged here.

    In this order: ``stream: true`` in a type that has ``stream`` (a batch line is
    answered with one response body; the SDK's types for batchable endpoints are the
    non-streaming ones, ``ConversationRequest`` and ``AudioTranscriptionRequest`` type
    it ``Literal[False]``, the streaming variants are ``ChatCompletionStreamRequest``...),
    :data:`STREAM_REFUSAL`; the SDK's validation error (``"<loc>: <msg>"``); the first
    key the type has no field for (:func:`extra_inputs`), ``"<key>: Extra inputs are
    not permitted"``, the service's 422 ``extra_forbidden`` answer (quoted in
    Gage-Technologies/mistral-go#3 and crewAIInc/crewAI#60). Without the SDK nothing
    is checked."""
    try:
        from mistralai.client import models
    except ImportError:  # pragma: no cover - the SDK is a test dependency
        return None
    model = getattr(models, kind)
    if payload.get("stream") and "stream" in model.model_fields:
        return STREAM_REFUSAL
    instance, reason = _validated(model, payload)
    if reason is not None:
        return reason
    extras = extra_inputs(instance, payload)
    return f"{extras[0]}: Extra inputs are not permitted" if extras else None


def marked_failure(cid: str, marker: str | None, tokens: int) -> Item | None:
    """The failed item of a line whose marker fails its request (``timeout``, or one of
    ``FAILURES``), None for any other marker: the same for every endpoint."""
    if marker == "timeout":
        line = error_line(cid, "request_timeout", "The request timed out.")
        return Item(cid, line, ok=False, input_tokens=tokens)
    if marker in FAILURES:
        status, kind, message = FAILURES[marker]
        return failed_response_item(marker, cid, http_line(cid, status, message, kind), tokens)
    return None


def answer_line(cid: str, response_body: dict[str, Any]) -> dict[str, Any]:
    """A result line answering ``cid`` with HTTP 200 and ``response_body``."""
    return result_line("batch-req-", cid, {"status_code": 200, "body": response_body}, None)


def scripted_body(marker: str | None) -> dict[str, Any] | None:
    """The 200 body a marker puts in place of a chat-like answer (``error_body_200``: an
    error object; ``empty_body_200``: ``{}``), None for any other marker: the same for
    chat, FIM and conversation lines."""
    if marker == "error_body_200":
        return error_body(api_error(500, "Scripted error body."))
    if marker == "empty_body_200":
        return {}
    return None
