"""The provider config contract of the ``batch_api`` processor, and its registry.

This keeps MMIRAGE's extension contract: a provider is a :class:`BatchProviderConfig`
dataclass subclass (validated in ``__post_init__``) registered with
:class:`BatchProviderConfigRegistry` under the name used in YAML ``provider:``, beside
the adapter contract and its registry (:mod:`mmirage_beam.providers.base`).

Each provider's config class lives in its package (``mmirage_beam/providers/<name>/``),
which registers it; its limits (requests and bytes per batch) come from the provider's
batch documentation, see ``PROVIDER_LIMITS_SOURCE`` on each subclass. The built-ins are
registered when :mod:`mmirage_beam.providers` is imported, which importing this module
does first; plugins register themselves (:mod:`mmirage_beam.providers.registry`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Collection, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers.model_rules import ModelRules
from mmirage_beam.providers.registry import ProviderRegistry, load_plugins

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES",
    "PRICE_KEYS",
    "BatchProviderConfig",
    "BatchProviderConfigRegistry",
    "check_number",
    "check_range",
    "check_sampling",
    "check_str",
]

DEFAULT_MAX_CHUNK_BYTES = 52_428_800  # 50 MiB, MMIRAGE's default upload size per chunk
#: the two batch-price overrides (USD per million tokens, see mmirage_beam.costs.prices)
PRICE_KEYS = ("price_per_million_input_tokens", "price_per_million_output_tokens")
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
            the provider's ``prices.json`` (:mod:`mmirage_beam.costs.prices`).
        max_enqueued_tokens: optional limit on this run's input tokens in unfinished
            batches of the model; SubmitChunks waits before creating a batch that would
            exceed it (:mod:`mmirage_beam.run.budget`).
        exact_tokens: count each request's input tokens with the provider's own
            counting endpoint where one exists (Anthropic ``messages.count_tokens``;
            also the ``--exact-tokens`` flag of ``mmirage run``).
        dimensions: for ``output_type: embedding`` outputs only: the length of every
            vector (an int >= 1), sent where the provider takes it (OpenAI
            ``dimensions``, Mistral ``output_dimension``, Gemini
            ``outputDimensionality``); None: the model's own length.

    Subclasses may set the class attributes ``PROVIDER_MAX_REQUESTS_PER_BATCH``,
    ``PROVIDER_MAX_BATCH_BYTES`` and ``PROVIDER_LIMITS_SOURCE``; values above them are
    rejected.

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = None
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = None
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = ""
    #: the batch endpoint of ``output_type: embedding`` outputs; None: this provider
    #: takes no embeddings batches (refused at load, naming ``provider``)
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = None
    #: the keys that only generation (chat) requests use, refused with embedding outputs
    CHAT_ONLY_KEYS: ClassVar[tuple[str, ...]] = ()
    #: the fields :meth:`for_outputs` sets itself for embedding outputs (e.g.
    #: ``embedding_job``), refused when the YAML gives them
    SET_FOR_EMBEDDINGS: ClassVar[tuple[str, ...]] = ()
    #: the service's model and parameter table (:class:`~mmirage_beam.providers.
    #: model_rules.ModelRules`), checked at config load; None: not checked.
    MODEL_RULES: ClassVar[Optional[ModelRules]] = None

    provider: str = ""
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES
    max_requests_per_chunk: Optional[int] = None
    metadata_output_path: str = ""
    oversized_request_policy: str = "isolate"
    price_per_million_input_tokens: Optional[float] = None
    price_per_million_output_tokens: Optional[float] = None
    max_enqueued_tokens: Optional[int] = None
    exact_tokens: bool = False
    dimensions: Optional[int] = None

    def __post_init__(self) -> None:
        require_int("max_chunk_bytes", self.max_chunk_bytes, minimum=1)
        if self.dimensions is not None:
            require_int("dimensions", self.dimensions, minimum=1)
        self._check_cost_fields()
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

    def _check_cost_fields(self) -> None:
        """Validate the two price keys, ``max_enqueued_tokens`` and ``exact_tokens``.

        Raises:
            ConfigError: a price that is not a number >= 0, a ``max_enqueued_tokens``
                that is not an integer >= 1, or an ``exact_tokens`` that is not a bool,
                naming the key.
        """
        for key in PRICE_KEYS:
            value = getattr(self, key, None)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ConfigError(key, f"must be a number of USD per million tokens, got {value!r}")
            if value < 0 or math.isinf(value):
                raise ConfigError(key, f"must be >= 0 and finite, got {value}")
        if self.max_enqueued_tokens is not None:
            require_int("max_enqueued_tokens", self.max_enqueued_tokens, minimum=1)
        if not isinstance(self.exact_tokens, bool):
            raise ConfigError("exact_tokens", f"must be true or false, got {self.exact_tokens!r}")

    def for_outputs(self, embedding: bool, given: Collection[str]) -> BatchProviderConfig:
        """This config checked against its outputs' kind, as the requests will use it.

        Args:
            embedding: whether the outputs are ``output_type: embedding`` (a config
                never mixes them with generation outputs: refused before this).
            given: the keys the YAML processor block set (a default is not "given").

        Returns:
            ``self``, or for embedding outputs a copy whose ``batch_endpoint`` (when the
            config has one) is :attr:`EMBEDDINGS_ENDPOINT`.

        Raises:
            ConfigError: naming the key: one of :attr:`SET_FOR_EMBEDDINGS` given;
                embedding outputs with a provider that takes none (``provider``), with a
                chat-only key (:attr:`CHAT_ONLY_KEYS`), with a ``batch_endpoint`` other
                than :attr:`EMBEDDINGS_ENDPOINT`, or without a ``model``; ``dimensions``
                or the embeddings endpoint without them.
        """
        for key in self.SET_FOR_EMBEDDINGS:
            if key in given:
                raise ConfigError(
                    key, "is set by output_type: embedding outputs, not in the config"
                )
        endpoint = getattr(self, "batch_endpoint", None)
        if not embedding:
            if "dimensions" in given:
                raise ConfigError(
                    "dimensions", "is the vector length of output_type: embedding outputs only"
                )
            if endpoint is not None and endpoint == self.EMBEDDINGS_ENDPOINT:
                raise ConfigError(
                    "batch_endpoint",
                    f"{endpoint!r} answers output_type: embedding outputs only; these "
                    "outputs generate text (leave batch_endpoint out for the default, "
                    f"{type(self).__dataclass_fields__['batch_endpoint'].default!r}, or make "
                    "them output_type: embedding)",
                )
            return self
        if not _takes_embeddings(self.provider) or self.EMBEDDINGS_ENDPOINT is None:
            takes = [
                name for name in BatchProviderConfigRegistry.names() if _takes_embeddings(name)
            ]
            raise ConfigError(
                "provider",
                f"{self.provider!r} takes no embeddings batches in mmirage-beam "
                f"(output_type: embedding is built for {', '.join(takes) or 'no provider'})",
            )
        for key in self.CHAT_ONLY_KEYS:
            if key in given:
                raise ConfigError(
                    key, "is a text-generation setting; embedding outputs take none (remove it)"
                )
        if "model" not in given:
            raise ConfigError(
                "model", "is required with output_type: embedding (an embedding model)"
            )
        if endpoint is None:
            return self
        if "batch_endpoint" in given and endpoint != self.EMBEDDINGS_ENDPOINT:
            raise ConfigError(
                "batch_endpoint",
                f"must be {self.EMBEDDINGS_ENDPOINT} for output_type: embedding outputs, "
                f"got {endpoint!r} (or leave it out)",
            )
        return dataclasses.replace(self, batch_endpoint=self.EMBEDDINGS_ENDPOINT)

    @property
    def effective_max_requests_per_chunk(self) -> Optional[int]:
        """The request cap actually applied: the configured one, else the provider's."""
        if self.max_requests_per_chunk is not None:
            return self.max_requests_per_chunk
        return self.PROVIDER_MAX_REQUESTS_PER_BATCH

    @classmethod
    def field_names(cls) -> set[str]:
        """The dataclass field names of this config class (its YAML keys)."""
        return {f.name for f in fields(cls)}


