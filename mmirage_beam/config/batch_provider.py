"""Where provider plugins have always imported the config contract from.

The contract lives beside the adapter contract, in :mod:`mmirage_beam.providers.config`
(the provider packages import it from there); this module hands the same objects on so
a plugin written against ``mmirage_beam.config.batch_provider`` keeps working.
"""

from mmirage_beam.providers.config import (
    DEFAULT_MAX_CHUNK_BYTES,
    PRICE_KEYS,
    BatchProviderConfig,
    BatchProviderConfigRegistry,
    check_number,
    check_str,
)

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES",
    "PRICE_KEYS",
    "BatchProviderConfig",
    "BatchProviderConfigRegistry",
    "check_number",
    "check_str",
]
