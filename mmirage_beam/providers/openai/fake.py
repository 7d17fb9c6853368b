"""The OpenAI Files and Batches API: uploads, batch creation (input-file validation),
retrieval, listing and cancellation, and the output and error files of a finished batch.

The checks of an input file and of a create call are in
:mod:`~mmirage_beam.providers.openai.fake_input`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.openai import fake_service
from mmirage_beam.providers.openai.fake_bodies import (
    HttpFailure,
    answer_line,
    check_body,
    error_line,
    http_line,
    oa_error,
    prompt_of,
    success_body,
)
from mmirage_beam.providers.openai.fake_input import (
    check_metadata,
    check_output_expires_after,
    is_batch_jsonl,
    parse_input_file,
)
from mmirage_beam.providers.openai.fake_service import OPENAI
from mmirage_beam.testing.fake_provider import lifecycle, limits, scripting
from mmirage_beam.testing.fake_provider.answers import count_words, make_answer
from mmirage_beam.testing.fake_provider.scripting import UNKNOWN_CUSTOM_ID, error_marker
from mmirage_beam.testing.fake_provider.store import (
    Batch,
    Item,
    Store,
    StoredFile,
    answered_response_item,
    failed_response_item,
    jsonl,
)
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    json_payload,
    json_response,
    query_limit,
)

__all__ = ["OpenAIApi", "is_batch_jsonl"]

if TYPE_CHECKING:
    from mmirage_beam.providers.openai.fake_profiles import Profile


class OpenAIApi:
    """The OpenAI Files and Batches endpoints over a shared :class:`Store`.

    Each public method named after an endpoint (``files_create``, ``batches_cancel``...)
    takes the Werkzeug request (and URL arguments) and returns the response, raising
    :class:`ApiError` for an HTTP error; the caller holds no lock.

    With a ``profile`` (an OpenAI-compatible service, see
    :mod:`~mmirage_beam.providers.openai.fake_profiles`) the files and batches are that
    profile's own and its window, line, size and expiry rules apply.
    """

    def __init__(self, store: Store, profile: Profile | None = None) -> None:
        self.store = store
        self.profile = profile
        self.owner = OPENAI if profile is None else profile.name

    def _get_file(self, file_id: str) -> StoredFile:
        stored = self.store.get_file(file_id)
        if stored.owner != self.owner:
            self.store.get_file("")  # the same 404 as an unknown id
        return stored

    def _get_batch(self, batch_id: str) -> Batch:
        batch = self.store.get_batch(OPENAI, batch_id)
        if batch.profile != self.profile_name:
            self.store.get_batch(OPENAI, "")  # the same 404 as an unknown id
        return batch

    @property
    def profile_name(self) -> str | None:
        """The profile's provider name, None for OpenAI itself."""
        return None if self.profile is None else self.profile.name

    # -- OpenAI files ---------------------------------------------------------------------

    def files_create(self, request: Request) -> Response:
        """``POST /v1/files`` (multipart ``file``, ``purpose``)."""
        upload = request.files.get("file")
        purpose = request.form.get("purpose")
        if upload is None:
            raise ApiError(
                400, "invalid_request_error", "Missing required parameter: 'file'.", param="file"
            )
        if purpose not in fake_service.OPENAI_FILE_PURPOSES:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid value for 'purpose': {purpose!r}.",
                param="purpose",
            )
        filename = upload.filename or ""
        maximum = (
            self.store.max_batch_file_bytes
            if purpose == "batch"
            else fake_service.OPENAI_MAX_UPLOAD_BYTES
        )
        if purpose == "batch" and self.profile is not None:
            maximum = self.profile.max_file_bytes
        content = upload.read(maximum + 1)
        if len(content) > maximum:
            raise ApiError(400, "invalid_request_error", "File is too large.", param="file")
        expires_after = None
        if purpose == "batch":
            if not is_batch_jsonl(filename, content):
                # The real service's text, type, param and code, as quoted in
                # https://github.com/BerriAI/litellm/pull/37527 (a notes.txt upload).
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "Invalid file format for Batch API. Must be .jsonl",
                )
            expires_after = fake_service.OPENAI_BATCH_FILE_LIFETIME_SECS
        with self.store.lock:
            stored = self.store.store_file(filename, purpose, content, expires_after)
            stored.owner = self.owner
            return json_response(stored.view())

    def files_list(self, request: Request) -> Response:
        """``GET /v1/files?after=&limit=&order=&purpose=``."""
        limit = query_limit(
            request,
            fake_service.OPENAI_FILE_LIST_MAX_LIMIT,
            fake_service.OPENAI_FILE_LIST_MAX_LIMIT,
        )
        purpose = request.args.get("purpose")
        with self.store.lock:
            files = [
                f
                for f in self.store.files.values()
                if purpose in (None, f.purpose) and f.owner == self.owner
            ]
            if request.args.get("order", "desc") == "desc":
                files.reverse()
            return json_response(_page([f.view() for f in files], request, limit, empty_id=""))

    def files_retrieve(self, request: Request, file_id: str) -> Response:
        """``GET /v1/files/{file_id}``."""
        with self.store.lock:
            return json_response(self._get_file(file_id).view())

    def files_delete(self, request: Request, file_id: str) -> Response:
        """``DELETE /v1/files/{file_id}``."""
        with self.store.lock:
            self._get_file(file_id)
            del self.store.files[file_id]
            return json_response({"id": file_id, "object": "file", "deleted": True})

    def files_content(self, request: Request, file_id: str) -> Response:
        """``GET /v1/files/{file_id}/content``: the raw bytes."""
        with self.store.lock:
            content = self._get_file(file_id).content
        return Response(content, mimetype="application/octet-stream")

    # -- OpenAI batches -------------------------------------------------------------------

    def batches_create(self, request: Request) -> Response:
        """``POST /v1/batches``: checks the arguments, creates and validates the batch."""
        payload = json_payload(request)
        input_file_id = payload.get("input_file_id")
        shown = payload.get("endpoint")  # echoed as given (Azure: "/chat/completions")
        endpoint = shown if self.profile is None else self.profile.canonical_endpoint(shown)
        window = payload.get("completion_window")
        metadata = payload.get("metadata")
        if endpoint not in fake_service.OPENAI_ENDPOINTS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid value: {shown!r}. Supported values are: "
                + ", ".join(repr(e) for e in fake_service.OPENAI_ENDPOINTS)
                + ".",
                param="endpoint",
                code="invalid_value",
            )
        if self.profile is not None:
            self.profile.check_window(window)
        elif window != "24h":
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid value: {window!r}. Supported values are: '24h'.",
                param="completion_window",
                code="invalid_value",
            )
        check_metadata(metadata)
        output_expires_after = check_output_expires_after(payload.get("output_expires_after"))
        with self.store.lock:
            known = self.store.files.get(input_file_id) if isinstance(input_file_id, str) else None
            if known is None or known.owner != self.owner:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"Invalid 'input_file_id': {input_file_id!r}. File not found.",
                    param="input_file_id",
                )
            stored = self.store.files[input_file_id]
            if stored.purpose != "batch":
                raise ApiError(
                    400,
                    "invalid_request_error",
                    f"File {input_file_id} has purpose {stored.purpose!r}; batches need "
                    "purpose 'batch'.",
                    param="input_file_id",
                )
            lost_answer = self.store.admit_create(OPENAI)
            batch = self._create_batch(stored, endpoint, metadata)
            batch.endpoint_shown = shown
            batch.completion_window = window
            batch.output_expires_after = output_expires_after
            if lost_answer is not None:
                raise lost_answer
            return json_response(self.view(batch, batch.created - 1e-6))

    def _create_batch(
        self, stored: StoredFile, endpoint: str, metadata: dict[str, str] | None
    ) -> Batch:
        now = self.store.clock()
        batch = self.store.new_batch(OPENAI, "batch_", now)
        batch.profile = self.profile_name
        if self.profile is not None and not self.profile.expires and batch.stop_kind == "expired":
            batch.stop_kind = "overrun"  # Azure: not expired, runs until cancelled
        batch.endpoint, batch.input_file_id, batch.metadata = endpoint, stored.id, metadata
        lines, errors, model = parse_input_file(stored.content, endpoint, self.profile)
        for line in lines:
            self.store.record(batch, line["custom_id"], line)
        if errors:
            batch.errors = errors
            return batch
        batch.model = model
        batch.items = [self._process_line(endpoint, line, now) for line in lines]
        batch.prompt_tokens = sum(item.input_tokens for item in batch.items)
        limit = self.store.script["enqueued_token_limit"]
        enqueued = batch.prompt_tokens
        if limit is not None:
            enqueued += sum(
                other.prompt_tokens
                for other in self.store.batches.values()
                if other.provider == OPENAI
                and other.profile == batch.profile
                and other is not batch
                and other.model == model
                and not fake_service.is_terminal(other, now)
            )
        if self.store.script["token_limit_exceeded"] or (limit is not None and enqueued > limit):
            batch.items = []
            batch.prompt_tokens = 0
            shown = f"{limit:,}" if limit is not None else "90,000"
            batch.errors = [
                {
                    "code": "token_limit_exceeded",
                    "message": f"Enqueued token limit reached for {model} in organization "
                    f"org-fake. Limit: {shown} enqueued tokens. Please try submitting an "
                    "input file with fewer tokens, or wait for your other batch jobs to "
                    "complete.",
                    "param": None,
                    "line": None,
                }
            ]
        return batch

    def _process_line(self, endpoint: str, line: Mapping[str, Any], now: float) -> Item:
        custom_id, body = line["custom_id"], line["body"]
        if endpoint in fake_service.OPENAI_UNFAKED_ENDPOINTS:
            failure = oa_error(
                400,
                f"The fake provider does not fake {endpoint} results; only "
                + ", ".join(
                    e
                    for e in fake_service.OPENAI_ENDPOINTS
                    if e not in fake_service.OPENAI_UNFAKED_ENDPOINTS
                )
                + ".",
                code="unsupported_endpoint",
            )
            return Item(custom_id, http_line(custom_id, failure), ok=False)
        failure = check_body(endpoint, body)
        if failure is None and self.profile is None:  # profiles: other services' models
            failure = fake_service.openai_failure(endpoint, body, self.store.models)
        if failure is not None:
            return Item(custom_id, http_line(custom_id, failure), ok=False)
        prompt, images, mode, schema = prompt_of(endpoint, body)
        input_tokens = count_words(prompt) + limits.TOKENS_PER_IMAGE * images
        marker = self.store.resolve_transient(error_marker(prompt), custom_id, prompt)
        if marker == "timeout":
            result = error_line(custom_id, "request_timeout", "The request timed out.")
            return Item(custom_id, result, ok=False, input_tokens=input_tokens)
        if marker in _FAILURES:
            result = http_line(custom_id, _FAILURES[marker])
            return failed_response_item(marker, custom_id, result, input_tokens)
        try:
            answer = make_answer(prompt, images, mode, schema, marker)
        except ValueError as exc:  # e.g. an unresolvable $ref deep in the schema
            failure = oa_error(400, f"Invalid schema: {exc}", code="invalid_json_schema")
            return Item(custom_id, http_line(custom_id, failure), ok=False)
        if marker == "error_body_200":
            response_body: dict[str, Any] = {"error": dict(_FAILURES["server_error"].error)}
        elif marker == "empty_body_200":
            response_body = {}
        else:
            response_body = success_body(endpoint, body, answer, now)
        result = answer_line(custom_id, 200, response_body)
        return answered_response_item(marker, custom_id, result, answer)

    def batches_retrieve(self, request: Request, batch_id: str) -> Response:
        """``GET /v1/batches/{batch_id}``."""
        with self.store.lock:
            return json_response(self.view(self._get_batch(batch_id), self.store.clock()))

    def batches_list(self, request: Request) -> Response:
        """``GET /v1/batches?after=&limit=``, newest first."""
        limit = query_limit(
            request, limits.DEFAULT_LIST_LIMIT, fake_service.OPENAI_BATCH_LIST_MAX_LIMIT
        )
        with self.store.lock:
            now = self.store.clock()
            views = [
                self.view(b, now)
                for b in reversed(self.store.batches.values())
                if b.provider == OPENAI and b.profile == self.profile_name
            ]
            return json_response(_page(views, request, limit))

    def batches_cancel(self, request: Request, batch_id: str) -> Response:
        """``POST /v1/batches/{batch_id}/cancel`` (409 once the batch has ended)."""
        with self.store.lock:
            batch = self._get_batch(batch_id)
            now = self.store.clock()
            status = self.view(batch, now)["status"]
            lifecycle.request_cancel(
                batch,
                now,
                ended=status in fake_service.OPENAI_TERMINAL,
                refusal=ApiError(
                    409, "invalid_request_error", f"Cannot cancel a batch with status '{status}'."
                ),
            )
            return json_response(self.view(batch, now))

    def _store_results_file(self, batch: Batch, kind: str, lines: list[Any]) -> str:
        """Store an ended batch's ``kind`` file (``"output"`` or ``"error"``): ``lines``
        (result line dicts, or ``bytes`` a marker scripted) as JSONL in the batch's
        shuffled order, owned by the batch's profile, expiring as the batch asked (else
        after the default file lifetime). Returns the file's id."""
        expires_after = fake_service.OPENAI_BATCH_FILE_LIFETIME_SECS
        if batch.output_expires_after is not None:
            expires_after = batch.output_expires_after["seconds"]
        stored = self.store.store_file(
            f"{batch.id}_{kind}.jsonl",
            "batch_output",
            jsonl(scripting.shuffled(batch.shuffle_seed, lines)),
            expires_after,
        )
        stored.owner = batch.profile or OPENAI
        return stored.id

    def _finish_results(
        self, batch: Batch, processed: list[Item], rest: list[Item], cancelled: bool
    ) -> None:
        """Materialises the output and error files once the batch has ended (called once,
        by :func:`lifecycle.finish_once`)."""
        ok_lines = [it.line for it in processed if it.ok]
        err_lines = [it.line for it in processed if not it.ok]
        if cancelled:
            code, message = "batch_cancelled", "This request was cancelled with its batch."
        else:
            code = "batch_expired"
            message = "This request could not be executed before the completion window expired."
        err_lines += [error_line(it.custom_id, code, message) for it in rest]
        if batch.unknown_custom_id:
            if ok_lines:
                answer = make_answer("", 0, "text", None)
                body = success_body(
                    batch.endpoint,
                    {"model": batch.model or "fake-model", "input": ""},
                    answer,
                    self.store.clock(),
                )
                ok_lines.append(answer_line(UNKNOWN_CUSTOM_ID, 200, body))
            else:
                err_lines.append(
                    http_line(UNKNOWN_CUSTOM_ID, oa_error(500, "Unknown request (fake)."))
                )
        if ok_lines:
            batch.output_file_id = self._store_results_file(batch, "output", ok_lines)
        if err_lines:
            batch.error_file_id = self._store_results_file(batch, "error", err_lines)
        elif batch.empty_error_file_id:
            batch.error_file_id = ""
        succeeded = sum(1 for it in processed if it.ok)
        total = len(batch.items)
        # Requests an expired batch never ran are not counted as failed (the real service
        # does not), so completed + failed < total is possible; cancelled ones are.
        failed = total - succeeded if cancelled else len(processed) - succeeded
        batch.final_counts = {"total": total, "completed": succeeded, "failed": failed}
        input_tokens = sum(it.input_tokens for it in processed if it.ok)
        output_tokens = sum(it.output_tokens for it in processed if it.ok)
        batch.usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }

    def view(self, batch: Batch, now: float) -> dict[str, Any]:
        """The batch object at ``now`` (output and error files made once it has ended)."""
        phase = fake_service.openai_phase(batch, now)
        status = phase.pop("status")
        terminal = status in ("completed", "failed", "expired", "cancelled")
        if terminal and status != "failed":
            lifecycle.finish_once(batch, self._finish_results)
        if status in ("validating", "failed") or (status == "cancelling" and not batch.items):
            counts = {"total": 0, "completed": 0, "failed": 0}
        elif terminal:
            counts = dict(batch.final_counts)
        else:
            done = lifecycle.processed(batch, now)
            if batch.cancel_requested_at is not None:
                done = min(done, lifecycle.processed(batch, batch.cancel_requested_at))
            succeeded = sum(1 for it in batch.items[:done] if it.ok)
            counts = {"total": len(batch.items), "completed": succeeded, "failed": done - succeeded}
        view: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint_shown or batch.endpoint,
            "model": batch.model,
            "errors": (
                {"object": "list", "data": copy.deepcopy(batch.errors)}
                if status == "failed"
                else None
            ),
            "input_file_id": batch.input_file_id,
            "completion_window": batch.completion_window,
            "status": status,
            "output_file_id": batch.output_file_id if terminal else None,
            "error_file_id": batch.error_file_id if terminal else None,
            "created_at": int(batch.created),
            "expires_at": int(batch.created + limits.BATCH_LIFETIME_SECS),
        }
        for key, value in phase.items():
            view[key] = None if value is None else int(value)
        view["request_counts"] = counts
        view["metadata"] = copy.deepcopy(batch.metadata)
        view["usage"] = copy.deepcopy(batch.usage) if terminal else None
        return view


