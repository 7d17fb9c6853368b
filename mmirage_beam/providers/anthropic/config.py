"""``provider: anthropic``: the config dataclass, its limits and their sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers.anthropic.rules import RULES
from mmirage_beam.providers.config import BatchProviderConfig, check_range
from mmirage_beam.providers.config import check_str as _check_str
from mmirage_beam.providers.model_rules import ModelRules


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
    MODEL_RULES: ClassVar[Optional[ModelRules]] = RULES

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
        check_range("temperature", self.temperature, 0, 1)
        check_range("top_p", self.top_p, 0, 1, low_open=True)
        check_range("timeout_seconds", self.timeout_seconds, 0, low_open=True)
        if self.base_url is not None:
            _check_str("base_url", self.base_url)
