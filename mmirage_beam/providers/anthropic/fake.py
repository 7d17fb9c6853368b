"""The Anthropic Message Batches API: request-params checks, batch creation, retrieval,
listing, cancellation, deletion and the results JSONL."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.anthropic import fake_files, fake_service
from mmirage_beam.providers.anthropic.fake_service import ANTHROPIC
from mmirage_beam.testing.fake_provider import lifecycle, limits, scripting
from mmirage_beam.testing.fake_provider.answers import (
    count_parts,
    count_words,
    make_answer,
    schema_root_is_object,
    text_parts,
)
from mmirage_beam.testing.fake_provider.media import b64decode, sniff_image
from mmirage_beam.testing.fake_provider.scripting import UNKNOWN_CUSTOM_ID, error_marker
from mmirage_beam.testing.fake_provider.store import Batch, Item, Store, jsonl, rfc3339
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    json_payload,
    json_response,
    new_id,
    query_limit,
)


def _check_block(block: Any, where: str) -> str | None:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        return f"{where}.type: Field required"
    if block["type"] == "text" and not isinstance(block.get("text"), str):
        return f"{where}.text: Field required"
    if block["type"] != "image":
        return None
    source = block.get("source")
    if not isinstance(source, Mapping):
        return f"{where}.source: Field required"
    if source.get("type") == "url":
        return None if isinstance(source.get("url"), str) else f"{where}.source.url: Field required"
    if source.get("type") != "base64":
        return f"{where}.source.type: Input should be 'base64' or 'url'"
    media_type = source.get("media_type")
    if media_type not in fake_service.ANTHROPIC_MEDIA_TYPES:
        return (
            f"{where}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'"
        )
    data = source.get("data")
    decoded = b64decode(data) if isinstance(data, str) else None
    if decoded is None:
        return f"{where}.source.base64.data: The image data is not valid base64."
    if len(decoded) > fake_service.ANTHROPIC_MAX_IMAGE_BYTES:
        return (
            f"{where}.source.base64: image exceeds 5 MB maximum: {len(decoded)} bytes > "
            f"{fake_service.ANTHROPIC_MAX_IMAGE_BYTES} bytes"
        )
    actual = sniff_image(decoded)
    if actual != media_type:
        return (
            f"{where}.source.base64.data: Image does not match the provided media type {media_type}"
        )
    return None


# Models that take ``temperature`` and ``top_p`` together: the Claude 2, 3 and 4.0
# families. The newer ones (Opus 4.1, Sonnet/Haiku 4.5 and later) refuse both with
# "`temperature` and `top_p` cannot both be specified for this model" (reported against
# the real API in https://github.com/BerriAI/litellm/issues/15097 and
# https://github.com/cloud-apim/otoroshi-llm-extension/issues/140: "With previous models
# it's OK"). A name outside this list (``claude-haiku-4-5``, or one admitted with
# ``--models``) is taken as a newer model.
_BOTH_SAMPLING_PARAMS_PREFIXES = (
    "claude-2",
    "claude-instant",
    "claude-3",
    "claude-sonnet-4-0",
    "claude-opus-4-0",
    "claude-sonnet-4-2025",
    "claude-opus-4-2025",
)


def both_sampling_params_allowed(model: str) -> bool:
    """Whether ``model`` accepts ``temperature`` and ``top_p`` in one request."""
    return model.startswith(_BOTH_SAMPLING_PARAMS_PREFIXES)


def check_params(params: Any) -> str | None:
    """Validation of one request's params: a message means an ``errored`` result."""
    if not isinstance(params, Mapping):
        return "params: Input should be a valid dictionary"
    if not isinstance(params.get("model"), str) or not params["model"]:
        return "model: Field required"
    max_tokens = params.get("max_tokens")
    if max_tokens is None:
        return "max_tokens: Field required"
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    messages = params.get("messages")
    if messages is None:
        return "messages: Field required"
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or msg.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = msg.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            return f"messages.{i}.content: Input should be a valid string or list"
        for j, block in enumerate(content):
            problem = _check_block(block, f"messages.{i}.content.{j}")
            if problem:
                return problem
    temperature = params.get("temperature")
    if temperature is not None:
        if params.get("top_p") is not None and not both_sampling_params_allowed(params["model"]):
            return (
                "`temperature` and `top_p` cannot both be specified for this model. "
                "Please use only one."
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 <= temperature <= 1
        ):
            return "temperature: Input should be less than or equal to 1"
    output_config = params.get("output_config")
    if output_config is not None:
        fmt = output_config.get("format") if isinstance(output_config, Mapping) else None
        if fmt is not None:
            if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
                return "output_config.format.type: Input should be 'json_schema'"
            if not schema_root_is_object(fmt.get("schema")):
                return "output_config.format.schema: the schema root must be an object"
    return None


