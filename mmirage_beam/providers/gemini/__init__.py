"""``provider: gemini``: the Gemini Developer API's batch mode (google-genai SDK).

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``gemini``; the SDK is imported only
when a client is built (``pip install 'mmirage-beam[gemini]'``).
"""

from mmirage_beam.providers.base import register_provider
from mmirage_beam.providers.gemini.adapter import GeminiBatchAdapter
from mmirage_beam.providers.gemini.config import GeminiBatchConfig

register_provider("gemini", GeminiBatchConfig, GeminiBatchAdapter)

# Its fake (imported only when a fake server starts; mmirage_beam.testing.fake_registry).
from mmirage_beam.testing.fake_registry import register_fake  # noqa: E402

#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = (
    "gemini_files_upload",
    "gemini_files_get",
    "gemini_files_download",
    "gemini_batches_create",
    "gemini_batches_list",
    "gemini_batches_get",
    "gemini_batches_cancel",
    "gemini_batches_delete",
    "gemini_count_tokens",
    "gemini_files_list",
    "gemini_files_delete",
)
register_fake(
    "gemini", "mmirage_beam.providers.gemini.fake:GeminiFake", FAKE_ENDPOINT_NAMES, rank=2
)

__all__ = ["GeminiBatchAdapter", "GeminiBatchConfig"]
