"""``provider: openai``: the OpenAI Batch API (chat completions, the Responses API).

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``openai``; no SDK is imported.
"""

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from mmirage_beam.providers.openai.config import OpenAIBatchConfig

BatchProviderConfigRegistry.register("openai", OpenAIBatchConfig)
BatchAdapterRegistry.register("openai", OpenAIBatchAdapter)

# OpenAI-compatible services, as named profiles of this adapter (profiles.py).
from mmirage_beam.providers.openai.profiles import PROFILES  # noqa: E402

for _name, (_config_cls, _adapter_cls) in PROFILES.items():
    BatchProviderConfigRegistry.register(_name, _config_cls)
    BatchAdapterRegistry.register(_name, _adapter_cls)

__all__ = ["OpenAIBatchAdapter", "OpenAIBatchConfig"]
