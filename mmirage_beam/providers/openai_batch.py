"""OpenAI Batch API adapter (Files + Batches, chat completions).

Contract facts (PROVIDERS.md, from openai-python and the OpenAI Batch guide): the input
file is JSONL of ``{custom_id, method: "POST", url, body}`` uploaded with
``purpose="batch"``; a batch is created with ``{input_file_id, endpoint,
completion_window: "24h", metadata}``; at most 50,000 requests and 200 MB per file;
images: PNG, JPEG, WEBP and non-animated GIF; results are split between
``output_file_id`` and ``error_file_id`` (either may be null or ``""``).

Retries and exactly-once creation: the client is built with the SDK's retries off
(``max_retries=0``); every call goes through
:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.call_with_retries` (408, 409,
429, >= 500 and connection errors, honouring ``retry-after-ms`` / ``retry-after``). The
SDK sends no idempotency key, so a create that reached OpenAI but answered an error (or
whose answer was lost) may already have made the batch. Each batch therefore carries
``metadata = {mmirage_run_id, mmirage_chunk_id}``, and before every *retried* create the
adapter lists recent batches (:meth:`OpenAIBatchAdapter.find_batch`) and adopts the one
of this run and chunk instead of creating a second. The input file is uploaded once per
chunk and reused by every create attempt (a retried *upload* can leave an unused file
behind: storage only, no requests).
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, ClassVar, Dict, Mapping, Optional, Sequence

from mmirage_beam.config.batch_provider import BatchProviderConfig
from mmirage_beam.errors import RequestBuildError
from mmirage_beam.providers.base import BatchAdapterRegistry, BatchSubmissionAdapter
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.base import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.retrying import make_retry_filter

_LOG = logging.getLogger(__name__)

ACCEPTED_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_SCHEMA_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")


class OpenAIBatchAdapter(BatchSubmissionAdapter):
    """``provider: openai``: builds chat-completion batch lines and drives the Batch API.

    The client (``openai.OpenAI``) is built in :meth:`setup` with the key from
    ``OPENAI_API_KEY``, the config's ``base_url`` and ``timeout_seconds`` (per call;
    default the SDK's 600 s) and the SDK's retries off: every call
    is retried by :meth:`call_with_retries`, and a retried create first adopts the batch
    an earlier attempt may have made (:meth:`find_batch`).
    """

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    chunk_overhead_bytes: ClassVar[int] = 0  # the upload is exactly the JSONL lines
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"expired": "failed", "cancelled": "failed"}
    #: a retried create looks at batches created up to this long before its chunk's
    #: first create attempt (covers clock skew between us and the provider), in seconds.
    FIND_BATCH_MARGIN_SECS: ClassVar[float] = 300.0
    #: page size of the batch listing (the API's maximum).
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100

    def setup(self, config: BatchProviderConfig) -> None:
        import openai

        self._retry_filter = make_retry_filter(
            (openai.APIConnectionError,), (openai.APIStatusError,)
        )
        kwargs: Dict[str, Any] = {}
        if getattr(config, "timeout_seconds", None):
            # A timed-out create is an APITimeoutError (an APIConnectionError): retried,
            # and the retry first adopts the batch if the provider made it (find_batch).
            kwargs["timeout"] = float(config.timeout_seconds)
        self._client = openai.OpenAI(
            api_key=self.credentials.get("api_key"),
            base_url=getattr(config, "base_url", None) or None,
            max_retries=0,  # every retry goes through call_with_retries (and adoption)
            **kwargs,
        )

    def is_retryable(self, exc: BaseException) -> bool:
        """Connection errors and timeouts (``openai.APIConnectionError``), and
        ``openai.APIStatusError`` with 408, 409, 429 or >= 500."""
        retry_filter = getattr(self, "_retry_filter", None)
        return retry_filter(exc) if retry_filter is not None else super().is_retryable(exc)

    def teardown(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        for img in payload.get("images", ()):
            if img.get("data") is None:
                continue  # an http(s) URL: fetched by the provider
            if img["media_type"] not in ACCEPTED_IMAGE_TYPES:
                raise RequestBuildError(
                    f"image {img['source']!r} is {img['media_type']}; OpenAI accepts PNG, "
                    "JPEG, WEBP and non-animated GIF"
                )
            if img.get("animated"):
                raise RequestBuildError(
                    f"image {img['source']!r} is an animated GIF; OpenAI accepts only "
                    "non-animated GIFs"
                )
        body: Dict[str, Any] = {"model": config.model, "messages": payload["messages"]}
        schema = payload.get("json_schema")
        if schema is not None:
            name = _SCHEMA_NAME_RE.sub("_", payload.get("output_name") or "output")[:64]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        return {
            "custom_id": custom_id,
            "method": "POST",
            "url": config.batch_endpoint,
            "body": body,
        }

    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        lines = [self.serialize_request(r) for r in requests]
        return self.submit_chunk_lines(chunk_id, lines, config)

    def submit_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        """Upload exactly ``lines`` as the JSONL input file, then create the batch.

        The upload is retried on its own and its file id is reused by every create
        attempt. Every create attempt after the first one first looks for the batch an
        earlier attempt may have made (:meth:`find_batch`, for ``self.run_id``) and
        returns that batch instead of creating another one.

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the upload, a
                lookup or the create still failed after the last attempt.
            openai.APIStatusError: a non-retryable answer (e.g. 400), at once.
        """
        data = b"".join(lines)
        uploaded = self.call_with_retries(
            f"OpenAI files.create (chunk {chunk_id})",
            lambda: self._client.files.create(
                file=(f"{chunk_id}.jsonl", data, "application/jsonl"), purpose="batch"
            ),
        )
        metadata = dict(getattr(config, "metadata", {}) or {})
        metadata["mmirage_chunk_id"] = chunk_id
        if self.run_id:
            metadata["mmirage_run_id"] = self.run_id
        first_attempt_at = time.time()
        attempts = 0

        def create() -> Dict[str, Any]:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and self.run_id:
                found = self.find_batch(
                    self.run_id,
                    chunk_id,
                    created_after=first_attempt_at - self.FIND_BATCH_MARGIN_SECS,
                )
                if found is not None:
                    _LOG.warning(
                        "OpenAI batches.create (chunk %s): adopted %s, created by an earlier "
                        "attempt that answered an error; not creating a second batch",
                        chunk_id,
                        found.get("id"),
                    )
                    return found
            batch = self._client.batches.create(
                input_file_id=uploaded.id,
                endpoint=config.batch_endpoint,
                completion_window=config.completion_window,
                metadata=metadata,
            )
            return batch.model_dump(mode="json")

        return self.call_with_retries(f"OpenAI batches.create (chunk {chunk_id})", create)

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[Dict[str, Any]]:
        """The newest batch whose metadata has ``mmirage_run_id == run_id`` and
        ``mmirage_chunk_id == chunk_id``, or None.

        Lists ``GET /v1/batches`` newest first, ``FIND_BATCH_PAGE_SIZE`` per page, and
        stops paging at the first page that reaches a batch created before
        ``created_after`` (Unix seconds; None: every page). Each page is fetched with
        retries, so a lookup that cannot complete raises instead of answering "none".

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: a page still failed
                after the last attempt.
        """
        what = f"OpenAI batches.list (looking for run {run_id} chunk {chunk_id})"
        page = self.call_with_retries(
            what, lambda: self._client.batches.list(limit=self.FIND_BATCH_PAGE_SIZE)
        )
        while True:
            reached_older = False
            for batch in page.data:
                created = _parse_timestamp(getattr(batch, "created_at", None))
                if created_after is not None and created is not None and created < created_after:
                    reached_older = True
                    continue
                meta = batch.metadata or {}
                if (
                    meta.get("mmirage_run_id") == run_id
                    and meta.get("mmirage_chunk_id") == chunk_id
                ):
                    return batch.model_dump(mode="json")
            if reached_older or not page.data or not page.has_next_page():
                return None
            page = self.call_with_retries(what, page.get_next_page)

    def parse_submission_result(self, raw_result: Dict[str, Any]) -> _Result:
        return _Result(
            provider_batch_id=raw_result["id"],
            status=self._normalize_status(raw_result.get("status")),
            raw_response=raw_result,
        )

    def check_batch_status(self, provider_batch_id: str, config: BatchProviderConfig) -> _Result:
        batch = self.call_with_retries(
            f"OpenAI batches.retrieve ({provider_batch_id})",
            lambda: self._client.batches.retrieve(provider_batch_id),
        )
        return self.parse_submission_result(batch.model_dump(mode="json"))

    def describe_batch(self, result: _Result) -> _Progress:
        """``status``, ``request_counts.{completed, failed, total}``, ``created_at``; the
        ``errors.data[]`` codes and messages (e.g. ``token_limit_exceeded``) as detail."""
        raw = result.raw_response or {}
        counts = raw.get("request_counts") or {}
        errors = (raw.get("errors") or {}).get("data") or []
        notes = []
        for err in errors:
            code = err.get("code") or "error"
            line = f" (line {err['line']})" if err.get("line") is not None else ""
            message = " ".join(str(err.get("message") or "").split())
            notes.append(f"{code}{line}: {message}" if message else f"{code}{line}")
        return _Progress(
            provider_status=str(raw.get("status") or result.status),
            completed=_count(counts.get("completed")),
            failed=_count(counts.get("failed")),
            total=_count(counts.get("total")),
            created_at=_parse_timestamp(raw.get("created_at")),
            detail="; ".join(notes),
            error_code=(errors[0].get("code") or "batch_failed") if errors else None,
        )

    def retrieve_results(
        self, provider_batch_id: str, config: BatchProviderConfig
    ) -> Sequence[Dict[str, Any]]:
        """Read the output file and the error file (either may be null or ``""``).

        Returns one dict per line: ``custom_id`` plus ``generated_text`` (and
        ``input_tokens``/``output_tokens`` when reported) or ``error``
        (``{"type", "message", "status_code"}``).
        """
        batch = self.call_with_retries(
            f"OpenAI batches.retrieve ({provider_batch_id})",
            lambda: self._client.batches.retrieve(provider_batch_id),
        )
        out: list[Dict[str, Any]] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = self.call_with_retries(
                f"OpenAI files.content ({file_id} of {provider_batch_id})",
                lambda fid=file_id: self._client.files.content(fid).read(),
            )
            for raw in content.splitlines():
                if raw.strip():
                    out.append(normalise_result_line(json.loads(raw)))
        return out


def normalise_result_line(line: Dict[str, Any]) -> Dict[str, Any]:
    """One OpenAI output/error file line -> the neutral result dict."""
    result: Dict[str, Any] = {"custom_id": line.get("custom_id")}
    response = line.get("response") or None
    error = line.get("error") or None
    if response is not None and int(response.get("status_code") or 0) == 200:
        body = response.get("body") or {}
        choices = body.get("choices") or [{}]
        result["generated_text"] = ((choices[0] or {}).get("message") or {}).get("content")
        usage = body.get("usage") or {}
        if "prompt_tokens" in usage:
            result["input_tokens"] = int(usage["prompt_tokens"])
            result["output_tokens"] = int(usage.get("completion_tokens") or 0)
        return result
    if response is not None:
        err = (response.get("body") or {}).get("error") or {}
        # OpenAI's rate-limit errors have type "requests"/"tokens" and the telling word in
        # code ("rate_limit_exceeded"); other errors have a "*_error" type.
        kind = err.get("type") or ""
        if not kind.endswith("_error"):
            kind = err.get("code") or kind
        result["error"] = {
            "type": kind or f"http_{response.get('status_code')}",
            "message": err.get("message") or "",
            "status_code": response.get("status_code"),
        }
    else:
        error = error or {}
        result["error"] = {
            "type": error.get("code") or "unknown_error",
            "message": error.get("message") or "",
            "status_code": None,
        }
    return result


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


BatchAdapterRegistry.register("openai", OpenAIBatchAdapter)
