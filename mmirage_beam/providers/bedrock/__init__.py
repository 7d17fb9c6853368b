"""``provider: bedrock``: Amazon Bedrock batch inference (``CreateModelInvocationJob``)
through boto3.

Everything Bedrock-specific lives in this package:

- :mod:`.config`: :class:`BedrockBatchConfig`, its limits and their sources;
- :mod:`.requests`: the records ``{recordId, modelInput}`` (Anthropic Claude and Meta
  Llama bodies), the job's name and its ``clientRequestToken``;
- :mod:`.adapter`: :class:`BedrockBatchAdapter` (S3 staging, idempotent job creation,
  adoption by job name, status mapping, results from S3);
- :mod:`.outcomes`: output lines -> the project's typed outcomes;
- :mod:`.tokens`: the labelled token estimate;
- ``prices.json``: the batch prices (50% of on-demand) and their sources;
- :mod:`.fake`: the fake Bedrock control plane (validated against botocore's service
  model, reading and writing S3 on a real S3 server), registered with the fake
  provider's registry (:mod:`mmirage_beam.testing.fake_provider.registry`) by name, so
  the fake's core names no provider; it is imported only when a fake server starts.

boto3 is optional (``pip install 'mmirage-beam[bedrock]'``); it is imported only when a
client is built. Credentials: boto3's own chain.
"""

from mmirage_beam.providers.base import register_provider
from mmirage_beam.providers.bedrock.adapter import BedrockBatchAdapter, MissingExtraError
from mmirage_beam.providers.bedrock.config import BedrockBatchConfig
from mmirage_beam.testing.fake_registry import register_fake

PROVIDER = "bedrock"
#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = (
    "bedrock_create_job",
    "bedrock_get_job",
    "bedrock_list_jobs",
    "bedrock_stop_job",
)

register_provider(PROVIDER, BedrockBatchConfig, BedrockBatchAdapter)
register_fake(PROVIDER, "mmirage_beam.providers.bedrock.fake:BedrockFake", FAKE_ENDPOINT_NAMES)

__all__ = ["BedrockBatchAdapter", "BedrockBatchConfig", "MissingExtraError", "PROVIDER"]
