"""``provider: openai``: the config dataclass, its limits and their sources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Collection, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers.config import BatchProviderConfig, check_range
from mmirage_beam.providers.config import check_str as _check_str
from mmirage_beam.providers.model_rules import ModelRules
from mmirage_beam.providers.openai.rules import RULES

# The OpenAI batch endpoints mmirage-beam builds requests for: generation from a prompt
# (chat completions and the Responses API) and, for ``output_type: embedding`` outputs,
# /v1/embeddings. The Batch API also takes /v1/completions, /v1/moderations,
# /v1/images/generations, /v1/images/edits and /v1/videos (openai-python 3.57
# ``batch_create_params.endpoint``), whose bodies and results have nothing in common
# with these jobs: refused at load.
OPENAI_EMBEDDINGS_ENDPOINT = "/v1/embeddings"
OPENAI_SUPPORTED_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", OPENAI_EMBEDDINGS_ENDPOINT)
#: openai-python 3.57 ``embedding_create_params.dimensions``: "Only supported in
#: ``text-embedding-3`` and later models."
OPENAI_DIMENSIONS_MODELS = ("text-embedding-3",)
# The Responses API refuses a smaller ``max_output_tokens`` ("Invalid 'max_output_tokens':
# integer below minimum value. Expected a value >= 16", code integer_below_min_value,
# quoted in vectorize-io/hindsight#58 and earendil-works/pi#6265).
RESPONSES_MIN_OUTPUT_TOKENS = 16
# ``detail`` of an image part (openai-python 3.57 ``ImageDetail``).
OPENAI_IMAGE_DETAILS = ("auto", "low", "high", "original")


@dataclass
class OpenAIBatchConfig(BatchProviderConfig):
    """``provider: openai`` (OpenAI Batch API over chat completions or the Responses API).

    ``batch_endpoint`` is one of :data:`OPENAI_SUPPORTED_ENDPOINTS`; anything else is a
    ConfigError naming the key.

    ``timeout_seconds``: the SDK client's per-call timeout (default: the SDK's 600 s);
    a create that times out is looked up by its metadata before it is retried.

    Limits: 50,000 requests and 200 MB per batch input file: "The file can contain up
    to 50,000 requests, and can be up to 200 MB in size" (OpenAI API reference, Create
    batch, ``input_file_id``, https://platform.openai.com/docs/api-reference/batch/create;
    the same words in openai-python 3.57's ``batches.create`` docstring). The reference
    gives no byte count: 200 MB is taken as 200,000,000 bytes (SI megabytes, the smaller
    reading, so a file within it fits whichever the service means), the number Azure
    OpenAI states in the same words for the same API (issue 38: 209,715,200 here and
    200,000,000 there).
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = 50_000
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 200_000_000
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = (
        "OpenAI API reference, Create batch (platform.openai.com/docs/api-reference/batch/"
        "create): 50,000 requests and 200 MB (200,000,000 bytes) per input file"
    )

    #: the service's name in the ``completion_window`` message
    WINDOW_SERVICE: ClassVar[str] = "OpenAI"
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = OPENAI_EMBEDDINGS_ENDPOINT
    CHAT_ONLY_KEYS: ClassVar[tuple[str, ...]] = (
        "max_tokens",
        "temperature",
        "top_p",
        "image_detail",
    )
    MODEL_RULES: ClassVar[Optional[ModelRules]] = RULES

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

    def check_completion_window(self) -> None:
        """``completion_window`` as the service accepts it: only ``24h`` (OpenAI, and
        the profiles that keep this; :attr:`WINDOW_SERVICE` names the service in the
        message; a profile accepting more overrides this).

        Raises:
            ConfigError: naming ``completion_window``.
        """
        if self.completion_window != "24h":
            raise ConfigError(
                "completion_window",
                f"{self.WINDOW_SERVICE} only supports '24h', got {self.completion_window!r}",
            )

    def for_outputs(self, embedding: bool, given: Collection[str]) -> OpenAIBatchConfig:
        """:meth:`BatchProviderConfig.for_outputs`, and ``dimensions`` only for the
        models that take it (:data:`OPENAI_DIMENSIONS_MODELS`).

        Raises:
            ConfigError: naming the key (see the base class; ``dimensions``).
        """
        checked = super().for_outputs(embedding, given)
        if (
            embedding
            and self.dimensions is not None
            and not self.model.startswith(OPENAI_DIMENSIONS_MODELS)
        ):
            raise ConfigError(
                "dimensions",
                f"model {self.model!r} has a fixed vector length; OpenAI takes dimensions "
                "only for text-embedding-3 and later models (openai-python "
                "EmbeddingCreateParams.dimensions)",
            )
        return checked  # type: ignore[return-value]

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        check_range("timeout_seconds", self.timeout_seconds, 0, low_open=True)
        _check_str("model", self.model)
        if self.max_tokens is not None:
            require_int("max_tokens", self.max_tokens, minimum=1)
        check_range("temperature", self.temperature, 0, 2)
        check_range("top_p", self.top_p, 0, 1)
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
                "requests for /v1/chat/completions (the default) and /v1/responses, and "
                "embeddings for /v1/embeddings (output_type: embedding) only (legacy "
                "completions, moderations, images and videos are refused)",
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
        self.check_completion_window()
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
