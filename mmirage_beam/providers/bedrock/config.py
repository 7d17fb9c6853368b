"""``provider: bedrock``: the config dataclass, Bedrock's batch inference limits and
their sources.

Limits of one batch inference job (``CreateModelInvocationJob``). AWS publishes them as
*default service quotas* per account, region and model (Amazon Bedrock endpoints and
quotas, https://docs.aws.amazon.com/general/latest/gr/bedrock.html#limits_bedrock). The
quota names below are quoted from "Format and upload your batch inference data"
(https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-data.html, read
2026-12-06); their default values are the quotas page's as we know them, not re-read
today (the page was not reachable from here): check Service Quotas for your account.

- "Minimum number of records per batch inference job": 100;
- "Records per batch inference job" and "Records per input file per batch inference
  job": 50,000 (the adapter sends one input file per job, so both apply);
- "Batch inference input file size (in GB)": 1 GB; "Batch inference job size (in GB)":
  5 GB (one file per job: the 1 GB file limit is the stricter).

A config may lower the maxima (``max_requests_per_chunk``, ``max_chunk_bytes``); higher
values are refused at load, naming the key. An account whose quotas differ (Service
Quotas console) sets ``min_records_per_job`` to its own minimum.

A chunk with fewer records than the minimum (the last fragment of an output, say) is
never sent as it is, since Bedrock would refuse the job: by default
(``small_chunk_policy: pad``) it is padded up to the minimum with copies of its own first
record under reserved record ids, whose results are dropped on the way back (they cost at
most ``min_records_per_job - 1`` extra requests per output; see docs/providers.md);
``small_chunk_policy: refuse`` fails the chunk before anything is uploaded, with a
message saying how to merge it. A ``max_requests_per_chunk`` below the minimum, which
would make every chunk too small, is refused at load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers.bedrock.requests import model_family
from mmirage_beam.providers.config import BatchProviderConfig, check_sampling, check_str

#: "Minimum number of records per batch inference job" (default quota).
MIN_RECORDS_PER_JOB = 100
#: "Records per batch inference job" / "Records per input file per batch inference job".
MAX_RECORDS_PER_JOB = 50_000
#: "Batch inference input file size (in GB)": 1 GB, decimal (the stricter reading).
MAX_INPUT_FILE_BYTES = 1_000_000_000
#: "Batch inference job size (in GB)": 5 GB (one input file per job: 1 GB applies first).
MAX_JOB_BYTES = 5_000_000_000
#: ``timeoutDurationInHours`` bounds (botocore ``bedrock`` service model,
#: ``ModelInvocationJobTimeoutDurationInHours``: min 24, max 168).
TIMEOUT_HOURS_RANGE = (24, 168)
LIMITS_SOURCE = (
    "Amazon Bedrock default quotas (docs.aws.amazon.com/general/latest/gr/bedrock.html"
    "#limits_bedrock; quota names in docs.aws.amazon.com/bedrock/latest/userguide/"
    "batch-inference-data.html): 100 records minimum, 50,000 records and a 1 GB input "
    "file per batch inference job (5 GB per job)"
)
SMALL_CHUNK_POLICIES = ("pad", "refuse")
_S3_URI = re.compile(r"^s3://([a-z0-9][-.a-z0-9]{1,61}[a-z0-9])(/[-!_*'().a-zA-Z0-9/]*)?$")
_ROLE_ARN = re.compile(r"^arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+$")
#: (field, the pattern its string must match, the rule the error states), in the order
#: they are checked
_MATCHED_FIELDS = (
    ("role_arn", _ROLE_ARN, "must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)"),
    (
        "s3_staging_uri",
        _S3_URI,
        "must be s3://<bucket>[/<prefix>] (key characters A-Z a-z 0-9 - ! _ * ' ( ) . /, as "
        "Bedrock's S3Uri allows)",
    ),
)


@dataclass
class BedrockBatchConfig(BatchProviderConfig):
    """``provider: bedrock`` (Amazon Bedrock batch inference, ``CreateModelInvocationJob``).

    Credentials are boto3's own chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
    / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, instance roles...): mmirage-beam reads no
    AWS key itself.

    Attributes:
        model: the Bedrock model id of every record (``modelId``), e.g.
            ``anthropic.claude-3-5-haiku-20241022-v1:0`` (Anthropic Messages bodies) or
            ``meta.llama3-1-8b-instruct-v1:0`` (Llama prompt bodies); an inference
            profile id (``us.anthropic...``) is read by the part after the region.
        role_arn: the service role Bedrock assumes to read and write the bucket.
        s3_staging_uri: ``s3://bucket/prefix``: input files go to
            ``<uri>/<run_id>/<chunk_id>.jsonl``, results to ``<uri>/<run_id>/output/``.
        region: the AWS region (None: boto3's, e.g. ``AWS_DEFAULT_REGION``).
        endpoint_url: the Bedrock control plane's URL (None: boto3's; e.g. the fake or a
            VPC endpoint; ``AWS_ENDPOINT_URL_BEDROCK`` works too).
        s3_endpoint_url: the S3 endpoint (None: boto3's; ``AWS_ENDPOINT_URL_S3`` too).
        timeout_hours: ``timeoutDurationInHours``, 24..168 (botocore's model).
        max_tokens: the answer's limit (Anthropic ``max_tokens``, Llama
            ``max_gen_len``); required by Anthropic bodies, so it defaults to 1024.
        temperature, top_p: sent only when set.
        min_records_per_job: the account's minimum records per job (default 100).
        small_chunk_policy: ``pad`` or ``refuse`` (see the module docstring).

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = MAX_RECORDS_PER_JOB
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = MAX_INPUT_FILE_BYTES
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = LIMITS_SOURCE

    provider: str = "bedrock"
    model: str = "anthropic.claude-3-5-haiku-20241022-v1:0"
    role_arn: str = ""
    s3_staging_uri: str = ""
    region: Optional[str] = None
    endpoint_url: Optional[str] = None
    s3_endpoint_url: Optional[str] = None
    timeout_hours: int = 24
    max_tokens: int = 1024
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    min_records_per_job: int = MIN_RECORDS_PER_JOB
    small_chunk_policy: str = "pad"
    timeout_seconds: Optional[float] = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("region", "endpoint_url", "s3_endpoint_url"):
            if getattr(self, key) == "":
                setattr(self, key, None)  # e.g. an unset ${VAR:-}
            elif getattr(self, key) is not None:
                check_str(key, getattr(self, key))
        check_str("model", self.model)
        if model_family(self.model) == "unknown":
            raise ConfigError(
                "model",
                f"{self.model!r}: mmirage-beam builds Bedrock bodies for Anthropic Claude "
                "(anthropic.*) and Meta Llama (meta.*) models only",
            )
        for key, pattern, must in _MATCHED_FIELDS:
            value = check_str(key, getattr(self, key))
            if not pattern.match(value):
                raise ConfigError(key, f"{must}, got {value!r}")
        low, high = TIMEOUT_HOURS_RANGE
        require_int("timeout_hours", self.timeout_hours, minimum=low)
        if self.timeout_hours > high:
            raise ConfigError(
                "timeout_hours", f"must be in [{low}, {high}], got {self.timeout_hours}"
            )
        check_sampling(self, 1, max_tokens_required=True)
        require_int("min_records_per_job", self.min_records_per_job, minimum=1)
        if self.small_chunk_policy not in SMALL_CHUNK_POLICIES:
            raise ConfigError(
                "small_chunk_policy",
                f"must be one of {', '.join(SMALL_CHUNK_POLICIES)}, "
                f"got {self.small_chunk_policy!r}",
            )
        cap = self.max_requests_per_chunk
        if cap is not None and cap < self.min_records_per_job:
            raise ConfigError(
                "max_requests_per_chunk",
                f"{cap} is below Bedrock's minimum of {self.min_records_per_job} records per "
                f"batch inference job ({LIMITS_SOURCE}): every chunk would be refused; raise "
                "it, or lower min_records_per_job if your account's quota is lower",
            )
        if not isinstance(self.tags, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.tags.items()
        ):
            raise ConfigError("tags", "must be a mapping of strings to strings")

    @property
    def staging_prefix(self) -> tuple[str, str]:
        """``(bucket, key prefix without a trailing slash)`` of :attr:`s3_staging_uri`."""
        rest = self.s3_staging_uri[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        return bucket, prefix.strip("/")
