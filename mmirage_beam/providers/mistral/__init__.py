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

from mmirage_beam.providers.base import register_provider
from mmirage_beam.providers.mistral.adapter import MissingExtraError, MistralBatchAdapter
from mmirage_beam.providers.mistral.config import MistralBatchConfig

PROVIDER = "mistral"

register_provider(PROVIDER, MistralBatchConfig, MistralBatchAdapter)

# Its fake (imported only when a fake server starts; mmirage_beam.testing.fake_registry).
from mmirage_beam.testing.fake_registry import register_fake  # noqa: E402

#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = (
    "mistral_files_upload",
    "mistral_files_list",
    "mistral_files_retrieve",
    "mistral_files_delete",
    "mistral_files_download",
    "mistral_jobs_create",
    "mistral_jobs_list",
    "mistral_jobs_get",
    "mistral_jobs_cancel",
    "mistral_jobs_delete",
    "mistral_files_signed_url",
    "mistral_signed_download",
)
register_fake(
    "mistral",
    "mmirage_beam.providers.mistral.fake:MistralFake",
    FAKE_ENDPOINT_NAMES,
    rank=3,
)

__all__ = ["MistralBatchAdapter", "MistralBatchConfig", "MissingExtraError", "PROVIDER"]