def prompt_of(params: Mapping[str, Any]) -> tuple[str, int, str, Any]:
    """(prompt text, image count, answer mode, schema) of validated params."""
    texts: list[str] = []
    images = 0
    for msg in params["messages"]:
        if msg["role"] == "user":
            texts += text_parts(msg.get("content"), ("text",))
        images += count_parts(msg.get("content"), ("image",))
    output_config = params.get("output_config")
    fmt = output_config.get("format") if isinstance(output_config, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return "\n".join(texts), images, "json_schema", fmt["schema"]
    return "\n".join(texts), images, "text", None


def context_tokens(params: Mapping[str, Any]) -> int:
    """Input tokens of what the request carries beside its user turns: the words of the
    ``system`` prompt (a string or text blocks) and of the ``tools`` (their JSON). The
    Messages API counts both as input ("The token count includes the system prompt,
    tools, images", token counting docs:
    https://docs.anthropic.com/en/docs/build-with-claude/token-counting)."""
    system = params.get("system")
    texts = [system] if isinstance(system, str) else text_parts(system, ("text",))
    tools = params.get("tools")
    tool_words = count_words(json.dumps(tools)) if isinstance(tools, list) and tools else 0
    return count_words("\n".join(texts)) + tool_words


def errored_line(custom_id: str, kind: str, message: str) -> dict[str, Any]:
    """An ``errored`` results line with error ``kind`` and ``message``."""
    return {
        "custom_id": custom_id,
        "result": {
            "type": "errored",
            "error": {"type": "error", "error": {"type": kind, "message": message}},
        },
    }


class AnthropicApi:
    """The Anthropic Message Batches endpoints over a shared :class:`Store`.

    Each public method named after an endpoint (``messages_batches_create``...) takes the
    Werkzeug request (and URL arguments) and returns the response, raising
    :class:`ApiError` for an HTTP error.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def messages_count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens`` (free, synchronous): ``{model, messages,
        system?, tools?, ...}`` -> ``{"input_tokens": N}`` (anthropic-sdk-python 2.14
        ``MessageTokensCount``). Invalid params are a 400 ``invalid_request_error`` here
        (not an ``errored`` result); ``max_tokens`` is not needed. N is what this fake
        reports as the request's ``usage.input_tokens`` in a batch: words of the user
        text, plus 10 per image, plus :func:`context_tokens` (system prompt and tools).
        An unknown model is a 404 ``not_found_error``, an unknown key a 400."""
        params = json_payload(request)
        problem = check_params(
            {"max_tokens": 1, **params} if isinstance(params, Mapping) else params
        )
        if problem is not None:
            raise ApiError(400, "invalid_request_error", problem)
        rule = fake_service.anthropic_problem(
            {k: v for k, v in params.items() if k != "max_tokens"}, self.store.models
        )
        if rule is not None:
            raise ApiError(404 if rule[0] == "not_found_error" else 400, *rule)
        prompt, images, _mode, _schema = prompt_of(params)
        words = count_words(prompt) + limits.TOKENS_PER_IMAGE * images
        return json_response({"input_tokens": words + context_tokens(params)})

    def messages_batches_create(self, request: Request) -> Response:
        """``POST /v1/messages/batches``: checks the requests, creates the batch."""
        size = request.content_length
        if size is not None and size > fake_service.ANTHROPIC_MAX_BODY_BYTES:
            raise ApiError(
                413,
                "request_too_large",
                f"Request exceeds the maximum allowed number of bytes "
                f"({fake_service.ANTHROPIC_MAX_BODY_BYTES}).",
            )
        payload = json_payload(request)
        requests = payload.get("requests")
        if not isinstance(requests, list):
            raise ApiError(400, "invalid_request_error", "requests: Field required")
        if not 1 <= len(requests) <= fake_service.ANTHROPIC_MAX_REQUESTS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"requests: List should have at least 1 item and at most "
                f"{fake_service.ANTHROPIC_MAX_REQUESTS:,} items, not {len(requests)}",
            )
        seen: set[str] = set()
        for i, entry in enumerate(requests):
            if not isinstance(entry, Mapping):
                raise ApiError(
                    400, "invalid_request_error", f"requests.{i}: Input should be an object"
                )
            custom_id = entry.get("custom_id")
            if not isinstance(custom_id, str) or not limits.CUSTOM_ID_RE.match(custom_id):
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: String should match pattern "
                    f"'^[a-zA-Z0-9_-]{{1,64}}$' (got {custom_id!r})",
                )
            if custom_id in seen:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_id "
                    "must be unique within a batch.",
                )
            seen.add(custom_id)
            if "params" not in entry:
                raise ApiError(400, "invalid_request_error", f"requests.{i}.params: Field required")
        with self.store.lock:
            lost_answer = self.store.admit_create(ANTHROPIC)
            batch = self.store.new_batch(ANTHROPIC, "msgbatch_", self.store.clock())
            for entry in requests:
                self.store.record(batch, entry["custom_id"], entry)
            batch.items = [self._process_request(e["custom_id"], e["params"]) for e in requests]
            if lost_answer is not None:
                raise lost_answer
            return json_response(self.view(batch, batch.created - 1e-6))

    def _process_request(self, custom_id: str, params: Any) -> Item:
        problem = check_params(params)
        if problem is not None:
            return Item(custom_id, errored_line(custom_id, "invalid_request_error", problem), False)
        rule = fake_service.anthropic_problem(params, self.store.models)
        if rule is not None:
            return Item(custom_id, errored_line(custom_id, *rule), False)
        prompt, images, mode, schema = prompt_of(params)
        marker = self.store.resolve_transient(error_marker(prompt), custom_id, prompt)
        if marker in _FAILURES:
            kind, message = _FAILURES[marker]
            line: dict[str, Any] | bytes = errored_line(custom_id, kind, message)
            if marker == "u2028":
                line = scripting.broken_line(
                    marker, custom_id, line, body_key="result", answer_text="", wrong_shape={}
                )
            return Item(custom_id, line, False)
        try:
            answer = make_answer(prompt, images, mode, schema, marker)
        except ValueError as exc:  # e.g. an unresolvable $ref deep in the schema
            line = errored_line(custom_id, "invalid_request_error", f"Invalid schema: {exc}")
            return Item(custom_id, line, False)
        # Anthropic has no content-filter finish: FAKE_ERROR:content_filter answers normally.
        if answer.finish == "content_filter":
            answer = make_answer(prompt, images, mode, schema)
        stop_reason = {"refusal": "refusal", "length": "max_tokens"}.get(answer.finish, "end_turn")
        content = (
            [] if answer.finish in ("empty", "refusal") else [{"type": "text", "text": answer.text}]
        )
        message_obj = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": answer.input_tokens + context_tokens(params),
                "output_tokens": answer.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "service_tier": "batch",
            },
        }
        line = {"custom_id": custom_id, "result": {"type": "succeeded", "message": message_obj}}
        if marker in scripting.LINE_MARKERS:
            line = scripting.broken_line(
                marker,
                custom_id,
                line,
                body_key="result",
                answer_text=answer.text,
                wrong_shape={"custom_id": custom_id, "result": {"type": "mystery"}},
            )
        return Item(custom_id, line, True, answer.input_tokens, answer.output_tokens)

    def messages_batches_retrieve(self, request: Request, batch_id: str) -> Response:
        """``GET /v1/messages/batches/{id}``."""
        with self.store.lock:
            batch = self.store.get_batch(ANTHROPIC, batch_id)
            return json_response(self.view(batch, self.store.clock()))

    def messages_batches_list(self, request: Request) -> Response:
        """``GET /v1/messages/batches?after_id=&before_id=&limit=``, newest first."""
        limit = query_limit(
            request, limits.DEFAULT_LIST_LIMIT, fake_service.ANTHROPIC_LIST_MAX_LIMIT
        )
        after_id, before_id = request.args.get("after_id"), request.args.get("before_id")
        if after_id and before_id:
            raise ApiError(
                400, "invalid_request_error", "Only one of after_id and before_id may be given."
            )
        with self.store.lock:
            now = self.store.clock()
            batches = [
                b
                for b in reversed(self.store.batches.values())
                if b.provider == ANTHROPIC and not b.deleted
            ]
            ids = [b.id for b in batches]
            if after_id:
                start = ids.index(after_id) + 1 if after_id in ids else len(ids)
                window = batches[start : start + limit]
                has_more = start + limit < len(batches)
            elif before_id:
                stop = ids.index(before_id) if before_id in ids else 0
                start = max(0, stop - limit)
                window = batches[start:stop]
                has_more = start > 0
            else:
                window = batches[:limit]
                has_more = limit < len(batches)
            return json_response(
                {
                    "data": [self.view(b, now) for b in window],
                    "has_more": has_more,
                    "first_id": window[0].id if window else None,
                    "last_id": window[-1].id if window else None,
                }
            )

    def messages_batches_cancel(self, request: Request, batch_id: str) -> Response:
        """``POST /v1/messages/batches/{id}/cancel`` (400 once ended)."""
        with self.store.lock:
            batch = self.store.get_batch(ANTHROPIC, batch_id)
            now = self.store.clock()
            message = f"Message batch {batch_id} has already ended and cannot be canceled."
            lifecycle.request_cancel(
                batch,
                now,
                ended=self.view(batch, now)["processing_status"] == "ended",
                refusal=ApiError(400, "invalid_request_error", message),
            )
            return json_response(self.view(batch, now))

    def _ended_batch(self, batch_id: str, not_ended: str) -> Batch:
        """The message batch ``batch_id``, which must have ended (call under the store's
        lock).

        Raises:
            ApiError: 404 for an unknown batch; 400 ``invalid_request_error`` with the
                message ``not_ended`` while it is still processing.
        """
        batch = self.store.get_batch(ANTHROPIC, batch_id)
        if self.view(batch, self.store.clock())["processing_status"] != "ended":
            raise ApiError(400, "invalid_request_error", not_ended)
        return batch

    def messages_batches_delete(self, request: Request, batch_id: str) -> Response:
        """``DELETE /v1/messages/batches/{id}`` (400 while processing)."""
        with self.store.lock:
            batch = self._ended_batch(
                batch_id,
                f"Message batch {batch_id} cannot be deleted while it is still processing; "
                "cancel it and wait until it has ended.",
            )
            batch.deleted = True
            return json_response({"id": batch_id, "type": "message_batch_deleted"})

    def messages_batches_results(self, request: Request, batch_id: str) -> Response:
        """``GET /v1/messages/batches/{id}/results``: the JSONL (400 until ended)."""
        with self.store.lock:
            batch = self._ended_batch(
                batch_id,
                f"Results for message batch {batch_id} are not available until it has ended.",
            )
            expire_at = batch.results_expire_at
            if expire_at is None:
                expire_at = batch.created + fake_service.ANTHROPIC_RESULTS_LIFETIME_SECS
            if self.store.clock() >= expire_at:
                raise ApiError(
                    404,
                    "not_found_error",
                    f"Results for message batch {batch_id} are no longer available.",
                )
            content = batch.results_jsonl
        return Response(content, mimetype="application/binary")

    def _finish_results(
        self, batch: Batch, processed: list[Item], rest: list[Item], cancelled: bool
    ) -> None:
        """Materialises the results JSONL once the batch has ended (called once, by
        :func:`lifecycle.finish_once`)."""
        kind = "canceled" if cancelled else "expired"
        lines = [it.line for it in processed]
        lines += [{"custom_id": it.custom_id, "result": {"type": kind}} for it in rest]
        if batch.unknown_custom_id:
            unknown = self._process_request(
                UNKNOWN_CUSTOM_ID,
                {
                    "model": "fake-model",
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": ""}],
                },
            )
            lines.append(unknown.line)
        batch.results_jsonl = jsonl(scripting.shuffled(batch.shuffle_seed, lines))
        succeeded = sum(1 for it in processed if it.ok)
        batch.final_counts = {
            "processing": 0,
            "succeeded": succeeded,
            "errored": len(processed) - succeeded,
            "canceled": len(rest) if cancelled else 0,
            "expired": 0 if cancelled else len(rest),
        }

    def view(self, batch: Batch, now: float) -> dict[str, Any]:
        """The message batch object at ``now`` (results materialised once ended)."""
        phase = fake_service.anthropic_phase(batch, now)
        ended = phase["processing_status"] == "ended"
        if ended:
            lifecycle.finish_once(batch, self._finish_results)
            counts = dict(batch.final_counts)
        else:
            counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
            counts["processing"] = len(batch.items)
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": phase["processing_status"],
            "request_counts": counts,
            "ended_at": rfc3339(phase["ended_at"]),
            "created_at": rfc3339(batch.created),
            "expires_at": rfc3339(batch.created + limits.BATCH_LIFETIME_SECS),
            "archived_at": None,
            "cancel_initiated_at": rfc3339(phase["cancel_initiated_at"]),
            "results_url": (
                f"{self.store.results_base_url}/v1/messages/batches/{batch.id}/results"
                if ended
                else None
            ),
        }


