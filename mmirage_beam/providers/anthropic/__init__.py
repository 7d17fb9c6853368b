"""``provider: anthropic``: the Anthropic Message Batches API.

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``anthropic``; no SDK is imported.
"""

from mmirage_beam.providers.anthropic.adapter import AnthropicBatchAdapter
from mmirage_beam.providers.anthropic.config import AnthropicBatchConfig
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry

BatchProviderConfigRegistry.register("anthropic", AnthropicBatchConfig)
BatchAdapterRegistry.register("anthropic", AnthropicBatchAdapter)

__all__ = ["AnthropicBatchAdapter", "AnthropicBatchConfig"]
