"""Vertex AI batch lines: the custom_id carried in ``request.labels``, and a
``predictions.jsonl`` line read into a :class:`~mmirage_beam.records.ProviderResult`.

How a result is matched to its row. Vertex AI's Gemini batch input is one
``{"request": GenerateContentRequest}`` per line, with no id field of its own, and the
output line echoes the request next to ``response`` (or an error in ``status``) ("Batch
inference from Cloud Storage", section "Batch output",
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/batch-prediction-from-cloud-storage).
Nothing documents that an extra top-level field (``key``, ``id``) passes through, so the
custom_id goes where the docs put caller metadata of a ``generateContent`` call: its
``labels`` ("Custom metadata labels",
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/add-labels-to-api-calls:
keys and values of at most 63 characters, lowercase letters, digits, ``_`` and ``-``;
up to 64 labels per call), which come back inside the echoed request:

- a custom_id that is already a valid label value (``answer-text-12``) is the value of
  ``mmirage_id``, unchanged;
- any other (upper-case letters, 64 characters) is base32 (lower case, no padding) split
  into values of at most 63 characters under ``mmirage_idb0``, ``mmirage_idb1``...

The labels page warns that a key with more than 1,000 distinct values "might be dropped"
from billing reports; that concerns the billing export, not the request itself.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Dict, Mapping, TypedDict

from mmirage_beam.providers.anthropic.adapter import normalise_result as _claude_line
from mmirage_beam.providers.gemini.outcomes import normalise_result_line as _gemini_line
from mmirage_beam.providers.vertex.embeddings import is_embedding_line, normalise_embedding_line
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import MalformedResult

__all__ = [
    "ID_LABEL",
    "ID_PART_LABEL",
    "id_labels",
    "id_from_labels",
    "normalise_prediction_line",
]

#: the label holding a custom_id that is a valid label value as it is
ID_LABEL = "mmirage_id"
#: the labels (``mmirage_idb0``, ``mmirage_idb1``...) holding any other custom_id, base32
ID_PART_LABEL = "mmirage_idb"
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{1,63}$")
_MAX_VALUE = 63


def id_labels(custom_id: str) -> Dict[str, str]:
    """The labels that carry ``custom_id`` (see the module docstring)."""
    if _LABEL_VALUE.match(custom_id):
        return {ID_LABEL: custom_id}
    text = base64.b32encode(custom_id.encode("utf-8")).decode("ascii").rstrip("=").lower()
    parts = [text[i : i + _MAX_VALUE] for i in range(0, len(text), _MAX_VALUE)]
    return {f"{ID_PART_LABEL}{n}": part for n, part in enumerate(parts)}


def id_from_labels(labels: Any) -> str:
    """The custom_id :func:`id_labels` put in ``labels``.

    Raises:
        MalformedResult: no such label, or a base32 value that does not decode.
    """
    if not isinstance(labels, Mapping):
        raise MalformedResult("the echoed request has no labels")
    plain = labels.get(ID_LABEL)
    if isinstance(plain, str) and plain:
        return plain
    parts = []
    while isinstance(labels.get(f"{ID_PART_LABEL}{len(parts)}"), str):
        parts.append(labels[f"{ID_PART_LABEL}{len(parts)}"])
    if not parts:
        raise MalformedResult(f"the echoed request's labels hold no {ID_LABEL}")
    text = "".join(parts).upper()
    try:
        return base64.b32decode(text + "=" * (-len(text) % 8)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise MalformedResult(f"the {ID_PART_LABEL}* labels are not base32") from None


class StatusError(TypedDict, total=False):
    """A failed row's error as a ``google.rpc.Status``-like object."""

    code: Any
    status: Any
    message: str


def _status_error(status: str) -> StatusError:
    """A failed row's ``status`` text as a ``google.rpc.Status``-like dict: the JSON
    error object it holds (``Bad Request: {"error": {"code", "message", "status"}}``),
    else the text as the message (code unknown)."""
    start = status.find("{")
    if start >= 0:
        try:
            body = json.loads(status[start:])
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            return {
                "code": error.get("code"),
                "status": error.get("status"),
                "message": str(error.get("message") or status),
            }
    return {"message": status}


def normalise_prediction_line(line: Any) -> ProviderResult:
    """One ``predictions.jsonl`` line (parsed JSON) -> its :class:`ProviderResult`.

    A Claude line (``{"custom_id", "request", "response": Message, "status"}``: Vertex AI
    "Batch predictions with Anthropic Claude models", whose input lines carry a
    ``custom_id``) is read by :func:`_claude_prediction`; a text embedding line (``key``
    or ``instance``, ``predictions``) by
    :func:`~mmirage_beam.providers.vertex.embeddings.normalise_embedding_line`. Otherwise
    the custom_id comes from the echoed ``request.labels`` (:func:`id_from_labels`); a
    non-empty ``status`` is the row's error (its HTTP code typed as the Gemini adapter
    types it; no code: ``unknown_error``), else ``response`` (a
    ``GenerateContentResponse``) is read by the Gemini adapter's
    :func:`~mmirage_beam.providers.gemini.outcomes.normalise_result_line`.

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    if not isinstance(line, dict):
        raise MalformedResult(f"a JSON {type(line).__name__}, not an object")
    if "custom_id" in line:
        return _claude_prediction(line)
    if is_embedding_line(line):
        return normalise_embedding_line(line, _status_result)
    request = line.get("request")
    if not isinstance(request, dict):
        raise MalformedResult("no echoed 'request'")
    cid = id_from_labels(request.get("labels"))
    status = line.get("status")
    if isinstance(status, str) and status.strip():
        return _status_result(cid, status)
    return _gemini_line({"key": cid, "response": line.get("response")})


def _status_result(cid: str, status: str) -> ProviderResult:
    """A failed row's result from its ``status`` text, typed by its HTTP code as the
    Gemini adapter types it (no code: ``unknown_error``)."""
    error = _status_error(status)
    if error.get("code") is None:
        return ProviderResult(cid, error=ResultError("unknown_error", status, None))
    return _gemini_line({"key": cid, "error": error})


def _claude_prediction(line: Dict[str, Any]) -> ProviderResult:
    """A Claude prediction line: a non-empty ``status`` is the error (typed by its HTTP
    code, as for Gemini lines), else ``response`` (an Anthropic ``Message``) is read by
    the Anthropic adapter's
    :func:`~mmirage_beam.providers.anthropic.adapter.normalise_result`."""
    cid = line.get("custom_id")
    if not isinstance(cid, str) or not cid:
        raise MalformedResult("no custom_id")
    status = line.get("status")
    if isinstance(status, str) and status.strip():
        return _status_result(cid, status)
    response = line.get("response")
    return _claude_line({"custom_id": cid, "result": {"type": "succeeded", "message": response}})
