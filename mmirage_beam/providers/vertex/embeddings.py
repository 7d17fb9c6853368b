"""``provider: vertex`` with ``output_type: embedding``: Vertex AI batch prediction of a
text embedding model (``text-embedding-005``, ``text-multilingual-embedding-002``...).

The documented format ("Get batch text embeddings inferences",
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/embeddings/batch-prediction-genai-embeddings,
read 2026-12-06):

- input: a JSONL file in Cloud Storage, one instance per line, ``{"content": "..."}``
  (the instance type is ``TextEmbeddingPredictionInstance``: ``content``, ``title``,
  ``taskType``,
  https://docs.cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/Shared.Types/TextEmbeddingPredictionInstance);
  up to 30,000 prompts per job;
- output: ``{"instance": {...}, "predictions": [{"embeddings": {"statistics":
  {"token_count", "truncated"}, "values": [float]}}], "status": ""}`` per line;
- models: the stable text embedding models; the page excepts Gemini embeddings
  (``gemini-embedding-001``) from batch inference, so that model is refused at load
  (:func:`check_embedding_model`).

The job is made by google-genai's ``batches.create`` (``vertexai=True``) with the
embedding model: ``batches.create_embeddings`` raises for Vertex AI in google-genai 2.34
and 3.6.1 ("... does not support batches.create_embeddings"), and ``CreateBatchJobConfig``
has no field for the job's ``modelParameters`` or ``instanceConfig`` (2.34 and 3.6.1),
so both go into the create body through the per-call ``http_options.extra_body``
(:func:`create_config`):

- ``modelParameters: {"outputDimensionality": N}`` for ``dimensions``
  (``TextEmbeddingPredictionParams``,
  https://docs.cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/Shared.Types/TextEmbeddingPredictionParams);
- ``instanceConfig: {"keyField": "mmirage_id"}``. How a result finds its row: each
  instance carries its custom_id in an extra field, ``mmirage_id``; ``keyField`` is the
  ``BatchPredictionJob`` setting for exactly this ("The values identified by the key
  field is not included in the transformed instances that is sent to the Model ... For
  jsonl output format, the output will have a ``key`` field instead of the ``instance``
  field", ``BatchPredictionJob.InstanceConfig.keyField``,
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.batchPredictionJobs).
  A line that echoes the ``instance`` instead (the service not applying ``keyField`` to
  a publisher model: not documented either way) is read by the same field in it.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.chat import malformed_200
from mmirage_beam.providers.tokens import TokenCount, count_proxy_text
from mmirage_beam.records import ProviderResult
from mmirage_beam.results import MalformedResult, embedding_text

__all__ = [
    "BATCH_EMBEDDINGS_DOC",
    "ID_FIELD",
    "MAX_PROMPTS_PER_JOB",
    "check_embedding_model",
    "count_embedding_instance",
    "create_config",
    "embedding_instance",
    "instance_without_id",
    "is_embedding_line",
    "normalise_embedding_line",
]

BATCH_EMBEDDINGS_DOC = (
    "https://docs.cloud.google.com/vertex-ai/generative-ai/docs/embeddings/"
    "batch-prediction-genai-embeddings"
)
#: the instance field holding the custom_id, named as the job's ``instanceConfig.keyField``
ID_FIELD = "mmirage_id"
#: "Each request can include up to 30,000 prompts" (:data:`BATCH_EMBEDDINGS_DOC`)
MAX_PROMPTS_PER_JOB = 30_000
#: Google's text embedding models (``text-embedding-005``,
#: ``text-multilingual-embedding-002``, ``textembedding-gecko@003``), bare or as
#: ``publishers/google/models/...``
_TEXT_EMBEDDING = re.compile(
    r"^(publishers/google/models/)?"
    r"(text-embedding-\d{3}|text-multilingual-embedding-\d{3}|textembedding-gecko[\w@.-]*)$"
)


def check_embedding_model(model: str) -> None:
    """Refuse a model that Vertex AI batch inference does not embed with.

    Raises:
        ConfigError: naming ``model``: a Claude model (Anthropic's models on Vertex AI
            generate text only), ``gemini-embedding-001`` (excepted from batch inference
            by :data:`BATCH_EMBEDDINGS_DOC`), or any model that is not a Google text
            embedding model (``text-embedding-NNN``, ``text-multilingual-embedding-NNN``,
            ``textembedding-gecko...``).
    """
    if model.startswith(("claude", "anthropic/", "publishers/anthropic/")):
        raise ConfigError(
            "model",
            f"{model!r} is a Claude model: Claude on Vertex AI generates text and has no "
            "embeddings; output_type: embedding needs a Google text embedding model such "
            "as text-embedding-005",
        )
    if "gemini-embedding" in model:
        raise ConfigError(
            "model",
            f"{model!r}: Vertex AI batch inference embeds with the stable text embedding "
            f"models except Gemini embeddings ({BATCH_EMBEDDINGS_DOC}); use "
            "text-embedding-005 or text-multilingual-embedding-002, or provider: gemini "
            "(the Gemini API's batch embeddings) for gemini-embedding-001",
        )
    if not _TEXT_EMBEDDING.match(model):
        raise ConfigError(
            "model",
            f"{model!r} is not a Vertex AI text embedding model (text-embedding-005, "
            "text-multilingual-embedding-002, textembedding-gecko@003; "
            f"{BATCH_EMBEDDINGS_DOC})",
        )


def embedding_instance(custom_id: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
    """One input line: ``{"mmirage_id": custom_id, "content": text}`` (the id first, so a
    line cut short still names its row)."""
    return {ID_FIELD: custom_id, "content": payload["text"]}


def instance_without_id(line: Mapping[str, Any]) -> Dict[str, Any]:
    """The instance without :data:`ID_FIELD` (what the model is sent)."""
    return {k: v for k, v in line.items() if k != ID_FIELD}


def create_config(display_name: str, dest: str, dimensions: Optional[int]) -> Dict[str, Any]:
    """The ``config`` of ``batches.create`` for an embeddings job: ``display_name``,
    ``dest`` (the ``gs://`` output prefix) and ``http_options.extra_body`` with
    ``instanceConfig.keyField`` and, when ``dimensions`` (an int >= 1) is set,
    ``modelParameters.outputDimensionality`` (see the module docstring)."""
    extra: Dict[str, Any] = {"instanceConfig": {"keyField": ID_FIELD}}
    if dimensions is not None:
        extra["modelParameters"] = {"outputDimensionality": int(dimensions)}
    return {"display_name": display_name, "dest": dest, "http_options": {"extra_body": extra}}


def count_embedding_instance(request: Mapping[str, Any]) -> TokenCount:
    """The estimated input tokens of one instance (the cl100k_base proxy of its
    ``content``; Google's tokenizer is not offline); no output tokens."""
    content = request.get("content")
    tokens = count_proxy_text(content) if isinstance(content, str) else 0
    note = "Vertex AI text embedding models have no offline tokenizer (cl100k_base proxy)"
    return TokenCount(tokens, 0, False, (note,))


def is_embedding_line(line: Any) -> bool:
    """Whether a parsed predictions line is an embeddings line (it has ``key`` or
    ``instance``, where a Gemini line has ``request``)."""
    return (
        isinstance(line, dict) and ("key" in line or "instance" in line) and "request" not in line
    )


def _custom_id(line: Mapping[str, Any]) -> str:
    key = line.get("key")
    if isinstance(key, str) and key:
        return key
    instance = line.get("instance")
    cid = instance.get(ID_FIELD) if isinstance(instance, Mapping) else None
    if isinstance(cid, str) and cid:
        return cid
    raise MalformedResult(f"neither 'key' nor 'instance.{ID_FIELD}'")


def normalise_embedding_line(line: Any, status_error: Any) -> ProviderResult:
    """One embeddings predictions line (parsed JSON) -> its :class:`ProviderResult`.

    The custom_id is ``key`` (``instanceConfig.keyField``), else the echoed
    ``instance.mmirage_id``. A non-empty ``status`` is the row's error, read by
    ``status_error`` (the Gemini lines' reader:
    :func:`~mmirage_beam.providers.vertex.outcomes.normalise_prediction_line`'s typing
    by HTTP code); else ``predictions[0].embeddings.values`` is the vector
    (:func:`~mmirage_beam.results.embedding_text`) and ``statistics.token_count`` its
    input tokens; a vector that is not a list of numbers is a ``malformed_response``.

    Args:
        line: the parsed line.
        status_error: ``(custom_id, status text) -> ProviderResult`` of a failed row.

    Raises:
        mmirage_beam.results.MalformedResult: no custom_id can be read.
    """
    if not isinstance(line, dict):
        raise MalformedResult(f"a JSON {type(line).__name__}, not an object")
    cid = _custom_id(line)
    status = line.get("status")
    if isinstance(status, str) and status.strip():
        return status_error(cid, status)
    predictions = line.get("predictions")
    first = predictions[0] if isinstance(predictions, list) and predictions else None
    embeddings = first.get("embeddings") if isinstance(first, dict) else None
    if not isinstance(embeddings, dict):
        error = malformed_200("status is empty but predictions[0].embeddings is missing")
        return ProviderResult(cid, error=error)
    tokens: Dict[str, int] = {}
    stats = embeddings.get("statistics")
    count = stats.get("token_count") if isinstance(stats, dict) else None
    if isinstance(count, (int, float)) and not isinstance(count, bool) and count >= 0:
        tokens = {"input_tokens": int(count), "output_tokens": 0}
    text = embedding_text(embeddings.get("values"))
    if text is None:
        error = malformed_200("predictions[0].embeddings.values is not a list of numbers")
        return ProviderResult(cid, error=error, **tokens)
    return ProviderResult(cid, generated_text=text, **tokens)
