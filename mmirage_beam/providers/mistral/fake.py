"""Mistral's Files and batch jobs API, as the mistralai SDK (3.7) calls it, under
``/mistral`` on the fake's port (``Mistral(server_url=fake.mistral_base_url)``): the
OpenAI fake owns ``/v1/files`` at the root, and Mistral's paths are the same.

Endpoints (``Authorization: Bearer <any non-empty key>``, else 401):

- ``POST /v1/files`` multipart ``file``, ``purpose`` (``fine-tune | batch | ocr |
  agentic_safety``), ``visibility``, ``expiry``: 400 without a file, 422 for an unknown
  purpose, 400 for a ``purpose=batch`` file over 512 MB (Mistral known limitations);
  ``GET /v1/files`` (``page``, ``page_size``, ``purpose``), ``GET /v1/files/{id}``,
  ``DELETE /v1/files/{id}``, ``GET /v1/files/{id}/content`` (octet-stream),
  ``GET /v1/files/{id}/url?expiry=H`` (``files.get_signed_url``: ``{"url"}``, a URL
  under ``/_signed/`` that answers the bytes without a key for H hours, 1..168).
- ``POST /v1/batch/jobs`` JSON, validated with the SDK's own ``CreateBatchJobRequest``
  (422 ``HTTPValidationError``-shaped ``detail`` otherwise); 404 for an unknown input
  file, 400 for a file of another purpose or an endpoint the fake does not answer
  (:data:`ENDPOINTS`: chat and FIM completions, embeddings, moderations and chat
  moderations; OCR, classifications, chat classifications, conversations and audio
  transcriptions are :mod:`~mmirage_beam.providers.mistral.fake_endpoints`', which
  also refuses a model its endpoint does not take). Exactly one of ``input_files`` and
  ``requests`` (inline batching, each
  ``{"custom_id"?, "body"}`` run as a line of a file, its index for a missing
  ``custom_id``), and one of ``model`` and ``agent_id`` (an agent's job, on
  ``/v1/chat/completions`` or ``/v1/conversations`` only: chat bodies checked with
  ``AgentsCompletionRequest``, answers named after the agent, ``model: null``;
  conversation bodies with ``ConversationRequest`` and the agent's ``agent_id``).
  Each line ``{"custom_id", "body"}`` is checked like the service does: a body that the
  SDK's ``ChatCompletionRequest`` refuses (with the job's model), or that has a key the
  type has no field for ("K: Extra inputs are not permitted") or ``stream: true``
  (:func:`~mmirage_beam.providers.mistral.fake_bodies.refusal`, the same check on every
  endpoint), becomes a 400 line in the error file; an unreadable line, a line without
  ``custom_id`` or ``body`` and a repeated ``custom_id`` are counted in the job's
  ``errors`` (``{message, count}``) and not run; an empty file or more than 100,000
  lines fails the job (``FAILED``). A job of ``endpoint: /v1/embeddings`` checks each
  body with ``EmbeddingRequest`` instead and answers ``EmbeddingResponse`` bodies of
  ``output_dimension`` numbers
  (:func:`~mmirage_beam.providers.mistral.fake_bodies.embeddings_response`).
- ``GET /v1/batch/jobs`` (``page``, ``page_size``, ``model``, ``status`` (repeated),
  ``agent_id``, ``created_after``, ``order_by`` (``created | -created``); every other
  query parameter
  is a metadata filter, as the SDK sends ``metadata={k: v}`` one pair per parameter):
  ``{"object": "list", "data", "total"}``. ``GET /v1/batch/jobs/{id}``,
  ``POST /v1/batch/jobs/{id}/cancel``, ``DELETE /v1/batch/jobs/{id}``;
  ``GET /v1/batch/jobs/{id}?inline=true`` adds the result lines as ``outputs``.
- Errors are Mistral's flat error object ``{"object": "error", "message", "type",
  "param", "code"}`` (Mistral error glossary).

Lifecycle (``d`` the processing delay): ``QUEUED`` until ``d/3``, ``RUNNING``, then
``SUCCESS`` at ``d`` (``FAILED`` at ``d/3`` for a job whose file failed validation);
``expire_after_requests`` ends it ``TIMEOUT_EXCEEDED`` with partial results,
``cancel_after_requests`` and ``cancel`` go through ``CANCELLATION_REQUESTED`` to
``CANCELLED``. Requests never run get an error line (``response: null``, ``error:
{"message", "code": "timeout_exceeded" | "cancelled"}``).

Result lines: ``{"id", "custom_id", "response": {"status_code", "body"}, "error"}``;
bodies of 200 lines validate as the SDK's type of their endpoint's answer
(``ChatCompletionResponse``, ``FIMCompletionResponse``, ``EmbeddingResponse``,
``ModerationResponse``: the batch docs, https://docs.mistral.ai/capabilities/batch, "A
batch body object can be any valid request body for the endpoint you are using"). Markers
(:mod:`~mmirage_beam.testing.fake_provider.scripting`): ``server_error`` (500
``server_error``), ``invalid_request`` (400), ``rate_limit`` (429 ``rate_limit_error``),
``timeout`` (``error.code: request_timeout``), ``transient``, ``not_json``, ``length``
(``finish_reason: length``), ``empty``, ``error_body_200``, ``empty_body_200``, the line
markers and ``u2028``. Mistral's chat completion has no refusal field and no
content-filter finish reason: ``refusal`` and ``content_filter`` answer normally.
Script keys honoured: ``processing_delay_secs``, ``expire_after_requests``,
``cancel_after_requests``, ``leading_errors`` (endpoint names :data:`ENDPOINT_NAMES`),
``fail_batch_creates``, ``empty_error_file_id`` (``error_file: ""``),
``shuffle_results``, ``unknown_custom_id``.

Result lines, error bodies and the SDK checks are built by
:mod:`~mmirage_beam.providers.mistral.fake_bodies`.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import hmac
import json
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.mistral import fake_endpoints, fake_service
from mmirage_beam.providers.mistral.fake_bodies import (
    answer_line,
    api_error,
    completion_body,
    embeddings_response,
    error_body,
    error_line,
    http_line,
    marked_failure,
    moderation_response,
    prompt_of,
    refusal,
    scripted_body,
    scripted_error,
    validate_response,
    validate_with_sdk,
)
from mmirage_beam.testing.fake_provider import lifecycle, limits, scripting
from mmirage_beam.testing.fake_provider.answers import make_answer
from mmirage_beam.testing.fake_provider.routing import route_rules
from mmirage_beam.testing.fake_provider.scripting import UNKNOWN_CUSTOM_ID, error_marker
from mmirage_beam.testing.fake_provider.store import (
    Batch,
    Item,
    Store,
    answered_response_item,
    file_object_head,
    jsonl,
)
from mmirage_beam.testing.fake_provider.wire import ApiError, json_response

MISTRAL = fake_service.MISTRAL
#: path prefix of every Mistral route on the fake's port.
PREFIX = fake_service.PREFIX
#: Mistral known limitations (docs.mistral.ai/resources/known-limitations): 512 MB per
#: batch file, 100,000 requests per batch.
MAX_BATCH_FILE_BYTES = 512 * 1000 * 1000
MAX_REQUESTS = 100_000
FILE_PURPOSES = ("fine-tune", "batch", "ocr", "agentic_safety")
#: the endpoints whose jobs this module answers (each in its own response shape; the
#: rest of the SDK's ``APIEndpoint``, ``/v1/ocr``, ``/v1/classifications``,
#: ``/v1/chat/classifications``, ``/v1/conversations`` and ``/v1/audio/transcriptions``,
#: are :mod:`~mmirage_beam.providers.mistral.fake_endpoints`')
ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/fim/completions",
    "/v1/moderations",
    "/v1/chat/moderations",
)
#: the endpoints whose request types take an ``agent_id`` in place of a model (mistralai
#: 3.7 ``AgentsCompletionRequest``, the body of an agent's chat completion, and
#: ``ConversationRequest.agent_id``); a job with ``agent_id`` runs one of them.
AGENT_ENDPOINTS = ("/v1/chat/completions", "/v1/conversations")
#: files.get_signed_url's ``expiry``, in hours (mistralai 3.7 ``files.get_signed_url``:
#: "Must be between 1h and 168h", default 24)
SIGNED_URL_EXPIRY_HOURS = (1, 168)
TERMINAL = ("SUCCESS", "FAILED", "TIMEOUT_EXCEEDED", "CANCELLED")
#: endpoint names of ``leading_errors.paths`` and ``call_counts()``.
ENDPOINT_NAMES = fake_service.ENDPOINT_NAMES
_LIST_PARAMS = {
    "page",
    "page_size",
    "model",
    "agent_id",
    "created_after",
    "created_by_me",
    "status",
    "order_by",
}


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    sample_type: str

    def view(self) -> dict[str, Any]:
        lines = sum(1 for ln in self.content.split(b"\n") if ln.strip())
        return {
            **file_object_head(self),
            "sample_type": self.sample_type,
            "source": "upload" if self.sample_type == "batch_request" else "mistral",
            "num_lines": lines,
            "mimetype": "application/jsonl",
            "signature": None,
            "expires_at": None,
            "visibility": "workspace",
        }


class MistralApi:
    """Mistral's Files and batch jobs endpoints over the shared :class:`Store`.

    :meth:`handle` serves one request whose path starts with :data:`PREFIX`: it counts
    the call, checks the key, applies scripted leading errors, and routes it.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        routes = {
            "/v1/files": {"POST": "files_upload", "GET": "files_list"},
            "/v1/files/<file_id>": {"GET": "files_retrieve", "DELETE": "files_delete"},
            "/v1/files/<file_id>/content": {"GET": "files_download"},
            "/v1/files/<file_id>/url": {"GET": "files_signed_url"},
            "/_signed/<file_id>": {"GET": "signed_download"},
            "/v1/batch/jobs": {"POST": "jobs_create", "GET": "jobs_list"},
            "/v1/batch/jobs/<job_id>": {"GET": "jobs_get", "DELETE": "jobs_delete"},
            "/v1/batch/jobs/<job_id>/cancel": {"POST": "jobs_cancel"},
        }
        self._url_map = Map(route_rules(routes), strict_slashes=False)

    @property
    def agents(self) -> dict[str, str]:
        """Job id -> the ``agent_id`` the job was created with (jobs with no model)."""
        return self.store.provider_state.setdefault(MISTRAL, {}).setdefault("agents", {})

    @property
    def files(self) -> dict[str, _File]:
        """Mistral's files (kept apart from OpenAI's: other ids, other objects)."""
        return self.store.provider_state.setdefault(MISTRAL, {}).setdefault("files", {})

    # -- plumbing ---------------------------------------------------------------------
    def handle(self, request: Request) -> Response:
        """Serve one ``/mistral/...`` request (errors in Mistral's shape)."""
        path = request.path[len(PREFIX) :] or "/"
        try:
            endpoint, args = self._url_map.bind("fake").match(path, method=request.method)
        except HTTPException as exc:
            err = api_error(exc.code or 404, f"{request.method} {path}: {exc.name}")
            return json_response(error_body(err), err.status)
        name = f"mistral_{endpoint}"
        with self.store.lock:
            self.store.call_counts[name] = self.store.call_counts.get(name, 0) + 1
        try:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            signed = endpoint == "signed_download"  # the URL's signature is its credential
            if not signed and (scheme.lower() != "bearer" or not token.strip()):
                raise api_error(401, "Unauthorized", "authentication_error")
            leading = self.store.take_leading_error(name)
            if leading is not None:
                raise scripted_error(*leading, f"leading error on {name}", args)
            return getattr(self, f"_{endpoint}")(request, **args)
        except ApiError as err:
            return json_response(error_body(err), err.status, err.headers)

    # -- files ------------------------------------------------------------------------
    def _files_upload(self, request: Request) -> Response:
        upload = request.files.get("file")
        purpose = request.form.get("purpose") or "fine-tune"
        if upload is None:
            raise api_error(400, "Missing file: the multipart field 'file' is required.")
        if purpose not in FILE_PURPOSES:
            raise api_error(422, f"Invalid purpose {purpose!r}; expected one of {FILE_PURPOSES}.")
        content = upload.read(MAX_BATCH_FILE_BYTES + 1)
        if purpose == "batch" and len(content) > MAX_BATCH_FILE_BYTES:
            raise api_error(400, "File is too large: batch files are at most 512 MB.")
        with self.store.lock:
            stored = _File(
                str(uuid.uuid4()),
                upload.filename or "file.jsonl",
                purpose,
                content,
                int(self.store.clock()),
                "batch_request" if purpose == "batch" else "instruct",
            )
            self.files[stored.id] = stored
            return json_response(stored.view())

    def _get_file(self, file_id: str) -> _File:
        stored = self.files.get(file_id)
        if stored is None:
            raise api_error(404, f"File {file_id} not found.", code="1000")
        return stored

    def _files_list(self, request: Request) -> Response:
        page, size = _int_arg(request, "page", 0), _int_arg(request, "page_size", 100)
        purpose = request.args.get("purpose")
        with self.store.lock:
            files = [f.view() for f in self.files.values() if purpose in (None, f.purpose)]
        files.reverse()
        return json_response(
            {"data": files[page * size : (page + 1) * size], "object": "list", "total": len(files)}
        )

    def _files_retrieve(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            return json_response({**self._get_file(file_id).view(), "deleted": False})

    def _files_delete(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            self._get_file(file_id)
            del self.files[file_id]
        return json_response({"id": file_id, "object": "file", "deleted": True})

    def _files_download(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            content = self._get_file(file_id).content
        return Response(content, mimetype="application/octet-stream")

    def _signature(self, file_id: str, expires: int) -> str:
        secret = self.store.provider_state.setdefault(MISTRAL, {}).setdefault(
            "url_secret", secrets.token_bytes(16)
        )
        message = f"{file_id}:{expires}".encode()
        return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]

    def _files_signed_url(self, request: Request, file_id: str) -> Response:
        """``GET /v1/files/{id}/url?expiry=H`` (mistralai ``files.get_signed_url``):
        ``{"url"}`` (the SDK's ``GetSignedURLResponse``), a URL that downloads the file
        without the API key for ``expiry`` hours (1..168, default 24; 422 otherwise), as
        the Files API reference describes "Get Signed Url"
        (https://docs.mistral.ai/api/endpoint/files). Here it is
        ``<base>/mistral/_signed/{id}?expires=<unix>&signature=<hmac>``."""
        hours = _int_arg(request, "expiry", 24)
        low, high = SIGNED_URL_EXPIRY_HOURS
        if not low <= hours <= high:
            raise api_error(422, f"expiry must be between {low} and {high} hours, got {hours}.")
        with self.store.lock:
            self._get_file(file_id)
            expires = int(self.store.clock()) + hours * 3600
            signature = self._signature(file_id, expires)
        base = request.host_url.rstrip("/") + PREFIX
        url = f"{base}/_signed/{file_id}?expires={expires}&signature={signature}"
        validate_response("GetSignedURLResponse", {"url": url})
        return json_response({"url": url})

    def _signed_download(self, request: Request, file_id: str) -> Response:
        """``GET /_signed/{id}?expires=&signature=``: the file's bytes while the signed
        URL holds (403 for a wrong signature or after ``expires``, as a storage
        service answers an expired signed URL)."""
        try:
            expires = int(request.args.get("expires", ""))
        except ValueError:
            raise api_error(403, "The signed URL is not valid.") from None
        with self.store.lock:
            good = hmac.compare_digest(
                self._signature(file_id, expires), request.args.get("signature", "")
            )
            if not good or self.store.clock() > expires:
                raise api_error(403, "The signed URL is not valid or has expired.")
            content = self._get_file(file_id).content
        return Response(content, mimetype="application/octet-stream")

    # -- jobs -------------------------------------------------------------------------
    def _get_job(self, job_id: str) -> Batch:
        batch = self.store.batches.get(job_id)
        if batch is None or batch.provider != MISTRAL or batch.deleted:
            raise api_error(404, f"Batch job {job_id} not found.", code="1000")
        return batch

    def _jobs_create(self, request: Request) -> Response:
        try:
            payload = json.loads(request.get_data(cache=False) or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise api_error(400, f"Invalid JSON body: {exc}") from None
        validate_with_sdk("CreateBatchJobRequest", payload)
        endpoint = payload.get("endpoint")
        served = ENDPOINTS + fake_endpoints.ENDPOINTS
        if endpoint not in served:
            raise api_error(400, f"The fake answers only {served}, not {endpoint!r}.")
        inline = payload.get("requests") or []
        file_ids = payload.get("input_files") or []
        if bool(inline) == bool(file_ids):
            raise api_error(400, "Give exactly one of input_files and requests.")
        model, agent_id = payload.get("model"), payload.get("agent_id")
        if bool(model) == bool(agent_id):
            raise api_error(400, "Give exactly one of model and agent_id.")
        if agent_id and endpoint not in AGENT_ENDPOINTS:
            raise api_error(400, f"An agent_id job runs {' or '.join(AGENT_ENDPOINTS)} only.")
        if model:
            unknown_model = fake_service.mistral_model_error(model, self.store.models)
            if unknown_model is not None:
                raise api_error(400, unknown_model)
            if endpoint in fake_endpoints.ENDPOINTS:
                wrong = fake_endpoints.model_error(endpoint, model, self.store.models)
                if wrong is not None:
                    raise api_error(400, wrong)
        with self.store.lock:
            files = [self._get_file(fid) for fid in file_ids]
            for stored in files:
                if stored.purpose != "batch":
                    raise api_error(
                        400, f"File {stored.id} has purpose {stored.purpose!r}, not 'batch'."
                    )
            failure = self.store.take_create_failure()
            if failure is not None and not failure.created:
                raise scripted_error(failure.status, failure.retry_after_ms, "create")
            now = self.store.clock()
            batch = self.store.new_batch(MISTRAL, "", now)
            del self.store.batches[batch.id]
            batch.id = str(uuid.uuid4())
            self.store.batches[batch.id] = batch
            batch.endpoint, batch.model = endpoint, model or None
            if agent_id:
                self.agents[batch.id] = agent_id
            batch.metadata = dict(payload.get("metadata") or {})
            batch.input_file_id = ",".join(file_ids)
            batch.completion_window = f"{int(payload.get('timeout_hours') or 24)}h"
            if inline:  # inline batching: each {custom_id?, body} is a line of the input
                content = jsonl(
                    [
                        {"custom_id": r.get("custom_id") or str(i), "body": r.get("body")}
                        for i, r in enumerate(inline)
                    ]
                )
            else:
                content = b"\n".join(f.content for f in files)
            self._fill(batch, content, now)
            if failure is not None:
                raise scripted_error(failure.status, failure.retry_after_ms, "create")
            return json_response(self.view(batch, batch.created - 1e-6))

    def _fill(self, batch: Batch, content: bytes, now: float) -> None:
        """Parse and run the job's lines (results materialise once it has ended)."""
        raw_lines = [ln for ln in content.split(b"\n") if ln.strip()]
        problems: dict[str, int] = {}
        if not raw_lines:
            batch.errors = [{"message": "The input files hold no request.", "count": 1}]
            return
        if len(raw_lines) > MAX_REQUESTS:
            batch.errors = [
                {"message": f"A batch holds at most {MAX_REQUESTS:,} requests.", "count": 1}
            ]
            return
        seen: set[str] = set()
        for raw in raw_lines:
            try:
                line = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                line = None
            if not isinstance(line, dict):
                problems["A line is not valid JSON."] = (
                    problems.get("A line is not valid JSON.", 0) + 1
                )
                continue
            cid = line.get("custom_id")
            if not isinstance(cid, str) or not cid or not isinstance(line.get("body"), dict):
                key = "A line has no custom_id or no body object."
                problems[key] = problems.get(key, 0) + 1
                continue
            if cid in seen:
                key = "A custom_id is repeated."
                problems[key] = problems.get(key, 0) + 1
                continue
            seen.add(cid)
            self.store.record(batch, cid, line)
            batch.items.append(self._process(batch, cid, line["body"], now))
        batch.errors = [{"message": m, "count": n} for m, n in problems.items()] or None
        batch.prompt_tokens = sum(it.input_tokens for it in batch.items)

    def _process_embedding(self, batch: Batch, cid: str, body: dict[str, Any]) -> Item:
        """One ``/v1/embeddings`` line: an ``EmbeddingResponse`` of the requested
        ``output_dimension`` (:func:`embeddings_response`); the error markers of chat
        lines that fail a request (``FAILURES``, ``timeout``) apply as well."""
        reason = refusal("EmbeddingRequest", {"model": batch.model, **body})
        if reason is not None:
            return Item(cid, http_line(cid, 400, f"Invalid request body: {reason}"), ok=False)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        prompt = "\n".join(str(x) for x in inputs)
        tokens = len(prompt.split())
        marker = self.store.resolve_transient(error_marker(prompt), cid)
        failed = marked_failure(cid, marker, tokens)
        if failed is not None:
            return failed
        response_body = embeddings_response(
            batch.model or "", inputs, body.get("output_dimension"), tokens
        )
        line = answer_line(cid, response_body)
        return Item(cid, line, ok=True, input_tokens=tokens)

    def _process_moderation(self, batch: Batch, cid: str, body: dict[str, Any]) -> Item:
        """One ``/v1/moderations`` line (``ClassificationRequest``: ``input`` a text or
        texts) or ``/v1/chat/moderations`` line (``ChatModerationRequest``: ``input`` a
        conversation or conversations): a ``ModerationResponse`` with one result per
        text or conversation (:func:`moderation_response`); ``content_filter`` flags
        its text, the failure markers fail it as a chat line."""
        chat = batch.endpoint == "/v1/chat/moderations"
        kind = "ChatModerationRequest" if chat else "ClassificationRequest"
        reason = refusal(kind, {"model": batch.model, **body})
        if reason is not None:
            return Item(cid, http_line(cid, 400, f"Invalid request body: {reason}"), ok=False)
        raw = body["input"]
        if chat:  # one conversation (a list of messages) or a list of them
            convos = raw if raw and isinstance(raw[0], list) else [raw]
            texts = [prompt_of({"messages": c})[0] for c in convos]
        else:
            texts = [str(x) for x in (raw if isinstance(raw, list) else [raw])]
        prompt = "\n".join(texts)
        tokens = len(prompt.split())
        marker = self.store.resolve_transient(error_marker(prompt), cid)
        failed = marked_failure(cid, marker, tokens)
        if failed is not None:
            return failed
        flagged = [error_marker(t) == "content_filter" for t in texts]
        response_body = moderation_response(batch.model or "", flagged)
        line = answer_line(cid, response_body)
        return Item(cid, line, ok=True, input_tokens=tokens)

    def _process(self, batch: Batch, cid: str, body: dict[str, Any], now: float) -> Item:
        """One line of a job: answered in its endpoint's response shape (chat and FIM
        completions, embeddings, moderations; the other endpoints are
        :func:`fake_endpoints.process`'s), or its error line."""
        if batch.endpoint in fake_endpoints.ENDPOINTS:
            return fake_endpoints.process(self, batch, cid, body, now)
        if batch.endpoint == "/v1/embeddings":
            return self._process_embedding(batch, cid, body)
        if batch.endpoint in ("/v1/moderations", "/v1/chat/moderations"):
            return self._process_moderation(batch, cid, body)
        fim = batch.endpoint == "/v1/fim/completions"
        agent_id = self.agents.get(batch.id)
        if fim:  # FIMCompletionRequest: the prompt (and suffix) to complete
            reason = refusal("FIMCompletionRequest", {"model": batch.model, **body})
            body = {"messages": [{"role": "user", "content": str(body.get("prompt", ""))}]}
        elif agent_id:  # AgentsCompletionRequest: the agent in place of a model
            reason = refusal("AgentsCompletionRequest", {"agent_id": agent_id, **body})
        else:
            reason = refusal("ChatCompletionRequest", {"model": batch.model, **body})
        if reason is not None:
            return Item(cid, http_line(cid, 400, f"Invalid request body: {reason}"), ok=False)
        prompt, images, mode, schema = prompt_of(body)
        tokens = len(prompt.split()) + limits.TOKENS_PER_IMAGE * images
        marker = self.store.resolve_transient(error_marker(prompt), cid)
        if marker in ("refusal", "content_filter"):
            marker = None  # Mistral has neither a refusal field nor a content filter
        failed = marked_failure(cid, marker, tokens)
        if failed is not None:
            return failed
        answer = make_answer(prompt, images, mode, schema, marker)
        response_body = scripted_body(marker)
        if response_body is None:
            response_body = completion_body(batch.model or agent_id or "", answer, now)
            validate_response(
                "FIMCompletionResponse" if fim else "ChatCompletionResponse", {**response_body}
            )
        line = answer_line(cid, response_body)
        return answered_response_item(marker, cid, line, answer)

    def _jobs_get(self, request: Request, job_id: str) -> Response:
        """``GET /v1/batch/jobs/{id}`` (``?inline=true``: mistralai ``jobs.get(inline=
        True)``, "return results inline in the response": once the job has ended its
        ``outputs`` holds the result lines of its output file, then of its error file;
        a line a marker broke, which no JSON answer can hold, is left out)."""
        with self.store.lock:
            view = self.view(self._get_job(job_id), self.store.clock())
            if request.args.get("inline", "").lower() == "true" and view["status"] in TERMINAL:
                view["outputs"] = self._outputs(view)
            return json_response(view)

    def _outputs(self, view: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for file_id in (view["output_file"], view["error_file"]):
            stored = self.files.get(file_id) if file_id else None
            for raw in stored.content.split(b"\n") if stored is not None else ():
                try:
                    line = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    continue
                if isinstance(line, dict):
                    out.append(line)
        return out

    def _jobs_list(self, request: Request) -> Response:
        page, size = _int_arg(request, "page", 0), _int_arg(request, "page_size", 100)
        model, agent_id = request.args.get("model"), request.args.get("agent_id")
        statuses = set(request.args.getlist("status"))
        after = _parse_time(request.args.get("created_after"))
        meta = {k: v for k, v in request.args.items() if k not in _LIST_PARAMS}
        with self.store.lock:
            now = self.store.clock()
            views = [
                self.view(b, now)
                for b in self.store.batches.values()
                if b.provider == MISTRAL and not b.deleted
            ]
        views = [
            v
            for v in views
            if (model is None or v["model"] == model)
            and (agent_id is None or v["agent_id"] == agent_id)
            and (not statuses or v["status"] in statuses)
            and (after is None or v["created_at"] >= after)
            and all((v["metadata"] or {}).get(k) == val for k, val in meta.items())
        ]
        if request.args.get("order_by", "-created") == "-created":
            views.reverse()
        return json_response(
            {"object": "list", "data": views[page * size : (page + 1) * size], "total": len(views)}
        )

    def _jobs_cancel(self, request: Request, job_id: str) -> Response:
        with self.store.lock:
            batch = self._get_job(job_id)
            now = self.store.clock()
            if (
                self.view(batch, now)["status"] not in TERMINAL
                and batch.cancel_requested_at is None
            ):
                batch.cancel_requested_at = now
            return json_response(self.view(batch, now))

    def _jobs_delete(self, request: Request, job_id: str) -> Response:
        with self.store.lock:
            self._get_job(job_id).deleted = True
        return json_response({"id": job_id, "object": "batch", "deleted": True})

    # -- views ------------------------------------------------------------------------
    def view(self, batch: Batch, now: float) -> dict[str, Any]:
        """The ``BatchJob`` object at ``now`` (result files made once it has ended)."""
        status, started, ended = _phase(batch, now)
        if status in TERMINAL and status != "FAILED":
            lifecycle.finish_once(batch, self._finish_results)
        total = len(batch.items)
        if status in TERMINAL:
            counts = dict(batch.final_counts) or {"succeeded": 0, "failed": 0, "completed": 0}
        else:
            done = lifecycle.processed(batch, now)
            if batch.cancel_requested_at is not None:
                done = min(done, lifecycle.processed(batch, batch.cancel_requested_at))
            ok = sum(1 for it in batch.items[:done] if it.ok)
            counts = {"succeeded": ok, "failed": done - ok, "completed": done}
        errors = copy.deepcopy(batch.errors or [])
        return {
            "id": batch.id,
            "object": "batch",
            "input_files": batch.input_file_id.split(",") if batch.input_file_id else [],
            "metadata": copy.deepcopy(batch.metadata),
            "endpoint": batch.endpoint,
            "model": batch.model,
            "agent_id": self.agents.get(batch.id),
            "output_file": batch.output_file_id if status in TERMINAL else None,
            "error_file": batch.error_file_id if status in TERMINAL else None,
            "errors": errors,
            "outputs": None,
            "status": status,
            "created_at": int(batch.created),
            "total_requests": 0 if status == "FAILED" else total,
            "completed_requests": counts["completed"],
            "succeeded_requests": counts["succeeded"],
            "failed_requests": counts["failed"],
            "started_at": None if started is None else int(started),
            "completed_at": None if ended is None else int(ended),
        }

    def _finish_results(
        self, batch: Batch, processed: list[Item], rest: list[Item], cancelled: bool
    ) -> None:
        """Stores the output and error files once the job has ended (called once, by
        :func:`lifecycle.finish_once`)."""
        ok_lines = [it.line for it in processed if it.ok]
        err_lines = [it.line for it in processed if not it.ok]
        code = "cancelled" if cancelled else "timeout_exceeded"
        message = (
            "The request was cancelled with its job."
            if cancelled
            else "The job's timeout_hours passed before the request ran."
        )
        err_lines += [error_line(it.custom_id, code, message) for it in rest]
        if batch.unknown_custom_id:
            answer = make_answer("", 0, "text", None)
            body = completion_body(batch.model or "", answer, self.store.clock())
            ok_lines.append(answer_line(UNKNOWN_CUSTOM_ID, body))
        for kind, lines, sample in (
            ("output", ok_lines, "batch_result"),
            ("error", err_lines, "batch_error"),
        ):
            if not lines:
                continue
            stored = _File(
                str(uuid.uuid4()),
                f"{batch.id}_{kind}.jsonl",
                "batch",
                jsonl(scripting.shuffled(batch.shuffle_seed, lines)),
                int(self.store.clock()),
                sample,
            )
            self.files[stored.id] = stored
            if kind == "output":
                batch.output_file_id = stored.id
            else:
                batch.error_file_id = stored.id
        if not err_lines and batch.empty_error_file_id:
            batch.error_file_id = ""
        succeeded = sum(1 for it in processed if it.ok)
        failed = len(batch.items) - succeeded if cancelled else len(processed) - succeeded
        batch.final_counts = {
            "succeeded": succeeded,
            "failed": failed,
            "completed": succeeded + failed,
        }


def _phase(batch: Batch, now: float) -> tuple[str, float | None, float | None]:
    """(status, started_at, completed_at) at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    start, end = t0 + d / 3, t0 + d
    tc = batch.cancel_requested_at
    if tc is not None:
        done = tc + d / 3
        started = start if tc >= start else None
        return (
            ("CANCELLATION_REQUESTED", started, None)
            if now < done
            else ("CANCELLED", started, done)
        )
    if now < start:
        return "QUEUED", None, None
    if batch.errors and not batch.items:
        return "FAILED", start, start
    if now < end:
        if batch.stop_kind == "cancelled" and now >= t0 + 2 * d / 3:
            return "CANCELLATION_REQUESTED", start, None
        return "RUNNING", start, None
    if batch.stop_kind == "cancelled":
        return "CANCELLED", start, end
    if batch.stop_kind == "expired":
        return "TIMEOUT_EXCEEDED", start, end
    return "SUCCESS", start, end


def _int_arg(request: Request, name: str, default: int) -> int:
    raw = request.args.get(name)
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = -1
    if value < 0:
        raise api_error(422, f"Query parameter {name!r} must be an integer >= 0, got {raw!r}.")
    return value


def _parse_time(raw: str | None) -> float | None:
    if not raw:
        return None
    try:
        when = _dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise api_error(422, f"created_after must be an ISO 8601 date-time, got {raw!r}.") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.timestamp()


class MistralFake:
    """Files and batch jobs as the mistralai SDK calls them, under :data:`PREFIX`."""

    provider_names = (MISTRAL,)
    labels = (("Mistral", MISTRAL),)

    def __init__(self, store: Store) -> None:
        self.api = MistralApi(store)

    def claims(self, request: Request) -> bool:
        """A path under :data:`PREFIX`."""
        return request.path.startswith(PREFIX + "/")

    def handle(self, request: Request) -> Response:
        """:meth:`MistralApi.handle`."""
        return self.api.handle(request)

    def base_url(self, root: str, provider: str) -> str:
        """``root + "/mistral"``, for ``Mistral(server_url=...)`` (its paths are OpenAI's,
        ``/v1/files``..., so they live under a prefix of their own)."""
        return root + PREFIX

    def batch_view(self, batch: Batch, now: float) -> dict[str, Any] | None:
        """The job object of a Mistral batch, else None."""
        return self.api.view(batch, now) if batch.provider == MISTRAL else None
