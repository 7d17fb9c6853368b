"""The Gemini API (Developer API, ``v1beta`` and ``v1``) as google-genai 2.34 (``v1beta``)
and 3.x (``v1`` by default) speak it: resumable
file uploads, batch jobs (``models/{model}:batchGenerateContent``, ``batches/{id}`` get,
list, cancel, delete), file download and ``countTokens``.

Paths and headers are those of the installed SDK (``google/genai/files.py``,
``batches.py``, ``_api_client.py``, ``_extra_utils.prepare_resumable_upload``):

- ``POST /upload/v1beta/files`` with ``X-Goog-Upload-Protocol: resumable`` and
  ``X-Goog-Upload-Command: start`` (body ``{"file": {mimeType, sizeBytes, displayName}}``,
  ``X-Goog-Upload-Header-Content-Length``) answers ``X-Goog-Upload-URL`` and
  ``X-Goog-Upload-Status: active``; the bytes follow to that URL in chunks with
  ``X-Goog-Upload-Command: upload`` (``upload, finalize`` on the last) and
  ``X-Goog-Upload-Offset``; the finalize answers ``X-Goog-Upload-Status: final`` and
  ``{"file": File}``. 400 for an offset that is not the bytes received so far, a size
  other than the declared one, or a file over 2 GB.
- ``POST /v1beta/models/{model}:batchGenerateContent`` ``{"batch": {"displayName",
  "inputConfig": {"fileName": "files/..."}}}``: the job (an operation whose ``metadata``
  is the ``GenerateContentBatch``: ``state`` ``BATCH_STATE_*``, ``createTime``,
  ``output.responsesFile`` once succeeded). Inline requests (``"inputConfig":
  {"requests": {"requests": [{"request", "metadata"?}]}}``, google-genai
  ``batches.create(src=[...])``, up to 20 MB in all) run through the same checks,
  markers and lifecycle and are answered in ``output.inlinedResponses.inlinedResponses``
  (``GeminiApi._create_inline``); inline embeddings requests likewise, answered in
  ``output.inlinedEmbedContentResponses.inlinedResponses``.
- ``POST /v1beta/models/{model}:asyncBatchEmbedContent`` (``batches.create_embeddings``),
  the same body: an embeddings job (``EmbedContentBatch``), whose lines ``{"key",
  "request": {"content", "output_dimensionality"?}}`` are answered ``{"key", "response":
  {"embedding": {"values"}, "tokenCount"}}`` (:func:`embed_response_line`).
- ``GET /v1beta/batches/{id}``, ``GET /v1beta/batches?pageSize=&pageToken=`` (newest
  first, ``{"operations", "nextPageToken"}``), ``POST /v1beta/batches/{id}:cancel``,
  ``DELETE /v1beta/batches/{id}``.
- ``GET /v1beta/files/{id}``, ``GET /v1beta/files/{id}:download?alt=media`` and the
  ``downloadUri`` form ``GET /download/v1beta/files/{id}:download?alt=media`` (litellm's;
  only generated files, as the real service), ``GET /v1beta/files?pageSize=&pageToken=``
  (``files.list``), ``DELETE /v1beta/files/{id}`` (``files.delete``).
- ``POST /v1beta/models/{model}:countTokens`` ``{"contents"}``: ``{"totalTokens": N}``,
  N being the ``usageMetadata.promptTokenCount`` a batch reports for the same contents.

Every path is served under ``v1`` too (``/v1/batches/{id}``, ``/upload/v1/files``...),
which google-genai 3.x calls by default; :func:`serves` tells those from OpenAI's
``/v1/files`` and ``/v1/batches`` on the same port.

Each input line is ``{"key", "request"}``; ``request`` is validated against the SDK's
own pydantic types (``types.Content`` for ``contents`` / ``system_instruction``,
``types.GenerationConfig``, ``types.SafetySetting``, ``types.Tool``; both snake_case and
camelCase names, unknown fields refused), and every response line is checked against
``types.GenerateContentResponse`` before it is written. A line that is not JSON, has no
``key`` or repeats one fails the whole job (``BATCH_STATE_FAILED`` with ``error``); a
request that does not validate gets an error line (400 ``INVALID_ARGUMENT``).

Lifecycle with delay ``D``: ``PENDING`` for ``D/3``, ``RUNNING`` until ``D``, then
``SUCCEEDED`` (``FAILED`` right after pending when the file is invalid; ``EXPIRED`` or
``CANCELLED`` when scripted or cancelled, with no responses file, as the real service
"expires with no results"). Markers (see the package docstring) map onto Gemini's own
outcomes: ``refusal`` -> ``finishReason: SAFETY`` with no content, ``content_filter`` ->
``PROHIBITED_CONTENT``, ``length`` -> ``MAX_TOKENS`` with the cut text, ``empty`` -> no
parts; failures are ``{"key", "error": {code, message, status}}`` lines (built, with the
request and response checks, by :mod:`~mmirage_beam.providers.gemini.fake_bodies`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Optional

from werkzeug.routing import Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.gemini import fake_service
from mmirage_beam.providers.gemini.fake_bodies import (
    FAILURES,
    broken_line,
    candidate_response,
    check_response,
    contents_tokens,
    error_line,
    get_field,
    json_schema_of,
    prompt_of,
    request_model,
)
from mmirage_beam.providers.gemini.fake_service import GEMINI
from mmirage_beam.testing.fake_provider import lifecycle, scripting
from mmirage_beam.testing.fake_provider.answers import make_answer
from mmirage_beam.testing.fake_provider.routing import route_rules
from mmirage_beam.testing.fake_provider.scripting import UNKNOWN_CUSTOM_ID, error_marker
from mmirage_beam.testing.fake_provider.store import Batch, Item, Store, jsonl, rfc3339
from mmirage_beam.testing.fake_provider.wire import (
    NOT_JSON,
    ApiError,
    json_payload,
    json_response,
    new_id,
    numbered_json_lines,
)

#: Gemini batch mode docs: input files up to 2 GB.
MAX_FILE_BYTES = 2_000_000_000
_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 500: "INTERNAL", 429: "RESOURCE_EXHAUSTED"}
_UPLOAD_ID = re.compile(r"^[a-z0-9]{1,64}$")


#: The API versions served: google-genai 2.x calls ``v1beta``, 3.x ``v1`` (its
#: ``GOOGLE_AI_API_DEFAULT_VERSION``; ``http_options.api_version`` picks another).
API_VERSIONS = ("v1beta", "v1")
_VERSION = "<any(v1beta, v1):api_version>"


def routes() -> list[Rule]:
    """New URL rules of the Gemini endpoints under ``v1beta`` and ``v1`` (a rule binds to
    one map: one set per server); the endpoint names are :class:`GeminiApi`'s handlers and
    each match carries an ``api_version`` argument that :func:`serves`'s caller drops."""
    v = _VERSION
    return route_rules(
        {
            f"/upload/{v}/files": {"POST": "gemini_files_upload"},
            f"/{v}/files/<file_id>:download": {"GET": "gemini_files_download"},
            f"/download/{v}/files/<file_id>:download": {"GET": "gemini_files_download"},
            f"/{v}/files": {"GET": "gemini_files_list"},
            f"/{v}/files/<file_id>": {"GET": "gemini_files_get", "DELETE": "gemini_files_delete"},
            f"/{v}/models/<model>:batchGenerateContent": {"POST": "gemini_batches_create"},
            f"/{v}/models/<model>:asyncBatchEmbedContent": {
                "POST": "gemini_batches_create_embeddings"
            },
            f"/{v}/models/<model>:countTokens": {"POST": "gemini_count_tokens"},
            f"/{v}/batches": {"GET": "gemini_batches_list"},
            f"/{v}/batches/<batch_id>:cancel": {"POST": "gemini_batches_cancel"},
            f"/{v}/batches/<batch_id>": {
                "GET": "gemini_batches_get",
                "DELETE": "gemini_batches_delete",
            },
        }
    )


