"""The Mistral batch adapter: request lines, upload + job creation, status, results.

Contract facts (PROVIDERS.md; mistralai 3.7, ``Mistral.files`` and ``Mistral.batch.jobs``):
input lines are ``{"custom_id", "body": <chat-completion body without model>}``,
uploaded with ``files.upload(file=..., purpose="batch")`` (multipart ``file``,
``purpose``, ``visibility``); a job is ``batch.jobs.create(input_files=[id], model,
endpoint="/v1/chat/completions", metadata, timeout_hours)``; ``jobs.get``, ``jobs.list``
(``metadata`` filter: each pair a query parameter of its own) and ``jobs.cancel``;
``output_file`` and ``error_file`` are downloaded with ``files.download``.

Exactly-once creation: the client is built without the SDK's retries; every call goes
through :meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.call_with_retries`.
A create that reached Mistral but whose answer was lost may already have made the job,
so every job carries ``metadata = {mmirage_run_id, mmirage_chunk_id}`` and, before every
*retried* create, :meth:`MistralBatchAdapter.find_batch` lists the jobs of this run and
chunk (``jobs.list(metadata=..., created_after=...)``, confirmed on our side) and adopts
the one it finds. A resumed run does the same for every chunk left with an intent
(:mod:`mmirage_beam.run.resume`). The input file is uploaded once per chunk and reused by
every create attempt (a retried upload can leave an unused file: storage, no requests).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
from typing import Any, ClassVar, Dict, Iterator, Mapping, Optional, Sequence

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.batch_status import (
    BatchFields,
    FoundBatch,
    JSONObject,
    SubmittedBatch,
    whole_count,
)
from mmirage_beam.providers.batch_status import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.mistral.config import MistralBatchConfig
from mmirage_beam.providers.mistral.outcomes import normalise_result_line
from mmirage_beam.providers.mistral.requests import MistralBatchLine, chat_body, embeddings_body
from mmirage_beam.providers.mistral.tokens import count_mistral_request
from mmirage_beam.providers.retrying import make_retry_filter
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.providers.uploads import FileUploadAdapter
from mmirage_beam.records import ProviderResult
from mmirage_beam.results import EMBEDDING, results_from_lines

_LOG = logging.getLogger(__name__)

#: the ``pip`` extra that installs the SDK (setup.py).
EXTRA = "mistral"
#: Mistral job states (mistralai 3.7 ``BatchJobStatus``) -> the project's statuses.
#: ``TIMEOUT_EXCEEDED`` (the job's ``timeout_hours`` passed: partial results) and
#: ``CANCELLED`` are failed batches, as OpenAI's ``expired`` / ``cancelled`` are.
STATUS_MAP: Dict[str, str] = {
    "queued": "in_progress",
    "running": "in_progress",
    "cancellation_requested": "in_progress",
    "success": "completed",
    "failed": "failed",
    "timeout_exceeded": "failed",
    "cancelled": "failed",
}


class MissingExtraError(ConfigError):
    """The optional SDK is not installed (a ConfigError on ``provider``, exit 2); the
    message names the extra."""

    def __init__(self, message: str) -> None:
        super().__init__("provider", message)


def import_sdk() -> Any:
    """``mistralai.client`` (mistralai >= 3, where ``Mistral`` lives).

    Raises:
        MissingExtraError: mistralai is not installed (or is a 1.x/2.x release without
            ``mistralai.client``), naming ``pip install 'mmirage-beam[mistral]'``.
    """
    try:
        import mistralai.client as sdk
    except ImportError:
        raise MissingExtraError(
            "provider 'mistral' needs the mistralai SDK (>= 3.7): "
            "pip install 'mmirage-beam[mistral]'"
        ) from None
    return sdk


class MistralBatchAdapter(FileUploadAdapter[MistralBatchConfig]):
    """``provider: mistral``: builds batch lines and drives Mistral's batch API.

    The client (``mistralai.client.Mistral``) is built in :meth:`setup` with the key from
    ``MISTRAL_API_KEY``, the config's ``base_url`` as ``server_url`` and
    ``timeout_seconds``; the SDK retries nothing by itself (no ``retry_config``).
    """

    #: text requests hold the custom_id and prompt verbatim (build_request)
    verbatim_prompt: ClassVar[bool] = True

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    chunk_overhead_bytes: ClassVar[int] = 0  # the upload is exactly the JSONL lines
    STATUS_MAP: ClassVar[Mapping[str, str]] = STATUS_MAP
    #: a retried create looks at jobs created up to this long before its chunk's first
    #: create attempt (clock skew between us and the provider), in seconds.
    FIND_BATCH_MARGIN_SECS: ClassVar[float] = 300.0
    #: page size of the job listing.
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100
    #: a job reads its ``input_files`` (one here)
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields(input_file_id=("input_files", 0))
    UPLOAD_CALL: ClassVar[str] = "Mistral files.upload"
    CREATE_CALL: ClassVar[str] = "Mistral batch.jobs.create"

    @classmethod
    def check_dependencies(cls) -> None:
        """Raises :class:`MissingExtraError` when the SDK is missing (before any data is
        read; a dry run needs no SDK)."""
        import_sdk()

    def setup(self, config: MistralBatchConfig) -> None:
        sdk = import_sdk()
        import httpx2
        from mistralai.client import errors

        self._retry_filter = make_retry_filter(
            (errors.NoResponseError, httpx2.TransportError), (errors.MistralError,)
        )
        kwargs: Dict[str, Any] = {}
        if getattr(config, "timeout_seconds", None):
            kwargs["timeout_ms"] = int(float(config.timeout_seconds) * 1000)
        if getattr(config, "base_url", None):
            kwargs["server_url"] = config.base_url
        self._client = sdk.Mistral(api_key=self.credentials.get("api_key"), **kwargs)

    def teardown(self) -> None:
        """Close the ``Mistral`` client, as its ``with`` block would (a failure to
        close ignored)."""
        self._close_client(lambda client: client.__exit__(None, None, None), quietly=True)

    # -- requests ---------------------------------------------------------------------
    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: MistralBatchConfig
    ) -> MistralBatchLine:
        """One input line ``{"custom_id", "body"}``: the payload's messages (text, and
        image parts as ``image_url`` chunks, data URLs or http(s)), ``response_format``
        ``json_schema`` for a JSON output, and the config's optional ``max_tokens``,
        ``temperature`` and ``top_p``. The model is the job's (``jobs.create(model=)``),
        not repeated in every body. An embedding output's line holds an embeddings body
        (:func:`~mmirage_beam.providers.mistral.requests.embeddings_body`)."""
        if payload.get("output_type") == EMBEDDING:
            return {"custom_id": custom_id, "body": embeddings_body(payload)}
        return {"custom_id": custom_id, "body": chat_body(payload, config)}

    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """A labelled estimate (:mod:`mmirage_beam.providers.mistral.tokens`: no offline
        tokenizer for current Mistral models)."""
        return count_mistral_request(request, model)

    # -- submission -------------------------------------------------------------------
    def upload_file(self, chunk_id: str, content: Any, config: MistralBatchConfig) -> Any:
        """``files.upload`` of the JSONL input file, ``purpose="batch"``."""
        return self._client.files.upload(
            file={
                "file_name": f"{chunk_id}.jsonl",
                "content": content,
                "content_type": "application/jsonl",
            },
            purpose="batch",
        )

    def create_batch(
        self, chunk_id: str, uploaded: Any, config: MistralBatchConfig
    ) -> SubmittedBatch:
        """``batch.jobs.create`` from the uploaded file, with the run's and chunk's
        metadata (:meth:`batch_metadata`), which :meth:`find_batch` looks for.

        Raises:
            mistralai.client.errors.MistralError: a non-retryable answer (e.g. 400).
        """
        job = self._client.batch.jobs.create(
            input_files=[uploaded.id],
            model=config.model,
            endpoint=config.batch_endpoint,
            metadata=self.batch_metadata(chunk_id, config),
            timeout_hours=int(config.timeout_hours),
        )
        return self.submitted_batch(_dump(job))

    adopts_by_metadata = True  # find_batch reads the batch's mmirage metadata
    cancels_batches = True  # batch.jobs.cancel
    takes_embeddings = True  # /v1/embeddings lines

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[FoundBatch]:
        """The newest job whose metadata has ``mmirage_run_id == run_id`` and
        ``mmirage_chunk_id == chunk_id``, or None.

        Lists ``jobs.list(metadata={...}, created_after=..., order_by="-created")``
        page by page (``FIND_BATCH_PAGE_SIZE``) and checks the metadata of every job
        itself, so a server that ignored the filter still gives the right answer.
        Each page is fetched with retries: a lookup that cannot complete raises.

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed
                after the last attempt.
        """
        what = f"Mistral batch.jobs.list (looking for run {run_id} chunk {chunk_id})"
        kwargs: Dict[str, Any] = {
            "metadata": {"mmirage_run_id": run_id, "mmirage_chunk_id": chunk_id},
            "page_size": self.FIND_BATCH_PAGE_SIZE,
            "order_by": "-created",
        }
        if created_after is not None:
            kwargs["created_after"] = _dt.datetime.fromtimestamp(
                max(0.0, created_after), _dt.timezone.utc
            )
        page_no, seen = 0, 0
        while True:
            page = self.call_with_retries(
                what, lambda p=page_no: self._client.batch.jobs.list(page=p, **kwargs)
            )
            jobs = list(page.data or ())
            for job in jobs:
                if self.names_chunk(job.metadata, run_id, chunk_id):
                    return self.found_batch(_dump(job))
            seen += len(jobs)
            if not jobs or seen >= int(page.total or 0):
                return None
            page_no += 1

    # -- status -----------------------------------------------------------------------
    def _get_job(self, provider_batch_id: str) -> JSONObject:
        """``batch.jobs.get`` of a receipted job (a 404 retried too), as JSON."""
        job = self.call_lookup_with_retries(
            f"Mistral batch.jobs.get ({provider_batch_id})",
            lambda: self._client.batch.jobs.get(job_id=provider_batch_id),
        )
        return _dump(job)

    def check_batch_status(self, provider_batch_id: str, config: MistralBatchConfig) -> _Result:
        """``batch.jobs.get``, its ``status`` normalised (:data:`STATUS_MAP`)."""
        return self.parse_submission_result(self._get_job(provider_batch_id))

    def cancel_batch(self, provider_batch_id: str, config: MistralBatchConfig) -> _Result:
        """``batch.jobs.cancel``: the job goes through ``CANCELLATION_REQUESTED`` to
        ``CANCELLED`` (https://docs.mistral.ai/api/#tag/batch)."""
        job = self.call_with_retries(
            f"Mistral batch.jobs.cancel ({provider_batch_id})",
            lambda: self._client.batch.jobs.cancel(job_id=provider_batch_id),
        )
        return self.parse_submission_result(_dump(job))

    def describe_batch(self, result: _Result) -> _Progress:
        """``status``; done = ``succeeded_requests``, failed = ``failed_requests``,
        total = ``total_requests``; the job's ``errors[].message`` as detail."""
        raw = result.raw_response or {}
        errors = raw.get("errors") or []
        notes = []
        for err in errors:
            message = " ".join(str(err.get("message") or "").split())
            count = err.get("count")
            notes.append(f"{message} (x{count})" if count and count > 1 else message)
        status = str(raw.get("status") or result.status)
        failed_code = None
        if status == "FAILED":
            failed_code = "batch_failed"
        elif status == "TIMEOUT_EXCEEDED":
            failed_code = "timeout_exceeded"
        return _Progress(
            provider_status=status,
            completed=whole_count(raw.get("succeeded_requests")),
            failed=whole_count(raw.get("failed_requests")),
            total=whole_count(raw.get("total_requests")),
            created_at=_parse_timestamp(raw.get("created_at")),
            detail="; ".join(n for n in notes if n),
            error_code=failed_code,
        )

    # -- results ----------------------------------------------------------------------
    def retrieve_results(
        self, provider_batch_id: str, config: MistralBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream the job's ``output_file``, then its ``error_file`` (either may be
        absent), one neutral dict per line (:mod:`mmirage_beam.results`), each line
        parsed on its own: a damaged line is a ``malformed_response`` for its custom_id
        (or an unknown line), never the end of the download. Memory: one line."""
        raw = self._get_job(provider_batch_id)
        for kind in ("output_file", "error_file"):
            file_id = raw.get(kind)
            if not file_id:
                continue

            @contextlib.contextmanager
            def open_stream(fid: str = file_id) -> Iterator[Iterator[bytes]]:
                response = self._client.files.download(file_id=fid)
                try:
                    yield response.iter_bytes()
                finally:
                    response.close()

            lines = self.stream_lines_with_retries(
                f"Mistral files.download ({file_id} of {provider_batch_id})",
                open_stream,
                self.lookup_retry_filter(),
            )
            yield from results_from_lines(
                lines, normalise_result_line, f"{kind} {file_id} of job {provider_batch_id}"
            )


def _dump(model: Any) -> JSONObject:
    """An SDK model as the JSON the API sent (unset fields left out)."""
    return model.model_dump(mode="json", by_alias=True)
