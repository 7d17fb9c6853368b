"""``provider: anthropic``: the Anthropic Message Batches API.

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``anthropic``; no SDK is imported.
"""

from mmirage_beam.providers.anthropic.adapter import AnthropicBatchAdapter
from mmirage_beam.providers.anthropic.config import AnthropicBatchConfig
from mmirage_beam.providers.base import register_provider

register_provider("anthropic", AnthropicBatchConfig, AnthropicBatchAdapter)

# Its fake (imported only when a fake server starts; mmirage_beam.testing.fake_registry).
from mmirage_beam.testing.fake_registry import register_fake  # noqa: E402

#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = (
    "messages_count_tokens",
    "messages_batches_create",
    "messages_batches_list",
    "messages_batches_retrieve",
    "messages_batches_cancel",
    "messages_batches_delete",
    "messages_batches_results",
    "anthropic_files_upload",
    "anthropic_files_list",
    "anthropic_files_retrieve",
    "anthropic_files_delete",
    "anthropic_files_download",
)
register_fake(
    "anthropic",
    "mmirage_beam.providers.anthropic.fake:AnthropicFake",
    FAKE_ENDPOINT_NAMES,
    rank=1,
)

__all__ = ["AnthropicBatchAdapter", "AnthropicBatchConfig"]
