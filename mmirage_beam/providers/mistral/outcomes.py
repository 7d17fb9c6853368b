"""Mistral batch result lines -> :class:`~mmirage_beam.records.ProviderResult` records
with typed outcomes.

A line of a job's ``output_file`` or ``error_file`` (PROVIDERS.md, Mistral batch guide)::

    {"id", "custom_id", "response": {"status_code", "body": <chat completion>} | null,
     "error": {"message", "code"?} | null}

An embeddings line's body is mistralai 3.7's ``EmbeddingResponse`` (``{"id", "object",
"model", "usage", "data": [{"object", "embedding": [float], "index"}]}``): its
``data[0].embedding`` becomes the answer (:func:`_embedding_outcome`).

The chat completion is mistralai 3.7's ``ChatCompletionResponse``: ``choices[0].message``
(``content`` a string or a list of chunks: ``text``, ``thinking``, ...),
``finish_reason`` in ``stop | length | model_length | error | tool_calls``, usage in
``usage.{prompt_tokens, completion_tokens}``. An HTTP-rejected request has a 4xx/5xx
``status_code`` and Mistral's error object as body (``{"object": "error", "message",
"type", "param", "code"}``, Mistral error glossary, docs.mistral.ai/resources/error-glossary).

Typed outcomes, as for OpenAI chat completions (:mod:`mmirage_beam.results`):
``length`` / ``model_length`` -> ``truncated``; ``error`` -> ``server_error``
(retryable); no text -> ``empty``; a 200 whose body is an error object or empty ->
``malformed_response``. Mistral's chat completion has no refusal field and no
content-filter finish reason, so a refusal is an ordinary answer (its text is what the
model said), as is an answer its guardrails let through.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from mmirage_beam.providers.batch_status import JSONObject
from mmirage_beam.providers.chat import embedding_outcome, first_choice, first_embedding
from mmirage_beam.providers.chat import malformed_200 as _malformed
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import (
    EMPTY,
    TRUNCATED,
    MalformedResult,
    split_batch_line,
)

#: finish reasons that mean the answer was cut (mistralai 3.7 ``ChatCompletionChoiceFinishReason``).
CUT_FINISH_REASONS = ("length", "model_length")


def normalise_result_line(line: Any) -> ProviderResult:
    """One parsed Mistral output/error file line -> its :class:`ProviderResult`.

    Returns:
        ``custom_id`` with ``generated_text`` or an ``error``
        (:class:`~mmirage_beam.records.ResultError`: ``type``, ``message``,
        ``status_code``, ``raw_text``), and ``input_tokens`` / ``output_tokens`` when
        reported.

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    cid, response, error = split_batch_line(line)
    status = _status(response) if response is not None else None
    if status == 200:
        body = response.get("body")
        if isinstance(body, dict) and (body.get("object") == "error" or body.get("error")):
            message = _error_fields(body).get("message") or "an error object"
            return ProviderResult(cid, error=_malformed(f"HTTP 200 with an error body: {message}"))
        if not isinstance(body, dict) or not body:
            return ProviderResult(cid, error=_malformed("HTTP 200 with an empty body"))
        if "choices" not in body and "data" in body:
            return _embedding_outcome(body, cid)
        return _chat_outcome(body, cid)
    if response is not None:
        err = _error_fields(response.get("body"))
        kind = str(err.get("type") or "")
        if not kind.endswith("_error"):
            kind = str(err.get("code") or kind or f"http_{response.get('status_code')}")
        return ProviderResult(cid, error=ResultError(kind, str(err.get("message") or ""), status))
    if error is not None:
        err = error if isinstance(error, dict) else {"message": str(error)}
        kind = str(err.get("code") or err.get("type") or "unknown_error")
        return ProviderResult(cid, error=ResultError(kind, str(err.get("message") or "")))
    raise MalformedResult("neither 'response' nor 'error'", cid)


def _status(response: Dict[str, Any]) -> Optional[int]:
    try:
        return int(response.get("status_code"))
    except (TypeError, ValueError):
        return None


def _error_fields(body: Any) -> JSONObject:
    """Mistral's flat error object, or an ``{"error": {...}}`` wrapper, as one dict."""
    if not isinstance(body, dict):
        return {"message": str(body)} if body else {}
    inner = body.get("error")
    if isinstance(inner, dict):
        return inner
    if isinstance(inner, str) and not body.get("message"):
        return {**body, "message": inner}
    return body


def _text_of(content: Any) -> Optional[str]:
    """The answer text of ``message.content``: a string, or the ``text`` chunks of a
    chunk list joined (``thinking`` and other chunks are not the answer)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    raise MalformedResult("choices[0].message.content is neither a string nor a chunk list")


def _chat_outcome(body: Dict[str, Any], cid: str) -> ProviderResult:
    """A chat-completion body -> ``generated_text`` or a typed error, plus usage."""
    tokens: Dict[str, int] = {}
    usage = body.get("usage")
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        tokens["input_tokens"] = int(usage.get("prompt_tokens") or 0)
        tokens["output_tokens"] = int(usage.get("completion_tokens") or 0)
    found = first_choice(body)
    if found is None:
        error = _malformed("HTTP 200 but the body has no choices[0].message")
        return ProviderResult(cid, error=error, **tokens)
    choice, message = found
    try:
        text = _text_of(message.get("content"))
    except MalformedResult as exc:
        return ProviderResult(cid, error=_malformed(str(exc)), **tokens)
    finish = choice.get("finish_reason")
    if finish in CUT_FINISH_REASONS:
        error = ResultError(
            TRUNCATED,
            f"the answer was cut at the token limit (finish_reason: {finish})",
            200,
            text or None,
        )
    elif finish == "error":
        error = ResultError(
            "server_error", "the generation failed (finish_reason: error)", 200, text or None
        )
    elif not text:
        error = ResultError(EMPTY, f"the answer is empty (finish_reason: {finish})", 200)
    else:
        return ProviderResult(cid, generated_text=text, **tokens)
    return ProviderResult(cid, error=error, **tokens)


def _embedding_outcome(body: Dict[str, Any], cid: str) -> ProviderResult:
    """An ``EmbeddingResponse`` body -> the vector as ``generated_text`` (its JSON text,
    :func:`~mmirage_beam.results.embedding_text`) with its input tokens, or a
    ``malformed_response``."""
    tokens: Dict[str, int] = {}
    usage = body.get("usage")
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        tokens["input_tokens"] = int(usage.get("prompt_tokens") or 0)
        tokens["output_tokens"] = 0  # embeddings bill input tokens only
    return embedding_outcome(cid, first_embedding(body), "data[0].embedding", tokens)
