"""``provider: mistral``: Mistral batch inference through the official mistralai SDK.

Everything Mistral-specific lives in this package:

- :mod:`.config`: :class:`MistralBatchConfig`, its limits and their sources;
- :mod:`.requests`: the chat-completion body of a batch line;
- :mod:`.adapter`: :class:`MistralBatchAdapter` (upload + job creation, adoption by
  run-tagged metadata, status mapping, result download);
- :mod:`.outcomes`: result lines -> the project's typed outcomes;
- :mod:`.tokens`: the labelled token estimate;
- ``prices.json``: dated price rows and the 50% batch discount.

The SDK is optional (``pip install 'mmirage-beam[mistral]'``, mistralai >= 3.7, < 4);
it is imported only when a client is built. Importing this package registers the config
and the adapter; the adapter's contract hooks give the token estimate
(``count_request_tokens``), the prices (``price_table``: ``prices.json`` here) and the
limits (the config's ``PROVIDER_*`` attributes).
"""

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.mistral.adapter import MissingExtraError, MistralBatchAdapter
from mmirage_beam.providers.mistral.config import MistralBatchConfig

PROVIDER = "mistral"

BatchProviderConfigRegistry.register(PROVIDER, MistralBatchConfig)
BatchAdapterRegistry.register(PROVIDER, MistralBatchAdapter)

__all__ = ["MistralBatchAdapter", "MistralBatchConfig", "MissingExtraError", "PROVIDER"]
