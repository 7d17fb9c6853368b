"""Vertex AI batch prediction adapter (google-genai SDK with ``vertexai=True``).

Contract facts (checked against google-genai 2.34 ``batches.py`` /
``_transformers.py`` / ``_api_client.py`` and the Vertex AI batch docs, see
:mod:`~mmirage_beam.providers.vertex.config`):

- A chunk is a JSONL file of ``{"request": GenerateContentRequest}`` lines, the
  request built by the Gemini adapter (the same parts, generation config and response
  schema) plus ``labels`` that carry the custom_id
  (:func:`~mmirage_beam.providers.vertex.outcomes.id_labels`). It is written to
  ``<gcs_staging_uri>/<run_id>/<chunk_id>/input.jsonl`` through Beam's file systems
  (Beam's GCS filesystem: google-cloud-storage, which honours
  ``$STORAGE_EMULATOR_HOST``), then one job is created:
  ``client.batches.create(model=, src="gs://.../input.jsonl", config={"display_name",
  "dest": "gs://.../output"})`` (``POST v1/projects/{p}/locations/{l}/batchPredictionJobs``
  ``{"displayName", "model": "publishers/google/models/...", "inputConfig":
  {"instancesFormat": "jsonl", "gcsSource": {"uris"}}, "outputConfig":
  {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix"}}}``).
- States: ``JOB_STATE_QUEUED | PENDING | RUNNING | SUCCEEDED | FAILED | CANCELLING |
  CANCELLED | EXPIRED | PARTIALLY_SUCCEEDED | PAUSED | UPDATING``.
- Results: the job's ``outputInfo.gcsOutputDirectory`` (a folder under the output
  prefix) holds ``predictions*.jsonl``: one line per request, the request echoed, and
  ``response`` (a ``GenerateContentResponse``) or an error text in ``status``
  (:func:`~mmirage_beam.providers.vertex.outcomes.normalise_prediction_line`).

Exactly-once creation: every job's ``display_name`` is ``mmirage-<run_id>-<chunk_id>``
(the Gemini adapter's :func:`~mmirage_beam.providers.gemini.adapter.display_name`); a
retried create, and a resumed run whose create answer was lost, first lists the jobs
with the filter ``display_name="..."`` (:meth:`VertexBatchAdapter.find_batch`) and adopts
the one found instead of creating a second. The input file is written once per chunk and
reused by every create attempt.

Credentials: Application Default Credentials, as the SDK finds them. Only for a fake
(or a short test), ``$VERTEX_ACCESS_TOKEN`` gives a bare OAuth access token
(``google.oauth2.credentials.Credentials(token=...)``), never refreshed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Iterator,
    Mapping,
    Optional,
    Sequence,
    TypedDict,
    Union,
)

from mmirage_beam.errors import CredentialsError
from mmirage_beam.providers.anthropic.adapter import ClaudePlatformBody, message_params
from mmirage_beam.providers.anthropic.tokens import count_anthropic_request
from mmirage_beam.providers.base import RequestLine
from mmirage_beam.providers.batch_status import BatchFields, FoundBatch, SubmittedBatch
from mmirage_beam.providers.batch_status import optional_int as _optional_int
from mmirage_beam.providers.gemini.adapter import (
    GeminiBatchAdapter,
    GenaiJobsAdapter,
    display_name,
    import_sdk,
    job_dict,
    newest_named_job,
)
from mmirage_beam.providers.gemini.requests import (
    GeminiGenerateContentRequest,
    generate_content_request,
)
from mmirage_beam.providers.gemini.tokens import count_gemini_request
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.providers.vertex import embeddings
from mmirage_beam.providers.vertex.config import VertexBatchConfig
from mmirage_beam.providers.vertex.outcomes import (
    ID_LABEL,
    ID_PART_LABEL,
    id_labels,
    normalise_prediction_line,
)
from mmirage_beam.records import ProviderResult
from mmirage_beam.results import EMBEDDING, results_from_lines

__all__ = [
    "ANTHROPIC_VERSION",
    "TOKEN_ENV_VAR",
    "VertexBatchAdapter",
    "VertexBatchLine",
    "VertexClaudeBody",
    "VertexExactCounter",
    "vertex_client",
    "input_uri",
    "is_claude",
    "job_model",
    "output_prefix",
]

_LOG = logging.getLogger(__name__)


#: A Claude request on Vertex AI: the Anthropic Messages ``params`` without ``model``,
#: with ``anthropic_version`` first (Vertex AI, "Batch predictions with Anthropic Claude
#: models"): the Claude platform body.
VertexClaudeBody = ClaudePlatformBody


class VertexBatchLine(TypedDict, total=False):
    """One line of a Vertex AI batch prediction input file: ``{"request":
    GenerateContentRequest}`` with the custom_id in its ``labels`` (Gemini), or
    ``{"custom_id", "request"}`` (Claude)."""

    custom_id: str
    request: Union[GeminiGenerateContentRequest, VertexClaudeBody]


#: a bare OAuth access token for a fake (real use: Application Default Credentials)
TOKEN_ENV_VAR = "VERTEX_ACCESS_TOKEN"
#: bytes read at a time from a result file
_BLOCK = 1 << 20
#: Claude on Vertex AI: the ``anthropic_version`` of every request body (Vertex AI's
#: "Batch predictions with Anthropic Claude models" input example)
ANTHROPIC_VERSION = "vertex-2023-10-16"
#: Claude on Vertex AI needs ``max_tokens``; the ``anthropic`` provider's default
CLAUDE_DEFAULT_MAX_TOKENS = 8192


def is_claude(model: str) -> bool:
    """Whether ``model`` is a Claude model on Vertex AI (``claude-...``,
    ``anthropic/claude-...`` or ``publishers/anthropic/models/...``)."""
    return model.startswith(("claude", "anthropic/", "publishers/anthropic/"))


def job_model(model: str) -> str:
    """The model a job names: a bare ``claude-...`` as ``publishers/anthropic/models/...``
    (the SDK would make it a Google publisher model); anything else as the SDK makes it."""
    return f"publishers/anthropic/models/{model}" if model.startswith("claude") else model


def vertex_client(config: VertexBatchConfig) -> Any:
    """``google.genai.Client(vertexai=True, project, location)`` of ``config``: its
    ``base_url``, ``api_version`` and ``timeout_seconds``; credentials from
    ``$VERTEX_ACCESS_TOKEN`` when set (a fake), else the SDK's Application Default
    Credentials.

    Raises:
        mmirage_beam.errors.ConfigError: google-genai is not installed (naming the extra).
    """
    genai = import_sdk()
    from google.genai import types

    options: Dict[str, Any] = {"api_version": config.api_version}
    if config.base_url:
        options["base_url"] = config.base_url
    if config.timeout_seconds:
        options["timeout"] = int(float(config.timeout_seconds) * 1000)  # milliseconds
    credentials = None
    token = os.environ.get(TOKEN_ENV_VAR, "").strip()
    if token:
        from google.oauth2.credentials import Credentials

        credentials = Credentials(token=token)
    return genai.Client(
        vertexai=True,
        project=config.project,
        location=config.location,
        credentials=credentials,
        http_options=types.HttpOptions(**options),
    )


class VertexExactCounter:
    """Exact input tokens of a Gemini line through Vertex AI's free ``countTokens``
    (``models.count_tokens``: ``POST .../publishers/google/models/{m}:countTokens`` with
    the request's ``contents`` and, as Vertex AI accepts it, its ``generation_config``).
    Built without a client (it is pickled with the DoFn); the client is opened on first
    use with :func:`vertex_client`."""

    def __init__(self, config: VertexBatchConfig) -> None:
        self.config = config
        self._client: Any = None

    def __reduce__(self) -> tuple[type, tuple[VertexBatchConfig]]:
        # pickled as its constructor's argument: never the client
        return (type(self), (self.config,))

    def __call__(self, request: Dict[str, Any]) -> int:
        if self._client is None:
            self._client = vertex_client(self.config)
        body = request.get("request") or {}
        generation = body.get("generation_config")
        extra = {"config": {"generation_config": generation}} if generation else {}
        answer = self._client.models.count_tokens(
            model=self.config.model, contents=body.get("contents"), **extra
        )
        return int(answer.total_tokens or 0)


def input_uri(config: VertexBatchConfig, run_id: Optional[str], chunk_id: str) -> str:
    """``<gcs_staging_uri>/<run_id>/<chunk_id>/input.jsonl``: a chunk's input file."""
    return f"{config.gcs_staging_uri}/{run_id or 'norun'}/{chunk_id}/input.jsonl"


def output_prefix(config: VertexBatchConfig, run_id: Optional[str], chunk_id: str) -> str:
    """``<gcs_staging_uri>/<run_id>/<chunk_id>/output``: a chunk's job output prefix."""
    return f"{config.gcs_staging_uri}/{run_id or 'norun'}/{chunk_id}/output"


class VertexBatchAdapter(GenaiJobsAdapter[VertexBatchConfig]):
    """``provider: vertex``: builds batch lines, stages them in Cloud Storage and drives
    Vertex AI batch prediction jobs.

    The client (``google.genai.Client(vertexai=True, project, location)``) is built in
    :meth:`setup`; the SDK retries nothing by default, so every call is retried by
    :meth:`call_with_retries`, and a retried create first adopts the job an earlier
    attempt may have made (:meth:`find_batch`).
    """

    #: the custom_id is encoded into labels (not a verbatim string value)
    verbatim_prompt: ClassVar[bool] = False
    #: Application Default Credentials: no key is read from the environment
    required_credentials: ClassVar[Sequence[str]] = ()
    chunk_overhead_bytes: ClassVar[int] = 0
    #: a retried create looks only at jobs created since its first attempt (no margin)
    FIND_BATCH_MARGIN_SECS: ClassVar[float] = 0.0
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100
    STATUS_MAP: ClassVar[Mapping[str, str]] = GeminiBatchAdapter.STATUS_MAP
    #: a job is named ``projects/.../batchPredictionJobs/<n>``, reads ``src.gcs_uri[0]``
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields(
        batch_id=("name",),
        status=("state",),
        created_at=("create_time",),
        input_file_id=("src", "gcs_uri", 0),
    )
    UPLOAD_CALL: ClassVar[str] = "Cloud Storage write"
    CREATE_CALL: ClassVar[str] = "Vertex AI batches.create"
    JOBS_SERVICE: ClassVar[str] = "Vertex AI"
    UPLOAD_IN_MEMORY: ClassVar[Callable[[bytes], Any]] = bytes

    @classmethod
    def check_dependencies(cls) -> None:
        """google-genai must be importable (the ``[gemini]`` extra)."""
        import_sdk()

    @classmethod
    def check_credentials(cls) -> None:
        """``$VERTEX_ACCESS_TOKEN``, else Google's Application Default Credentials
        (``google.auth.default()``: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
        application-default login, the metadata server). Without this check a run with
        none read its data, then retried Cloud Storage anonymously for minutes.

        Raises:
            mmirage_beam.errors.CredentialsError: none found, with how to give some.
        """
        if os.environ.get(TOKEN_ENV_VAR, "").strip():
            return
        try:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError
        except ImportError:  # google-auth comes with google-genai: check_dependencies
            return
        try:
            google.auth.default()
        except DefaultCredentialsError:
            raise CredentialsError(
                "provider 'vertex' uses Google's Application Default Credentials and "
                "found none: run 'gcloud auth application-default login', or set "
                "GOOGLE_APPLICATION_CREDENTIALS to a service account key file "
                f"(${TOKEN_ENV_VAR}: a bare OAuth access token, e.g. for the fake). "
                "('mmirage run --export-prompts P' is a dry run that needs none.)"
            ) from None

    def setup(self, config: VertexBatchConfig) -> None:
        self._client = vertex_client(config)

    def teardown(self) -> None:
        """Close the ``google.genai.Client`` (a failure to close ignored)."""
        self._close_client(quietly=True)

    is_retryable = GeminiBatchAdapter.is_retryable
    is_retryable_lookup = GeminiBatchAdapter.is_retryable_lookup
    #: ``google.genai.errors.APIError.code``: a 404 on a lookup is retried once, then final
    http_status = GeminiBatchAdapter.http_status

    # -- provider knowledge ---------------------------------------------------------------
    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """The Gemini adapter's labelled estimate
        (:func:`mmirage_beam.providers.gemini.tokens.count_gemini_request`); for Claude,
        the Anthropic adapter's
        (:func:`~mmirage_beam.providers.anthropic.tokens.count_anthropic_request`)."""
        if "custom_id" in request:
            body = request.get("request")
            return count_anthropic_request({"params": body}, model)
        if "request" not in request:  # a text embedding instance
            return embeddings.count_embedding_instance(request)
        return count_gemini_request(request, model)

    def exact_token_counter(self, config: VertexBatchConfig) -> Optional[VertexExactCounter]:
        """Gemini: Vertex AI's free ``countTokens`` (:class:`VertexExactCounter`); Claude:
        none, nor for embeddings jobs (the offline estimate is kept)."""
        if is_claude(config.model) or getattr(config, "embedding_job", False):
            return None
        return VertexExactCounter(config)

    # -- requests -------------------------------------------------------------------------
    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: VertexBatchConfig
    ) -> VertexBatchLine:
        """``{"request": {"labels", "contents", "generation_config"?}}``: the Gemini
        adapter's request, with the custom_id in ``labels``
        (:func:`~mmirage_beam.providers.vertex.outcomes.id_labels`); an embedding
        output's line is a text embedding instance ``{"mmirage_id", "content"}``
        (:func:`~mmirage_beam.providers.vertex.embeddings.embedding_instance`).

        Raises:
            mmirage_beam.errors.RequestBuildError: as the Gemini adapter's (an image by
                URL, of a refused type, or over 20 MB inline).
        """
        if payload.get("output_type") == EMBEDDING:  # a text embedding model's instance
            return embeddings.embedding_instance(custom_id, payload)
        if is_claude(config.model):
            return {"custom_id": custom_id, "request": self._claude_body(payload, config)}
        # the labels first: a result line cut short still names its row
        return {
            "request": {"labels": id_labels(custom_id), **generate_content_request(payload, config)}
        }

    def _claude_body(self, payload: Dict[str, Any], config: VertexBatchConfig) -> VertexClaudeBody:
        """Claude on Vertex AI: the Anthropic adapter's Messages ``params`` without
        ``model`` (the job names it) and with ``anthropic_version``; ``max_tokens``
        defaults to :data:`CLAUDE_DEFAULT_MAX_TOKENS`."""
        import types as _types

        settings = _types.SimpleNamespace(
            model=config.model,
            max_tokens=config.max_tokens or CLAUDE_DEFAULT_MAX_TOKENS,
            temperature=config.temperature,
            top_p=config.top_p,
        )
        params = message_params(payload, settings)
        params.pop("model")
        return {"anthropic_version": ANTHROPIC_VERSION, **params}  # type: ignore[typeddict-item]

    def request_without_id(self, request: Dict[str, Any]) -> RequestLine:
        """The line without the labels that carry its custom_id (Claude: without its
        ``custom_id``; an embedding instance: without its ``mmirage_id``)."""
        if "request" not in request and embeddings.ID_FIELD in request:
            return embeddings.instance_without_id(request)
        if "custom_id" in request:
            return {k: v for k, v in request.items() if k != "custom_id"}
        body = dict(request.get("request") or {})
        labels = {
            k: v
            for k, v in (body.get("labels") or {}).items()
            if k != ID_LABEL and not k.startswith(ID_PART_LABEL)
        }
        if labels:
            body["labels"] = labels
        else:
            body.pop("labels", None)
        return {**request, "request": body}

    # -- submission -----------------------------------------------------------------------
    def upload_file(self, chunk_id: str, content: Any, config: VertexBatchConfig) -> str:
        """Write the chunk's JSONL to :func:`input_uri` (bytes, or a binary file object
        copied in blocks) through Beam's file systems; returns that ``gs://`` URI."""
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        uri = input_uri(config, self.run_id, chunk_id)
        with FileSystems.create(uri, compression_type=CompressionTypes.UNCOMPRESSED) as out:
            if isinstance(content, (bytes, bytearray)):
                out.write(content)
            else:
                for block in iter(lambda: content.read(_BLOCK), b""):
                    out.write(block)
        return uri

    def create_batch(
        self, chunk_id: str, uploaded: Any, config: VertexBatchConfig
    ) -> SubmittedBatch:
        """``batches.create`` from the staged file, the job named :func:`display_name`
        (what :meth:`find_batch` looks for), its output under :func:`output_prefix`; an
        embeddings job adds ``instanceConfig`` and ``modelParameters`` to the body
        (:func:`~mmirage_beam.providers.vertex.embeddings.create_config`).

        Raises:
            google.genai.errors.APIError: a non-retryable answer (e.g. 400).
        """
        job_config: Dict[str, Any] = {
            "display_name": display_name(self.run_id, chunk_id),
            "dest": output_prefix(config, self.run_id, chunk_id),
        }
        if getattr(config, "embedding_job", False):  # keyField, outputDimensionality
            job_config = embeddings.create_config(
                job_config["display_name"], job_config["dest"], config.dimensions
            )
        job = self._client.batches.create(
            model=job_model(config.model), src=str(uploaded), config=job_config
        )
        submitted = self.submitted_batch(job_dict(job))
        return dataclasses.replace(
            submitted, input_file_id=submitted.input_file_id or str(uploaded)
        )

    adopts_by_metadata = True  # find_batch reads the job's display_name
    cancels_batches = True  # batches.cancel
    takes_embeddings = True  # text embedding batch prediction jobs (embeddings.py)
    counts_tokens_exactly = True  # countTokens (Gemini models; Claude: none)

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[FoundBatch]:
        """The newest job whose ``display_name`` is :func:`display_name` of ``run_id``
        and ``chunk_id``, or None.

        Lists the jobs with the filter ``display_name="..."`` (``GET
        .../batchPredictionJobs?filter=``, ``FIND_BATCH_PAGE_SIZE`` per page, every page);
        the name is compared again here. Each page is fetched with retries, so a lookup
        that cannot complete raises instead of answering "none".

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed
                after the last attempt.
        """
        wanted = display_name(run_id, chunk_id)
        what = f"Vertex AI batches.list (looking for run {run_id} chunk {chunk_id})"
        list_config = {"page_size": self.FIND_BATCH_PAGE_SIZE, "filter": f'display_name="{wanted}"'}
        pager = self.call_with_retries(what, lambda: self._client.batches.list(config=list_config))
        return newest_named_job(self, what, pager, wanted, job_dict)

    # -- status: GenaiJobsAdapter's (_get_job, check_batch_status, cancel_batch, describe) --
    def job_counts(self, raw: Mapping[str, Any]) -> Dict[str, Optional[int]]:
        """``completion_stats``: successful, failed; the total with the incomplete."""
        stats = raw.get("completion_stats") or {}
        ok = _optional_int(stats.get("successful_count"))
        failed = _optional_int(stats.get("failed_count"))
        incomplete = _optional_int(stats.get("incomplete_count"))
        total = None
        if ok is not None or failed is not None:
            total = (ok or 0) + (failed or 0) + (incomplete or 0)
        return {"completed": ok, "failed": failed, "total": total}

    # -- results --------------------------------------------------------------------------
    def prediction_files(self, provider_batch_id: str) -> list[str]:
        """The job's ``predictions*.jsonl`` files, sorted: under
        ``output_info.gcs_output_directory`` (none yet: ``[]``)."""
        from mmirage_beam.io.fs import list_files

        job = self._get_job(provider_batch_id)
        info = job.output_info
        folder = getattr(info, "gcs_output_directory", None) if info is not None else None
        if not folder:
            return []
        return list_files(folder, "predictions*.jsonl")

    def retrieve_results(
        self, provider_batch_id: str, config: VertexBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream every ``predictions*.jsonl`` file of the job (Beam's file systems), one
        result per line (:func:`~mmirage_beam.providers.vertex.outcomes.normalise_prediction_line`);
        a damaged line is a ``malformed_response`` for its custom_id when the plain
        ``mmirage_id`` label can be read from its bytes, else an unknown line. A failed
        read is retried from the start of that file; lines already yielded are skipped.
        """
        from apache_beam.io.filesystems import FileSystems

        for path in self.prediction_files(provider_batch_id):

            @contextlib.contextmanager
            def open_stream(path: str = path) -> Iterator[Iterator[bytes]]:
                with FileSystems.open(path, compression_type="uncompressed") as f:
                    yield iter(lambda: f.read(_BLOCK), b"")

            lines = self.stream_lines_with_retries(
                f"Cloud Storage read ({path} of {provider_batch_id})",
                open_stream,
                self.is_retryable_lookup,
            )
            yield from results_from_lines(
                lines,
                normalise_prediction_line,
                f"predictions file {path} of batch {provider_batch_id}",
                id_key=_id_key(config),
            )


def _id_key(config: VertexBatchConfig) -> str:
    """The field a damaged predictions line's custom_id is read from."""
    if getattr(config, "embedding_job", False):
        return "key"  # instanceConfig.keyField's output field
    return "custom_id" if is_claude(config.model) else ID_LABEL
