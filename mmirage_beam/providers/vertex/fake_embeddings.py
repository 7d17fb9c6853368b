"""The fake Vertex AI service's text embedding jobs (a job whose model is
``publishers/google/models/text-embedding-NNN``, ``text-multilingual-embedding-NNN`` or
``textembedding-gecko...``), used by :class:`~mmirage_beam.providers.vertex.fake.FakeVertexServer`.

As "Get batch text embeddings inferences" documents
(https://docs.cloud.google.com/vertex-ai/generative-ai/docs/embeddings/batch-prediction-genai-embeddings):
each input line is an instance ``{"content", "title"?, "task_type"?}``; each output line
``{"instance", "predictions": [{"embeddings": {"statistics": {"token_count",
"truncated"}, "values"}}], "status": ""}``. The job's ``modelParameters.outputDimensionality``
sets the vector length (8 when unset, as the other fakes' vectors: the OpenAI fake's
vector of the same text,
:func:`~mmirage_beam.providers.openai.fake_bodies.embedding_vector`), and its
``instanceConfig.keyField`` (``BatchPredictionJob.InstanceConfig``) is applied as
documented: the key field is taken out of the instance the model sees, and the output
line has ``key`` instead of ``instance``.

The fake's own strictness (not documented behaviour): an instance field other than
``content``, ``title``, ``task_type`` / ``taskType`` (the fields of
``TextEmbeddingPredictionInstance``), or no ``content`` string, is a failed row (a 400 in
``status``), so an adapter that leaves its id field in what the model sees fails here.
A failure marker (``FAKE_ERROR:...``) in the content is a failed row as in the Gemini
lines (:data:`~mmirage_beam.providers.gemini.fake_bodies.FAILURES`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping, Optional

from mmirage_beam.providers.gemini.fake_bodies import FAILURES
from mmirage_beam.providers.openai.fake_bodies import embedding_vector
from mmirage_beam.testing.fake_provider.scripting import error_marker
from mmirage_beam.testing.fake_provider.store import Batch, Item, Store
from mmirage_beam.testing.fake_provider.wire import numbered_json_lines

__all__ = ["check_job", "embedding_items", "is_text_embedding"]

_MODEL = re.compile(
    r"^publishers/google/models/"
    r"(text-embedding-\d{3}|text-multilingual-embedding-\d{3}|textembedding-gecko[\w@.-]*)$"
)
_INSTANCE_FIELDS = {"content", "title", "task_type", "taskType"}
_REASON = {400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}
_REASON.update({503: "Service Unavailable", 504: "Gateway Timeout"})


def is_text_embedding(model: str) -> bool:
    """Whether a job's model is one of Google's text embedding models."""
    return bool(_MODEL.match(model))


def check_job(body: Mapping[str, Any]) -> Optional[str]:
    """Why a text embedding job's create body is refused (a 400), or None:
    ``modelParameters.outputDimensionality`` not an int >= 1, ``instanceConfig.keyField``
    not a non-empty string."""
    params = body.get("modelParameters") or {}
    dims = params.get("outputDimensionality") if isinstance(params, dict) else None
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        return f"modelParameters.outputDimensionality: must be a positive integer, got {dims!r}."
    config = body.get("instanceConfig") or {}
    key_field = config.get("keyField") if isinstance(config, dict) else None
    if key_field is not None and (not isinstance(key_field, str) or not key_field):
        return "instanceConfig.keyField: must be a field name."
    return None


def _failed(where: Mapping[str, Any], code: int, status: str, message: str) -> dict[str, Any]:
    error = json.dumps({"error": {"code": code, "message": message, "status": status}})
    return {**where, "status": f"{_REASON.get(code, 'Error')}: {error}"}


def embedding_items(
    store: Store,
    batch: Batch,
    content: bytes,
    job: Mapping[str, Any],
    fail_job: Callable[[str], None],
) -> list[Item]:
    """The items of a text embedding job's input file (one per instance line), recorded
    in ``store``; a line that is not a JSON object fails the whole job (``fail_job``
    with the reason, then ``[]``)."""
    params = job.get("modelParameters") or {}
    dims = params.get("outputDimensionality")
    key_field = (job.get("instanceConfig") or {}).get("keyField")
    items: list[Item] = []
    for number, line in numbered_json_lines(content):
        if not isinstance(line, dict):
            fail_job(f"Line {number} of the input is not a JSON object.")
            return []
        instance = dict(line)
        if key_field:
            key = instance.pop(key_field, None)
            where: dict[str, Any] = {"key": key}
            cid = str(key) if key else f"line-{number}"
        else:
            where = {"instance": line}
            cid = str(line.get("mmirage_id") or f"line-{number}")
        store.record(batch, cid, line)
        items.append(_answer(store, cid, where, instance, dims))
    if not items:
        fail_job("The input holds no instances.")
    return items


def _answer(
    store: Store, cid: str, where: dict[str, Any], instance: dict[str, Any], dims: Any
) -> Item:
    extra = sorted(set(instance) - _INSTANCE_FIELDS)
    if extra:
        message = f"Invalid instance: unknown field {extra[0]!r} (TextEmbeddingPredictionInstance)"
        return Item(cid, _failed(where, 400, "INVALID_ARGUMENT", message), False)
    text = instance.get("content")
    if not isinstance(text, str) or not text:
        message = "Invalid instance: content: a non-empty string is required."
        return Item(cid, _failed(where, 400, "INVALID_ARGUMENT", message), False)
    marker = store.resolve_transient(error_marker(text), cid, text)
    if marker in FAILURES:
        code, status, message = FAILURES[marker]
        return Item(cid, _failed(where, code, status, message), False)
    tokens = len(text.split())
    embeddings = {
        "statistics": {"token_count": tokens, "truncated": False},
        "values": embedding_vector(text, dims),
    }
    line = {**where, "predictions": [{"embeddings": embeddings}], "status": ""}
    return Item(cid, line, True, tokens, 0)
