"""OpenAI-compatible batch services as named profiles of the OpenAI adapter.

Each profile is a provider name of its own (``provider: azure-openai | groq |
together``), so its key comes from ``<PROVIDER>_API_KEY`` (``AZURE_OPENAI_API_KEY``,
``GROQ_API_KEY``, ``TOGETHER_API_KEY``), with the config subclass holding its limits and
their sources and refusing at load what the service refuses. Facts (PROVIDERS.md,
"OpenAI-compatible batch services", and the services' batch guides):

- **Azure OpenAI global batch** (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/batch,
  REST ``POST /openai/v1/batches``): base ``https://<resource>.openai.azure.com/openai/v1/``
  (required: there is no default resource); the ``api-key`` header; ``model`` is the
  batch deployment's name, the same on every line; ``completion_window`` ``24h``;
  100,000 requests and 200 MB per file; jobs that overrun 24 h are not expired by the
  service (they run until done or cancelled).
- **Groq** (https://console.groq.com/docs/batch): base ``https://api.groq.com/openai/v1``;
  ``completion_window`` from ``24h`` to ``7d``; chat completions. PROVIDERS.md records no
  per-file limits for it, so only ``max_chunk_bytes`` bounds a chunk.
- **Together** (https://docs.together.ai/docs/batch-inference): base
  ``https://api.together.xyz/v1``; lines ``{"custom_id", "body"}`` only; 50,000 requests
  and 100 MB per file; ``completion_window`` ``24h``.

Every other behaviour (upload, create with run-tagged metadata and adoption, status,
results) is the OpenAI adapter's. Prices: none are shipped for these services ("price
unknown" unless the config sets ``price_per_million_*_tokens``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Mapping, Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.model_rules import ModelRules
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter, OpenAIBatchLine
from mmirage_beam.providers.openai.config import OpenAIBatchConfig

AZURE_SOURCE = (
    "Azure OpenAI batch guide (learn.microsoft.com/azure/ai-foundry/openai/how-to/batch): "
    "100,000 requests and 200 MB (200,000,000 bytes) per file; the Foundry REST reference, "
    "Create batch (learn.microsoft.com/azure/foundry/reference/rest/batches-create-batch), "
    "says 'up to 200 MB in size' as OpenAI's does"
)
GROQ_SOURCE = "Groq batch docs (console.groq.com/docs/batch): no per-file limit recorded"
TOGETHER_SOURCE = (
    "Together batch inference docs (docs.together.ai/docs/batch-inference): 50,000 "
    "requests and 100 MB per file"
)
_WINDOW_RE = re.compile(r"^([1-9][0-9]*)([hd])$")
GROQ_MIN_WINDOW_HOURS = 24
GROQ_MAX_WINDOW_HOURS = 7 * 24


def window_hours(value: Any) -> Optional[int]:
    """Hours of a ``completion_window`` such as ``24h`` or ``7d``, None if unreadable."""
    match = _WINDOW_RE.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    n = int(match.group(1))
    return n * 24 if match.group(2) == "d" else n


@dataclass
class _ChatProfileConfig(OpenAIBatchConfig):
    """An OpenAI-compatible service that takes chat completions only: its
    ``base_url`` defaults to :attr:`DEFAULT_BASE_URL` (None: required, as
    :attr:`BASE_URL_HINT` shows). Raises ConfigError naming the key."""

    #: the service's name in messages
    SERVICE: ClassVar[str] = ""
    #: chat completions only: no embeddings batches (output_type: embedding refused)
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = None
    #: deployments (Azure) and other services' catalogues: OpenAI's names do not apply
    MODEL_RULES: ClassVar[Optional[ModelRules]] = None
    DEFAULT_BASE_URL: ClassVar[Optional[str]] = None
    BASE_URL_HINT: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if self.DEFAULT_BASE_URL and self.base_url in (None, ""):
            self.base_url = self.DEFAULT_BASE_URL
        super().__post_init__()
        if self.base_url is None:
            raise ConfigError("base_url", f"is required for {self.SERVICE}: {self.BASE_URL_HINT}")
        if self.batch_endpoint != "/v1/chat/completions":
            raise ConfigError(
                "batch_endpoint",
                f"{self.SERVICE} batches are built for /v1/chat/completions only",
            )


@dataclass
class AzureOpenAIBatchConfig(_ChatProfileConfig):
    """``provider: azure-openai``: ``base_url`` (the resource's ``.../openai/v1/``) is
    required and ``model`` is the deployment name; ``completion_window`` ``24h`` only
    (Azure global batch: jobs that overrun are not expired). Raises ConfigError naming
    the key."""

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = 100_000
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 200 * 1000 * 1000
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = AZURE_SOURCE
    SERVICE: ClassVar[str] = "azure-openai"
    BASE_URL_HINT: ClassVar[str] = "https://<resource>.openai.azure.com/openai/v1/"
    WINDOW_SERVICE: ClassVar[str] = "Azure OpenAI batch"

    provider: str = "azure-openai"


@dataclass
class GroqBatchConfig(_ChatProfileConfig):
    """``provider: groq``: ``completion_window`` from ``24h`` to ``7d``; chat
    completions only."""

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = None
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = None
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = GROQ_SOURCE
    SERVICE: ClassVar[str] = "groq"
    DEFAULT_BASE_URL: ClassVar[Optional[str]] = "https://api.groq.com/openai/v1"

    provider: str = "groq"
    model: str = "llama-3.1-8b-instant"
    base_url: Optional[str] = "https://api.groq.com/openai/v1"

    def check_completion_window(self) -> None:
        """``24h`` .. ``7d`` (hours or days)."""
        hours = window_hours(self.completion_window)
        if hours is None or not GROQ_MIN_WINDOW_HOURS <= hours <= GROQ_MAX_WINDOW_HOURS:
            raise ConfigError(
                "completion_window",
                f"Groq accepts 24h to 7d (e.g. '24h', '72h', '7d'), got {self.completion_window!r}",
            )


@dataclass
class TogetherBatchConfig(_ChatProfileConfig):
    """``provider: together``: chat completions, ``24h``."""

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = 50_000
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 100 * 1000 * 1000
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = TOGETHER_SOURCE
    SERVICE: ClassVar[str] = "together"
    DEFAULT_BASE_URL: ClassVar[Optional[str]] = "https://api.together.xyz/v1"
    WINDOW_SERVICE: ClassVar[str] = "Together"

    provider: str = "together"
    model: str = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    base_url: Optional[str] = "https://api.together.xyz/v1"


class _ProfileAdapter(OpenAIBatchAdapter):
    """The OpenAI adapter under another service's name: no OpenAI prices, and chat
    completions only (the profiles' config classes name no ``EMBEDDINGS_ENDPOINT``)."""

    takes_embeddings = False

    @classmethod
    def price_table(cls) -> Optional[Mapping[str, Any]]:
        """None: no prices are shipped for this service ("price unknown")."""
        return None


class AzureOpenAIBatchAdapter(_ProfileAdapter):
    """``provider: azure-openai``: the key goes in the ``api-key`` header as well as the
    SDK's bearer token (the Azure v1 API takes either)."""

    def setup(self, config: OpenAIBatchConfig) -> None:
        super().setup(config)
        key = self.credentials.get("api_key")
        if key:
            self._client = self._client.with_options(default_headers={"api-key": key})


class GroqBatchAdapter(_ProfileAdapter):
    """``provider: groq``: the OpenAI adapter; the window is the config's."""


class TogetherBatchAdapter(_ProfileAdapter):
    """``provider: together``: lines hold ``custom_id`` and ``body`` only."""

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: OpenAIBatchConfig
    ) -> OpenAIBatchLine:
        """The OpenAI line without ``method`` and ``url`` (Together's line shape)."""
        line = super().build_request(custom_id, payload, config)
        return {"custom_id": line["custom_id"], "body": line["body"]}


#: provider name -> (config class, adapter class), registered by the openai package.
PROFILES = {
    "azure-openai": (AzureOpenAIBatchConfig, AzureOpenAIBatchAdapter),
    "groq": (GroqBatchConfig, GroqBatchAdapter),
    "together": (TogetherBatchConfig, TogetherBatchAdapter),
}
