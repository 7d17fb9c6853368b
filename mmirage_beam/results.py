"""Provider results after normalisation: JSON parsing, schema validation, retryability.

Adapters' normalisers and ``retrieve_results`` yield
:class:`~mmirage_beam.records.ProviderResult` records (``custom_id``,
``generated_text``, ``error``: a :class:`~mmirage_beam.records.ResultError`, usage in
tokens, ``line`` / ``offset``); a plugin's may still yield the neutral dicts of
:meth:`ProviderResult.to_json <mmirage_beam.records.ProviderResult.to_json>`::

    {"custom_id", "generated_text"?, "error"?: {"type", "message", "status_code",
     "raw_text"?}, "input_tokens"?, "output_tokens"?, "line"?, "offset"?}

which :func:`~mmirage_beam.records.provider_result` turns into records where they
enter shared code (here, for a normaliser's output, and in ``FetchResults``).
``custom_id`` is None only for a result line so damaged that its custom_id cannot be
recovered (then ``line`` / ``offset`` say where it is in the provider's file).

This module holds the provider-neutral rules applied to them at merge: the outcome types
an adapter reports besides the provider's own error codes, which of them a new attempt
can fix, and :func:`results_from_lines`, which parses a provider's result file line by
line so that one bad line is an error for its request and never ends the merge.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Union

from mmirage_beam.jsonl import RawLine
from mmirage_beam.records import ProviderResult, ResultError, provider_result

#: ``output_type`` of an output whose answer is a vector (a list of floats), not text
EMBEDDING = "embedding"

_LOG = logging.getLogger(__name__)

# -- outcome types (shared by every adapter) ------------------------------------------
#: the provider's result line is not UTF-8, not JSON, cut short, of the wrong shape, or a
#: 200 whose body is an error object or empty. Retryable: the request itself was fine
#: as far as anyone can tell, and a new attempt gets a new line.
MALFORMED_RESPONSE = "malformed_response"
#: the model declined (OpenAI ``message.refusal``, Anthropic ``stop_reason: "refusal"``).
#: Not retryable: the same prompt is refused again; ``--only all`` re-sends it anyway.
REFUSAL = "refusal"
#: the answer was cut at the token limit (OpenAI ``finish_reason: "length"``, Anthropic
#: ``stop_reason: "max_tokens"`` / ``"model_context_window_exceeded"``). Not retryable:
#: the same limit cuts it again; raise ``max_tokens`` (or shorten the prompt) first. For
#: JSON outputs this is the type, never ``invalid_json``.
TRUNCATED = "truncated"
#: the provider's content filter removed the answer (OpenAI ``finish_reason:
#: "content_filter"``). Not retryable: the filter decides the same way again.
CONTENT_FILTER = "content_filter"
#: a well-formed success with no text at all. Retryable: sampling again usually answers.
EMPTY = "empty"
#: the outcome types adapters report for answers that are not usable; the provider's
#: text (refusal, cut answer) is kept as the error's ``raw_text`` and tokens are counted.
ANSWER_ERROR_TYPES = (MALFORMED_RESPONSE, REFUSAL, TRUNCATED, CONTENT_FILTER, EMPTY)

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)

# Error types (lower-case) a new attempt can fix: expiry and cancellation, timeouts,
# rate limits and server errors (OpenAI and Anthropic vocabularies, PROVIDERS.md),
# OpenAI's batch-level enqueued-token limit, and of ours ``malformed_response`` and
# ``empty`` (see above; ``refusal``, ``truncated`` and ``content_filter`` are not).
RETRYABLE_ERROR_TYPES = frozenset(
    {
        MALFORMED_RESPONSE,
        EMPTY,
        "batch_expired",
        "expired",
        "batch_cancelled",
        "cancelled",
        "canceled",
        "request_timeout",
        "timeout",
        "timeout_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "server_error",
        "api_error",
        "overloaded_error",
        "internal_error",
        "service_unavailable",
        "token_limit_exceeded",
        "pending",
    }
)


def is_retryable(error: Union[ResultError, Mapping[str, Any]]) -> bool:
    """Whether resubmitting the request could succeed.

    Args:
        error: a :class:`~mmirage_beam.records.ResultError`, or an error dict with
            ``type`` and ``status_code``.

    True for expiry, cancellation, timeouts, rate limits (429), server errors (5xx) and
    OpenAI's ``token_limit_exceeded``; False for invalid requests and anything unknown.
    """
    if isinstance(error, ResultError):
        kind_value, status = error.type, error.status_code
    else:
        kind_value, status = error.get("type"), error.get("status_code")
    kind = str(kind_value or "").lower()
    if kind in RETRYABLE_ERROR_TYPES:
        return True
    try:
        code = int(status) if status is not None else None
    except (TypeError, ValueError):
        code = None
    return code is not None and (code in (408, 409, 429) or code >= 500)


def parse_json_output(text: Optional[str]) -> tuple[Any, Optional[str]]:
    """Parse a JSON answer, tolerating surrounding whitespace and a fenced code block.

    Returns:
        ``(value, None)`` on success, ``(None, reason)`` when the text is not JSON.
    """
    if text is None:
        return None, "no text"
    body = text.strip()
    m = _FENCE.match(body)
    if m:
        body = m.group(1).strip()
    try:
        return json.loads(body), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"


def validate_json_output(value: Any, schema: dict[str, Any]) -> Optional[str]:
    """Check ``value`` against the output's JSON schema (fields, types, bounds).

    Returns:
        None when valid, else a short reason naming the field.
    """
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path) or "(root)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.message}{more}"


# -- typed fields of a provider's line ------------------------------------------------------


def token_count(value: Any) -> Optional[int]:
    """A provider's token count: ``value`` when it is an int >= 0 (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def kind_text(value: Any) -> str:
    """A provider's error ``type`` or ``code``: ``value`` when it is a string, else ``""``
    (the caller falls back to its default)."""
    return value if isinstance(value, str) else ""


