"""Provider configuration classes for the ``batch_api`` processor, and their registry.

This keeps MMIRAGE's extension contract: a provider is a :class:`BatchProviderConfig`
dataclass subclass (validated in ``__post_init__``) registered with
:class:`BatchProviderConfigRegistry` under the name used in YAML ``provider:``.

Provider limits (requests and bytes per batch) come from each provider's batch
documentation; see ``PROVIDER_LIMITS_SOURCE`` on each subclass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.registry import ProviderRegistry

DEFAULT_MAX_CHUNK_BYTES = 52_428_800  # 50 MiB, MMIRAGE's default upload size per chunk
# The OpenAI batch endpoints mmirage-beam builds requests for (generation from a prompt:
# chat completions and the Responses API). The Batch API also takes /v1/embeddings,
# /v1/completions, /v1/moderations, /v1/images/generations, /v1/images/edits and
# /v1/videos (openai-python 3.57 ``batch_create_params.endpoint``), whose bodies and
# results have nothing in common with a prompt -> text job: refused at load.
OPENAI_SUPPORTED_ENDPOINTS = ("/v1/chat/completions", "/v1/responses")
# The Responses API refuses a smaller ``max_output_tokens`` ("Invalid 'max_output_tokens':
# integer below minimum value. Expected a value >= 16", code integer_below_min_value,
# quoted in vectorize-io/hindsight#58 and earendil-works/pi#6265).
RESPONSES_MIN_OUTPUT_TOKENS = 16
# ``detail`` of an image part (openai-python 3.57 ``ImageDetail``).
OPENAI_IMAGE_DETAILS = ("auto", "low", "high", "original")
_POLICIES = ("isolate", "reject")


@dataclass
class BatchProviderConfig:
    """Fields shared by every batch provider (MMIRAGE names and defaults).

    Attributes:
        provider: the registry name, e.g. ``"openai"``.
        max_chunk_bytes: upper bound, in bytes, of one uploaded chunk (default 50 MiB).
        max_requests_per_chunk: optional cap on requests per chunk.
        metadata_output_path: base path of the receipt files.
        oversized_request_policy: ``"isolate"`` (a request larger than
            ``max_chunk_bytes`` gets a chunk of its own) or ``"reject"`` (the run fails
            before anything is submitted).
        price_per_million_input_tokens, price_per_million_output_tokens: optional batch
            prices in USD per million tokens, overriding the table in
            ``mmirage_beam/costs/prices.json`` (:mod:`mmirage_beam.costs.prices`).
        max_enqueued_tokens: optional limit on this run's input tokens in unfinished
            batches of the model; SubmitChunks waits before creating a batch that would
            exceed it (:mod:`mmirage_beam.costs.budget`).
        exact_tokens: count each request's input tokens with the provider's own
            counting endpoint where one exists (Anthropic ``messages.count_tokens``;
            also the ``--exact-tokens`` flag of ``mmirage run``).

    Subclasses may set the class attributes ``PROVIDER_MAX_REQUESTS_PER_BATCH``,
    ``PROVIDER_MAX_BATCH_BYTES`` and ``PROVIDER_LIMITS_SOURCE``; values above them are
    rejected.

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = None
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = None
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = ""

    provider: str = ""
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES
    max_requests_per_chunk: Optional[int] = None
    metadata_output_path: str = ""
    oversized_request_policy: str = "isolate"
    price_per_million_input_tokens: Optional[float] = None
    price_per_million_output_tokens: Optional[float] = None
    max_enqueued_tokens: Optional[int] = None
    exact_tokens: bool = False

    def __post_init__(self) -> None:
        from mmirage_beam.costs.prices import check_price_overrides

        require_int("max_chunk_bytes", self.max_chunk_bytes, minimum=1)
        check_price_overrides(self)
        if self.max_requests_per_chunk is not None:
            require_int("max_requests_per_chunk", self.max_requests_per_chunk, minimum=1)
        if self.oversized_request_policy not in _POLICIES:
            raise ConfigError(
                "oversized_request_policy",
                f"must be one of {', '.join(_POLICIES)}, got {self.oversized_request_policy!r}",
            )
        if not isinstance(self.metadata_output_path, str):
            raise ConfigError("metadata_output_path", "must be a string path")
        limit_bytes = self.PROVIDER_MAX_BATCH_BYTES
        if limit_bytes is not None and self.max_chunk_bytes > limit_bytes:
            raise ConfigError(
                "max_chunk_bytes",
                f"{self.max_chunk_bytes} is above the {self.provider} limit of {limit_bytes} "
                f"bytes per batch ({self.PROVIDER_LIMITS_SOURCE})",
            )
        limit_n = self.PROVIDER_MAX_REQUESTS_PER_BATCH
        if (
            limit_n is not None
            and self.max_requests_per_chunk is not None
            and self.max_requests_per_chunk > limit_n
        ):
            raise ConfigError(
                "max_requests_per_chunk",
                f"{self.max_requests_per_chunk} is above the {self.provider} limit of "
                f"{limit_n} requests per batch ({self.PROVIDER_LIMITS_SOURCE})",
            )

    @property
    def effective_max_requests_per_chunk(self) -> Optional[int]:
        """The request cap actually applied: the configured one, else the provider's."""
        if self.max_requests_per_chunk is not None:
            return self.max_requests_per_chunk
        return self.PROVIDER_MAX_REQUESTS_PER_BATCH

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


