"""The shapes the fake Gemini batch API reads and writes: one batch line's ``request``
checked with google-genai's own pydantic types, a ``response_schema`` read back as JSON
schema, the user prompt of a request, error lines and scripted failures, and responses
checked as the SDK reads them. :mod:`~mmirage_beam.providers.gemini.fake` serves
them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from mmirage_beam.testing.fake_provider import scripting

__all__ = [
    "request_model",
    "camel",
    "get_field",
    "json_schema_of",
    "error_line",
    "FAILURES",
    "prompt_of",
    "check_response",
    "broken_line",
]


def request_model() -> Any:
    """The pydantic model of one batch line's ``request`` (built once, on first use)."""
    global _REQUEST_MODEL
    if _REQUEST_MODEL is None:
        # google-genai is an optional extra: the fake serves the other providers without it
        import pydantic
        from google.genai import types

        class GenerateContentRequest(pydantic.BaseModel):
            model_config = pydantic.ConfigDict(
                extra="forbid", populate_by_name=True, alias_generator=camel
            )
            model: Optional[str] = None
            contents: list[types.Content]
            system_instruction: Optional[types.Content] = None
            generation_config: Optional[types.GenerationConfig] = None
            safety_settings: Optional[list[types.SafetySetting]] = None
            tools: Optional[list[types.Tool]] = None
            cached_content: Optional[str] = None

        _REQUEST_MODEL = GenerateContentRequest
    return _REQUEST_MODEL


_REQUEST_MODEL: Any = None


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def get_field(mapping: Any, snake: str) -> Any:
    if not isinstance(mapping, Mapping):
        return None
    return mapping[snake] if snake in mapping else mapping.get(camel(snake))


_SCHEMA_BACK = {
    "min_items": "minItems",
    "max_items": "maxItems",
    "min_length": "minLength",
    "max_length": "maxLength",
    "any_of": "anyOf",
}


def json_schema_of(schema: Any) -> Any:
    """A Gemini ``response_schema`` as the JSON schema the fake's answers are made
    from (types lower-cased, OpenAPI field names back to JSON-schema keywords)."""
    if isinstance(schema, list):
        return [json_schema_of(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("property_ordering", "propertyOrdering"):
            continue
        name = _SCHEMA_BACK.get(key, key)
        if name == "type" and isinstance(value, str):
            out[name] = value.lower()
        elif name == "properties" and isinstance(value, Mapping):
            out[name] = {k: json_schema_of(v) for k, v in value.items()}
        else:
            out[name] = json_schema_of(value) if isinstance(value, (Mapping, list)) else value
    return out


def error_line(key: str, code: int, status: str, message: str) -> dict[str, Any]:
    return {"key": key, "error": {"code": code, "message": message, "status": status}}


# Markers that make a request fail: (HTTP code, google.rpc status, message).
FAILURES: dict[str, tuple[int, str, str]] = {
    "server_error": (500, "INTERNAL", "Internal error encountered (FAKE_ERROR:server_error)"),
    "invalid_request": (
        400,
        "INVALID_ARGUMENT",
        "Scripted invalid request (FAKE_ERROR:invalid_request)",
    ),
    "rate_limit": (429, "RESOURCE_EXHAUSTED", "Resource exhausted (FAKE_ERROR:rate_limit)"),
    "timeout": (504, "DEADLINE_EXCEEDED", "Deadline exceeded (FAKE_ERROR:timeout)"),
    "u2028": (400, "INVALID_ARGUMENT", scripting.U2028_MESSAGE),
}


def prompt_of(contents: Any) -> tuple[str, int]:
    """(the user parts' text joined by ``\\n``, the number of inline images)."""
    texts: list[str] = []
    images = 0
    for content in contents or ():
        if not isinstance(content, Mapping) or content.get("role", "user") != "user":
            continue
        for part in content.get("parts") or ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, Mapping) and get_field(part, "inline_data") is not None:
                images += 1
    return "\n".join(texts), images


#: the answer's finish (``answers.Answer.finish``) -> ``Candidate.finishReason``
FINISH_REASONS = {
    "refusal": "SAFETY",
    "content_filter": "PROHIBITED_CONTENT",
    "length": "MAX_TOKENS",
}


def contents_tokens(contents: Any) -> int:
    """``countTokens`` of ``contents`` as the fakes answer it (Gemini's and Vertex AI's):
    the prompt's words plus ``limits.TOKENS_PER_IMAGE`` per image, as a batch reports it.

    Raises:
        ValueError: google-genai's request type refuses ``contents`` (its message).
    """
    from mmirage_beam.testing.fake_provider import limits
    from mmirage_beam.testing.fake_provider.answers import count_words

    try:
        request_model().model_validate({"contents": contents})
    except Exception as exc:  # pydantic.ValidationError
        raise ValueError(str(exc)) from None
    prompt, images = prompt_of(contents)
    return count_words(prompt) + limits.TOKENS_PER_IMAGE * images


def candidate_response(answer: Any, model_version: str) -> tuple[dict[str, Any], int]:
    """The ``GenerateContentResponse`` of ``answer`` (an ``answers.Answer`` of the fake's
    core) and its output tokens: one candidate whose
    ``finishReason`` says how it ended (a refusal or a filtered answer has
    ``safetyRatings`` and no content, and counts no output tokens), ``usageMetadata`` and
    ``modelVersion``. The Gemini API's fake and Vertex AI's answer with it."""
    candidate: dict[str, Any] = {
        "finishReason": FINISH_REASONS.get(answer.finish, "STOP"),
        "index": 0,
    }
    if answer.finish in ("refusal", "content_filter"):
        candidate["safetyRatings"] = [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
        ]
        output_tokens = 0
    else:
        parts = [] if answer.finish == "empty" else [{"text": answer.text}]
        candidate["content"] = {"role": "model", "parts": parts}
        output_tokens = answer.output_tokens
    response = {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": answer.input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": answer.input_tokens + output_tokens,
        },
        "modelVersion": model_version,
    }
    return response, output_tokens


def check_response(response: Mapping[str, Any]) -> None:
    """Raises if ``response`` is not a ``GenerateContentResponse`` the SDK reads."""
    from google.genai import types  # an optional extra, see request_model()

    types.GenerateContentResponse.model_validate(dict(response))


def broken_line(marker: str, key: str, line: Mapping[str, Any], text: str) -> bytes:
    """:func:`scripting.broken_line` with Gemini's ``key`` for the id."""
    if marker == "malformed_line":
        return f'{{"key": {json.dumps(key)}, "response": <<garbage'.encode()
    return scripting.broken_line(
        marker,
        key,
        line,
        body_key="response",
        answer_text=text,
        wrong_shape={"key": key, "unexpected": True},
    )
