"""``provider: mistral``: the config dataclass, its limits and their sources.

Limits (requests and bytes per batch). Mistral's own pages disagree, so the stricter
one is used and both are cited:

- the batch inference guide (https://docs.mistral.ai/capabilities/batch, read 2026-12):
  up to 1,000,000 requests per batch job;
- "Known limitations" (https://docs.mistral.ai/resources/known-limitations, read
  2026-12): "Maximum batch file size: 512 MB", "Maximum requests per batch: 100,000";
  results are kept 24 hours.

The adapter sends one input file per batch job, so a batch holds at most 100,000
requests and 512 MB (decimal, so nothing we send is refused for its size). A config may
lower both (``max_requests_per_chunk``, ``max_chunk_bytes``); higher values are refused
at load, naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers.config import (
    BatchProviderConfig,
    check_sampling,
    check_str,
)
from mmirage_beam.providers.mistral.rules import RULES
from mmirage_beam.providers.model_rules import ModelRules

#: 1,000,000 requests per batch job (Mistral batch guide).
BATCH_GUIDE_MAX_REQUESTS = 1_000_000
#: 100,000 requests per batch file (Mistral "Known limitations").
FILE_MAX_REQUESTS = 100_000
#: 512 MB per batch file (Mistral "Known limitations"; the Files API's
#: upload limit, ``files.upload`` docstring of mistralai 3.7), decimal megabytes.
FILE_MAX_BYTES = 512 * 1000 * 1000
LIMITS_SOURCE = (
    "Mistral batch guide (docs.mistral.ai/capabilities/batch): 1,000,000 requests per batch; "
    "Mistral known limitations (docs.mistral.ai/resources/known-limitations): 100,000 "
    "requests and 512 MB per batch file; the stricter holds"
)
#: The batch endpoints mmirage-beam builds requests for: prompt -> text, and embeddings
#: (``output_type: embedding``). Mistral's batch API also takes FIM, moderations, OCR...
#: (mistralai 3.7 ``APIEndpoint``), whose bodies and results have nothing in common
#: with these jobs.
EMBEDDINGS_ENDPOINT = "/v1/embeddings"
SUPPORTED_ENDPOINTS = ("/v1/chat/completions", EMBEDDINGS_ENDPOINT)
#: metadata keys mmirage-beam adds to every batch job (adoption after a lost create).
RESERVED_METADATA_KEYS = ("mmirage_run_id", "mmirage_chunk_id")


@dataclass
class MistralBatchConfig(BatchProviderConfig):
    """``provider: mistral`` (Mistral batch inference over chat completions).

    Attributes:
        model: the model of every request (``client.batch.jobs.create(model=...)``).
        batch_endpoint: ``/v1/chat/completions``, or ``/v1/embeddings`` (set by
            itself for ``output_type: embedding`` outputs); anything else: ConfigError.
        base_url: the API's server URL (``Mistral(server_url=...)``); None: the SDK's
            default, ``https://api.mistral.ai``.
        metadata: extra string pairs for every batch job (``mmirage_run_id`` and
            ``mmirage_chunk_id`` are added and may not be set).
        timeout_hours: the job's ``timeout_hours`` (the SDK's default, 24); a job still
            running then ends ``TIMEOUT_EXCEEDED`` with partial results.
        max_tokens, temperature, top_p: sent in every body only when set.
        timeout_seconds: the SDK client's per-call timeout (default: the SDK's 300 s).

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = min(
        BATCH_GUIDE_MAX_REQUESTS, FILE_MAX_REQUESTS
    )
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = FILE_MAX_BYTES
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = LIMITS_SOURCE
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = EMBEDDINGS_ENDPOINT
    CHAT_ONLY_KEYS: ClassVar[tuple[str, ...]] = ("max_tokens", "temperature", "top_p")
    MODEL_RULES: ClassVar[Optional[ModelRules]] = RULES

    provider: str = "mistral"
    model: str = "mistral-small-latest"
    batch_endpoint: str = "/v1/chat/completions"
    base_url: Optional[str] = None
    metadata: dict[str, str] = field(default_factory=dict)
    timeout_hours: int = 24
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    timeout_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        check_str("model", self.model)
        if self.batch_endpoint not in SUPPORTED_ENDPOINTS:
            raise ConfigError(
                "batch_endpoint",
                f"{self.batch_endpoint!r} is not supported: mmirage-beam builds prompt -> text "
                "requests for Mistral's /v1/chat/completions and embeddings for "
                "/v1/embeddings (output_type: embedding) only",
            )
        if self.base_url is not None:
            check_str("base_url", self.base_url)
        require_int("timeout_hours", self.timeout_hours, minimum=1)
        check_sampling(self, None)
        if not isinstance(self.metadata, dict):
            raise ConfigError("metadata", "must be a mapping of strings to strings")
        for k, v in self.metadata.items():
            if k in RESERVED_METADATA_KEYS:
                raise ConfigError(f"metadata.{k}", "is set by mmirage-beam on every batch job")
            if not isinstance(k, str) or not isinstance(v, str):
                raise ConfigError(f"metadata.{k}", "keys and values must be strings")
