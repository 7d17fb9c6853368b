"""``provider: vertex``: the config dataclass, its limits and their sources.

Vertex AI batch prediction for Gemini models (Batch inference with Gemini,
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/batch-prediction-gemini,
and Batch inference from Cloud Storage,
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/batch-prediction-from-cloud-storage):
one JSONL file in Cloud Storage per job, results written under a ``gs://`` output prefix.
The limits kept here are the Gemini batch page's "limitations" (up to 200,000 requests
per job, a Cloud Storage input file of up to 1 GB); docs/providers.md says when they
were read.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar, Collection, Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.config import BatchProviderConfig, check_sampling
from mmirage_beam.providers.config import check_str as _check_str

#: Vertex AI Gemini batch inference: requests per batch job.
MAX_REQUESTS_PER_JOB = 200_000
#: Vertex AI Gemini batch inference: the Cloud Storage input file, at most 1 GB (taken as
#: 10**9 bytes, the stricter reading).
MAX_FILE_BYTES = 1_000_000_000
LIMITS_SOURCE = (
    "Vertex AI batch inference with Gemini "
    "(https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/"
    "batch-prediction-gemini): up to 200,000 requests per job, input file up to 1 GB"
)
#: the REST version the client speaks (the batch prediction docs' URLs use ``v1``).
DEFAULT_API_VERSION = "v1"
_LOCATION = re.compile(r"^[a-z0-9-]+$")
_PROJECT = re.compile(r"^[a-z0-9.:-]+$")


@dataclass
class VertexBatchConfig(BatchProviderConfig):
    """``provider: vertex`` (Vertex AI batch prediction through google-genai with
    ``vertexai=True``).

    Attributes:
        model: the Gemini model (``gemini-2.5-flash``; the SDK makes it
            ``publishers/google/models/gemini-2.5-flash``), a Claude model, or with
            ``output_type: embedding`` outputs a Google text embedding model
            (``text-embedding-005``; :mod:`~mmirage_beam.providers.vertex.embeddings`).
        project: the Google Cloud project id the jobs run in (required).
        location: the region of the jobs (``us-central1``; required). Input and output
            must be in the same region (Vertex AI batch docs).
        gcs_staging_uri: ``gs://bucket/prefix`` under which each chunk's input file
            (``<run_id>/<chunk_id>/input.jsonl``) and its job's output prefix
            (``<run_id>/<chunk_id>/output``) are written (required).
        max_tokens: optional ``generation_config.max_output_tokens``.
        temperature: optional, in [0, 2]; top_p: optional, in [0, 1].
        base_url: optional API root (``http_options.base_url``), e.g. the fake's; real
            use leaves it unset (``https://<location>-aiplatform.googleapis.com``).
        api_version: the REST version (default ``v1``).
        timeout_seconds: optional per-call timeout of the SDK client.
        embedding_job: set by :meth:`for_outputs` for embedding outputs (never in YAML).

    Credentials are Google's Application Default Credentials (``gcloud auth
    application-default login``, a service account, the metadata server); only a fake
    takes a bare access token from ``$VERTEX_ACCESS_TOKEN`` (see the adapter).

    Raises:
        ConfigError: on any invalid field, naming it.
    """

    PROVIDER_MAX_REQUESTS_PER_BATCH: ClassVar[Optional[int]] = MAX_REQUESTS_PER_JOB
    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = MAX_FILE_BYTES
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = LIMITS_SOURCE
    #: embeddings jobs: a ``batchPredictionJobs`` job of a text embedding model
    #: (:mod:`~mmirage_beam.providers.vertex.embeddings`), for output_type: embedding
    EMBEDDINGS_ENDPOINT: ClassVar[Optional[str]] = "batchPredictionJobs"
    CHAT_ONLY_KEYS: ClassVar[tuple[str, ...]] = ("max_tokens", "temperature", "top_p")
    SET_FOR_EMBEDDINGS: ClassVar[tuple[str, ...]] = ("embedding_job",)

    provider: str = "vertex"
    model: str = "gemini-2.5-flash"
    project: str = ""
    location: str = ""
    gcs_staging_uri: str = ""
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    base_url: Optional[str] = None
    api_version: str = DEFAULT_API_VERSION
    timeout_seconds: Optional[float] = None
    #: set by :meth:`for_outputs` for ``output_type: embedding`` outputs (never in YAML):
    #: the jobs embed (:mod:`~mmirage_beam.providers.vertex.embeddings`)
    embedding_job: bool = False

    def for_outputs(self, embedding: bool, given: Collection[str]) -> VertexBatchConfig:
        """:meth:`BatchProviderConfig.for_outputs`; for embedding outputs the model is
        checked (:func:`~mmirage_beam.providers.vertex.embeddings.check_embedding_model`)
        and the copy has :attr:`embedding_job` set and at most
        :data:`~mmirage_beam.providers.vertex.embeddings.MAX_PROMPTS_PER_JOB` requests
        per chunk (the embeddings jobs' limit).

        Raises:
            ConfigError: naming the key (see the base class; ``embedding_job``;
                ``model``: a Claude, Gemini or other model that is not a text embedding
                model; ``max_requests_per_chunk`` above 30,000).
        """
        from mmirage_beam.providers.vertex.embeddings import (
            BATCH_EMBEDDINGS_DOC,
            MAX_PROMPTS_PER_JOB,
            check_embedding_model,
        )

        checked = super().for_outputs(embedding, given)
        if not embedding:
            return checked
        check_embedding_model(self.model)
        cap = self.max_requests_per_chunk
        if cap is not None and cap > MAX_PROMPTS_PER_JOB:
            raise ConfigError(
                "max_requests_per_chunk",
                f"{cap} is above the {MAX_PROMPTS_PER_JOB} prompts a Vertex AI batch "
                f"embeddings job takes ({BATCH_EMBEDDINGS_DOC})",
            )
        return dataclasses.replace(
            checked, embedding_job=True, max_requests_per_chunk=cap or MAX_PROMPTS_PER_JOB
        )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base_url == "":
            self.base_url = None  # e.g. an unset ${VAR:-}
        _check_str("model", self.model)
        if not isinstance(self.project, str) or not _PROJECT.match(self.project):
            raise ConfigError(
                "project",
                f"must be a Google Cloud project id (lowercase letters, digits, '-'), got "
                f"{self.project!r}",
            )
        if not isinstance(self.location, str) or not _LOCATION.match(self.location):
            raise ConfigError(
                "location", f"must be a Vertex AI region such as us-central1, got {self.location!r}"
            )
        staging = self.gcs_staging_uri
        if not isinstance(staging, str) or not staging.startswith("gs://") or len(staging) < 6:
            raise ConfigError(
                "gcs_staging_uri",
                f"must be a gs://bucket[/prefix] URI (Vertex AI batch jobs read and write "
                f"Cloud Storage), got {staging!r}",
            )
        self.gcs_staging_uri = staging.rstrip("/")
        check_sampling(self, 2)
        if self.base_url is not None:
            _check_str("base_url", self.base_url)
        _check_str("api_version", self.api_version)