def message_text(value: Any) -> str:
    """A provider's error message as text: a string as is, None as ``""``, any other JSON
    value as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


# -- result files, line by line ---------------------------------------------------------


class MalformedResult(ValueError):
    """A result line is valid JSON of the wrong shape; raised by adapters' normalisers.

    Attributes:
        custom_id: the line's custom_id when it has one (so the error is that
            request's), else None.
    """

    def __init__(self, message: str, custom_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.custom_id = custom_id


_ID_VALUE_RE = rb'"\s*:\s*("(?:[^"\\]|\\.){1,256}?")'
_CUSTOM_ID_RE = re.compile(rb'"custom_id' + _ID_VALUE_RE)


def line_id(line: Any, id_key: str = "custom_id") -> str:
    """The id of a result line (``id_key``: ``custom_id``, or Gemini's ``key``), once the
    line is known to be a JSON object.

    Raises:
        MalformedResult: the line is not an object, or its id is missing or empty.
    """
    if not isinstance(line, dict):
        raise MalformedResult(f"a JSON {type(line).__name__}, not an object")
    cid = line.get(id_key)
    if not isinstance(cid, str) or not cid:
        raise MalformedResult(f"no {id_key}")
    return cid


def split_batch_line(line: Any) -> tuple[str, Optional[dict[str, Any]], Any]:
    """``(custom_id, response, error)`` of a result line shaped ``{"custom_id",
    "response": {"status_code", "body"} | null, "error": ... | null}`` (OpenAI's batch
    output and error files, and Mistral's, which copy it); an empty ``response`` or
    ``error`` is None.

    Raises:
        MalformedResult: the line is not an object, has no custom_id, or its response is
        not an object.
    """
    cid = line_id(line)
    response = line.get("response") or None
    error = line.get("error") or None
    if response is not None and not isinstance(response, dict):
        raise MalformedResult("'response' is not an object", cid)
    return cid, response, error


def recover_custom_id(data: bytes, id_key: str = "custom_id") -> Optional[str]:
    """The custom_id of a damaged line, read from its raw bytes, or None.

    Looks for the first ``"<id_key>": "..."`` member (``custom_id``, or the provider's
    own id field, e.g. Gemini's ``key``); provider lines put it first, so it survives a
    line cut short or damaged further on.
    """
    pattern = (
        _CUSTOM_ID_RE
        if id_key == "custom_id"
        else re.compile(b'"' + re.escape(id_key.encode()) + _ID_VALUE_RE)
    )
    m = pattern.search(data)
    if m is None:
        return None
    try:
        value = json.loads(m.group(1).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, str) and value else None


def malformed_result(custom_id: Optional[str], message: str, line: RawLine) -> ProviderResult:
    """The result of a line that cannot be read: ``malformed_response``, with the line's
    number and byte offset."""
    return ProviderResult(
        custom_id,
        error=ResultError(MALFORMED_RESPONSE, message),
        line=line.number,
        offset=line.offset,
    )


#: an adapter's line normaliser: parsed JSON line -> its result (a plugin's may be a dict)
Normaliser = Callable[[Any], Union[ProviderResult, Mapping[str, Any]]]


def results_from_lines(
    lines: Iterable[RawLine],
    normalise: Normaliser,
    where: str,
    id_key: str = "custom_id",
) -> Iterator[ProviderResult]:
    """One :class:`~mmirage_beam.records.ProviderResult` per non-blank line of a provider
    result file, in file order.

    Each line is decoded (UTF-8) and parsed (JSON) on its own, then given to
    ``normalise`` (the adapter's line normaliser, which raises :class:`MalformedResult`
    for a wrong shape). A line that fails any step becomes a ``malformed_response``
    error whose message names ``where``, the line number and byte offset; its custom_id
    is recovered from the raw bytes when possible (else None: an unknown line). The
    other lines are unaffected.

    Args:
        lines: the file's lines (:func:`mmirage_beam.jsonl.iter_raw_lines`).
        normalise: parsed line -> ``ProviderResult`` (or a plugin's neutral dict,
            converted with ``ProviderResult.from_json``).
        where: names the file in messages, e.g. ``"output file file-1 of batch_2"``.
        id_key: the provider's name of the request id in a line (``custom_id``; Gemini
            ``key``), to recover it from a damaged line.
    """
    for line in lines:
        if not line.data.strip():
            continue
        yield result_from_line(line, normalise, where, id_key)


def result_from_line(
    line: RawLine,
    normalise: Normaliser,
    where: str,
    id_key: str = "custom_id",
) -> ProviderResult:
    """The result of one line (see :func:`results_from_lines`)."""
    at = f"line {line.number} (byte offset {line.offset}) of the {where}"
    try:
        text = line.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return malformed_result(
            recover_custom_id(line.data, id_key),
            f"{at} is not valid UTF-8 (byte offset {line.offset + exc.start})",
            line,
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.strip()
        cut = " (cut short?)" if body.startswith("{") and not body.endswith("}") else ""
        return malformed_result(
            recover_custom_id(line.data, id_key),
            f"{at} is not valid JSON{cut}: {exc.msg} at column {exc.colno}",
            line,
        )
    except (ValueError, RecursionError) as exc:  # an integer of > 4,300 digits; deep nesting
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return malformed_result(
            recover_custom_id(line.data, id_key), f"{at} cannot be read as JSON: {why}", line
        )
    cid = value.get(id_key) if isinstance(value, dict) else None
    cid = cid if isinstance(cid, str) and cid else None
    try:
        result = provider_result(normalise(value))
    except MalformedResult as exc:
        return malformed_result(exc.custom_id or cid, f"{at} has the wrong shape: {exc}", line)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # A normaliser (a plugin's, say) tripped on a shape it did not expect: the line is
        # still one outcome for its request, never the end of the merge.
        _LOG.warning("%s: the result normaliser raised %r", at, exc)
        return malformed_result(cid, f"{at} has a shape the adapter cannot read: {exc!r}", line)
    if not isinstance(result.custom_id, str) or not result.custom_id:
        return malformed_result(None, f"{at} has the wrong shape: no custom_id", line)
    error = result.error
    if error is not None and error.type == MALFORMED_RESPONSE:
        result = result._replace(
            error=error._replace(message=f"{at}: {error.message or ''}".rstrip(": ")),
            line=line.number if result.line is None else result.line,
            offset=line.offset if result.offset is None else result.offset,
        )
    return result


def embedding_text(vector: Any) -> Optional[str]:
    """An embedding as it travels in ``ProviderResult.generated_text``: the compact JSON
    text of its floats (``"[0.1,-0.2]"``; Python's float repr, which reads back to the
    same floats), or None when ``vector`` is not a non-empty list of finite numbers."""
    if not isinstance(vector, list) or not vector:
        return None
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            return None
    return json.dumps([float(x) for x in vector], separators=(",", ":"))


def _embedding_value(
    text: Optional[str], dimensions: Optional[int]
) -> tuple[Optional[list[float]], Optional[str]]:
    """The vector of an embedding answer's text, or why it is not usable."""
    try:
        vector = json.loads(text or "")
    except ValueError:
        return None, "the embedding is not a JSON list of numbers"
    if embedding_text(vector) is None:
        return None, "the embedding is not a non-empty list of finite numbers"
    if dimensions is not None and len(vector) != dimensions:
        return None, f"the embedding has {len(vector)} numbers; dimensions asks for {dimensions}"
    return [float(x) for x in vector], None


def check_answer(
    output_type: str,
    text: Optional[str],
    json_schema: Optional[dict[str, Any]],
    dimensions: Optional[int] = None,
) -> tuple[Any, Optional[dict[str, Any]]]:
    """The value of a successful answer, or why it is not usable: the one rule merge and
    ``resubmit`` share, so they count the same failures.

    Args:
        output_type: the output's ``output_type`` (``JSON`` answers are parsed, tolerating
            a fenced block, and validated against ``json_schema``; ``embedding`` answers
            are the JSON text of a list of floats, :func:`embedding_text`).
        text: the generated text.
        json_schema: the output's JSON schema (JSON outputs).
        dimensions: an embedding output's vector length, when the config sets it.

    Returns:
        ``(value, None)`` (an embedding's value: a ``list[float]``), or ``(None, error)``
        with ``error`` of type ``invalid_json``, ``schema_mismatch`` or
        ``invalid_embedding`` (not retryable) keeping the answer as ``raw_text``.
    """
    if output_type == EMBEDDING:
        vector, why = _embedding_value(text, dimensions)
        if why is None:
            return vector, None
        error = ResultError("invalid_embedding", why).to_json(retryable=False)
        return None, {**error, "raw_text": text}
    if output_type != "JSON":
        return text, None
    parsed, why = parse_json_output(text)
    kind = "invalid_json"
    if why is None and json_schema is not None:
        why = validate_json_output(parsed, json_schema)
        kind = "schema_mismatch"
    if why is None:
        return parsed, None
    # raw_text last and always present (None when there was no text at all)
    return None, {**ResultError(kind, why).to_json(retryable=False), "raw_text": text}


# Outcomes that a resubmission cannot fix: the request was never answered for a reason
# outside the provider (the source row vanished, the id is not ours), it is still
# running, or it was never submitted (the run's resume sends it). A ``source_changed``
# row is re-sent: the resubmission builds its request from the current row.
NOT_RESUBMITTABLE = frozenset(
    {"unknown_custom_id", "missing_source_row", "pending", "never_submitted"}
)


def resubmittable(error: dict[str, Any], only: str) -> bool:
    """Whether a failed request (an ``OUT.errors.jsonl`` line or an error dict with
    ``error_type``/``type`` and ``retryable``) is re-sent under ``--only only``."""
    kind = error.get("error_type") or error.get("type")
    if kind in NOT_RESUBMITTABLE:
        return False
    return only == "all" or bool(error.get("retryable"))
