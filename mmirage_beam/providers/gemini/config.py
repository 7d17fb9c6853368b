"""``provider: gemini``: the config dataclass, its limits and their sources.

Gemini API batch mode (https://ai.google.dev/gemini-api/docs/batch-mode, read 2026-12):
"The input file size limit is 2GB" for a JSONL file uploaded through the File API, and
inline requests are for batches "under 20MB" in total. mmirage-beam uploads a file per
chunk, except that a chunk of at most 2 MB of requests is sent inline
(:data:`mmirage_beam.providers.gemini.adapter.INLINE_MAX_BYTES`), so the per-batch byte
limit is the file's; no request count per batch is documented. A batch job that stays
pending or running for 48 hours expires.

Vertex AI batch prediction is its own provider, ``provider: vertex``
(:mod:`mmirage_beam.providers.vertex`); ``vertexai: true`` here is refused at load,
naming it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Collection, Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.config import BatchProviderConfig, check_sampling
from mmirage_beam.providers.config import check_str as _check_str
from mmirage_beam.providers.gemini.rules import RULES
from mmirage_beam.providers.model_rules import ModelRules

#: Gemini batch mode docs: the input file of a batch job, at most 2 GB (taken as
#: 2 * 10**9 bytes, the stricter reading).
MAX_FILE_BYTES = 2_000_000_000
#: Gemini batch mode docs: inline requests ("src=[...]"), at most 20 MB in total. Also the
#: largest single request with inline images (image understanding guide: "When the
#: combination of files and system instructions that you intend to send is larger than
#: 20 MB in size, use the File API").
MAX_INLINE_BYTES = 20_000_000
LIMITS_SOURCE = (
    "Gemini API batch mode docs (https://ai.google.dev/gemini-api/docs/batch-mode): "
    "input file up to 2 GB; inline requests up to 20 MB"
)


@dataclass
class GeminiBatchConfig(BatchProviderConfig):
    """``provider: gemini`` (the Gemini Developer API's batch mode, google-genai SDK).

    Attributes:
        model: the model name (``gemini-2.5-flash``; ``models/`` is added by the SDK).
        max_tokens: optional ``generation_config.max_output_tokens``.
        temperature: optional, in [0, 2]; top_p: optional, in [0, 1].
        base_url: optional API root (``http_options.base_url``), e.g. the fake's.
        timeout_seconds: optional per-call timeout of the SDK client.
        vertexai: must stay false: Vertex AI batch prediction is ``provider: vertex``.
        embedding_job: the jobs are embeddings jobs (``asyncBatchEmbedContent``); set
            from ``output_type: embedding`` outputs, never in YAML.

    Limits: 2 GB per batch input file (:data:`LIMITS_SOURCE`).

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = None
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = MAX_FILE_BYTES
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = LIMITS_SOURCE
    #: embeddings jobs: ``models/{model}:asyncBatchEmbedContent`` (google-genai
    #: ``batches.create_embeddings``, file source), for output_type: embedding outputs
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = "asyncBatchEmbedContent"
    CHAT_ONLY_KEYS: ClassVar[tuple[str, ...]] = ("max_tokens", "temperature", "top_p")
    SET_FOR_EMBEDDINGS: ClassVar[tuple[str, ...]] = ("embedding_job",)
    MODEL_RULES: ClassVar[Optional[ModelRules]] = RULES

    provider: str = "gemini"
    model: str = "gemini-2.5-flash"
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    base_url: Optional[str] = None
    timeout_seconds: Optional[float] = None
    vertexai: bool = False
    #: set by :meth:`for_outputs` for ``output_type: embedding`` outputs (never in YAML):
    #: the jobs are embeddings jobs (``batches.create_embeddings``)
    embedding_job: bool = False

    def for_outputs(self, embedding: bool, given: Collection[str]) -> GeminiBatchConfig:
        """:meth:`BatchProviderConfig.for_outputs`; for embedding outputs a copy with
        :attr:`embedding_job` set, which the YAML may not set itself.

        Raises:
            ConfigError: naming the key (see the base class; ``embedding_job``).
        """
        checked = super().for_outputs(embedding, given)
        return dataclasses.replace(self, embedding_job=True) if embedding else checked

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        _check_str("model", self.model)
        check_sampling(self, 2)
        if self.base_url is not None:
            _check_str("base_url", self.base_url)
        if not isinstance(self.vertexai, bool):
            raise ConfigError("vertexai", f"must be true or false, got {self.vertexai!r}")
        if self.vertexai:
            raise ConfigError(
                "vertexai",
                "Vertex AI batch prediction is its own provider: use provider: vertex with "
                "project, location and gcs_staging_uri (see docs/providers.md); or the "
                "Gemini Developer API here (vertexai: false, GEMINI_API_KEY)",
            )
