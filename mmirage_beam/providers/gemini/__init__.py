"""``provider: gemini``: the Gemini Developer API's batch mode (google-genai SDK).

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``gemini``; the SDK is imported only
when a client is built (``pip install 'mmirage-beam[gemini]'``).
"""

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.gemini.adapter import GeminiBatchAdapter
from mmirage_beam.providers.gemini.config import GeminiBatchConfig

BatchProviderConfigRegistry.register("gemini", GeminiBatchConfig)
BatchAdapterRegistry.register("gemini", GeminiBatchAdapter)

__all__ = ["GeminiBatchAdapter", "GeminiBatchConfig"]