# Markers that make a request ``errored``: (error type, message).
_FAILURES: dict[str, tuple[str, str]] = {
    "server_error": ("api_error", "Internal server error (FAKE_ERROR:server_error)"),
    "invalid_request": (
        "invalid_request_error",
        "Scripted invalid request (FAKE_ERROR:invalid_request)",
    ),
    "rate_limit": ("rate_limit_error", "Rate limited (FAKE_ERROR:rate_limit)"),
    "timeout": ("timeout_error", "Request timed out (FAKE_ERROR:timeout)"),
    "u2028": ("invalid_request_error", scripting.U2028_MESSAGE),
}


class AnthropicFake(fake_service.AnthropicRoutes):
    """The fake registered as ``anthropic``: :class:`AnthropicApi` behind its routes, and
    the Files API beta (:mod:`~mmirage_beam.providers.anthropic.fake_files`) on the
    ``/v1/files`` calls that carry Anthropic's headers (OpenAI's fake, asked last, keeps
    the others)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.files_api = fake_files.AnthropicFilesApi(store)

    def make_api(self, store: Store) -> AnthropicApi:
        """:class:`AnthropicApi` over the shared store."""
        return AnthropicApi(store)

    def claims(self, request: Request) -> bool:
        """``/v1/messages`` and below, and Anthropic's ``/v1/files`` calls."""
        return fake_files.serves(request) or super().claims(request)

    def handle(self, request: Request) -> Response:
        """The Files API's calls to :attr:`files_api`, the rest through the routes."""
        if fake_files.serves(request):
            response = self.files_api.handle(request)
            response.headers[self.request_id_header] = new_id("req_")
            return response
        return super().handle(request)
