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

import contextlib
import dataclasses
import json
import logging
import time
from typing import (
    Any,
    ClassVar,
    Dict,
    Iterator,
    List,
    Mapping,
    NotRequired,
    Optional,
    Sequence,
    TypedDict,
    Union,
)

from mmirage_beam.images import image_error, images_error
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.batch_status import FoundBatch, SubmittedBatch
from mmirage_beam.providers.batch_status import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.chat import (
    embedding_outcome,
    first_choice,
    first_embedding,
    generation_options,
    json_schema_format,
)
from mmirage_beam.providers.chat import malformed_200 as _malformed
from mmirage_beam.providers.openai.config import OpenAIBatchConfig
from mmirage_beam.providers.openai.responses import (
    OpenAIResponsesBody,
    build_responses_body,
    detail_tokens,
    normalise_responses_body,
)
from mmirage_beam.providers.openai.tokens import count_openai_request
from mmirage_beam.providers.retrying import make_retry_filter
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.providers.uploads import FileUploadAdapter
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import (
    CONTENT_FILTER,
    EMBEDDING,
    EMPTY,
    REFUSAL,
    TRUNCATED,
    MalformedResult,
    kind_text,
    message_text,
    results_from_lines,
    split_batch_line,
    token_count,
)

_LOG = logging.getLogger(__name__)

ACCEPTED_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")

# Per-request vision limits. OpenAI "Images and vision" guide, "Image input
# requirements" (https://platform.openai.com/docs/guides/images-vision, read 2026-12):
# "Up to 50 MB total payload size per request" and "Up to 500 individual image inputs
# per request". Checked on the serialised request body (the bigger measure: base64
# data URLs plus the JSON around them) of every request holding an image, with
# decimal MB, so nothing we send is refused for its size.
VISION_LIMITS_SOURCE = "OpenAI Images and vision guide, image input requirements"
MAX_REQUEST_PAYLOAD_BYTES = 50 * 1000 * 1000  # 50 MB
MAX_IMAGES_PER_REQUEST = 500


class OpenAIChatBody(TypedDict, total=False):
    """A ``/v1/chat/completions`` batch body (openai-python
    ``CompletionCreateParamsNonStreaming``), keys in the order they are sent."""

    model: str
    messages: List[Dict[str, Any]]
    max_completion_tokens: int
    temperature: float
    top_p: float
    response_format: Dict[str, Any]


class OpenAIEmbeddingsBody(TypedDict, total=False):
    """A ``/v1/embeddings`` batch body (openai-python ``EmbeddingCreateParams``)."""

    model: str
    input: str
    encoding_format: str
    dimensions: int


#: the body of one line, by ``batch_endpoint``
OpenAIBody = Union[OpenAIChatBody, OpenAIResponsesBody, OpenAIEmbeddingsBody]


class OpenAIBatchLine(TypedDict):
    """One line of an OpenAI batch input file (``{"custom_id", "method", "url",
    "body"}``, https://platform.openai.com/docs/api-reference/batch/request-input);
    Together's lines hold ``custom_id`` and ``body`` only."""

    custom_id: str
    method: NotRequired[str]
    url: NotRequired[str]
    body: OpenAIBody


class ErrorCodeParam(TypedDict, total=False):
    """An OpenAI error object's ``code`` and ``param``, kept beside its message."""

    code: str
    param: str


