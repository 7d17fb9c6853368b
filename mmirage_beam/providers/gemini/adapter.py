"""Gemini API batch mode adapter (google-genai SDK, file mode).

Contract facts (PROVIDERS.md, checked against google-genai 2.34 ``batches.py`` /
``files.py`` and the Gemini batch mode docs, https://ai.google.dev/gemini-api/docs/batch-mode):

- A chunk is a JSONL file of ``{"key": custom_id, "request": GenerateContentRequest}``
  lines, uploaded with ``client.files.upload`` (Google's resumable protocol:
  ``POST upload/v1beta/files`` with ``X-Goog-Upload-Command: start``, then ``upload,
  finalize`` to the returned ``X-Goog-Upload-URL``), then
  ``client.batches.create(model=, src="files/...", config={"display_name"})``
  (``POST v1beta/models/{model}:batchGenerateContent``). Text and images are parts
  (``text``, ``inline_data {mime_type, data}``); JSON outputs set
  ``generation_config.response_mime_type = "application/json"`` and
  ``response_schema`` (an OpenAPI-subset schema, converted from the JSON schema).
- States: ``JOB_STATE_PENDING | RUNNING | SUCCEEDED | FAILED | CANCELLED | EXPIRED``
  (REST ``BATCH_STATE_*``); a job pending or running for over 48 h expires.
- Results: ``client.files.download(file=job.dest.file_name)``, one line per request,
  ``{"key", "response": GenerateContentResponse}`` or ``{"key", "error": Status}``; text
  in ``candidates[0].content.parts[*].text``, ``finish_reason`` mapped (``MAX_TOKENS`` ->
  truncated; ``SAFETY``, ``PROHIBITED_CONTENT``, ``BLOCKLIST``, ``SPII`` and
  ``RECITATION`` -> content_filter, the message naming the reason), usage from
  ``usage_metadata.prompt_token_count`` / ``candidates_token_count``.

Small chunks go inline: a chunk of at most :data:`INLINE_MAX_BYTES` of request lines
(generate-content jobs only) is not uploaded; its requests are sent in the create call
itself (``batches.create(src=[InlinedRequest])``, each with ``metadata: {"key":
custom_id}``), saving the upload, and the answers are read from the job's
``dest.inlined_responses`` by that ``key`` (the docs promise request order, but
googleapis/python-genai#1909 reports otherwise, so the order is not relied on).

Exactly-once creation: "Creation of a batch job is not idempotent" (batch mode docs).
Every job's ``display_name`` is ``mmirage-<run_id>-<chunk_id>`` (:func:`display_name`),
and before every *retried* create the adapter lists the jobs
(:meth:`GeminiBatchAdapter.find_batch`) and adopts the one of this run and chunk instead
of creating a second; a resumed run does the same for every chunk whose submission was
interrupted (:mod:`mmirage_beam.run.resume`). The file is uploaded once per chunk and reused
by every create attempt.

Request parts are built by :mod:`~mmirage_beam.providers.gemini.requests`, result lines
read by :mod:`~mmirage_beam.providers.gemini.outcomes`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import tempfile
from typing import Any, Callable, ClassVar, Dict, Iterator, Mapping, Optional, Sequence

from mmirage_beam.errors import ConfigError
from mmirage_beam.jsonl import iter_raw_lines
from mmirage_beam.providers import retrying
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionAdapter, ConfigT, RequestLine
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.batch_status import BatchFields, FoundBatch, JSONObject, SubmittedBatch
from mmirage_beam.providers.batch_status import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.gemini.config import GeminiBatchConfig
from mmirage_beam.providers.gemini.outcomes import FINISH_OUTCOMES, normalise_result_line
from mmirage_beam.providers.gemini.requests import (
    ACCEPTED_IMAGE_TYPES,
    VISION_LIMITS_SOURCE,
    GeminiBatchLine,
    embed_request,
    generate_content_request,
    response_schema,
)
from mmirage_beam.providers.gemini.tokens import GeminiExactCounter, count_gemini_request
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.providers.uploads import FileUploadAdapter
from mmirage_beam.records import ProviderResult
from mmirage_beam.results import (
    EMBEDDING,
    results_from_lines,
)

__all__ = [
    "SDK_EXTRA",
    "ACCEPTED_IMAGE_TYPES",
    "VISION_LIMITS_SOURCE",
    "FINISH_OUTCOMES",
    "GenaiJobsAdapter",
    "display_name",
    "import_sdk",
    "GeminiBatchAdapter",
    "INLINE_MAX_BYTES",
    "InlineChunk",
    "inlined_request",
    "job_dict",
    "normalise_result_line",
    "response_schema",
]

_LOG = logging.getLogger(__name__)

#: the ``[gemini]`` extra: ``pip install 'mmirage-beam[gemini]'``.
SDK_EXTRA = "gemini"
#: a chunk of at most this many bytes of JSONL request lines (2 MB) is sent inline in the
#: create call instead of being uploaded; well under the batch mode guide's 20 MB for
#: inline requests (:data:`~mmirage_beam.providers.gemini.config.MAX_INLINE_BYTES`),
#: since every ``batches.get`` of an inline job carries all its answers.
INLINE_MAX_BYTES = 2_000_000


@dataclasses.dataclass(frozen=True)
class InlineChunk:
    """A chunk sent inline instead of uploaded: ``requests`` are google-genai
    ``InlinedRequest`` dicts (``{"contents", "config"?, "metadata": {"key"}}``)."""

    requests: tuple


def inlined_request(line: Mapping[str, Any]) -> Dict[str, Any]:
    """One request line ``{"key", "request": GenerateContentRequest}`` as google-genai's
    ``InlinedRequest``: ``contents``, the rest of the request (``generation_config``'s
    fields, ``system_instruction``, ``safety_settings``, ``tools``) as its
    ``GenerateContentConfig``, and ``metadata: {"key": key}``, which the job's
    ``InlinedResponse`` carries back."""
    request = dict(line["request"])
    contents = request.pop("contents")
    config: Dict[str, Any] = dict(request.pop("generation_config", None) or {})
    config.update(request)  # system_instruction, safety_settings, tools... as-is
    out: Dict[str, Any] = {"contents": contents, "metadata": {"key": str(line["key"])}}
    if config:
        out["config"] = config
    return out


def display_name(run_id: Optional[str], chunk_id: str) -> str:
    """The run-tagged ``display_name`` of a chunk's batch job, by which a lost create is
    found again (``mmirage-<run_id>-<chunk_id>``)."""
    return f"mmirage-{run_id or 'norun'}-{chunk_id}"


def import_sdk() -> Any:
    """``google.genai``, or a ConfigError naming the extra that installs it."""
    import importlib

    try:
        genai = importlib.import_module("google.genai")
    except ImportError:
        raise ConfigError(
            "provider",
            "provider 'gemini' needs the google-genai SDK: pip install "
            f"'mmirage-beam[{SDK_EXTRA}]'",
        ) from None
    return genai


class GenaiJobsAdapter(FileUploadAdapter[ConfigT]):
    """What the Gemini API's and Vertex AI's adapters do alike with a receipted
    google-genai batch job (``client.batches.get`` / ``cancel`` on the adapter's
    ``_client``): look it up, read its status, describe it, cancel it. Each adapter
    subclasses it with its config class; :attr:`JOBS_SERVICE` names the service in the
    calls' names (logs and errors)."""

    #: the service in the calls' names: ``"<JOBS_SERVICE> batches.get (<job>)"``
    JOBS_SERVICE: ClassVar[str] = "Gemini"
    #: the detail of an expired job whose ``error`` says nothing ("": none)
    EXPIRED_DETAIL: ClassVar[str] = ""

    def _get_job(self, provider_batch_id: str) -> Any:
        """``batches.get`` of a receipted job (a 404 retried too)."""
        return self.call_lookup_with_retries(
            f"{self.JOBS_SERVICE} batches.get ({provider_batch_id})",
            lambda: self._client.batches.get(name=provider_batch_id),
        )

    def check_batch_status(self, provider_batch_id: str, config: ConfigT) -> _Result:
        """``batches.get``, its ``state`` normalised."""
        return self.parse_submission_result(job_dict(self._get_job(provider_batch_id)))

    def cancel_batch(self, provider_batch_id: str, config: ConfigT) -> _Result:
        """``batches.cancel`` (it answers nothing), then ``batches.get``: the job ends
        ``JOB_STATE_CANCELLED`` (https://ai.google.dev/gemini-api/docs/batch-mode; on
        Vertex AI, ``POST .../batchPredictionJobs/{id}:cancel``, through
        ``JOB_STATE_CANCELLING``, keeping the predictions already written)."""
        self.call_with_retries(
            f"{self.JOBS_SERVICE} batches.cancel ({provider_batch_id})",
            lambda: self._client.batches.cancel(name=provider_batch_id),
        )
        return self.check_batch_status(provider_batch_id, config)

    def describe_batch(self, result: _Result) -> _Progress:
        """``state``, ``create_time``, the request counts of :meth:`job_counts`; a
        failed, expired or cancelled job's code (``batch_failed`` / ``batch_expired`` /
        ``batch_cancelled``) and its error (an expired job's, when it has none:
        :attr:`EXPIRED_DETAIL`)."""
        raw = result.raw_response or {}
        state = str(raw.get("state") or result.status)
        word = state.rsplit("_", 1)[-1].lower()
        error = raw.get("error") or {}
        detail = str(error.get("message") or "") if isinstance(error, dict) else str(error)
        code = None
        if word in ("failed", "expired", "cancelled"):
            code = f"batch_{word}"
            if word == "expired" and not detail:
                detail = self.EXPIRED_DETAIL
        return _Progress(
            provider_status=state,
            created_at=_parse_timestamp(raw.get("create_time")),
            detail=detail,
            error_code=code,
            **self.job_counts(raw),
        )

    def job_counts(self, raw: Mapping[str, Any]) -> Dict[str, Optional[int]]:
        """The ``completed`` / ``failed`` / ``total`` requests of a job's fields ``raw``
        (:class:`~mmirage_beam.providers.batch_status.BatchProgress` fields); {}: the
        service reports none (the Gemini API's ``BatchJob`` holds no counts)."""
        return {}


