"""Gemini batch result lines -> :class:`~mmirage_beam.records.ProviderResult` records
with typed outcomes.

A line of a job's responses file is ``{"key", "response": GenerateContentResponse}`` or
``{"key", "error": Status}``: the text of ``candidates[0].content.parts``, a
``finish_reason`` of :data:`FINISH_OUTCOMES` typed (``MAX_TOKENS`` -> truncated; the
safety reasons -> content_filter), a blocked prompt, an error typed by its HTTP code.
:mod:`mmirage_beam.providers.gemini.adapter` reads the file with them (and re-exports
:func:`normalise_result_line` and :data:`FINISH_OUTCOMES`).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from mmirage_beam.providers.chat import embedding_outcome
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import (
    CONTENT_FILTER,
    EMPTY,
    TRUNCATED,
    MalformedResult,
    line_id,
)

__all__ = ["FINISH_OUTCOMES", "normalise_result_line"]

#: ``finish_reason`` -> (outcome type, why), for answers that are not usable
#: (google-genai 2.34 ``types.FinishReason``; Gemini API reference, "FinishReason").
FINISH_OUTCOMES: Mapping[str, tuple[str, str]] = {
    "MAX_TOKENS": (TRUNCATED, "the answer was cut at max_output_tokens"),
    "SAFETY": (CONTENT_FILTER, "the answer was blocked by Gemini's safety filters"),
    "PROHIBITED_CONTENT": (CONTENT_FILTER, "the answer was blocked as prohibited content"),
    "BLOCKLIST": (CONTENT_FILTER, "the answer holds a term of a blocklist"),
    "SPII": (CONTENT_FILTER, "the answer holds sensitive personal information"),
    "IMAGE_SAFETY": (CONTENT_FILTER, "the answer was blocked by Gemini's image safety filters"),
    "RECITATION": (
        CONTENT_FILTER,
        "the answer was stopped for reciting training data (finish_reason RECITATION)",
    ),
}
#: google.rpc status code (HTTP) of an error line -> the project's error type.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout",
    429: "rate_limit_exceeded",
    499: "cancelled",
    500: "server_error",
    503: "service_unavailable",
    504: "timeout",
}
_RPC_CODES = {  # google.rpc.Code (numeric, as some error lines carry) -> HTTP
    1: 499,
    3: 400,
    4: 504,
    5: 404,
    7: 403,
    8: 429,
    13: 500,
    14: 503,
    16: 401,
}


def _get(mapping: Mapping[str, Any], snake: str) -> Any:
    """``mapping[snake]`` or its lowerCamelCase form (REST answers use camelCase; the
    SDK's own dumps snake_case)."""
    if snake in mapping:
        return mapping[snake]
    head, *rest = snake.split("_")
    return mapping.get(head + "".join(w.title() for w in rest))


def normalise_result_line(line: Any) -> ProviderResult:
    """One responses-file line (parsed JSON) -> its :class:`ProviderResult`.

    ``{"key", "response"}``: the text of ``candidates[0].content.parts`` (thought parts
    left out), or a typed error: a prompt blocked by ``prompt_feedback.block_reason`` or a
    ``finish_reason`` of :data:`FINISH_OUTCOMES` (the provider's text, if any, kept as
    ``raw_text``), no candidate or no text -> ``empty``. ``{"key", "error": {code,
    message, status}}`` -> the error, typed by its HTTP code. Usage from
    ``usage_metadata``.

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    cid = line_id(line, "key")
    response, error = line.get("response"), line.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        code = _RPC_CODES.get(code, code) if isinstance(code, int) else None
        status = error.get("status") or ""
        kind = _ERROR_TYPES.get(code or 0) or (status.lower() or "unknown_error")
        message = str(error.get("message") or "")
        message = f"{status}: {message}" if status else message
        return ProviderResult(cid, error=ResultError(kind, message, code))
    if not isinstance(response, dict):
        raise MalformedResult("neither 'response' nor 'error'", cid)
    if "embedding" in response and "candidates" not in response:
        return _embedding_outcome(response, cid)
    tokens: Dict[str, int] = {}
    usage = _get(response, "usage_metadata")
    if isinstance(usage, dict) and _get(usage, "prompt_token_count") is not None:
        tokens["input_tokens"] = int(_get(usage, "prompt_token_count") or 0)
        tokens["output_tokens"] = int(_get(usage, "candidates_token_count") or 0)
    feedback = _get(response, "prompt_feedback")
    block = _get(feedback, "block_reason") if isinstance(feedback, dict) else None
    candidates = _get(response, "candidates")
    if block:
        error = ResultError(CONTENT_FILTER, f"the prompt was blocked (block_reason {block})", 200)
        return ProviderResult(cid, error=error, **tokens)
    if candidates is not None and not isinstance(candidates, list):
        raise MalformedResult("'candidates' is not a list", cid)
    candidate = candidates[0] if candidates else None
    if candidate is not None and not isinstance(candidate, dict):
        raise MalformedResult("candidates[0] is not an object", cid)
    candidate = candidate or {}
    content = candidate.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    if parts is not None and not isinstance(parts, list):
        raise MalformedResult("candidates[0].content.parts is not a list", cid)
    texts = [
        p["text"]
        for p in parts or ()
        if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    ]
    text = "".join(texts)
    finish = str(_get(candidate, "finish_reason") or "")
    if finish in FINISH_OUTCOMES:
        kind, why = FINISH_OUTCOMES[finish]
        error = ResultError(kind, f"{why} (finish_reason {finish})", 200, text or None)
    elif not text:
        error = ResultError(EMPTY, f"the answer is empty (finish_reason {finish or 'none'})", 200)
    else:
        return ProviderResult(cid, generated_text=text, **tokens)
    return ProviderResult(cid, error=error, **tokens)


def _embedding_outcome(response: Dict[str, Any], cid: str) -> ProviderResult:
    """An embeddings job's response (google-genai ``SingleEmbedContentResponse``:
    ``{"embedding": {"values": [float]}, "tokenCount"?}``, ``tokenCount`` an int64, a
    string in JSON) -> the vector as ``generated_text`` (its JSON text,
    :func:`~mmirage_beam.results.embedding_text`) with ``tokenCount`` as its input
    tokens when given, or a ``malformed_response``."""
    tokens: Dict[str, int] = {}
    count = _get(response, "token_count")
    if isinstance(count, (int, str)) and not isinstance(count, bool) and str(count).isdigit():
        tokens = {"input_tokens": int(count), "output_tokens": 0}
    embedding = response.get("embedding")
    values = embedding.get("values") if isinstance(embedding, dict) else None
    return embedding_outcome(cid, values, "embedding.values", tokens)
