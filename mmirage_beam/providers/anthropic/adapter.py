"""Anthropic Message Batches adapter.

Contract facts (PROVIDERS.md, from anthropic-sdk-python and the Message Batches docs):
a batch is ``POST /v1/messages/batches {requests: [{custom_id, params}]}`` with at most
100,000 requests and 256 MB per body; ``custom_id`` matches ``^[a-zA-Z0-9_-]{1,64}$``;
images are base64 (``image/jpeg|png|gif|webp``, at most 5 MB each) or URL sources;
structured output is ``params.output_config.format = {type: "json_schema", schema}``.
The SDK serialises the body as compact JSON, so an upload is the request lines joined by
commas inside ``{"requests":[...]}``: 14 bytes more than the JSONL lines it is built from.

Retries, and the duplicate-batch window: the client is built with the SDK's retries off
(``max_retries=0``); every call goes through
:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.call_with_retries` (408, 409,
429, >= 500 incl. 529 and connection errors, honouring ``retry-after-ms`` /
``retry-after``). Anthropic message batches carry no metadata and the API takes no
idempotency key, but ``GET /v1/messages/batches`` lists every batch, newest first, with
its ``created_at`` and ``request_counts``. So before a *retried* create (the earlier
attempt answered a retryable error, or its answer never arrived), the adapter lists the
batches created since its first attempt (minus ``ADOPT_SKEW_SECS`` of clock skew) whose
request count is exactly the chunk's and that no receipt or earlier create of this
process names (:data:`CLAIMED`); when exactly one matches it is *adopted* instead of
creating a second batch. A resumed run does the same for each chunk that was being
submitted when the run stopped (:mod:`mmirage_beam.run.resume`), and confirms the adoption
by custom_ids when the batch's results already exist.

The window that remains (a duplicate, never a loss): a stored create is not adopted, and
its chunk is sent again, when several unclaimed batches of exactly that request count
were created in the window (another workload on the same API key, or other chunks of
this run whose creates were lost at the same time), or when Anthropic's clock is more
than ``ADOPT_SKEW_SECS`` behind ours. Both batches are then billed; the receipt names
the last one, and merge keeps, per custom_id, the newest successful result. A batch of
another workload with exactly the chunk's request count, created in the window while the
chunk's own create was *refused*, would be adopted wrongly: the adoption is recorded in
the receipt (``adoption``) and confirmed by custom_ids once results exist.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    TypedDict,
    Union,
)

from mmirage_beam.images import image_error, images_error
from mmirage_beam.providers.anthropic.config import AnthropicBatchConfig
from mmirage_beam.providers.anthropic.tokens import AnthropicExactCounter, count_anthropic_request
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionAdapter, iter_chunk_lines
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.batch_status import BatchFields, FoundBatch, SubmittedBatch
from mmirage_beam.providers.batch_status import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.chat import prompt_text
from mmirage_beam.providers.retrying import make_retry_filter
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import (
    EMPTY,
    MALFORMED_RESPONSE,
    REFUSAL,
    TRUNCATED,
    MalformedResult,
    kind_text,
    line_id,
    message_text,
    results_from_lines,
    token_count,
)

_LOG = logging.getLogger(__name__)

#: batch ids this process created, adopted or read in a receipt: never adopted again.
CLAIMED: set[str] = set()
_CLAIMED_LOCK = threading.Lock()
#: request count -> creates of that size in flight in this process (a sibling chunk's
#: unanswered create must not be mistaken for our lost one).
_IN_FLIGHT: dict[int, int] = {}


def claim(batch_id: str) -> None:
    """Record that ``batch_id`` belongs to a receipt (it is never adopted for another
    chunk)."""
    with _CLAIMED_LOCK:
        CLAIMED.add(batch_id)


ACCEPTED_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
# Per-request vision limits. Anthropic "Vision" guide, "General limits" and FAQ
# (https://platform.claude.com/docs/en/build-with-claude/vision, read 2026-12):
# - "5MB per image" for the API. Checked on the base64 text, the larger of the two
#   measures, so a request we send is never refused for its size.
# - images larger than 8000 x 8000 px are rejected; when a request holds more than 20
#   images the limit is 2000 x 2000 px per image (the API's 400 reads "At least one of
#   the image dimensions exceed max allowed size for many-image requests: 2000 pixels",
#   anthropics/claude-code#13480).
# - up to 100 images per API request (the API's 400 reads "too many images and
#   documents: 104 + 1 > 100", anthropics/claude-code#23392).
# Only local files are checked: an http(s) image is fetched by Anthropic, its size is
# not known here (it still counts towards the 100).
VISION_LIMITS_SOURCE = "Anthropic Vision guide, general limits"
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # 5 MB of base64 text per image
MAX_IMAGE_SIDE_PX = 8000
MANY_IMAGES_THRESHOLD = 20  # more than this many images in a request ...
MANY_IMAGES_MAX_SIDE_PX = 2000  # ... and every image must fit 2000 x 2000 px
MAX_IMAGES_PER_REQUEST = 100
# The largest file whose base64 text fits in MAX_IMAGE_BYTES (4 characters per 3 bytes).
MAX_IMAGE_FILE_BYTES = MAX_IMAGE_BYTES * 3 // 4


class AnthropicBatchAdapter(BatchSubmissionAdapter[AnthropicBatchConfig]):
    """``provider: anthropic``: builds Message Batch requests and drives the API.

    The client (``anthropic.Anthropic``) is built in :meth:`setup` with the key from
    ``ANTHROPIC_API_KEY``, the config's ``base_url`` and ``timeout_seconds``, and the
    SDK's retries off: every call is retried by :meth:`call_with_retries`.

    :meth:`find_batch` is the contract's default (None): message batches carry no
    metadata. A retried create first looks for the batch its earlier attempt may have
    made by creation time and request count (:meth:`find_candidate_batches`), and adopts
    it when exactly one matches (see the module docstring for the window that remains).
    """

    #: text requests hold the custom_id and prompt verbatim (build_request)
    verbatim_prompt: ClassVar[bool] = True

    #: how far before our clock's "first attempt" a batch's ``created_at`` may be, s.
    ADOPT_SKEW_SECS: ClassVar[float] = 5.0
    #: page size of the batch listing (the API's maximum is 1000; 100 keeps pages small).
    LIST_PAGE_SIZE: ClassVar[int] = 100

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    # len('{"requests":[') + len(']}') - 1 (n lines carry n newlines; the body n-1 commas)
    chunk_overhead_bytes: ClassVar[int] = 14
    max_image_file_bytes: ClassVar[Optional[int]] = MAX_IMAGE_FILE_BYTES
    image_file_limit: ClassVar[str] = (
        f"Anthropic's 5 MB per-image limit ({MAX_IMAGE_BYTES} bytes of base64, so files of "
        f"at most {MAX_IMAGE_FILE_BYTES} bytes; {VISION_LIMITS_SOURCE})"
    )
    # A retried create adopts "the one batch of this many requests created since the first
    # attempt": with siblings of the same size in flight that is ambiguous (and a second
    # batch would be paid for), so one chunk at a time per worker.
    max_concurrent_submissions: ClassVar[Optional[int]] = 1
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"ended": "completed", "canceling": "in_progress"}
    #: a message batch's status word is ``processing_status``; it reads no input file
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields(
        status=("processing_status",), input_file_id=()
    )

    def setup(self, config: AnthropicBatchConfig) -> None:
        import anthropic

        self._retry_filter = make_retry_filter(
            (anthropic.APIConnectionError,), (anthropic.APIStatusError,)
        )
        # every retry goes through call_with_retries
        kwargs: Dict[str, Any] = {"api_key": self.credentials.get("api_key"), "max_retries": 0}
        if getattr(config, "base_url", None):
            kwargs["base_url"] = config.base_url
        if getattr(config, "timeout_seconds", None):
            kwargs["timeout"] = float(config.timeout_seconds)
        self._client = anthropic.Anthropic(**kwargs)

    def teardown(self) -> None:
        """Close the ``anthropic.Anthropic`` client."""
        self._close_client()

    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """A labelled estimate (no public tokenizer:
        :func:`mmirage_beam.providers.anthropic.tokens.count_anthropic_request`)."""
        return count_anthropic_request(request, model)

    def exact_token_counter(
        self, config: AnthropicBatchConfig
    ) -> Optional[Callable[[Dict[str, Any]], int]]:
        """The free ``messages.count_tokens`` endpoint
        (:class:`~mmirage_beam.providers.anthropic.tokens.AnthropicExactCounter`)."""
        return AnthropicExactCounter(type(self), getattr(config, "base_url", None))

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: AnthropicBatchConfig
    ) -> AnthropicBatchLine:
        """``{"custom_id", "params"}``: :func:`message_params` of the payload."""
        return {"custom_id": custom_id, "params": message_params(payload, config)}

    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: AnthropicBatchConfig
    ) -> SubmittedBatch:
        """Create one message batch; the create is retried (see the module docstring for
        the duplicate-batch window this leaves).

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the create still
                failed after the last attempt.
            anthropic.APIStatusError: a non-retryable answer (e.g. 400, 413), at once.
        """
        body = list(requests)
        return self._create(
            chunk_id, len(body), lambda: self._client.messages.batches.create(requests=body)
        )

    def submit_chunk_file(
        self, chunk_id: str, path: str, config: AnthropicBatchConfig
    ) -> SubmittedBatch:
        """Create one message batch from the staged chunk file ``path``: the request body
        is ``{"requests":[<line>,<line>,...]}`` made of the staged lines as they are (one
        copy of the chunk in memory, no parse and re-serialisation), sent with the SDK's
        raw ``content``; otherwise as :meth:`submit_chunk`."""
        if self.submits_its_own_way:
            return self.submitted_batch(super().submit_chunk_file(chunk_id, path, config))
        import io

        from anthropic.types.messages import MessageBatch

        buf = io.BytesIO()
        buf.write(b'{"requests":[')
        count = 0
        for line in iter_chunk_lines(path):
            if count:
                buf.write(b",")
            buf.write(line.rstrip(b"\n"))
            count += 1
        buf.write(b"]}")
        data = buf.getvalue()
        del buf

        def send() -> Any:
            return self._client.post(
                "/v1/messages/batches",
                content=data,
                cast_to=MessageBatch,
                options={"headers": {"Content-Type": "application/json"}},
            )

        return self._create(chunk_id, count, send)

    def _create(self, chunk_id: str, count: int, send: Callable[[], Any]) -> SubmittedBatch:
        """The create of a batch of ``count`` requests through ``send()``, retried, with
        adoption of a batch an earlier attempt made (:meth:`create_once`, through
        :meth:`adopt_lost_create`; see :meth:`submit_chunk`)."""

        def create() -> SubmittedBatch:
            with _CLAIMED_LOCK:
                _IN_FLIGHT[count] = _IN_FLIGHT.get(count, 0) + 1
            try:
                batch = send()
            finally:
                with _CLAIMED_LOCK:
                    _IN_FLIGHT[count] -= 1
            submitted = self.submitted_batch(batch.model_dump(mode="json"))
            claim(submitted.batch_id)
            return submitted

        what = f"Anthropic messages.batches.create (chunk {chunk_id})"
        return self.create_once(what, chunk_id, create, request_count=count)

    def adopt_lost_create(
        self,
        what: str,
        chunk_id: str,
        first_attempt_at: float,
        request_count: Optional[int] = None,
    ) -> Optional[SubmittedBatch]:
        """By shape: the one unclaimed batch of ``request_count`` requests created since
        ``first_attempt_at - ADOPT_SKEW_SECS`` (:meth:`find_candidate_batches`), marked
        ``mmirage_adoption`` (unconfirmed: the resume confirms it by custom_ids); None
        when there is none, several, or a sibling create of the same size is in flight
        in this process (ambiguous). The lookup is part of the attempt: if it fails,
        the attempt fails and is retried."""
        count = int(request_count or 0)
        with _CLAIMED_LOCK:
            siblings = _IN_FLIGHT.get(count, 0)
        found = self.find_candidate_batches(
            count, created_after=first_attempt_at - self.ADOPT_SKEW_SECS, retries=False
        )
        if siblings:
            _LOG.warning(
                "%s: another create of %d requests is in flight in this process; "
                "not adopting by time and count",
                what,
                count,
            )
            return None  # ambiguous: create again
        if len(found) == 1:
            _LOG.warning(
                "%s: adopted %s (created since the first attempt, %d requests, named "
                "by no receipt): not creating a second batch",
                what,
                found[0].batch_id,
                count,
            )
            claim(found[0].batch_id)
            return found[0].adopted(
                {"method": "created_at+request_count", "confirmed": False}, self.BATCH_FIELDS
            )
        if found:
            _LOG.warning(
                "%s: %d batches of %d requests were created since the first attempt; "
                "cannot tell which is this chunk's, creating it again (its requests may "
                "now exist twice)",
                what,
                len(found),
                count,
            )
        return None

    adopts_by_shape = True
    cancels_batches = True  # messages.batches.cancel
    counts_tokens_exactly = True  # messages.count_tokens
    sends_requests_inline = True  # messages.batches.create(requests=[...])
    streams_staged_file = True  # submit_chunk_file sends the staged lines as they are

    @classmethod
    def claim_batch(cls, batch_id: str) -> None:
        """:func:`claim`: ``batch_id`` is never adopted for another chunk."""
        claim(batch_id)

    def find_candidate_batches(
        self,
        request_count: int,
        created_after: float,
        created_before: Optional[float] = None,
        exclude_ids: Iterable[str] = (),
        retries: bool = True,
    ) -> list[FoundBatch]:
        """Batches that may be a chunk's lost create: created in ``[created_after,
        created_before]`` (Unix seconds; None: up to now), holding exactly
        ``request_count`` requests (the sum of ``request_counts``), and in neither
        ``exclude_ids`` nor :data:`CLAIMED`.

        Lists ``GET /v1/messages/batches`` newest first (Anthropic Message Batches API:
        "most recently created batches first"), ``LIST_PAGE_SIZE`` per page, and stops at
        the first batch created before ``created_after``. Each page is fetched with
        retries (none with ``retries=False``: the caller's own retry repeats the lookup),
        so a lookup that cannot complete raises instead of answering "none".
        """
        with _CLAIMED_LOCK:
            excluded = set(CLAIMED) | set(exclude_ids)
        what = "Anthropic messages.batches.list (looking for a lost create)"

        def call(fn):  # noqa: ANN001, ANN202
            return self.call_with_retries(what, fn) if retries else fn()

        page = call(lambda: self._client.messages.batches.list(limit=self.LIST_PAGE_SIZE))
        found: list[FoundBatch] = []
        while True:
            for batch in page.data:
                raw = batch.model_dump(mode="json")
                created = _parse_timestamp(raw.get("created_at"))
                if created is not None and created < created_after:
                    return found
                if created_before is not None and created is not None:
                    if created > created_before:
                        continue
                counts = raw.get("request_counts") or {}
                total = sum(int(counts.get(k) or 0) for k in _OUTCOMES)
                if total == request_count and raw["id"] not in excluded:
                    found.append(self.found_batch(raw, request_count=total))
            if not page.data or not page.has_next_page():
                return found
            page = call(page.get_next_page)

    def result_custom_ids(self, provider_batch_id: str) -> Optional[set[str]]:
        """The custom_ids of an ended batch's results (to confirm an adoption); None
        while the batch is still processing."""
        batch = self.check_batch_status(provider_batch_id, None)  # type: ignore[arg-type]
        if (batch.raw_response or {}).get("processing_status") != "ended":
            return None
        return {r.custom_id for r in self.retrieve_results(provider_batch_id, None)}  # type: ignore[arg-type]

    def parse_submission_result(self, raw_result: Dict[str, Any]) -> _Result:
        """``processing_status`` normalised, and an ended batch whose requests did not
        all run, or of which none succeeded, ``failed``.

        Raises:
            KeyError: the batch has no ``id``.
        """
        status = raw_result.get("processing_status")
        normalised = self._normalize_status(status)
        counts = raw_result.get("request_counts") or {}
        # An ended batch with requests that never ran (expired: the 24 h window closed;
        # canceled) is a failed batch, exactly as OpenAI's "expired" / "cancelled" batch
        # statuses are; so is one where nothing succeeded. Requests that ran and errored
        # in a batch that otherwise succeeded are request-level failures, as on OpenAI.
        if status == "ended" and (
            any(counts.get(k) for k in ("canceled", "expired"))
            or (not counts.get("succeeded") and counts.get("errored"))
        ):
            normalised = "failed"
        return _Result(
            provider_batch_id=raw_result["id"], status=normalised, raw_response=raw_result
        )

    def check_batch_status(self, provider_batch_id: str, config: AnthropicBatchConfig) -> _Result:
        batch = self.call_lookup_with_retries(
            f"Anthropic messages.batches.retrieve ({provider_batch_id})",
            lambda: self._client.messages.batches.retrieve(provider_batch_id),
        )
        return self.parse_submission_result(batch.model_dump(mode="json"))

    def cancel_batch(self, provider_batch_id: str, config: AnthropicBatchConfig) -> _Result:
        """``messages.batches.cancel``: ``canceling``, then ``ended`` with the unprocessed
        requests ``canceled`` (https://docs.anthropic.com/en/api/canceling-message-batches)."""
        batch = self.call_with_retries(
            f"Anthropic messages.batches.cancel ({provider_batch_id})",
            lambda: self._client.messages.batches.cancel(provider_batch_id),
        )
        return self.parse_submission_result(batch.model_dump(mode="json"))

    def describe_batch(self, result: _Result) -> _Progress:
        """``processing_status``; done = succeeded, failed = errored + canceled + expired,
        total = all five counts (``processing`` included); the outcome counts as detail."""
        raw = result.raw_response or {}
        counts = raw.get("request_counts") or {}
        n = {k: int(counts.get(k) or 0) for k in _OUTCOMES}
        shown = [f"{k} {v}" for k, v in n.items() if v]
        return _Progress(
            provider_status=str(raw.get("processing_status") or result.status),
            completed=n["succeeded"],
            failed=n["errored"] + n["canceled"] + n["expired"],
            total=sum(n.values()),
            created_at=_parse_timestamp(raw.get("created_at")),
            detail=", ".join(shown),
        )

    def retrieve_results(
        self, provider_batch_id: str, config: AnthropicBatchConfig
    ) -> Iterator[ProviderResult]:
        """Stream the batch's results file; ``succeeded``, ``errored``, ``canceled``,
        ``expired``, one neutral dict per line (:mod:`mmirage_beam.results`).

        The raw bytes of ``results()`` are read through the SDK's
        ``with_streaming_response`` (so the SDK's own JSONL decoder, which ends the whole
        download on the first damaged line, is never used), split on ``\\n`` only and
        parsed line by line: a damaged line is a ``malformed_response`` for its custom_id
        (or an unknown line). A download error is retried; a retry skips the lines
        already read. Memory: one line at a time.
        """

        @contextlib.contextmanager
        def open_stream() -> Iterator[Iterator[bytes]]:
            stream = self._client.messages.batches.with_streaming_response.results
            with stream(provider_batch_id) as response:
                yield response.iter_bytes()

        lines = self.stream_lines_with_retries(
            f"Anthropic messages.batches.results ({provider_batch_id})",
            open_stream,
            self.lookup_retry_filter(),  # results() looks the batch up first
        )
        yield from results_from_lines(
            lines, normalise_result, f"results file of batch {provider_batch_id}"
        )


#: ``stop_reason`` values that mean the answer was cut (Anthropic Messages API
#: reference, "stop_reason").
_CUT_STOP_REASONS = ("max_tokens", "model_context_window_exceeded")


def content_text(content: Sequence[Any]) -> Optional[str]:
    """The text of a Claude ``Message``'s ``content`` blocks: its ``text`` blocks' texts
    joined (a None text counts as ""), or None when a text block's ``text`` is not a
    string (a malformed answer)."""
    blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if any(not isinstance(b.get("text"), (str, type(None))) for b in blocks):
        return None
    return "".join(b.get("text") or "" for b in blocks)


def message_outcome(
    cid: Optional[str], text: str, stop: Any, tokens: Mapping[str, int]
) -> ProviderResult:
    """The result of a Claude ``Message`` (here, and on Bedrock) of text ``text``
    (:func:`content_text`) and ``stop_reason`` ``stop``: ``refusal`` -> ``refusal``,
    ``max_tokens`` or ``model_context_window_exceeded`` -> ``truncated`` (the text kept
    as ``raw_text``), no text -> ``empty``, else the text; ``tokens`` (``input_tokens``,
    ``output_tokens``... as ints) on the result either way. Source: Anthropic Messages
    API reference, "stop_reason"."""
    if stop == "refusal":
        error = ResultError(REFUSAL, "the model refused (stop_reason: refusal)", None, text or None)
    elif stop in _CUT_STOP_REASONS:
        error = ResultError(
            TRUNCATED, f"the answer was cut (stop_reason: {stop})", None, text or None
        )
    elif not text:
        error = ResultError(EMPTY, f"the answer is empty (stop_reason: {stop})")
    else:
        return ProviderResult(cid, generated_text=text, **tokens)
    return ProviderResult(cid, error=error, **tokens)


def normalise_result(item: Any) -> ProviderResult:
    """One Anthropic result line (parsed JSON) -> its :class:`ProviderResult`.

    Success needs ``result.type == "succeeded"`` with a ``message`` object; its
    ``stop_reason`` ``refusal`` -> ``refusal``, ``max_tokens`` (or
    ``model_context_window_exceeded``) -> ``truncated``, and no text -> ``empty``, with
    the text kept as ``raw_text`` and usage reported (``cache_read_input_tokens`` /
    ``cache_creation_input_tokens`` too, when non-zero).

    Raises:
        mmirage_beam.results.MalformedResult: the line is JSON of the wrong shape.
    """
    cid = line_id(item)
    res = item.get("result")
    if not isinstance(res, dict):
        raise MalformedResult("'result' is not an object", cid)
    kind = res.get("type")
    if kind == "succeeded":
        message = res.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return ProviderResult(
                cid,
                error=ResultError(
                    MALFORMED_RESPONSE, "succeeded without a message (no message.content list)"
                ),
            )
        tokens: Dict[str, int] = {}
        usage = message.get("usage")
        if isinstance(usage, dict) and "input_tokens" in usage:
            tokens["input_tokens"] = token_count(usage["input_tokens"]) or 0
            tokens["output_tokens"] = token_count(usage.get("output_tokens")) or 0
            # prompt caching: tokens read from / written to the cache, not in input_tokens
            # (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching)
            for key in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                if token_count(usage.get(key)):
                    tokens[key] = token_count(usage[key])
        text = content_text(message["content"])
        if text is None:
            error = ResultError(
                MALFORMED_RESPONSE, "succeeded with a text block whose text is not a string"
            )
            return ProviderResult(cid, error=error, **tokens)
        return message_outcome(cid, text, message.get("stop_reason"), tokens)
    if kind == "errored":
        outer = res.get("error") if isinstance(res.get("error"), dict) else {}
        err = outer.get("error") if isinstance(outer.get("error"), dict) else outer
        error = ResultError(
            kind_text(err.get("type")) or "api_error", message_text(err.get("message"))
        )
        return ProviderResult(cid, error=error)
    if kind in ("canceled", "expired"):
        why = {
            "canceled": "the batch was canceled before this request ran",
            "expired": "the batch expired (24 h) before this request ran",
        }[kind]
        return ProviderResult(cid, error=ResultError(kind, why))
    raise MalformedResult(f"unknown result type {kind!r}", cid)


class AnthropicImageBlock(TypedDict):
    """An image content block (``{"type": "image", "source": {"type": "base64",
    "media_type", "data"} | {"type": "url", "url"}}``, anthropic ``ImageBlockParam``)."""

    type: str
    source: Dict[str, str]


class AnthropicMessageParams(TypedDict, total=False):
    """A batch request's ``params`` (anthropic ``MessageCreateParamsNonStreaming``),
    keys in the order they are sent."""

    model: str
    max_tokens: int
    messages: List[Dict[str, Union[str, List[Dict[str, Any]]]]]
    temperature: float
    top_p: float
    output_config: Dict[str, Any]


class ClaudeOptions(TypedDict, total=False):
    """The optional tail of a Claude Messages body (:func:`claude_options`), keys in the
    order they are sent."""

    temperature: float
    top_p: float
    output_config: Dict[str, Any]


class ClaudePlatformBody(TypedDict, total=False):
    """A Claude Messages body on a cloud platform: :class:`AnthropicMessageParams`
    without ``model`` (the platform names it) and with ``anthropic_version`` first
    (Amazon Bedrock user guide, "Anthropic Claude Messages API"; Vertex AI, "Batch
    predictions with Anthropic Claude models"), keys in the order they are sent."""

    anthropic_version: str
    max_tokens: int
    messages: List[Dict[str, Any]]
    temperature: float
    top_p: float
    output_config: Dict[str, Any]


class AnthropicBatchLine(TypedDict):
    """One request of a message batch: ``{"custom_id", "params"}`` (anthropic
    ``batch_create_params.Request``)."""

    custom_id: str
    params: AnthropicMessageParams


def message_params(payload: Dict[str, Any], config: Any) -> AnthropicMessageParams:
    """The Messages API ``params`` of a neutral payload: ``model``, ``max_tokens``,
    one user message (the prompt text, then the images as blocks), ``temperature`` /
    ``top_p`` when set, a JSON schema as ``output_config.format``. ``config`` is an
    :class:`AnthropicBatchConfig` or any object with those fields (Claude on Vertex AI).

    Raises:
        mmirage_beam.errors.RequestBuildError: more images than a request may hold, or
            an image Anthropic refuses.
    """
    text = prompt_text(payload["messages"])
    images = payload.get("images") or []
    if len(images) > MAX_IMAGES_PER_REQUEST:
        raise images_error(
            images,
            f"the request holds {len(images)} images; Anthropic accepts at most "
            f"{MAX_IMAGES_PER_REQUEST} per request ({VISION_LIMITS_SOURCE})",
        )
    max_side = MANY_IMAGES_MAX_SIDE_PX if len(images) > MANY_IMAGES_THRESHOLD else MAX_IMAGE_SIDE_PX
    if images:
        content: Any = [{"type": "text", "text": text}]
        content += [_image_block(img, max_side, len(images)) for img in images]
    else:
        content = text
    params: AnthropicMessageParams = {
        "model": config.model,
        "max_tokens": config.max_tokens,
        "messages": [{"role": "user", "content": content}],
    }
    params.update(claude_options(payload, config))
    return params


def claude_options(payload: Mapping[str, Any], config: Any) -> ClaudeOptions:
    """What follows ``messages`` in a Claude Messages body, here and on the platforms
    that serve Claude (Bedrock): ``temperature`` and ``top_p`` when ``config`` sets them
    (floats), then the payload's ``json_schema`` as ``output_config.format`` (Anthropic
    Messages API reference, structured outputs), in that order.

    Args:
        payload: the neutral payload (its ``json_schema``, or None).
        config: any object with ``temperature`` and ``top_p`` (None: unset).
    """
    options: ClaudeOptions = {}
    if config.temperature is not None:
        options["temperature"] = config.temperature
    if config.top_p is not None:
        options["top_p"] = config.top_p
    schema = payload.get("json_schema")
    if schema is not None:
        options["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return options


def _image_block(img: Dict[str, Any], max_side_px: int, n_images: int) -> AnthropicImageBlock:
    if img.get("data") is None:
        return {"type": "image", "source": {"type": "url", "url": img["url"]}}
    if img["media_type"] not in ACCEPTED_IMAGE_TYPES:
        raise image_error(
            img,
            f"image {img['source']!r} is {img['media_type']}; Anthropic accepts only JPEG, "
            "PNG, GIF and WEBP",
        )
    if len(img["data"]) > MAX_IMAGE_BYTES:
        raise image_error(
            img,
            f"image {img['source']!r} is {img['size_bytes']} bytes ({len(img['data'])} as "
            f"base64), over Anthropic's 5 MB ({MAX_IMAGE_BYTES} bytes) per-image limit",
        )
    width, height = img.get("width"), img.get("height")
    if width is not None and height is not None and max(width, height) > max_side_px:
        many = (
            f" (the limit for a request with more than {MANY_IMAGES_THRESHOLD} images; "
            f"this one holds {n_images})"
            if max_side_px == MANY_IMAGES_MAX_SIDE_PX
            else ""
        )
        raise image_error(
            img,
            f"image {img['source']!r} is {width} x {height} px; Anthropic accepts at most "
            f"{max_side_px} px per side{many} ({VISION_LIMITS_SOURCE})",
        )
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": img["media_type"], "data": img["data"]},
    }


_OUTCOMES = ("processing", "succeeded", "errored", "canceled", "expired")