class BatchProviderConfigRegistry(ProviderRegistry):
    """Maps a YAML ``provider:`` name to its :class:`BatchProviderConfig` subclass.

    ``register(name, config_cls)`` (TypeError for a non-subclass) and ``get(name)``
    (ConfigError naming ``provider`` and the registered names).
    """

    base_class = BatchProviderConfig
    unknown_message = "unknown provider {name!r}; registered providers: {known}"


def check_number(name: str, value: Any) -> float:
    """``value`` as a float. Raises ConfigError naming ``name`` unless it is a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(name, f"must be a number, got {value!r}")
    return float(value)


def check_range(
    name: str,
    value: Any,
    low: float,
    high: Optional[float] = None,
    *,
    low_open: bool = False,
) -> Optional[float]:
    """``value`` (None: unset, kept) as a float in ``[low, high]`` (``(low, high]`` with
    ``low_open``; no upper bound when ``high`` is None).

    Raises:
        ConfigError: naming ``name``: not a number (:func:`check_number`), or out of the
            range (``must be in [0, 2], got 3.0``, ``must be > 0, got 0.0``).
    """
    if value is None:
        return None
    number = check_number(name, value)
    above = low < number if low_open else low <= number
    if high is None:
        bound = f"{'>' if low_open else '>='} {low}"
    else:
        above = above and number <= high
        bound = f"in {'(' if low_open else '['}{low}, {high}]"
    if not above:
        raise ConfigError(name, f"must be {bound}, got {number}")
    return number


def check_sampling(
    config: Any,
    temperature_max: Optional[float],
    *,
    max_tokens_required: bool = False,
) -> None:
    """A generation config's length, sampling and timeout settings, checked in this
    order: ``max_tokens`` an integer >= 1 (None: unset, unless ``max_tokens_required``),
    ``temperature`` in ``[0, temperature_max]`` (None: no upper bound), ``top_p`` in
    ``[0, 1]``, ``timeout_seconds`` (the SDK client's per-call timeout, seconds) > 0;
    None leaves a float setting unset. The ranges are each provider's (its config
    module names the source).

    Raises:
        ConfigError: naming the first key that is out of its range or not a number.
    """
    if max_tokens_required or config.max_tokens is not None:
        require_int("max_tokens", config.max_tokens, minimum=1)
    check_range("temperature", config.temperature, 0, temperature_max)
    check_range("top_p", config.top_p, 0, 1)
    check_range("timeout_seconds", config.timeout_seconds, 0, low_open=True)


def check_str(name: str, value: Any) -> str:
    """``value``. Raises ConfigError naming ``name`` unless it is a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ConfigError(name, f"must be a non-empty string, got {value!r}")
    return value


#: provider name -> its adapter's ``takes_embeddings``, kept by
#: ``BatchAdapterRegistry.register`` (:mod:`mmirage_beam.providers.base`), so that this
#: module, below the adapters, reads the capability without importing them.
ADAPTER_TAKES_EMBEDDINGS: dict[str, bool] = {}


def _takes_embeddings(provider: str) -> bool:
    """Whether ``provider``'s adapter declares ``takes_embeddings`` (its config class's
    ``EMBEDDINGS_ENDPOINT`` when no adapter is registered under the name)."""
    load_plugins()  # a plugin's adapter registers itself on load
    if provider in ADAPTER_TAKES_EMBEDDINGS:
        return ADAPTER_TAKES_EMBEDDINGS[provider]
    if provider in BatchProviderConfigRegistry.names():
        return BatchProviderConfigRegistry.get(provider).EMBEDDINGS_ENDPOINT is not None
    return False