def serves(request: Request) -> bool:
    """Whether ``request`` is a Gemini call rather than an OpenAI one on the shared port.

    ``/v1beta/...``, ``/upload/...`` and ``/download/...`` are Gemini's alone. Under
    ``/v1/`` (OpenAI's ``/v1/files``, ``/v1/batches`` too) a call is Gemini's when it
    carries Gemini's credential (the ``x-goog-api-key`` header google-genai sends, or the REST docs'
    ``?key=``), or has Gemini's shape: a ``/v1/models/...`` path or a ``:verb`` suffix
    (``:download``, ``:cancel``), which OpenAI's ids (``file-...``, ``batch_...``) never
    have. ``/v1/messages...`` is Anthropic's.
    """
    path = request.path
    if path.startswith(("/v1beta/", "/upload/", "/download/")):
        return True
    if not path.startswith("/v1/") or path.startswith("/v1/messages"):
        return False
    if request.headers.get("x-goog-api-key", "").strip() or request.args.get("key"):
        return True
    return path.startswith("/v1/models/") or ":" in path.rsplit("/", 1)[-1]


def _gemini_error(status: int, message: str) -> ApiError:
    return ApiError(status, _STATUS.get(status, "UNKNOWN"), message)


def _page(request: Request, default: int, maximum: int) -> tuple[int, int]:
    """``(pageSize, offset)`` of a list call: ``pageSize`` from 1 to ``maximum``
    (``default`` when absent), ``pageToken`` the offset (0 when absent); 400 otherwise."""
    try:
        size = int(request.args.get("pageSize", str(default)))
        start = int(request.args.get("pageToken") or "0")
    except ValueError:
        raise _gemini_error(400, "pageSize and pageToken must be integers.") from None
    if not 1 <= size <= maximum or start < 0:
        raise _gemini_error(400, f"pageSize must be in 1..{maximum}.")
    return size, start