def _page(
    items: list[dict[str, Any]], request: Request, limit: int, empty_id: str | None = None
) -> dict[str, Any]:
    """One page of a list (``after`` cursor); ``first_id``/``last_id`` are ``empty_id``
    for an empty page (the spec's ListFilesResponse requires strings there,
    ListBatchesResponse does not require them)."""
    after = request.args.get("after")
    start = 0
    if after:
        ids = [item["id"] for item in items]
        start = ids.index(after) + 1 if after in ids else len(items)
    page = items[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else empty_id,
        "last_id": page[-1]["id"] if page else empty_id,
        "has_more": start + limit < len(items),
    }


_FAILURES: dict[str, HttpFailure] = {
    "server_error": oa_error(
        500,
        "The server had an error while processing your request. Sorry about that! "
        "(FAKE_ERROR:server_error)",
    ),
    "invalid_request": oa_error(400, "Scripted invalid request (FAKE_ERROR:invalid_request)."),
    "rate_limit": HttpFailure(
        429,
        {
            "message": "Rate limit reached (FAKE_ERROR:rate_limit).",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        },
    ),
    "u2028": oa_error(400, scripting.U2028_MESSAGE),
}


class OpenAIFake(fake_service.OpenAIRoutes):
    """The fake registered as ``openai``: :class:`OpenAIApi` behind its routes."""

    def make_api(self, store: Store) -> OpenAIApi:
        """:class:`OpenAIApi` over the shared store."""
        return OpenAIApi(store)
