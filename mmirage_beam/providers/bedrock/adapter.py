"""The Bedrock batch inference adapter: records, S3 staging, job creation, status,
results.

Contract facts (botocore's ``bedrock`` service model 2023-04-20, boto3
``client("bedrock")``; "Process multiple prompts with batch inference",
https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference.html):

- a chunk's records ``{"recordId", "modelInput"}`` are written to
  ``<s3_staging_uri>/<run_id>/<chunk_id>.jsonl`` (``s3.put_object``), then one job is
  created with ``create_model_invocation_job(jobName, roleArn, clientRequestToken,
  modelId, inputDataConfig.s3InputDataConfig.s3Uri = that file, outputDataConfig.
  s3OutputDataConfig.s3Uri = <s3_staging_uri>/<run_id>/output/,
  timeoutDurationInHours)``, which answers ``{jobArn}``;
- ``get_model_invocation_job(jobIdentifier=jobArn)`` gives ``status`` (``Submitted |
  Validating | Scheduled | InProgress | Stopping`` running; ``Completed |
  PartiallyCompleted`` ended with results; ``Failed | Stopped | Expired`` failed, the
  last two with partial results), the record counts and ``message``;
- results are ``<output s3Uri>/<jobId>/<input file name>.out`` (one line per record,
  :mod:`.outcomes`) and ``manifest.json.out`` (``totalRecordCount``,
  ``processedRecordCount``, ``successRecordCount``, ``errorRecordCount``,
  ``inputTokenCount``, ``outputTokenCount``), "View the results of a batch inference
  job" (https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-results.html).

Exactly-once creation: the client is built with botocore's retries off
(``total_max_attempts=1``); every call goes through
:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.call_with_retries`. Every
attempt at a chunk's create sends the same ``clientRequestToken``
(:func:`~.requests.client_request_token` of the run and the chunk): "If this token
matches a previous request, Amazon Bedrock ignores the request, but does not return an
error" (``CreateModelInvocationJobRequest.clientRequestToken``, botocore's model), so a
retried create answers the job the first attempt made. A crash between the create and
its receipt is recovered by :meth:`BedrockBatchAdapter.find_batch`, which lists the jobs
by their name (``mmirage-<run>-<chunk>``, :func:`~.requests.job_name`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
from typing import Any, ClassVar, Dict, Iterator, List, Mapping, Optional, Sequence, TypedDict

from mmirage_beam.errors import ConfigError, CredentialsError
from mmirage_beam.jsonl import RawLine
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionAdapter, RequestLine
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.batch_status import (
    BatchFields,
    FoundBatch,
    JSONObject,
    SubmittedBatch,
    whole_count,
)
from mmirage_beam.providers.batch_status import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.bedrock.config import LIMITS_SOURCE, BedrockBatchConfig
from mmirage_beam.providers.bedrock.outcomes import normalise_result_line
from mmirage_beam.providers.bedrock.requests import (
    PAD_PREFIX,
    BedrockRecord,
    client_request_token,
    custom_id_of,
    job_name,
    model_input,
    pad_record_id,
    record_id,
)
from mmirage_beam.providers.bedrock.tokens import count_bedrock_request
from mmirage_beam.providers.chunk_files import iter_chunk_lines
from mmirage_beam.providers.retrying import transport_errors
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import results_from_lines

_LOG = logging.getLogger(__name__)

EXTRA = "bedrock"
#: Bedrock job states (``ModelInvocationJobStatus``), lower-cased -> the project's.
STATUS_MAP: Dict[str, str] = {
    "submitted": "in_progress",
    "validating": "in_progress",
    "scheduled": "in_progress",
    "inprogress": "in_progress",
    "stopping": "in_progress",
    "completed": "completed",
    "partiallycompleted": "completed",
    "failed": "failed",
    "stopped": "failed",
    "expired": "failed",
}
#: job states that end with records never run -> (their outcome type, why): both
#: retryable (:data:`mmirage_beam.results.RETRYABLE_ERROR_TYPES`).
NEVER_RAN: Dict[str, tuple[str, str]] = {
    "Expired": ("expired", "the job's timeout_hours passed before this record ran"),
    "Stopped": ("cancelled", "the job was stopped before this record ran"),
}
#: error codes of botocore ``ClientError`` worth another attempt (the model's
#: ``ThrottlingException`` and ``InternalServerException``, and S3's 5xx codes).
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "InternalServerException",
        "ServiceUnavailable",
        "SlowDown",
        "InternalError",
        "RequestTimeout",
    }
)
#: a lookup of a receipted job or its output: these mean "not there yet" and are retried.
NOT_FOUND_CODES = frozenset({"ResourceNotFoundException", "NoSuchKey", "404"})


class MissingExtraError(ConfigError):
    """boto3 is not installed (a ConfigError on ``provider``, exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("provider", message)


def import_boto3() -> Any:
    """``boto3``.

    Raises:
        MissingExtraError: naming ``pip install 'mmirage-beam[bedrock]'``.
    """
    try:
        import boto3
    except ImportError:
        raise MissingExtraError(
            "provider 'bedrock' needs boto3: pip install 'mmirage-beam[bedrock]'"
        ) from None
    return boto3


def _client_error_code(exc: BaseException) -> tuple[Optional[str], Optional[int]]:
    """(``Error.Code``, HTTP status) of a botocore ``ClientError``, else (None, None)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return None, None
    code = (response.get("Error") or {}).get("Code")
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return (str(code) if code is not None else None), (status if isinstance(status, int) else None)


def _jsonable(value: Any) -> Any:
    """A boto3 answer as JSON: datetimes as ISO 8601 strings, ``ResponseMetadata`` out."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.isoformat()
    return value


def job_id_of(job_arn: str) -> str:
    """The 12-character job id at the end of a job ARN (``.../model-invocation-job/<id>``)."""
    return job_arn.rsplit("/", 1)[-1]


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


class CreateJobParams(TypedDict, total=False):
    """The ``CreateModelInvocationJob`` parameters (boto3 ``bedrock``
    ``create_model_invocation_job``), in the order they are built."""

    jobName: str
    roleArn: str
    clientRequestToken: str
    modelId: str
    inputDataConfig: Dict[str, Dict[str, str]]
    outputDataConfig: Dict[str, Dict[str, str]]
    timeoutDurationInHours: int
    tags: List[Dict[str, str]]


class BedrockBatchAdapter(BatchSubmissionAdapter[BedrockBatchConfig]):
    """``provider: bedrock``: builds records and drives Bedrock batch inference (boto3).

    Two clients are built in :meth:`setup` from boto3's default session (its credential
    chain and region), with the config's ``region``, ``endpoint_url`` (bedrock) and
    ``s3_endpoint_url`` (s3), botocore's retries off and ``timeout_seconds`` as the
    connect and read timeouts.
    """

    #: credentials come from boto3's own chain (environment, profile, instance role)
    required_credentials: ClassVar[Sequence[str]] = ()
    chunk_overhead_bytes: ClassVar[int] = 0
    STATUS_MAP: ClassVar[Mapping[str, str]] = STATUS_MAP
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields(
        batch_id=("jobArn",),
        status=("status",),
        created_at=("submitTime",),
        input_file_id=("inputDataConfig", "s3InputDataConfig", "s3Uri"),
    )
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100
    #: find_batch finds a chunk's job by its name (a resumed run); a retried create
    #: needs no lookup: it replays the chunk's clientRequestToken (adopt_lost_create)
    adopts_by_metadata: ClassVar[bool] = True
    cancels_batches: ClassVar[bool] = True  # StopModelInvocationJob
    #: botocore's connection errors, set in setup (before it: the builtins')
    _connection_errors: tuple[type[BaseException], ...] = ()

    @classmethod
    def check_dependencies(cls) -> None:
        """Raises :class:`MissingExtraError` when boto3 is missing."""
        import_boto3()

    @classmethod
    def check_credentials(cls) -> None:
        """boto3's credential chain finds some (environment, shared files, SSO, the
        instance or task role).

        Raises:
            mmirage_beam.errors.CredentialsError: it finds none, with where to put them.
        """
        boto3 = import_boto3()
        if boto3.session.Session().get_credentials() is None:
            raise CredentialsError(
                "provider 'bedrock' uses boto3's credential chain and found no "
                "credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                "AWS_PROFILE, an SSO login, an instance or task role). ('mmirage run "
                "--export-prompts P' is a dry run that needs none.)"
            )

    def setup(self, config: BedrockBatchConfig) -> None:
        boto3 = import_boto3()
        from botocore.config import Config

        options: Dict[str, Any] = {"retries": {"total_max_attempts": 1}}
        if config.timeout_seconds:
            options["connect_timeout"] = options["read_timeout"] = float(config.timeout_seconds)
        session = boto3.session.Session()
        common = {"region_name": config.region, "config": Config(**options)}
        self._client = session.client("bedrock", endpoint_url=config.endpoint_url, **common)
        self._s3 = session.client("s3", endpoint_url=config.s3_endpoint_url, **common)
        from botocore.exceptions import HTTPClientError

        self._connection_errors = (HTTPClientError, *transport_errors())

    def teardown(self) -> None:
        """Close both clients (a failure to close ignored)."""
        for name in ("_client", "_s3"):
            client = getattr(self, name, None)
            with contextlib.suppress(Exception):
                if client is not None:
                    client.close()
            setattr(self, name, None)

    def is_retryable(self, exc: BaseException) -> bool:
        """Connection errors, ``ThrottlingException``, ``InternalServerException``, 429
        and 5xx answers."""
        code, status = _client_error_code(exc)
        if code is not None:
            return code in RETRYABLE_CODES or status == 429 or (status or 0) >= 500
        return isinstance(exc, self._connection_errors or transport_errors())

    def http_status(self, exc: BaseException) -> Optional[int]:
        """The HTTP status of a botocore ``ClientError`` (``ResponseMetadata``), so a 404
        on a lookup is retried once and then final, as for every provider
        (:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.lookup_retry_filter`)."""
        _code, status = _client_error_code(exc)
        return status if status is not None else super().http_status(exc)

    def is_retryable_lookup(self, exc: BaseException) -> bool:
        """:meth:`is_retryable`, plus not-found answers (a receipted job exists)."""
        code, status = _client_error_code(exc)
        return self.is_retryable(exc) or code in NOT_FOUND_CODES or status == 404

    # -- requests ---------------------------------------------------------------------
    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: BedrockBatchConfig
    ) -> BedrockRecord:
        """One record ``{"recordId", "modelInput"}``: the escaped custom_id
        (:func:`~.requests.record_id`) and the model family's ``InvokeModel`` body
        (:func:`~.requests.model_input`).

        Raises:
            mmirage_beam.errors.RequestBuildError: a row the model cannot take.
        """
        return {"recordId": record_id(custom_id), "modelInput": model_input(payload, config)}

    def request_without_id(self, request: Dict[str, Any]) -> RequestLine:
        """The record without its ``recordId``."""
        return {k: v for k, v in request.items() if k != "recordId"}

    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """A labelled estimate (:mod:`~mmirage_beam.providers.bedrock.tokens`)."""
        return count_bedrock_request(request, model)

    # -- submission -------------------------------------------------------------------
    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: BedrockBatchConfig
    ) -> SubmittedBatch:
        """:meth:`submit_chunk_lines` of the records' lines."""
        return self.submit_chunk_lines(
            chunk_id, [self.serialize_request(r) for r in requests], config
        )

    def submit_chunk_file(
        self, chunk_id: str, path: str, config: BedrockBatchConfig
    ) -> SubmittedBatch:
        """:meth:`submit_chunk_lines` of the staged file's lines."""
        return self.submit_chunk_lines(chunk_id, list(iter_chunk_lines(path)), config)

    def small_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: BedrockBatchConfig
    ) -> list[bytes]:
        """``lines`` made acceptable to Bedrock's minimum records per job: as they are
        when there are enough; padded with copies of the first record under
        :func:`~.requests.pad_record_id` ids (``small_chunk_policy: pad``).

        Raises:
            ConfigError: on ``small_chunk_policy``, for ``refuse`` (nothing uploaded).
        """
        lines = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in lines]
        minimum = int(config.min_records_per_job)
        if len(lines) >= minimum or not lines:
            return lines
        if config.small_chunk_policy == "refuse":
            raise ConfigError(
                "small_chunk_policy",
                f"chunk {chunk_id} holds {len(lines)} records, below Bedrock's minimum of "
                f"{minimum} per batch inference job ({LIMITS_SOURCE}); nothing was uploaded "
                "for it. Merge it with another chunk (a larger max_requests_per_chunk, or "
                "fewer outputs) or set small_chunk_policy: pad",
            )
        first = json.loads(lines[0])
        pads = [
            self.serialize_request(
                {"recordId": pad_record_id(i), "modelInput": first["modelInput"]}
            )
            for i in range(1, minimum - len(lines) + 1)
        ]
        _LOG.warning(
            "Bedrock chunk %s holds %d records, below the minimum of %d per job: padded with "
            "%d copies of its first record, whose results are dropped (billed as requests)",
            chunk_id,
            len(lines),
            minimum,
            len(pads),
        )
        return lines + pads

    def input_uri(self, chunk_id: str, config: BedrockBatchConfig) -> str:
        """``<s3_staging_uri>/<run_id>/<chunk_id>.jsonl``."""
        bucket, prefix = config.staging_prefix
        key = "/".join(p for p in (prefix, self.run_id or "norun", f"{chunk_id}.jsonl") if p)
        return f"s3://{bucket}/{key}"

    def output_uri(self, config: BedrockBatchConfig) -> str:
        """``<s3_staging_uri>/<run_id>/output/``."""
        bucket, prefix = config.staging_prefix
        key = "/".join(p for p in (prefix, self.run_id or "norun", "output") if p)
        return f"s3://{bucket}/{key}/"

    def create_request(self, chunk_id: str, config: BedrockBatchConfig) -> CreateJobParams:
        """The ``CreateModelInvocationJob`` parameters of chunk ``chunk_id`` (the same for
        every attempt: the token and the name come from the run and the chunk)."""
        params: CreateJobParams = {
            "jobName": job_name(self.run_id, chunk_id),
            "roleArn": config.role_arn,
            "clientRequestToken": client_request_token(self.run_id, chunk_id),
            "modelId": config.model,
            "inputDataConfig": {
                "s3InputDataConfig": {
                    "s3Uri": self.input_uri(chunk_id, config),
                    "s3InputFormat": "JSONL",
                }
            },
            "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": self.output_uri(config)}},
            "timeoutDurationInHours": int(config.timeout_hours),
        }
        if config.tags:
            params["tags"] = [{"key": k, "value": v} for k, v in sorted(config.tags.items())]
        return params

    def submit_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: BedrockBatchConfig
    ) -> SubmittedBatch:
        """Write the records to S3 (padded or refused below the minimum:
        :meth:`small_chunk_lines`), then create the job with this chunk's
        ``clientRequestToken``.

        Raises:
            ConfigError: a chunk below the minimum with ``small_chunk_policy: refuse``.
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the upload or the
                create still failed after the last attempt.
            botocore.exceptions.ClientError: a non-retryable answer (e.g. a
                ``ValidationException``), at once.
        """
        data = b"".join(self.small_chunk_lines(chunk_id, lines, config))
        bucket, key = _split_s3(self.input_uri(chunk_id, config))
        self.call_with_retries(
            f"S3 put_object (chunk {chunk_id}, s3://{bucket}/{key})",
            lambda: self._s3.put_object(
                Bucket=bucket, Key=key, Body=data, ContentType="application/jsonl"
            ),
        )
        params = self.create_request(chunk_id, config)

        def create() -> SubmittedBatch:
            answer = self._client.create_model_invocation_job(**params)
            return self.submitted_batch(self._get_job(answer["jobArn"]))

        return self.create_once(
            f"Bedrock create_model_invocation_job (chunk {chunk_id})",
            chunk_id,
            create,
            request_count=len(lines),
        )

    def adopt_lost_create(
        self,
        what: str,
        chunk_id: str,
        first_attempt_at: float,
        request_count: Optional[int] = None,
    ) -> Optional[SubmittedBatch]:
        """None: a retried create needs no lookup, it sends the same
        ``clientRequestToken`` and Bedrock answers the job the lost attempt made (no
        listing, so no window where a list has not seen the job yet). :meth:`find_batch`
        is still what a resumed run uses for a chunk whose receipt a crash lost."""
        return None

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[FoundBatch]:
        """The job named :func:`~.requests.job_name` of ``run_id`` and ``chunk_id``, or
        None: ``list_model_invocation_jobs(nameContains=<name>, submitTimeAfter=...)``
        page by page, the name checked exactly on our side.

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed.
        """
        name = job_name(run_id, chunk_id)
        kwargs: Dict[str, Any] = {
            "nameContains": name,
            "maxResults": self.FIND_BATCH_PAGE_SIZE,
            "sortBy": "CreationTime",
            "sortOrder": "Descending",
        }
        if created_after is not None:
            kwargs["submitTimeAfter"] = _dt.datetime.fromtimestamp(
                max(0.0, created_after), _dt.timezone.utc
            )
        token: Optional[str] = None
        while True:
            page_args = dict(kwargs, **({"nextToken": token} if token else {}))
            page = self.call_with_retries(
                f"Bedrock list_model_invocation_jobs (looking for {name})",
                lambda a=page_args: self._client.list_model_invocation_jobs(**a),
            )
            for job in page.get("invocationJobSummaries") or ():
                if job.get("jobName") == name:
                    return self.found_batch(_jsonable(job))
            token = page.get("nextToken")
            if not token:
                return None

    # -- status -----------------------------------------------------------------------
    def _get_job(self, job_arn: str) -> JSONObject:
        """``get_model_invocation_job`` of a receipted job (a not-found retried), as JSON."""
        job = self.call_lookup_with_retries(
            f"Bedrock get_model_invocation_job ({job_arn})",
            lambda: self._client.get_model_invocation_job(jobIdentifier=job_arn),
        )
        return _jsonable(job)

    def check_batch_status(self, provider_batch_id: str, config: BedrockBatchConfig) -> _Result:
        """``get_model_invocation_job``, its ``status`` normalised (:data:`STATUS_MAP`)."""
        return self.parse_submission_result(self._get_job(provider_batch_id))

    def cancel_batch(self, provider_batch_id: str, config: BedrockBatchConfig) -> _Result:
        """``stop_model_invocation_job``: the job goes through ``Stopping`` to ``Stopped``,
        keeping the records already processed."""
        self.call_with_retries(
            f"Bedrock stop_model_invocation_job ({provider_batch_id})",
            lambda: self._client.stop_model_invocation_job(jobIdentifier=provider_batch_id),
        )
        return self.check_batch_status(provider_batch_id, config)

    def describe_batch(self, result: _Result) -> _Progress:
        """``status``; done = ``successRecordCount``, failed = ``errorRecordCount`` (for a
        ``Stopped`` or ``Expired`` job, every record not answered), total =
        ``totalRecordCount``; ``message`` as detail."""
        raw = result.raw_response or {}
        status = str(raw.get("status") or result.status)
        codes = {"Failed": "batch_failed", "Expired": "expired", "Stopped": "cancelled"}
        done = whole_count(raw.get("successRecordCount"))
        failed = whole_count(raw.get("errorRecordCount"))
        total = whole_count(raw.get("totalRecordCount"))
        if status in NEVER_RAN and done is not None and total is not None:
            failed = total - done  # the records never run failed with the job
        return _Progress(
            provider_status=status,
            completed=done,
            failed=failed,
            total=total,
            created_at=_parse_timestamp(raw.get("submitTime")),
            detail=" ".join(str(raw.get("message") or "").split()),
            error_code=codes.get(status),
        )

    # -- results ----------------------------------------------------------------------
    def output_location(self, job: Mapping[str, Any]) -> tuple[str, str, str]:
        """``(bucket, key of the .out file, key of manifest.json.out)`` of a job."""
        out_uri = job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]
        in_uri = job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
        bucket, prefix = _split_s3(out_uri.rstrip("/") + "/")
        folder = f"{prefix}{job_id_of(job['jobArn'])}/"
        return bucket, folder + in_uri.rsplit("/", 1)[-1] + ".out", folder + "manifest.json.out"

    def retrieve_results(
        self, provider_batch_id: str, config: BedrockBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream the job's ``.out`` file from S3, one result per line, joined on
        ``recordId`` (turned back into the custom_id; padding records dropped), each line
        parsed on its own; then, for a ``Stopped`` or ``Expired`` job, an ``expired`` /
        ``cancelled`` error for every record that has no line (:data:`NEVER_RAN`). A
        ``Failed`` job that wrote no output yields nothing. The
        line count is checked against ``manifest.json.out`` (a mismatch is logged).
        Memory: one line."""
        job = self._get_job(provider_batch_id)
        bucket, key, manifest_key = self.output_location(job)
        ended_early = job.get("status") in ("Failed", "Stopped", "Expired")
        if ended_early and not self._exists(bucket, key):
            if job.get("status") in NEVER_RAN:  # stopped or expired before any output
                yield from self._never_ran(job, set())
            return
        lines = self._s3_lines(bucket, key, job_id=provider_batch_id)
        seen = 0
        answered: set[str] = set()
        for result in results_from_lines(
            lines, normalise_result_line, f"output s3://{bucket}/{key}", id_key="recordId"
        ):
            seen += 1
            rid = result.custom_id
            if rid is not None:
                answered.add(rid)
            if rid is not None and rid.startswith(PAD_PREFIX):
                continue
            cid = custom_id_of(rid) if rid is not None else None
            yield result._replace(custom_id=cid or rid)
        self._check_manifest(bucket, manifest_key, seen, provider_batch_id)
        if job.get("status") in NEVER_RAN:
            yield from self._never_ran(job, answered)

    def _never_ran(self, job: Mapping[str, Any], answered: set[str]) -> Iterator[ProviderResult]:
        """A ``Stopped`` or ``Expired`` job's records that have no output line: each an
        ``expired`` / ``cancelled`` error (retryable), read from the job's input file."""
        kind, why = NEVER_RAN[job["status"]]
        bucket, key = _split_s3(job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"])
        for line in self._s3_lines(bucket, key):
            if not line.data.strip():
                continue
            try:
                rid = json.loads(line.data).get("recordId")
            except (ValueError, AttributeError):
                continue
            if not isinstance(rid, str) or rid in answered or rid.startswith(PAD_PREFIX):
                continue
            yield ProviderResult(custom_id_of(rid) or rid, error=ResultError(kind, why))

    def _s3_lines(self, bucket: str, key: str, job_id: Optional[str] = None) -> Iterator[RawLine]:
        """The lines of the S3 object ``bucket``/``key``, streamed 64 KiB at a time with
        a lookup's retries (:meth:`stream_lines_with_retries`); ``job_id``, when given, is
        named in the call's logs and errors."""
        job = f", job {job_id}" if job_id is not None else ""

        @contextlib.contextmanager
        def open_stream() -> Iterator[Iterator[bytes]]:
            body = self._s3.get_object(Bucket=bucket, Key=key)["Body"]
            try:
                yield body.iter_chunks(1 << 16)
            finally:
                body.close()

        return self.stream_lines_with_retries(
            f"S3 get_object (s3://{bucket}/{key}{job})", open_stream, self.is_retryable_lookup
        )

    def _exists(self, bucket: str, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=bucket, Key=key)
        except Exception as exc:  # noqa: BLE001 - any failure: look no further
            code, status = _client_error_code(exc)
            if code in NOT_FOUND_CODES or status == 404:
                return False
            raise
        return True

    def read_manifest(self, bucket: str, key: str) -> Optional[Dict[str, Any]]:
        """``manifest.json.out`` as a dict, or None when it is missing."""
        try:
            body = self.call_with_retries(
                f"S3 get_object (s3://{bucket}/{key})",
                lambda: self._s3.get_object(Bucket=bucket, Key=key)["Body"].read(),
            )
        except Exception as exc:  # noqa: BLE001
            code, status = _client_error_code(exc)
            if code in NOT_FOUND_CODES or status == 404:
                return None
            raise
        return json.loads(body)

    def _check_manifest(self, bucket: str, key: str, seen: int, job_arn: str) -> None:
        manifest = self.read_manifest(bucket, key)
        if manifest is None:
            _LOG.warning("job %s: no manifest.json.out at s3://%s/%s", job_arn, bucket, key)
            return
        processed = manifest.get("processedRecordCount")
        if processed is not None and processed != seen:
            _LOG.warning(
                "job %s: manifest.json.out counts %s processed records, the output holds %d lines",
                job_arn,
                processed,
                seen,
            )