class GeminiApi:
    """The Gemini endpoints over a shared :class:`Store` (handlers named ``gemini_*``).

    Uploaded and generated files live in ``self.files`` (``id -> record``),
    uploads in progress in ``self.uploads`` (in ``store.provider_state``).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        """Uploaded and generated files, ``id -> record`` (emptied by ``reset()``)."""
        return self.store.provider_state.setdefault(GEMINI, {}).setdefault("files", {})

    @property
    def uploads(self) -> dict[str, dict[str, Any]]:
        """Resumable uploads in progress, ``upload_id -> record``."""
        return self.store.provider_state.setdefault(GEMINI, {}).setdefault("uploads", {})

    # -- files ----------------------------------------------------------------------------

    def gemini_files_upload(self, request: Request) -> Response:
        """``POST /upload/v1beta/files``: the resumable protocol's start, then its chunks."""
        command = request.headers.get("X-Goog-Upload-Command", "").replace(" ", "").lower()
        upload_id = request.args.get("upload_id")
        if command == "start":
            if request.headers.get("X-Goog-Upload-Protocol", "").lower() != "resumable":
                raise _gemini_error(400, "X-Goog-Upload-Protocol must be 'resumable'.")
            payload = json_payload(request)
            meta = payload.get("file") if isinstance(payload.get("file"), Mapping) else {}
            declared = request.headers.get("X-Goog-Upload-Header-Content-Length")
            try:
                size = int(declared if declared is not None else get_field(meta, "size_bytes"))
            except (TypeError, ValueError):
                raise _gemini_error(400, "The upload's size is required.") from None
            if size > MAX_FILE_BYTES:
                raise _gemini_error(
                    400, f"File size {size} exceeds the maximum of {MAX_FILE_BYTES} bytes."
                )
            uid = new_id("")
            with self.store.lock:
                self.uploads[uid] = {
                    "size": size,
                    "mime_type": request.headers.get("X-Goog-Upload-Header-Content-Type")
                    or get_field(meta, "mime_type")
                    or "application/octet-stream",
                    "display_name": get_field(meta, "display_name"),
                    "data": bytearray(),
                }
            url = f"{request.host_url.rstrip('/')}/upload/v1beta/files?upload_id={uid}"
            return json_response(
                {},
                headers={
                    "X-Goog-Upload-URL": url + "&upload_protocol=resumable",
                    "X-Goog-Upload-Status": "active",
                    "X-Goog-Upload-Chunk-Granularity": "8388608",
                },
            )
        if command not in ("upload", "upload,finalize") or not upload_id:
            raise _gemini_error(400, f"Unknown X-Goog-Upload-Command {command!r}.")
        data = request.get_data(cache=False)
        with self.store.lock:
            upload = self.uploads.get(upload_id)
            if upload is None or not _UPLOAD_ID.match(upload_id):
                raise _gemini_error(404, f"Upload {upload_id} not found.")
            offset = request.headers.get("X-Goog-Upload-Offset", "")
            if offset != str(len(upload["data"])):
                raise _gemini_error(
                    400,
                    f"X-Goog-Upload-Offset {offset!r} is not the {len(upload['data'])} bytes "
                    "received so far.",
                )
            upload["data"] += data
            if len(upload["data"]) > upload["size"]:
                raise _gemini_error(400, "More bytes than the declared size were sent.")
            if command == "upload":
                return Response(b"", headers={"X-Goog-Upload-Status": "active"})
            del self.uploads[upload_id]
            if len(upload["data"]) != upload["size"]:
                raise _gemini_error(
                    400,
                    f"The upload holds {len(upload['data'])} bytes, not the declared "
                    f"{upload['size']}.",
                )
            record = self._store_file(
                bytes(upload["data"]),
                upload["mime_type"],
                upload["display_name"],
                "UPLOADED",
                request.host_url,
            )
        return json_response({"file": record["view"]}, headers={"X-Goog-Upload-Status": "final"})

    def _store_file(
        self,
        content: bytes,
        mime_type: str,
        display_name: Optional[str],
        source: str,
        host_url: str,
        prefix: str = "",
    ) -> dict[str, Any]:
        fid = prefix + new_id("")[:16]
        now = self.store.clock()
        view: dict[str, Any] = {
            "name": f"files/{fid}",
            "mimeType": mime_type,
            "sizeBytes": str(len(content)),
            "createTime": rfc3339(now),
            "updateTime": rfc3339(now),
            "expirationTime": rfc3339(now + 48 * 3600),
            "sha256Hash": base64.b64encode(hashlib.sha256(content).digest()).decode(),
            "uri": f"{host_url.rstrip('/')}/v1beta/files/{fid}",
            "state": "ACTIVE",
            "source": source,
        }
        if display_name:
            view["displayName"] = display_name
        if source == "GENERATED":
            base = host_url.rstrip("/")
            view["downloadUri"] = f"{base}/download/v1beta/files/{fid}:download?alt=media"
        record = {"id": fid, "content": content, "view": view}
        self.files[fid] = record
        return record

    def _file(self, file_id: str) -> dict[str, Any]:
        record = self.files.get(file_id)
        if record is None:
            raise _gemini_error(404, f"File files/{file_id} not found.")
        return record

    def gemini_files_get(self, request: Request, file_id: str) -> Response:
        """``GET /v1beta/files/{id}``."""
        with self.store.lock:
            return json_response(self._file(file_id)["view"])

    def gemini_files_list(self, request: Request) -> Response:
        """``GET /v1beta/files?pageSize=&pageToken=`` (google-genai ``files.list``):
        ``{"files": [File], "nextPageToken"?}``, newest first, page size 1..100 (default
        10), the token being the offset (REST reference ``files.list``,
        https://ai.google.dev/api/files#method:-files.list: "pageSize ... Maximum 100";
        uploaded and generated files alike)."""
        size, start = _page(request, 10, 100)
        with self.store.lock:
            records = list(reversed(self.files.values()))
            body: dict[str, Any] = {"files": [r["view"] for r in records[start : start + size]]}
            if start + size < len(records):
                body["nextPageToken"] = str(start + size)
            return json_response(body)

    def gemini_files_delete(self, request: Request, file_id: str) -> Response:
        """``DELETE /v1beta/files/{id}`` (google-genai ``files.delete``): ``{}``; the
        file is gone (404 on a later get, delete or download, as the REST reference's
        ``files.delete`` says: "Deletes the File")."""
        with self.store.lock:
            self._file(file_id)
            del self.files[file_id]
        return json_response({})

    def gemini_files_download(self, request: Request, file_id: str) -> Response:
        """``GET /v1beta/files/{id}:download?alt=media`` (google-genai
        ``files.download``) or ``GET /download/v1beta/files/{id}:download?alt=media``
        (the ``downloadUri`` of a generated file, which litellm's Gemini batch
        retrieval reads): a generated file's bytes."""
        with self.store.lock:
            record = self._file(file_id)
            if record["view"]["source"] != "GENERATED":
                raise _gemini_error(400, "Only generated files can be downloaded.")
            content = record["content"]
        return Response(content, mimetype="application/octet-stream")

    # -- counting -------------------------------------------------------------------------

    def gemini_count_tokens(self, request: Request, model: str) -> Response:
        """``POST /v1beta/models/{model}:countTokens`` ``{"contents"}`` (or
        ``{"generateContentRequest"}``): ``{"totalTokens": N}``, the prompt's words plus
        10 per image, as a batch reports it."""
        payload = json_payload(request)
        body = get_field(payload, "generate_content_request") or payload
        try:
            tokens = contents_tokens(get_field(body, "contents"))
        except ValueError as exc:
            raise _gemini_error(400, f"Invalid contents: {exc}") from None
        return json_response({"totalTokens": tokens})

    # -- batches --------------------------------------------------------------------------

    def gemini_batches_create_embeddings(self, request: Request, model: str) -> Response:
        """``POST /v1beta/models/{model}:asyncBatchEmbedContent`` (file mode, google-genai
        ``batches.create_embeddings``): an embeddings job, whose lines
        ``{"key", "request": {"content", "output_dimensionality"?}}`` are answered by
        :func:`embed_response_line`."""
        return self.gemini_batches_create(request, model, endpoint=EMBED_ENDPOINT)

    def gemini_batches_create(
        self, request: Request, model: str, endpoint: str = "batchGenerateContent"
    ) -> Response:
        """``POST /v1beta/models/{model}:batchGenerateContent`` (file mode)."""
        payload = json_payload(request)
        batch_body = payload.get("batch")
        if not isinstance(batch_body, Mapping):
            raise _gemini_error(400, "batch: required.")
        input_config = get_field(batch_body, "input_config")
        if not isinstance(input_config, Mapping):
            raise _gemini_error(400, "batch.input_config: required.")
        inline = get_field(input_config, "requests")
        if inline is not None:
            return self._create_inline(request, model, batch_body, inline, endpoint)
        file_name = get_field(input_config, "file_name")
        if not isinstance(file_name, str) or not file_name.startswith("files/"):
            raise _gemini_error(400, "batch.input_config.file_name must be 'files/<id>'.")
        unknown_model = fake_service.gemini_model_error(model, self.store.models)
        if unknown_model is not None:
            raise unknown_model
        with self.store.lock:
            stored = self._file(file_name.split("/", 1)[1])
            lost_answer = self.store.admit_create(GEMINI)
            batch = self.store.new_batch(GEMINI, "", self.store.clock())
            batch.model = model
            batch.endpoint = endpoint
            batch.input_file_id = file_name
            batch.metadata = {"displayName": str(get_field(batch_body, "display_name") or "")}
            batch.items = self._process_file(batch, stored["content"])
            if lost_answer is not None:
                raise lost_answer
            return json_response(self.view(batch, batch.created - 1e-6, request.host_url))

    def _create_inline(
        self,
        request: Request,
        model: str,
        batch_body: Mapping[str, Any],
        inline: Any,
        endpoint: str = "batchGenerateContent",
    ) -> Response:
        """``batchGenerateContent`` with ``inputConfig.requests.requests`` (google-genai
        ``batches.create(src=[InlinedRequest])``): each ``{"request", "metadata"?}`` is
        run as a file line would be (same validation, markers and lifecycle); the
        responses come back in the job's ``output.inlinedResponses.inlinedResponses``,
        in request order, each ``{"response"}`` or ``{"error"}`` with its ``metadata``
        (REST reference, ``GenerateContentBatchOutput.inlinedResponses``: "The responses
        will be in the same order as the input requests"; ``InlinedResponse``). The
        batch mode guide puts inline requests at 20 MB in total
        (:data:`MAX_INLINE_BYTES`): a larger body is refused with 400. An embeddings job
        (``asyncBatchEmbedContent``, ``batches.create_embeddings(src={"inlined_requests":
        {"contents", "config"?}})``) has ``{"request": {"content", ...}}`` entries and
        answers in ``output.inlinedEmbedContentResponses.inlinedResponses``."""
        entries = get_field(inline, "requests") if isinstance(inline, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise _gemini_error(400, "batch.input_config.requests.requests: required.")
        size = request.content_length or len(request.get_data())
        if size > MAX_INLINE_BYTES:
            raise _gemini_error(
                400,
                f"Inline requests hold {size} bytes, over the {MAX_INLINE_BYTES} bytes "
                "allowed; upload a file instead.",
            )
        unknown_model = fake_service.gemini_model_error(model, self.store.models)
        if unknown_model is not None:
            raise unknown_model
        with self.store.lock:
            lost_answer = self.store.admit_create(GEMINI)
            batch = self.store.new_batch(GEMINI, "", self.store.clock())
            batch.model = model
            batch.endpoint = endpoint
            batch.metadata = {
                "displayName": str(get_field(batch_body, "display_name") or ""),
                "inline": "1",
            }
            for number, entry in enumerate(entries):
                # the fake's name of the request (create_counts, submitted_requests, the
                # transient markers): its metadata's "key" (mmirage sends the custom_id
                # there), else its place; the answers keep the request order either way
                meta = get_field(entry, "metadata") if isinstance(entry, Mapping) else None
                named = meta.get("key") if isinstance(meta, Mapping) else None
                key = named if isinstance(named, str) and named else str(number)
                body = get_field(entry, "request") if isinstance(entry, Mapping) else None
                if isinstance(body, Mapping):
                    body = {k: v for k, v in body.items() if k != "model"}
                self.store.record(batch, key, dict(entry) if isinstance(entry, Mapping) else {})
                if endpoint == EMBED_ENDPOINT:
                    item = self._process_embed_request(key, body)
                else:
                    item = self._process_request(key, body, model, inline=True)
                item.line = _inlined_response(item.line, meta, endpoint == EMBED_ENDPOINT)
                batch.items.append(item)
            if lost_answer is not None:
                raise lost_answer
            return json_response(self.view(batch, batch.created - 1e-6, request.host_url))

    def _process_file(self, batch: Batch, content: bytes) -> list[Item]:
        items: list[Item] = []
        seen: set[str] = set()
        for number, line in numbered_json_lines(content):
            if line is NOT_JSON:
                batch.errors = [{"message": f"Line {number} of the input file is not JSON."}]
                return []
            key = line.get("key") if isinstance(line, dict) else None
            if not isinstance(key, str) or not key:
                batch.errors = [{"message": f"Line {number} of the input file has no key."}]
                return []
            if key in seen:
                batch.errors = [{"message": f"Line {number} repeats the key {key!r}."}]
                return []
            seen.add(key)
            self.store.record(batch, key, line)
            if batch.endpoint == EMBED_ENDPOINT:
                items.append(self._process_embed_request(key, line.get("request")))
                continue
            items.append(self._process_request(key, line.get("request"), batch.model or ""))
        if not items:
            batch.errors = [{"message": "The input file holds no requests."}]
        return items

    def _process_embed_request(self, key: str, body: Any) -> Item:
        """One embeddings-job line: its vector (:func:`embed_response_line`), or the
        failure its text's error marker scripts (``FAILURES``)."""
        content = get_field(body, "content") if isinstance(body, Mapping) else None
        prompt, _images = prompt_of([content] if isinstance(content, Mapping) else None)
        if not isinstance(content, Mapping) or not prompt:
            line = error_line(key, 400, "INVALID_ARGUMENT", "Invalid request: content: required.")
            return Item(key, line, False)
        marker = self.store.resolve_transient(error_marker(prompt), key)
        if marker in FAILURES:
            code, status, message = FAILURES[marker]
            return Item(key, error_line(key, code, status, message), False)
        dims = get_field(body, "output_dimensionality")
        return Item(key, embed_response_line(key, prompt, dims), True)

    def _process_request(self, key: str, body: Any, model: str, inline: bool = False) -> Item:
        """One request: its response line (``{"key", "response"}``) or its error line.
        ``inline``: no file line to break, so the line markers answer normally and
        ``u2028``'s message stays a JSON string."""
        try:
            request_model().model_validate(body)
        except Exception as exc:  # pydantic.ValidationError: the request is refused
            message = " ".join(str(exc).split())
            line = error_line(key, 400, "INVALID_ARGUMENT", f"Invalid request: {message}")
            return Item(key, line, False)
        prompt, images = prompt_of(get_field(body, "contents"))
        generation = get_field(body, "generation_config") or {}
        schema = get_field(generation, "response_schema") or get_field(
            generation, "response_json_schema"
        )
        json_mode = get_field(generation, "response_mime_type") == "application/json"
        mode = "json_schema" if json_mode and schema else ("json_object" if json_mode else "text")
        marker = self.store.resolve_transient(error_marker(prompt), key)
        if marker in FAILURES:
            code, status, message = FAILURES[marker]
            line: dict[str, Any] | bytes = error_line(key, code, status, message)
            if marker == "u2028" and not inline:
                line = json.dumps(line, ensure_ascii=False).encode("utf-8")
            return Item(key, line, False)
        try:
            answer = make_answer(prompt, images, mode, json_schema_of(schema), marker)
        except ValueError as exc:
            line = error_line(key, 400, "INVALID_ARGUMENT", f"Invalid schema: {exc}")
            return Item(key, line, False)
        response, output_tokens = candidate_response(answer, model.split("/", 1)[-1])
        response["responseId"] = new_id("")
        check_response(response)
        line = {"key": key, "response": response}
        if marker in scripting.LINE_MARKERS and not inline:
            line = broken_line(marker, key, line, answer.text)
        return Item(key, line, True, answer.input_tokens, output_tokens)

    def _batch(self, batch_id: str) -> Batch:
        batch = self.store.batches.get(batch_id)
        if batch is None or batch.provider != GEMINI or batch.deleted:
            raise _gemini_error(404, f"Batch batches/{batch_id} not found.")
        return batch

    def gemini_batches_get(self, request: Request, batch_id: str) -> Response:
        """``GET /v1beta/batches/{id}``."""
        with self.store.lock:
            batch = self._batch(batch_id)
            return json_response(self.view(batch, self.store.clock(), request.host_url))

    def gemini_batches_list(self, request: Request) -> Response:
        """``GET /v1beta/batches?pageSize=&pageToken=``, newest first (page size 1..1000,
        default 50; the token is the offset)."""
        size, start = _page(request, 50, 1000)
        with self.store.lock:
            now = self.store.clock()
            jobs = [
                b
                for b in reversed(self.store.batches.values())
                if b.provider == GEMINI and not b.deleted
            ]
            window = jobs[start : start + size]
            body: dict[str, Any] = {
                "operations": [self.view(b, now, request.host_url) for b in window]
            }
            if start + size < len(jobs):
                body["nextPageToken"] = str(start + size)
            return json_response(body)

    def gemini_batches_cancel(self, request: Request, batch_id: str) -> Response:
        """``POST /v1beta/batches/{id}:cancel`` (400 once the job has ended)."""
        with self.store.lock:
            batch = self._batch(batch_id)
            refusal = _gemini_error(400, f"Batch batches/{batch_id} has already ended.")
            fake_service.cancel_google_job(batch, self.store.clock(), refusal)
            return json_response({})

    def gemini_batches_delete(self, request: Request, batch_id: str) -> Response:
        """``DELETE /v1beta/batches/{id}``."""
        with self.store.lock:
            self._batch(batch_id).deleted = True
            return json_response({})

    # -- lifecycle and views --------------------------------------------------------------

    def _state(self, batch: Batch, now: float) -> str:
        state = fake_service.google_job_state(batch, now)
        return "BATCH_STATE_" + ("RUNNING" if state == "CANCELLING" else state)

    def _finish(self, batch: Batch, host_url: str) -> None:
        if batch.finished:
            return
        batch.finished = True
        if _is_inline(batch):  # the responses are in the job itself (view)
            return
        lines = [it.line for it in batch.items]
        if batch.unknown_custom_id:
            lines.append(self._process_request(UNKNOWN_CUSTOM_ID, _EMPTY_REQUEST, "x").line)
        record = self._store_file(
            jsonl(scripting.shuffled(batch.shuffle_seed, lines)),
            "application/jsonl",
            f"responses of batches/{batch.id}",
            "GENERATED",
            host_url,
            prefix="batch-",
        )
        batch.output_file_id = record["view"]["name"]

    def view(self, batch: Batch, now: float, host_url: str = "") -> dict[str, Any]:
        """The batch job (an operation) at ``now``; the responses file is made once the
        job has succeeded."""
        state = self._state(batch, now)
        host_url = host_url or self.store.results_base_url
        done = state in _TERMINAL
        total = len(batch.items)
        finished = lifecycle.processed(batch, now) if not done else total
        ok = sum(1 for it in batch.items[:finished] if it.ok)
        kind = "EmbedContentBatch" if batch.endpoint == EMBED_ENDPOINT else "GenerateContentBatch"
        meta: dict[str, Any] = {
            "@type": f"type.googleapis.com/google.ai.generativelanguage.v1main.{kind}",
            "model": f"models/{batch.model}"
            if not str(batch.model).startswith("models/")
            else batch.model,
            "displayName": (batch.metadata or {}).get("displayName", ""),
            "inputConfig": {"fileName": batch.input_file_id},  # inline: replaced below
            "createTime": rfc3339(batch.created),
            "updateTime": rfc3339(now),
            "state": state,
            "name": f"batches/{batch.id}",
            "batchStats": {
                "requestCount": str(total),
                "successfulRequestCount": str(ok),
                "failedRequestCount": str(finished - ok),
                "pendingRequestCount": str(total - finished),
            },
        }
        out: dict[str, Any] = {"name": f"batches/{batch.id}", "metadata": meta, "done": done}
        if done:
            meta["endTime"] = rfc3339(now)
        if _is_inline(batch):
            meta["inputConfig"] = {"requests": {"requests": []}}  # not echoed back here
        if state == "BATCH_STATE_SUCCEEDED" and _is_inline(batch):
            field = (
                "inlinedEmbedContentResponses"
                if batch.endpoint == EMBED_ENDPOINT
                else "inlinedResponses"
            )
            output = {field: {"inlinedResponses": [it.line for it in batch.items]}}
            meta["output"] = output
            out["response"] = {
                "@type": f"type.googleapis.com/google.ai.generativelanguage.v1main.{kind}Output",
                **output,
            }
        elif state == "BATCH_STATE_SUCCEEDED":
            self._finish(batch, host_url)
            meta["output"] = {"responsesFile": batch.output_file_id}
            out["response"] = {
                "@type": f"type.googleapis.com/google.ai.generativelanguage.v1main.{kind}Output",
                "responsesFile": batch.output_file_id,
            }
        elif state == "BATCH_STATE_FAILED":
            out["error"] = {"code": 3, "message": (batch.errors or [{}])[0].get("message", "")}
        return out


#: the fake's name of embeddings jobs (``Batch.endpoint``), after the REST method
EMBED_ENDPOINT = "asyncBatchEmbedContent"
#: Gemini batch mode guide (https://ai.google.dev/gemini-api/docs/batch-mode): inline
#: requests suit batches "under 20MB" in total, in bytes of the create body.
MAX_INLINE_BYTES = 20_000_000


def _is_inline(batch: Batch) -> bool:
    return (batch.metadata or {}).get("inline") == "1"


def _inlined_response(line: Any, metadata: Any, embedding: bool = False) -> dict[str, Any]:
    """A result line (``{"key", "response" | "error"}``) as an ``InlinedResponse``
    (``{"response" | "error", "metadata"?}``, google-genai ``types.InlinedResponse``, or
    ``types.InlinedEmbedContentResponse`` when ``embedding``, checked with it; its
    ``error`` a ``google.rpc.Status`` of ``code`` and ``message``)."""
    from google.genai import types  # an optional extra, see gemini_bodies.request_model

    out = {k: v for k, v in dict(line).items() if k in ("response", "error")}
    if "error" in out:  # a google.rpc.Status: code, message (and details), no status name
        out["error"] = {k: v for k, v in out["error"].items() if k in ("code", "message")}
    if metadata is not None:
        out["metadata"] = metadata
    kind = types.InlinedEmbedContentResponse if embedding else types.InlinedResponse
    kind.model_validate(out)
    return out


def embed_response_line(key: str, text: str, dimensions: Any) -> dict[str, Any]:
    """The responses-file line of one embedded text: ``{"key", "response": {"embedding":
    {"values"}, "tokenCount"}}``, google-genai's ``SingleEmbedContentResponse`` (the
    response of one request of an embeddings batch; ``tokenCount`` an int64, a string in
    JSON, here the text's word count), ``dimensions`` numbers (8 when unset; the OpenAI
    fake's vector of the same text,
    :func:`~mmirage_beam.providers.openai.fake_bodies.embedding_vector`),
    checked with that SDK type."""
    from google.genai import types  # an optional extra, see gemini_bodies.request_model

    from mmirage_beam.providers.openai.fake_bodies import embedding_vector

    response = {
        "embedding": {"values": embedding_vector(text, dimensions)},
        "tokenCount": str(len(text.split())),
    }
    types.SingleEmbedContentResponse.model_validate(response)
    return {"key": key, "response": response}


_TERMINAL = tuple("BATCH_STATE_" + state for state in fake_service.GOOGLE_ENDED)
_EMPTY_REQUEST = {"contents": [{"role": "user", "parts": [{"text": ""}]}]}


class GeminiFake(fake_service.GeminiRoutes):
    """The fake registered as ``gemini``: :func:`routes` to :class:`GeminiApi`, for the
    requests :func:`serves` accepts."""

    def rules(self) -> list[Rule]:
        """:func:`routes`."""
        return routes()

    def make_api(self, store: Store) -> GeminiApi:
        """:class:`GeminiApi` over the shared store."""
        return GeminiApi(store)

    def claims(self, request: Request) -> bool:
        """:func:`serves`."""
        return serves(request)