@dataclass
class OpenAIBatchConfig(BatchProviderConfig):
    """``provider: openai`` (OpenAI Batch API over chat completions or the Responses API).

    ``batch_endpoint`` is one of :data:`OPENAI_SUPPORTED_ENDPOINTS`; anything else is a
    ConfigError naming the key.

    ``timeout_seconds``: the SDK client's per-call timeout (default: the SDK's 600 s);
    a create that times out is looked up by its metadata before it is retried.

    Limits: 50,000 requests and 200 MB per batch input file (OpenAI Batch API guide).
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = 50_000
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 200 * 1024 * 1024
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = (
        "OpenAI Batch API guide: 50,000 requests and 200 MB per input file"
    )

    provider: str = "openai"
    model: str = "gpt-4.1-mini"
    batch_endpoint: str = "/v1/chat/completions"
    completion_window: str = "24h"
    base_url: Optional[str] = None
    metadata: dict[str, str] = field(default_factory=dict)
    #: optional sampling and length settings, sent only when set: chat completions
    #: ``max_completion_tokens``/``temperature``/``top_p``, Responses
    #: ``max_output_tokens``/``temperature``/``top_p`` (ranges: openai-python 3.57
    #: ``completion_create_params`` and ``response_create_params``).
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    #: ``detail`` of every image part (``auto`` when unset; the Responses API requires
    #: one on every ``input_image``).
    image_detail: Optional[str] = None
    timeout_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        if self.timeout_seconds is not None:
            s = _check_number("timeout_seconds", self.timeout_seconds)
            if not s > 0:
                raise ConfigError("timeout_seconds", f"must be > 0, got {s}")
        _check_str("model", self.model)
        if self.max_tokens is not None:
            require_int("max_tokens", self.max_tokens, minimum=1)
        if self.temperature is not None:
            t = _check_number("temperature", self.temperature)
            if not 0 <= t <= 2:
                raise ConfigError("temperature", f"must be in [0, 2], got {t}")
        if self.top_p is not None:
            p = _check_number("top_p", self.top_p)
            if not 0 <= p <= 1:
                raise ConfigError("top_p", f"must be in [0, 1], got {p}")
        if self.image_detail is not None and self.image_detail not in OPENAI_IMAGE_DETAILS:
            raise ConfigError(
                "image_detail",
                f"must be one of {', '.join(OPENAI_IMAGE_DETAILS)}, got {self.image_detail!r}",
            )
        _check_str("batch_endpoint", self.batch_endpoint)
        if not self.batch_endpoint.startswith("/"):
            raise ConfigError("batch_endpoint", f"must start with '/', got {self.batch_endpoint!r}")
        if self.batch_endpoint not in OPENAI_SUPPORTED_ENDPOINTS:
            raise ConfigError(
                "batch_endpoint",
                f"{self.batch_endpoint!r} is not supported: mmirage-beam builds prompt -> text "
                "requests, for /v1/chat/completions (the default) and /v1/responses only "
                "(embeddings, legacy completions, moderations, images and videos are refused)",
            )
        if (
            self.batch_endpoint == "/v1/responses"
            and self.max_tokens is not None
            and self.max_tokens < RESPONSES_MIN_OUTPUT_TOKENS
        ):
            raise ConfigError(
                "max_tokens",
                f"{self.max_tokens} is below the Responses API's minimum max_output_tokens "
                f"of {RESPONSES_MIN_OUTPUT_TOKENS}; every request would be refused",
            )
        if self.completion_window != "24h":
            raise ConfigError(
                "completion_window",
                f"OpenAI only supports '24h', got {self.completion_window!r}",
            )
        if self.base_url is not None:
            _check_str("base_url", self.base_url)
        if not isinstance(self.metadata, dict):
            raise ConfigError("metadata", "must be a mapping of strings to strings")
        # OpenAI metadata: at most 16 pairs, keys <= 64 chars, values <= 512 chars; we add
        # two of our own (mmirage_run_id, mmirage_chunk_id).
        if len(self.metadata) > 14:
            raise ConfigError(
                "metadata",
                f"has {len(self.metadata)} pairs; OpenAI allows 16 and mmirage-beam adds 2 "
                "(mmirage_run_id, mmirage_chunk_id), so at most 14",
            )
        for k, v in self.metadata.items():
            if not isinstance(k, str) or len(k) > 64:
                raise ConfigError(f"metadata.{k}", "keys must be strings of at most 64 chars")
            if not isinstance(v, str) or len(v) > 512:
                raise ConfigError(f"metadata.{k}", "values must be strings of at most 512 chars")


@dataclass
class AnthropicBatchConfig(BatchProviderConfig):
    """``provider: anthropic`` (Anthropic Message Batches API).

    Limits: 100,000 requests and 256 MB per batch creation (Anthropic Message Batches
    documentation).
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = 100_000
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 256 * 1024 * 1024
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = (
        "Anthropic Message Batches docs: 100,000 requests and 256 MB per batch"
    )

    provider: str = "anthropic"
    model: str = "claude-haiku-4-5"
    max_tokens: int = 8192
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    base_url: Optional[str] = None
    timeout_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        _check_str("model", self.model)
        require_int("max_tokens", self.max_tokens, minimum=1)
        if self.temperature is not None and self.top_p is not None:
            raise ConfigError(
                "temperature",
                "temperature and top_p are mutually exclusive for Anthropic; set only one",
            )
        if self.temperature is not None:
            t = _check_number("temperature", self.temperature)
            if not 0 <= t <= 1:
                raise ConfigError("temperature", f"must be in [0, 1], got {t}")
        if self.top_p is not None:
            p = _check_number("top_p", self.top_p)
            if not 0 < p <= 1:
                raise ConfigError("top_p", f"must be in (0, 1], got {p}")
        if self.timeout_seconds is not None:
            s = _check_number("timeout_seconds", self.timeout_seconds)
            if not s > 0:
                raise ConfigError("timeout_seconds", f"must be > 0, got {s}")
        if self.base_url is not None:
            _check_str("base_url", self.base_url)


class BatchProviderConfigRegistry(ProviderRegistry):
    """Maps a YAML ``provider:`` name to its :class:`BatchProviderConfig` subclass.

    ``register(name, config_cls)`` (TypeError for a non-subclass) and ``get(name)``
    (ConfigError naming ``provider`` and the registered names).
    """

    base_class = BatchProviderConfig
    unknown_message = "unknown provider {name!r}; registered providers: {known}"


BatchProviderConfigRegistry.register("openai", OpenAIBatchConfig)
BatchProviderConfigRegistry.register("anthropic", AnthropicBatchConfig)


def _check_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(name, f"must be a number, got {value!r}")
    return float(value)


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(name, f"must be a non-empty string, got {value!r}")
    return value