class OpenAIBatchAdapter(FileUploadAdapter[OpenAIBatchConfig]):
    """``provider: openai``: builds chat-completion batch lines and drives the Batch API.

    The client (``openai.OpenAI``) is built in :meth:`setup` with the key from
    ``OPENAI_API_KEY``, the config's ``base_url`` and ``timeout_seconds`` (per call;
    default the SDK's 600 s) and the SDK's retries off: every call
    is retried by :meth:`call_with_retries`, and a retried create first adopts the batch
    an earlier attempt may have made (:meth:`find_batch`).
    """

    #: text requests hold the custom_id and prompt verbatim (build_request)
    verbatim_prompt: ClassVar[bool] = True

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    chunk_overhead_bytes: ClassVar[int] = 0  # the upload is exactly the JSONL lines
    # OpenAI states no per-image size, only the 50 MB per request: a bigger file can
    # never fit (the request's own size is checked once it is built).
    max_image_file_bytes: ClassVar[Optional[int]] = MAX_REQUEST_PAYLOAD_BYTES
    image_file_limit: ClassVar[str] = (
        f"OpenAI's 50 MB ({MAX_REQUEST_PAYLOAD_BYTES} bytes) per request, which one image "
        f"file cannot exceed ({VISION_LIMITS_SOURCE})"
    )
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"expired": "failed", "cancelled": "failed"}
    #: page size of the batch listing (the API's maximum).
    FIND_BATCH_PAGE_SIZE: ClassVar[int] = 100
    UPLOAD_CALL: ClassVar[str] = "OpenAI files.create"
    CREATE_CALL: ClassVar[str] = "OpenAI batches.create"

    def setup(self, config: OpenAIBatchConfig) -> None:
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

    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """tiktoken's count, exact for plain chat text
        (:func:`mmirage_beam.providers.openai.tokens.count_openai_request`)."""
        return count_openai_request(request, model)

    def teardown(self) -> None:
        """Close the ``openai.OpenAI`` client."""
        self._close_client()

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: OpenAIBatchConfig
    ) -> OpenAIBatchLine:
        """One batch input line for ``config.batch_endpoint``: a chat-completions body
        (``messages``, ``response_format``), a Responses body
        (:func:`~mmirage_beam.providers.openai.responses.build_responses_body`), or for
        an embedding output a ``/v1/embeddings`` body (:func:`embeddings_body`).

        Raises:
            RequestBuildError: an image OpenAI refuses (type, animation), more than
                :data:`MAX_IMAGES_PER_REQUEST` images, or a body above
                :data:`MAX_REQUEST_PAYLOAD_BYTES`; ``input_name`` names the image input.
        """
        if payload.get("output_type") == EMBEDDING:
            return {
                "custom_id": custom_id,
                "method": "POST",
                "url": config.batch_endpoint,
                "body": embeddings_body(payload, config),
            }
        images = list(payload.get("images") or ())
        for img in images:
            if img.get("data") is None:
                continue  # an http(s) URL: fetched by the provider
            if img["media_type"] not in ACCEPTED_IMAGE_TYPES:
                raise image_error(
                    img,
                    f"image {img['source']!r} is {img['media_type']}; OpenAI accepts PNG, "
                    "JPEG, WEBP and non-animated GIF",
                )
            if img.get("animated"):
                raise image_error(
                    img,
                    f"image {img['source']!r} is an animated GIF; OpenAI accepts only "
                    "non-animated GIFs",
                )
        if len(images) > MAX_IMAGES_PER_REQUEST:
            raise images_error(
                images,
                f"the request holds {len(images)} images; OpenAI accepts at most "
                f"{MAX_IMAGES_PER_REQUEST} image inputs per request ({VISION_LIMITS_SOURCE})",
            )
        detail = getattr(config, "image_detail", None)
        body: OpenAIBody
        if config.batch_endpoint == "/v1/responses":
            body = build_responses_body(payload, config, image_detail=detail or "auto")
        else:
            body = _chat_body(payload, config, detail)
        if images:
            nbytes = len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
            if nbytes > MAX_REQUEST_PAYLOAD_BYTES:
                raise images_error(
                    images,
                    f"the request body is {nbytes} bytes with its {len(images)} image(s); "
                    f"OpenAI accepts at most {MAX_REQUEST_PAYLOAD_BYTES} bytes (50 MB) per "
                    f"request ({VISION_LIMITS_SOURCE})",
                )
        return {
            "custom_id": custom_id,
            "method": "POST",
            "url": config.batch_endpoint,
            "body": body,
        }

    def upload_file(self, chunk_id: str, content: Any, config: OpenAIBatchConfig) -> Any:
        """``files.create`` of the JSONL input file, ``purpose="batch"``."""
        return self._client.files.create(
            file=(f"{chunk_id}.jsonl", content, "application/jsonl"), purpose="batch"
        )

    def create_batch(
        self, chunk_id: str, uploaded: Any, config: OpenAIBatchConfig
    ) -> SubmittedBatch:
        """``batches.create`` from the uploaded file, with the run's and chunk's
        metadata (:meth:`batch_metadata`), which :meth:`find_batch` looks for.

        Raises:
            openai.APIStatusError: a non-retryable answer (e.g. 400).
        """
        batch = self._client.batches.create(
            input_file_id=uploaded.id,
            endpoint=config.batch_endpoint,
            completion_window=config.completion_window,
            metadata=self.batch_metadata(chunk_id, config),
        )
        return self.submitted_batch(batch.model_dump(mode="json"))

    adopts_by_metadata = True  # find_batch reads the batch's mmirage metadata
    cancels_batches = True  # batches.cancel
    takes_embeddings = True  # /v1/embeddings lines

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[FoundBatch]:
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
                if self.names_chunk(batch.metadata, run_id, chunk_id):
                    return self.found_batch(batch.model_dump(mode="json"))
            if reached_older or not page.data or not page.has_next_page():
                return None
            page = self.call_with_retries(what, page.get_next_page)

    def _retrieve(self, provider_batch_id: str) -> Any:
        """``batches.retrieve`` of a receipted batch (a 404 retried too)."""
        return self.call_lookup_with_retries(
            f"OpenAI batches.retrieve ({provider_batch_id})",
            lambda: self._client.batches.retrieve(provider_batch_id),
        )

    def check_batch_status(self, provider_batch_id: str, config: OpenAIBatchConfig) -> _Result:
        """``batches.retrieve``, its ``status`` normalised."""
        return self.parse_submission_result(
            self._retrieve(provider_batch_id).model_dump(mode="json")
        )

    def cancel_batch(self, provider_batch_id: str, config: OpenAIBatchConfig) -> _Result:
        """``batches.cancel``: the batch becomes ``cancelling``, then ``cancelled`` with the
        output file of the requests already done (https://platform.openai.com/docs/api-reference/batch/cancel)."""
        batch = self.call_with_retries(
            f"OpenAI batches.cancel ({provider_batch_id})",
            lambda: self._client.batches.cancel(provider_batch_id),
        )
        return self.parse_submission_result(batch.model_dump(mode="json"))

    def describe_batch(self, result: _Result) -> _Progress:
        """``status``, ``request_counts.{completed, failed, total}``, ``created_at``; the
        ``errors.data[]`` codes and messages (e.g. ``token_limit_exceeded``) as detail."""
        raw = result.raw_response or {}
        errors = (raw.get("errors") or {}).get("data") or []
        notes = []
        for err in errors:
            code = err.get("code") or "error"
            line = f" (line {err['line']})" if err.get("line") is not None else ""
            message = " ".join(str(err.get("message") or "").split())
            notes.append(f"{code}{line}: {message}" if message else f"{code}{line}")
        return dataclasses.replace(
            super().describe_batch(result),  # status, request_counts, created_at
            detail="; ".join(notes),
            error_code=(errors[0].get("code") or "batch_failed") if errors else None,
        )

    def retrieve_results(
        self, provider_batch_id: str, config: OpenAIBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream the output file, then the error file (either may be null or ``""``).

        Yields one neutral dict per line (:mod:`mmirage_beam.results`), the file read as
        a byte stream (``files.with_streaming_response.content``) split on ``\\n``
        only, each line parsed on its own: a damaged line is a ``malformed_response``
        for its custom_id (or an unknown line), never the end of the download. Memory:
        one line at a time.
        """
        batch = self._retrieve(provider_batch_id)
        for kind, file_id in (("output", batch.output_file_id), ("error", batch.error_file_id)):
            if not file_id:
                continue

            @contextlib.contextmanager
            def open_stream(fid: str = file_id) -> Iterator[Iterator[bytes]]:
                with self._client.files.with_streaming_response.content(fid) as response:
                    yield response.iter_bytes()

            lines = self.stream_lines_with_retries(
                f"OpenAI files.content ({file_id} of {provider_batch_id})", open_stream
            )
            yield from results_from_lines(
                lines,
                normalise_result_line,
                f"{kind} file {file_id} of batch {provider_batch_id}",
            )

    def results_available(self, provider_batch_id: str, config: OpenAIBatchConfig) -> Optional[str]:
        """The batch's output file still exists: ``files.retrieve`` of its
        ``output_file_id`` (the real API deletes an output file when it expires, 30 days
        or ``output_expires_after`` after creation, and answers 404 ``No such File
        object``), and its ``expires_at`` has not passed. Two metadata calls, no
        download."""
        file_id = None
        try:
            batch = self._retrieve(provider_batch_id)
            file_id = batch.output_file_id
            if not file_id:
                return f"batch {provider_batch_id} has no output file"
            meta = self.call_lookup_with_retries(
                f"OpenAI files.retrieve ({file_id})",
                lambda: self._client.files.retrieve(file_id),
            )
        except Exception as exc:  # noqa: BLE001 - 404 and any other failure: not reused
            status = getattr(exc, "status_code", None)
            if status == 404 and file_id is None:  # the batch itself: not here, not expired
                return f"batch {provider_batch_id} not found on this endpoint or account (404)"
            if status == 404:
                return f"results file {file_id} of batch {provider_batch_id} is gone (404: expired)"
            text = str(exc).strip().splitlines()
            return f"{type(exc).__name__}: {text[-1] if text else ''}"
        expires = getattr(meta, "expires_at", None)
        if isinstance(expires, (int, float)) and expires <= time.time():
            return f"results file {file_id} of batch {provider_batch_id} expired"
        return None


def normalise_result_line(line: Any) -> ProviderResult:
    """One OpenAI output/error file line (parsed JSON) -> its :class:`ProviderResult`.

    Success needs HTTP 200 *and* a body shaped like the endpoint's response: for chat
    completions ``choices[0].message`` (OpenAI API reference, "The chat completion
    object"); for ``/v1/embeddings`` bodies (``object: "list"``) ``data[0].embedding``
    (:func:`_embedding_outcome`); for ``/v1/responses`` bodies (``object:
    "response"``) the Responses parser.
    A 200 whose body is an error object or empty is ``malformed_response``. A usable
    body can still be no answer: ``message.refusal`` -> ``refusal``, ``finish_reason``
    ``length`` -> ``truncated``, ``content_filter`` -> ``content_filter``, no text ->
    ``empty``; the provider's text is kept as ``raw_text`` and usage is reported.

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    cid, response, error = split_batch_line(line)
    if response is not None and _status(response) == 200:
        body = response.get("body")
        if isinstance(body, dict) and body.get("object") == "response":
            # /v1/responses: output[].content[] (a failed Response keeps its error.code)
            return normalise_responses_body(body)._replace(custom_id=cid)
        if isinstance(body, dict) and body.get("error"):
            err = body["error"] if isinstance(body["error"], dict) else {}
            message = err.get("message") or str(body["error"])
            return ProviderResult(cid, error=_malformed(f"HTTP 200 with an error body: {message}"))
        if not isinstance(body, dict) or not body:
            return ProviderResult(cid, error=_malformed("HTTP 200 with an empty body"))
        if body.get("object") == "list" and "choices" not in body:
            return _embedding_outcome(body, cid)
        return _chat_outcome(body, cid)
    if response is not None:
        body = response.get("body")
        err = (body.get("error") if isinstance(body, dict) else None) or {}
        err = err if isinstance(err, dict) else {"message": str(err)}
        # OpenAI's rate-limit errors have type "requests"/"tokens" and the telling word in
        # code ("rate_limit_exceeded"); other errors have a "*_error" type.
        kind = kind_text(err.get("type"))
        if not kind.endswith("_error"):
            kind = kind_text(err.get("code")) or kind
        status = _status(response)
        return ProviderResult(
            cid,
            error=ResultError(
                kind or f"http_{status if status is not None else 'unknown'}",
                message_text(err.get("message")),
                status,
                **_code_and_param(err, kind),
            ),
        )
    if error is not None:
        error = error if isinstance(error, dict) else {"message": str(error)}
        return ProviderResult(
            cid,
            error=ResultError(
                kind_text(error.get("code")) or "unknown_error",
                message_text(error.get("message")),
                None,
                **_code_and_param(error, error.get("code")),
            ),
        )
    raise MalformedResult("neither 'response' nor 'error'", cid)


def _code_and_param(err: Dict[str, Any], kind: Any) -> ErrorCodeParam:
    """The provider error's ``code`` and ``param`` (e.g. ``invalid_value``,
    ``messages[0].content``), kept beside its message when set and when the code is not
    already the error's type: OpenAI's error object is ``{message, type, param, code}``
    (https://platform.openai.com/docs/guides/error-codes)."""
    kept: ErrorCodeParam = {}
    for key in ("code", "param"):
        if isinstance(err.get(key), str) and err[key]:
            kept[key] = err[key]  # type: ignore[literal-required]
    if "code" in kept and kept["code"] == kind:
        del kept["code"]
    return kept


def _status(response: Dict[str, Any]) -> Optional[int]:
    """The HTTP status of a result line's response, None when it is not a number."""
    value = response.get("status_code")
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return None


def _chat_outcome(body: Dict[str, Any], cid: str) -> ProviderResult:
    """A chat-completion body -> ``generated_text`` or a typed error, plus usage."""
    tokens: Dict[str, int] = {}
    usage = body.get("usage")
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        tokens["input_tokens"] = token_count(usage.get("prompt_tokens")) or 0
        tokens["output_tokens"] = token_count(usage.get("completion_tokens")) or 0
        tokens.update(detail_tokens(usage, "prompt_tokens_details", "completion_tokens_details"))
    found = first_choice(body)
    if found is None:
        error = _malformed("HTTP 200 but the body has no choices[0].message")
        return ProviderResult(cid, error=error, **tokens)
    choice, message = found
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        error = _malformed("choices[0].message.content is not a string")
        return ProviderResult(cid, error=error, **tokens)
    finish = choice.get("finish_reason")
    refusal = message.get("refusal")
    if refusal:
        error = ResultError(REFUSAL, f"the model refused: {refusal}", 200, str(refusal))
    elif finish == "length":
        error = ResultError(
            TRUNCATED,
            "the answer was cut at max_tokens (finish_reason: length)",
            200,
            content or None,
        )
    elif finish == "content_filter":
        error = ResultError(
            CONTENT_FILTER,
            "the answer was removed by OpenAI's content filter (finish_reason: content_filter)",
            200,
            content or None,
        )
    elif not content:
        error = ResultError(EMPTY, f"the answer is empty (finish_reason: {finish})", 200)
    else:
        return ProviderResult(cid, generated_text=content, **tokens)
    return ProviderResult(cid, error=error, **tokens)


def _chat_body(
    payload: Dict[str, Any], config: OpenAIBatchConfig, detail: Optional[str]
) -> OpenAIChatBody:
    """The ``/v1/chat/completions`` body: the payload's messages (every image part with
    ``detail`` when one is configured), ``response_format`` for a JSON schema, and the
    config's optional ``max_tokens`` (as ``max_completion_tokens``), ``temperature`` and
    ``top_p``."""
    messages = []
    for message in payload["messages"]:
        content = message.get("content")
        if isinstance(content, list) and detail:
            content = [
                {"type": "image_url", "image_url": {"detail": detail, **p["image_url"]}}
                if p.get("type") == "image_url"
                else p
                for p in content
            ]
        messages.append({**message, "content": content})
    body: OpenAIChatBody = {"model": config.model, "messages": messages}
    body.update(generation_options(config, "max_completion_tokens"))  # type: ignore[typeddict-item]
    response_format = json_schema_format(payload, strict_first=True)
    if response_format is not None:
        body["response_format"] = response_format
    return body


def embeddings_body(payload: Dict[str, Any], config: OpenAIBatchConfig) -> OpenAIEmbeddingsBody:
    """The ``/v1/embeddings`` body of an embedding output's payload: ``{"model", "input":
    text, "encoding_format": "float", "dimensions"?}`` (openai-python 3.57
    ``EmbeddingCreateParams``; ``dimensions`` only when the processor sets it)."""
    body: OpenAIEmbeddingsBody = {
        "model": config.model,
        "input": payload["text"],
        "encoding_format": "float",
    }
    if payload.get("dimensions") is not None:
        body["dimensions"] = int(payload["dimensions"])
    return body


def _embedding_outcome(body: Dict[str, Any], cid: str) -> ProviderResult:
    """A ``/v1/embeddings`` body (``CreateEmbeddingResponse``: ``{"object": "list",
    "data": [{"object": "embedding", "index", "embedding": [float]}], "model", "usage":
    {"prompt_tokens", "total_tokens"}}``) -> the vector as ``generated_text`` (its JSON
    text, :func:`~mmirage_beam.results.embedding_text`) with its input tokens, or a
    ``malformed_response``."""
    tokens: Dict[str, int] = {}
    usage = body.get("usage")
    if isinstance(usage, dict) and "prompt_tokens" in usage:
        tokens["input_tokens"] = token_count(usage.get("prompt_tokens")) or 0
        tokens["output_tokens"] = 0  # embeddings bill input tokens only
    return embedding_outcome(cid, first_embedding(body), "data[0].embedding", tokens)