class GeminiBatchAdapter(GenaiJobsAdapter[GeminiBatchConfig]):
    """``provider: gemini``: builds batch lines and drives the Gemini batch API.

    The client (``google.genai.Client``) is built in :meth:`setup` with the key from
    ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``), the config's ``base_url`` and
    ``timeout_seconds``; the SDK retries nothing by default, so every call is retried by
    :meth:`call_with_retries`, and a retried create first adopts the job an earlier
    attempt may have made (:meth:`find_batch`).
    """

    #: text requests hold the custom_id and prompt verbatim (build_request)
    verbatim_prompt: ClassVar[bool] = True

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    #: ``GOOGLE_API_KEY`` is the SDK's own fallback (google-genai reads both).
    CREDENTIAL_FALLBACKS: ClassVar[Mapping[str, Sequence[str]]] = {"api_key": ("GOOGLE_API_KEY",)}
    chunk_overhead_bytes: ClassVar[int] = 0  # the upload is exactly the JSONL lines
    #: a retried create looks only at jobs created since its first attempt (no margin)
    FIND_BATCH_MARGIN_SECS: ClassVar[float] = 0.0
    STATUS_MAP: ClassVar[Mapping[str, str]] = {
        **{f"{p}_state_pending": "in_progress" for p in ("job", "batch")},
        **{f"{p}_state_running": "in_progress" for p in ("job", "batch")},
        **{f"{p}_state_succeeded": "completed" for p in ("job", "batch")},
        **{f"{p}_state_failed": "failed" for p in ("job", "batch")},
        **{f"{p}_state_cancelled": "failed" for p in ("job", "batch")},
        **{f"{p}_state_expired": "failed" for p in ("job", "batch")},
        "job_state_queued": "in_progress",
        "job_state_cancelling": "in_progress",
        "job_state_paused": "in_progress",
        "job_state_updating": "in_progress",
        "job_state_partially_succeeded": "completed",
    }
    #: page size of the job listing when looking for a lost create.
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100
    #: a job (``BatchJob``) is named ``batches/...``, its state is ``state``, it reads
    #: the file ``src.file_name``
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields(
        batch_id=("name",),
        status=("state",),
        created_at=("create_time",),
        input_file_id=("src", "file_name"),
    )
    #: Gemini batch mode docs: a job pending or running for 48 hours expires
    EXPIRED_DETAIL: ClassVar[str] = "the job was pending or running for more than 48 hours"
    UPLOAD_CALL: ClassVar[str] = "Gemini files.upload"
    CREATE_CALL: ClassVar[str] = "Gemini batches.create"
    #: the SDK's upload takes a file object
    UPLOAD_IN_MEMORY: ClassVar[Callable[[bytes], Any]] = io.BytesIO

    @classmethod
    def check_dependencies(cls) -> None:
        """google-genai must be importable (the ``[gemini]`` extra)."""
        import_sdk()

    def setup(self, config: GeminiBatchConfig) -> None:
        genai = import_sdk()
        from google.genai import types

        options: Dict[str, Any] = {}
        if getattr(config, "base_url", None):
            options["base_url"] = config.base_url
        if getattr(config, "timeout_seconds", None):
            options["timeout"] = int(float(config.timeout_seconds) * 1000)  # milliseconds
        self._client = genai.Client(
            api_key=self.credentials.get("api_key"), http_options=types.HttpOptions(**options)
        )

    def teardown(self) -> None:
        """Close the ``google.genai.Client`` (a failure to close ignored)."""
        self._close_client(quietly=True)

    def is_retryable(self, exc: BaseException) -> bool:
        """Connection errors and timeouts (httpx transport errors), and
        ``google.genai.errors.APIError`` with 408, 409, 429 or >= 500."""
        code = _error_code(exc)
        if code is not None:
            return code in retrying.RETRYABLE_STATUS_CODES or code >= 500
        import httpx

        return isinstance(exc, (httpx.TransportError, *retrying.transport_errors()))

    def http_status(self, exc: BaseException) -> Optional[int]:
        """``google.genai.errors.APIError.code`` (it has no ``status_code``)."""
        return _error_code(exc)

    def is_retryable_lookup(self, exc: BaseException) -> bool:
        """:meth:`is_retryable`, plus a 404 (a receipted job exists)."""
        return self.is_retryable(exc) or _error_code(exc) == 404

    # -- provider knowledge ---------------------------------------------------------------
    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """A labelled estimate
        (:func:`mmirage_beam.providers.gemini.tokens.count_gemini_request`)."""
        return count_gemini_request(request, model)

    def exact_token_counter(
        self, config: GeminiBatchConfig
    ) -> Optional[Callable[[Dict[str, Any]], int]]:
        """The free ``models.count_tokens`` endpoint
        (:class:`~mmirage_beam.providers.gemini.tokens.GeminiExactCounter`)."""
        return GeminiExactCounter(
            type(self), getattr(config, "model", None), getattr(config, "base_url", None)
        )

    # -- requests -------------------------------------------------------------------------
    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: GeminiBatchConfig
    ) -> GeminiBatchLine:
        """``{"key": custom_id, "request": {"contents": [{"role": "user", "parts"}],
        "generation_config"?}}``: the prompt text, then each image as ``inline_data``; an
        embedding output's line holds an embeddings request instead
        (:func:`~mmirage_beam.providers.gemini.requests.embed_request`).

        Raises:
            mmirage_beam.errors.RequestBuildError: an image given by URL, of a type
                Gemini refuses, or a request whose inline images pass 20 MB.
        """
        if payload.get("output_type") == EMBEDDING:
            return {"key": custom_id, "request": embed_request(payload)}
        return {"key": custom_id, "request": generate_content_request(payload, config)}

    # -- submission -----------------------------------------------------------------------
    def request_without_id(self, request: Dict[str, Any]) -> RequestLine:
        """The line without its ``key`` (Gemini's custom_id field)."""
        return {k: v for k, v in request.items() if k != "key"}

    def upload_file(self, chunk_id: str, content: Any, config: GeminiBatchConfig) -> Any:
        """``files.upload`` of the JSONL input file, named :func:`display_name`; a
        generate-content chunk of at most :data:`INLINE_MAX_BYTES` is not uploaded but
        returned as an :class:`InlineChunk` for :meth:`create_batch` to send inline.

        Raises:
            ValueError: an inline chunk's line is not a request line (the adapter's own
                lines always are).
        """
        if not getattr(config, "embedding_job", False):
            head = content.read(INLINE_MAX_BYTES + 1)
            if len(head) <= INLINE_MAX_BYTES:
                lines = [json.loads(raw) for raw in head.split(b"\n") if raw.strip()]
                return InlineChunk(tuple(inlined_request(line) for line in lines))
            content.seek(0)
        return self._client.files.upload(
            file=content,
            config={"mime_type": "jsonl", "display_name": display_name(self.run_id, chunk_id)},
        )

    def create_batch(
        self, chunk_id: str, uploaded: Any, config: GeminiBatchConfig
    ) -> SubmittedBatch:
        """``batches.create`` (``batches.create_embeddings`` for embedding outputs) from
        the uploaded file, the job named :func:`display_name` (what :meth:`find_batch`
        looks for).

        Raises:
            google.genai.errors.APIError: a non-retryable answer (e.g. 400).
        """
        job_config = {"display_name": display_name(self.run_id, chunk_id)}
        if isinstance(uploaded, InlineChunk):  # no file: the requests travel in the call
            job = self._client.batches.create(
                model=config.model, src=list(uploaded.requests), config=job_config
            )
            return self.submitted_batch(job_dict(job))
        if getattr(config, "embedding_job", False):  # models/{model}:asyncBatchEmbedContent
            job = self._client.batches.create_embeddings(
                model=config.model, src={"file_name": uploaded.name}, config=job_config
            )
        else:
            job = self._client.batches.create(
                model=config.model, src=uploaded.name, config=job_config
            )
        submitted = self.submitted_batch(job_dict(job))
        # the SDK's BatchJob of the Developer API leaves ``src`` out: the file is ours
        return dataclasses.replace(
            submitted, input_file_id=submitted.input_file_id or uploaded.name
        )

    adopts_by_metadata = True  # find_batch reads the batch's mmirage metadata
    cancels_batches = True  # batches.cancel
    counts_tokens_exactly = True  # models.count_tokens
    takes_embeddings = True  # asyncBatchEmbedContent jobs

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[FoundBatch]:
        """The newest job whose ``display_name`` is :func:`display_name` of ``run_id``
        and ``chunk_id``, or None.

        Lists every job (``GET v1beta/batches``, ``FIND_BATCH_PAGE_SIZE`` per page; the
        listing's order is not documented, so no page is skipped); ``created_after`` is
        not used to stop early. Each page is fetched with retries, so a lookup that
        cannot complete raises instead of answering "none".

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed
                after the last attempt.
        """
        wanted = display_name(run_id, chunk_id)
        what = f"Gemini batches.list (looking for run {run_id} chunk {chunk_id})"
        pager = self.call_with_retries(
            what, lambda: self._client.batches.list(config={"page_size": self.FIND_BATCH_PAGE_SIZE})
        )
        return newest_named_job(self, what, pager, wanted, job_dict)

    # -- status: GenaiJobsAdapter's (_get_job, check_batch_status, cancel_batch, describe) --
    # -- results --------------------------------------------------------------------------
    def retrieve_results(
        self, provider_batch_id: str, config: GeminiBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream the job's responses file (``dest.file_name``; absent for a job that
        ended without results), one neutral dict per line (:mod:`mmirage_beam.results`);
        an inline job's answers come from ``dest.inlined_responses`` instead, each named
        by the ``metadata.key`` its request carried (a missing key: an unknown line).

        The SDK's ``files.download`` writes the file into a temporary file (spooled to
        disk past 16 MiB), which is then split on ``\\n`` only, each line parsed on its
        own: a damaged line is a ``malformed_response`` for its key (or an unknown line).
        A failed download is retried from the start; lines already yielded are skipped.
        """
        dest = self._get_job(provider_batch_id).dest
        inlined = getattr(dest, "inlined_responses", None) if dest is not None else None
        if inlined:
            yield from results_from_lines(
                iter_raw_lines(_inlined_lines(inlined)),
                normalise_result_line,
                f"inlined responses of batch {provider_batch_id}",
                id_key="key",
            )
            return
        file_name = getattr(dest, "file_name", None) if dest is not None else None
        if not file_name:
            return

        @contextlib.contextmanager
        def open_stream() -> Iterator[Iterator[bytes]]:
            with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as buf:
                self._client.files.download(file=file_name, destination=buf)
                buf.seek(0)
                yield iter(lambda: buf.read(1024 * 1024), b"")

        lines = self.stream_lines_with_retries(
            f"Gemini files.download ({file_name} of {provider_batch_id})",
            open_stream,
            self.lookup_retry_filter(),
        )
        yield from results_from_lines(
            lines,
            normalise_result_line,
            f"responses file {file_name} of batch {provider_batch_id}",
            id_key="key",
        )


def _inlined_lines(inlined: Sequence[Any]) -> Iterator[bytes]:
    """google-genai ``InlinedResponse`` objects as responses-file lines (``{"key",
    "response" | "error"}``, the key from the ``metadata`` the request carried)."""
    for answer in inlined:
        dumped = answer.model_dump(mode="json", exclude_none=True)
        line: Dict[str, Any] = {"key": (dumped.get("metadata") or {}).get("key")}
        for field in ("response", "error"):
            if field in dumped:
                line[field] = dumped[field]
        yield json.dumps(line).encode("utf-8") + b"\n"


def _error_code(exc: BaseException) -> Optional[int]:
    try:
        from google.genai import errors
    except ImportError:  # pragma: no cover - without the SDK nothing raises its errors
        return None
    if isinstance(exc, errors.APIError) and isinstance(exc.code, int):
        return exc.code
    return None


def newest_named_job(
    adapter: BatchSubmissionAdapter, what: str, pager: Any, wanted: str, as_dict: Any
) -> Optional[FoundBatch]:
    """The newest job named ``wanted`` (its ``display_name``) over every page of a
    google-genai ``batches.list`` pager, as the adapter's :class:`FoundBatch`
    (``as_dict(job)`` -> the job's fields); None: none. The next pages are fetched with
    the adapter's retries (``what`` names the call). Shared by the Gemini API and
    Vertex AI adapters, whose jobs google-genai lists alike.

    Raises:
        mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed
            after the last attempt.
    """
    best: Optional[FoundBatch] = None
    while True:
        for job in pager.page:
            if job.display_name == wanted:
                found = adapter.found_batch(as_dict(job))
                if best is None or (found.created_at or 0) > (best.created_at or 0):
                    best = found
        if not pager.page or not (pager.config or {}).get("page_token"):
            return best
        adapter.call_with_retries(what, pager.next_page)


def job_dict(job: Any) -> JSONObject:
    """A google-genai ``BatchJob`` as its JSON fields (None fields and the SDK's
    ``sdk_http_response`` left out)."""
    raw = job.model_dump(mode="json", exclude_none=True)
    raw.pop("sdk_http_response", None)
    return raw
