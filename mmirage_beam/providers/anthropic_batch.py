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
idempotency key, so a batch cannot be traced back to its run and chunk: the adapter
keeps the contract's default ``find_batch`` (always None, "cannot tell"; not overridden,
so a resumed run knows it cannot look batches up) and a retried create is never
preceded by an adoption step, unlike OpenAI.

The window that remains: a ``POST /v1/messages/batches`` that Anthropic *stored* but
whose answer was a retryable error (a 5xx or 529 sent after the batch was created) or
never arrived (the connection dropped or timed out after the body was sent) is retried
and creates a *second* batch with the same requests. What the user sees: two message
batches holding the same custom_ids, both processed and both billed; the receipt names
only the batch whose create answered (the last one), so ``check`` and ``merge`` follow
that one, and if both are ever receipted (e.g. one by a resumed run) ``merge`` keeps,
per custom_id, the newest successful result. A create refused before anything was
stored (a 400 or 413 validation error, which is never retried, or a 429 rate limit)
makes no batch. The same duplicate can come from a run that stopped between a stored
create and its receipt: the resume of that run cannot look the batch up either and
sends the chunk again.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Mapping, Sequence

from mmirage_beam.config.batch_provider import BatchProviderConfig
from mmirage_beam.images import image_error, images_error
from mmirage_beam.providers.base import BatchAdapterRegistry, BatchSubmissionAdapter
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.base import parse_timestamp as _parse_timestamp
from mmirage_beam.providers.retrying import make_retry_filter

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


class AnthropicBatchAdapter(BatchSubmissionAdapter):
    """``provider: anthropic``: builds Message Batch requests and drives the API.

    The client (``anthropic.Anthropic``) is built in :meth:`setup` with the key from
    ``ANTHROPIC_API_KEY``, the config's ``base_url`` and ``timeout_seconds``, and the
    SDK's retries off: every call is retried by :meth:`call_with_retries`.

    :meth:`find_batch` is the contract's default (None): message batches carry no
    metadata, so a create that Anthropic stored but answered with a retryable error is
    retried into a second batch with the same custom_ids (see the module docstring).
    """

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    # len('{"requests":[') + len(']}') - 1 (n lines carry n newlines; the body n-1 commas)
    chunk_overhead_bytes: ClassVar[int] = 14
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"ended": "completed", "canceling": "in_progress"}

    def setup(self, config: BatchProviderConfig) -> None:
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
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

    def is_retryable(self, exc: BaseException) -> bool:
        """Connection errors and timeouts (``anthropic.APIConnectionError``), and
        ``anthropic.APIStatusError`` with 408, 409, 429 or >= 500 (529 overloaded)."""
        retry_filter = getattr(self, "_retry_filter", None)
        return retry_filter(exc) if retry_filter is not None else super().is_retryable(exc)

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        text = _prompt_text(payload["messages"])
        images = payload.get("images") or []
        if len(images) > MAX_IMAGES_PER_REQUEST:
            raise images_error(
                images,
                f"the request holds {len(images)} images; Anthropic accepts at most "
                f"{MAX_IMAGES_PER_REQUEST} per request ({VISION_LIMITS_SOURCE})",
            )
        max_side = (
            MANY_IMAGES_MAX_SIDE_PX if len(images) > MANY_IMAGES_THRESHOLD else MAX_IMAGE_SIDE_PX
        )
        if images:
            content: Any = [{"type": "text", "text": text}]
            content += [_image_block(img, max_side, len(images)) for img in images]
        else:
            content = text
        params: Dict[str, Any] = {
            "model": config.model,
            "max_tokens": config.max_tokens,
            "messages": [{"role": "user", "content": content}],
        }
        if config.temperature is not None:
            params["temperature"] = config.temperature
        if config.top_p is not None:
            params["top_p"] = config.top_p
        schema = payload.get("json_schema")
        if schema is not None:
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return {"custom_id": custom_id, "params": params}

    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        """Create one message batch; the create is retried (see the module docstring for
        the duplicate-batch window this leaves).

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the create still
                failed after the last attempt.
            anthropic.APIStatusError: a non-retryable answer (e.g. 400, 413), at once.
        """
        body = list(requests)
        batch = self.call_with_retries(
            f"Anthropic messages.batches.create (chunk {chunk_id})",
            lambda: self._client.messages.batches.create(requests=body),
        )
        return batch.model_dump(mode="json")

    def parse_submission_result(self, raw_result: Dict[str, Any]) -> _Result:
        status = raw_result.get("processing_status")
        normalised = self._normalize_status(status)
        counts = raw_result.get("request_counts") or {}
        if (
            status == "ended"
            and not counts.get("succeeded")
            and any(counts.get(k) for k in ("errored", "canceled", "expired"))
        ):
            normalised = "failed"
        return _Result(
            provider_batch_id=raw_result["id"], status=normalised, raw_response=raw_result
        )

    def check_batch_status(self, provider_batch_id: str, config: BatchProviderConfig) -> _Result:
        batch = self.call_with_retries(
            f"Anthropic messages.batches.retrieve ({provider_batch_id})",
            lambda: self._client.messages.batches.retrieve(provider_batch_id),
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
        self, provider_batch_id: str, config: BatchProviderConfig
    ) -> Sequence[Dict[str, Any]]:
        """Stream ``results()``; ``succeeded``, ``errored``, ``canceled``, ``expired``.

        The whole download is retried (it is a read): an error while the stream is read
        starts it again from the first line.
        """

        def download() -> list[Dict[str, Any]]:
            return [
                normalise_result(item.model_dump(mode="json"))
                for item in self._client.messages.batches.results(provider_batch_id)
            ]

        return self.call_with_retries(
            f"Anthropic messages.batches.results ({provider_batch_id})", download
        )


def normalise_result(item: Dict[str, Any]) -> Dict[str, Any]:
    """One Anthropic result line -> the neutral result dict."""
    result: Dict[str, Any] = {"custom_id": item.get("custom_id")}
    res = item.get("result") or {}
    kind = res.get("type")
    if kind == "succeeded":
        message = res.get("message") or {}
        texts = [b.get("text", "") for b in message.get("content") or [] if b.get("type") == "text"]
        result["generated_text"] = "".join(texts)
        usage = message.get("usage") or {}
        if "input_tokens" in usage:
            result["input_tokens"] = int(usage["input_tokens"] or 0)
            result["output_tokens"] = int(usage.get("output_tokens") or 0)
    elif kind == "errored":
        err = ((res.get("error") or {}).get("error")) or {}
        result["error"] = {
            "type": err.get("type") or "api_error",
            "message": err.get("message") or "",
            "status_code": None,
        }
    else:
        why = {
            "canceled": "the batch was canceled before this request ran",
            "expired": "the batch expired (24 h) before this request ran",
        }.get(kind or "", "")
        result["error"] = {"type": kind or "unknown", "message": why, "status_code": None}
    return result


def _prompt_text(messages: Sequence[Dict[str, Any]]) -> str:
    content = messages[0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


def _image_block(img: Dict[str, Any], max_side_px: int, n_images: int) -> Dict[str, Any]:
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


BatchAdapterRegistry.register("anthropic", AnthropicBatchAdapter)
