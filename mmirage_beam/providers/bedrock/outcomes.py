"""Bedrock batch output lines -> :class:`~mmirage_beam.records.ProviderResult` records
with typed outcomes.

A line of ``<output>/<jobId>/<input file>.out`` ("View the results of a batch inference
job", https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-results.html)::

    {"recordId", "modelInput", "modelOutput": <the model's InvokeModel answer>}
    {"recordId", "modelInput", "error": {"errorCode": <HTTP status>, "errorMessage"}}

``modelOutput`` is the family's own answer: Anthropic Messages (``content[]`` text
blocks, ``stop_reason`` in ``end_turn | max_tokens | stop_sequence | refusal | ...``,
``usage.{input_tokens, output_tokens}``) or Meta Llama (``generation``,
``stop_reason`` in ``stop | length``, ``prompt_token_count``,
``generation_token_count``).

Typed outcomes: Anthropic ``refusal`` -> ``refusal``; ``max_tokens`` / Llama ``length``
-> ``truncated``; no text -> ``empty``; a ``modelOutput`` that is an error object or
empty -> ``malformed_response``. An ``error`` line's ``errorCode`` gives the type: 429
``rate_limit_error``, 408 ``request_timeout``, >= 500 ``server_error`` (all retryable),
other 4xx ``invalid_request_error``.

The result's ``custom_id`` here is the line's ``recordId`` as it is: the adapter turns
it back into the custom_id (:func:`~mmirage_beam.providers.bedrock.requests.custom_id_of`).
"""

from __future__ import annotations

from typing import Any, Dict

from mmirage_beam.providers.anthropic.adapter import content_text, message_outcome
from mmirage_beam.providers.chat import malformed_200 as _malformed
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import (
    EMPTY,
    TRUNCATED,
    MalformedResult,
    kind_text,
    message_text,
    token_count,
)


def error_type(code: Any) -> str:
    """The outcome type of an ``errorCode`` (an HTTP status, as a number or a string)."""
    try:
        status = int(code)
    except (TypeError, ValueError):
        return kind_text(code) or "unknown_error"
    if status == 429:
        return "rate_limit_error"
    if status == 408:
        return "request_timeout"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def normalise_result_line(line: Any) -> ProviderResult:
    """One parsed output line -> its :class:`ProviderResult` (``custom_id`` = the
    ``recordId``).

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    if not isinstance(line, dict):
        raise MalformedResult("the line is not an object")
    rid = line.get("recordId")
    if not isinstance(rid, str) or not rid:
        raise MalformedResult("no recordId")
    if "error" in line and line["error"] is not None:
        err = line["error"] if isinstance(line["error"], dict) else {"errorMessage": line["error"]}
        code = err.get("errorCode")
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = None
        return ProviderResult(
            rid, error=ResultError(error_type(code), message_text(err.get("errorMessage")), status)
        )
    output = line.get("modelOutput")
    if not isinstance(output, dict):
        raise MalformedResult("neither 'modelOutput' nor 'error'", rid)
    if not output:
        return ProviderResult(rid, error=_malformed("modelOutput is empty"))
    if output.get("type") == "error" or "error" in output:
        err = output.get("error")
        why = message_text(err.get("message")) if isinstance(err, dict) else str(err)
        return ProviderResult(rid, error=_malformed(f"modelOutput is an error: {why}"))
    if "generation" in output:
        return _llama(rid, output)
    if isinstance(output.get("content"), list):
        return _claude(rid, output)
    return ProviderResult(
        rid, error=_malformed("modelOutput is neither a Claude nor a Llama answer")
    )


def _claude(rid: str, output: Dict[str, Any]) -> ProviderResult:
    tokens: Dict[str, int] = {}
    usage = output.get("usage")
    if isinstance(usage, dict) and "input_tokens" in usage:
        tokens["input_tokens"] = token_count(usage.get("input_tokens")) or 0
        tokens["output_tokens"] = token_count(usage.get("output_tokens")) or 0
    text = content_text(output["content"])
    if text is None:
        return ProviderResult(
            rid, error=_malformed("a text block's text is not a string"), **tokens
        )
    return message_outcome(rid, text, output.get("stop_reason"), tokens)


def _llama(rid: str, output: Dict[str, Any]) -> ProviderResult:
    tokens: Dict[str, int] = {}
    if "prompt_token_count" in output:
        tokens["input_tokens"] = token_count(output.get("prompt_token_count")) or 0
        tokens["output_tokens"] = token_count(output.get("generation_token_count")) or 0
    text = output.get("generation")
    if not isinstance(text, (str, type(None))):
        return ProviderResult(rid, error=_malformed("generation is not a string"), **tokens)
    stop = output.get("stop_reason")
    if stop == "length":
        error = ResultError(
            TRUNCATED, "the answer was cut (stop_reason: length)", None, text or None
        )
    elif not text:
        error = ResultError(EMPTY, f"the answer is empty (stop_reason: {stop})")
    else:
        return ProviderResult(rid, generated_text=text, **tokens)
    return ProviderResult(rid, error=error, **tokens)
