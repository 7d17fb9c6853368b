"""``provider: openai``: the OpenAI Batch API (chat completions, the Responses API).

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (request building, submission, status, results),
``tokens`` (token counting) and ``prices.json`` (its dated price rows). Importing the
package registers the config and the adapter under ``openai``; no SDK is imported.
"""

from mmirage_beam.providers.base import register_provider
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from mmirage_beam.providers.openai.config import OpenAIBatchConfig

register_provider("openai", OpenAIBatchConfig, OpenAIBatchAdapter)

# OpenAI-compatible services, as named profiles of this adapter (profiles.py).
from mmirage_beam.providers.openai.profiles import PROFILES  # noqa: E402

for _name, (_config_cls, _adapter_cls) in PROFILES.items():
    register_provider(_name, _config_cls, _adapter_cls)

# Its fake (imported only when a fake server starts; mmirage_beam.testing.fake_registry).
from mmirage_beam.testing.fake_registry import register_fake  # noqa: E402

#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = (
    "files_create",
    "files_list",
    "files_retrieve",
    "files_delete",
    "files_content",
    "batches_create",
    "batches_list",
    "batches_retrieve",
    "batches_cancel",
)
register_fake(
    "openai",
    "mmirage_beam.providers.openai.fake:OpenAIFake",
    FAKE_ENDPOINT_NAMES,
    fallback=True,
    rank=0,
)
register_fake(
    "openai-compatible", "mmirage_beam.providers.openai.fake_profile_api:CompatibleFake", rank=4
)

__all__ = ["OpenAIBatchAdapter", "OpenAIBatchConfig"]
