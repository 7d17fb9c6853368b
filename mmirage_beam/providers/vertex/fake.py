"""A fake Vertex AI batch prediction service (the ``batchPredictionJobs`` routes
google-genai 2.34 calls with ``vertexai=True``), its job files in a real Cloud Storage
protocol server (a GCS emulator), for the tests and ``mmirage demo --provider vertex``.

Routes (``<v>`` is ``v1`` or ``v1beta1``; google-genai ``batches.py``: ``batchPredictionJobs``,
``batchPredictionJobs/{name}``, ``batchPredictionJobs/{name}:cancel``):

- ``POST /<v>/projects/{p}/locations/{l}/batchPredictionJobs`` ``{"displayName", "model",
  "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {"uris": ["gs://..."]}},
  "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {"outputUriPrefix"}}}``:
  the job (``JOB_STATE_PENDING``), its input read from the emulator at once. Gemini
  (``publishers/google/models/...``) and Claude (``publishers/anthropic/models/...``:
  lines ``{"custom_id", "request": Anthropic params with anthropic_version}``, answers
  ``{"custom_id", "status", "request", "response": Message}``) models are emulated, and
  Google's text embedding models (``text-embedding-005``...: instance lines, the body's
  ``modelParameters`` and ``instanceConfig``,
  :mod:`~mmirage_beam.providers.vertex.fake_embeddings`); a BigQuery source or destination is a 400.
- ``GET .../batchPredictionJobs/{id}``; ``GET .../batchPredictionJobs?pageSize=&pageToken=&filter=``
  (newest first; the only filter understood is ``display_name="..."``, anything else is
  a 400 naming it); ``POST .../batchPredictionJobs/{id}:cancel`` (``{}``; 400
  ``FAILED_PRECONDITION`` once ended); ``DELETE .../batchPredictionJobs/{id}``.
- ``POST /<v>/projects/{p}/locations/{l}/publishers/google/models/{m}:countTokens``
  ``{"contents", "generationConfig"?}``: ``{"totalTokens": N}``, N the
  ``promptTokenCount`` a job reports for the same contents.
- Every call needs ``Authorization: Bearer <token>`` (any token: 401 without one).

Input: each line ``{"request": GenerateContentRequest}``, the request checked against
google-genai's own pydantic types (the Gemini fake's
:func:`~mmirage_beam.providers.gemini.fake_bodies.request_model`, plus Vertex's
``labels``: at most 64, keys and values of at most 63 lowercase letters, digits, ``_``,
``-``, as https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/add-labels-to-api-calls
says); a request that does not validate is a failed row (``status`` holding the 400). A
line that is not JSON, or holds no ``request`` object, fails the whole job (``error``).

Output, once the job has ended: ``<outputUriPrefix>/prediction-model-<time>/predictions.jsonl``
(the job's ``outputInfo.gcsOutputDirectory``), one line per processed request:
``{"status": "", "processed_time", "request": <as sent>, "response":
GenerateContentResponse}``, or for a failed row ``{"status": "Bad Request: {\\"error\\":
{code, message, status}}", "processed_time", "request"}`` ("Batch output" in
https://docs.cloud.google.com/vertex-ai/generative-ai/docs/multimodal/batch-prediction-from-cloud-storage:
responses in ``response``, errors in ``status``). A cancelled or expired job writes the
rows processed before it ended ("If the batch prediction job is terminated, all
completed rows are exported"). ``completionStats`` counts successful, failed and
incomplete rows.

Answers, markers and lifecycle are the shared fake's, through their public functions:
:func:`~mmirage_beam.testing.fake_provider.answers.make_answer` (deterministic text and
JSON, usage), the ``FAKE_ERROR:...`` markers
(:func:`~mmirage_beam.testing.fake_provider.scripting.error_marker`; failures as the
Gemini fake's :data:`~mmirage_beam.providers.gemini.fake_bodies.FAILURES`,
``refusal`` -> ``SAFETY``, ``content_filter`` -> ``PROHIBITED_CONTENT``, ``length`` ->
``MAX_TOKENS``, the line markers break the written line), the script keys
(:class:`~mmirage_beam.testing.fake_provider.store.Store`: ``processing_delay_secs``,
``fail_batch_creates`` (``created: true`` creates the job, then answers the error: a
lost create answer), ``leading_errors``, ``expire_after_requests``,
``cancel_after_requests``, ``shuffle_results``, ``unknown_custom_id``) and
:func:`~mmirage_beam.testing.fake_provider.lifecycle.processed`. With delay ``D``:
``PENDING`` for ``D/3``, ``RUNNING`` until ``D``, then ``SUCCEEDED`` (``FAILED`` after
pending for a bad input file; ``CANCELLING`` for ``D/3`` then ``CANCELLED`` after a
cancel).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.gemini.fake_bodies import (
    FAILURES,
    candidate_response,
    check_response,
    contents_tokens,
    get_field,
    json_schema_of,
    prompt_of,
    request_model,
)
from mmirage_beam.providers.gemini.fake_service import (
    GEMINI,
    GOOGLE_ENDED,
    cancel_google_job,
    google_job_state,
)
from mmirage_beam.providers.vertex import fake_embeddings
from mmirage_beam.testing.fake_provider import lifecycle, scripting
from mmirage_beam.testing.fake_provider.answers import make_answer
from mmirage_beam.testing.fake_provider.scripting import (
    SCRIPT_DEFAULTS,
    SCRIPT_PARSERS,
    UNKNOWN_CUSTOM_ID,
    error_marker,
)
from mmirage_beam.testing.fake_provider.serving import ThreadServed
from mmirage_beam.testing.fake_provider.store import (
    Batch,
    Item,
    Store,
    StoreCounts,
    jsonl,
    rfc3339,
)
from mmirage_beam.testing.fake_provider.wire import (
    NOT_JSON,
    ApiError,
    error_response,
    json_payload,
    json_response,
    numbered_json_lines,
    status_error,
)

__all__ = ["DEMO_ADC", "FakeVertexServer", "VERTEX", "VertexDemo", "demo_services"]

_LOG = logging.getLogger(__name__)
VERTEX = "vertex"
#: the label the adapter puts a plain custom_id in (providers.vertex.outcomes.ID_LABEL)
_ID_LABEL = "mmirage_id"
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_FILTER = re.compile(r'^\s*display_name\s*=\s*"([^"]*)"\s*$')
_TERMINAL = tuple("JOB_STATE_" + state for state in GOOGLE_ENDED)
_ROUTE = "/<version>/projects/<project>/locations/<location>/batchPredictionJobs"
_HTTP_REASON = {400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}
_HTTP_REASON.update({504: "Gateway Timeout", 503: "Service Unavailable"})


def _vertex_request_model() -> Any:
    """The Gemini fake's request model with Vertex's ``labels`` (built once)."""
    global _VERTEX_MODEL
    if _VERTEX_MODEL is None:
        from typing import Optional as _Opt

        import pydantic

        class VertexGenerateContentRequest(request_model()):  # type: ignore[misc]
            labels: _Opt[dict[str, str]] = None

            @pydantic.field_validator("labels")
            @classmethod
            def _labels(cls, value: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
                if value is None:
                    return value
                if len(value) > 64:
                    raise ValueError("at most 64 labels per call")
                for key, val in value.items():
                    if not _LABEL_KEY.match(key) or not _LABEL.match(val):
                        raise ValueError(
                            f"label {key!r}: {val!r}: keys and values are at most 63 "
                            "lowercase letters, digits, '_' and '-' (keys start with a letter)"
                        )
                return value

        _VERTEX_MODEL = VertexGenerateContentRequest
    return _VERTEX_MODEL


_VERTEX_MODEL: Any = None


def _error(status: int, message: str, kind: Optional[str] = None) -> ApiError:
    return ApiError(status, kind or {400: "INVALID_ARGUMENT"}.get(status, ""), message)


class FakeVertexServer(ThreadServed, StoreCounts):
    """A loopback Vertex AI batch prediction fake (see the module docstring).

    Use as a context manager or call :meth:`start` / :meth:`stop` (:class:`ThreadServed`'s,
    as the shared fake's). Point google-genai at
    it with ``genai.Client(vertexai=True, project=, location=, credentials=,
    http_options={"base_url": fake.base_url, "api_version": "v1"})``.

    Args:
        gcs_endpoint: the GCS emulator's ``http://host:port`` (what
            ``$STORAGE_EMULATOR_HOST`` holds); job inputs are read and outputs written there.
        host: loopback address to bind; port: 0 picks a free one.
        processing_delay_secs: seconds from creation until a job has ended.
        clock: the current Unix time in seconds (injectable).
    """

    def __init__(
        self,
        gcs_endpoint: str,
        host: str = "127.0.0.1",
        port: int = 0,
        processing_delay_secs: float = 0.0,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gcs_endpoint = gcs_endpoint
        self._store = Store(
            clock, scripting.parse_delay("processing_delay_secs", processing_delay_secs)
        )
        super().__init__(host, port, self._store.lock, "fake-vertex")
        self._jobs: dict[str, dict[str, Any]] = {}
        self._gcs: Any = None
        self._url_map = Map(
            [
                Rule(_ROUTE, methods=["POST"], endpoint="create"),
                Rule(_ROUTE, methods=["GET"], endpoint="list"),
                Rule(_ROUTE + "/<job_id>:cancel", methods=["POST"], endpoint="cancel"),
                Rule(_ROUTE + "/<job_id>", methods=["GET"], endpoint="get"),
                Rule(_ROUTE + "/<job_id>", methods=["DELETE"], endpoint="delete"),
                Rule(
                    "/<version>/projects/<project>/locations/<location>/publishers/google/"
                    "models/<model>:countTokens",
                    methods=["POST"],
                    endpoint="count_tokens",
                ),
            ],
            strict_slashes=False,
        )

    # -- what tests read and script -------------------------------------------------------
    def script(self, **keys: Any) -> None:
        """Set script keys (the shared fake's, see :mod:`...scripting`); None puts a key
        back to its default.

        Raises:
            ValueError: an unknown key or a bad value.
        """
        with self._store.lock:
            for key, value in keys.items():
                if key not in SCRIPT_PARSERS:
                    raise ValueError(
                        f"unknown script key {key!r}; known: {sorted(SCRIPT_DEFAULTS)}"
                    )
                parsed = SCRIPT_DEFAULTS[key] if value is None else SCRIPT_PARSERS[key](value)
                self._store.script[key] = parsed

    def reset(self) -> None:
        """Forget every job, record and script key (the bucket is left as it is)."""
        with self._store.lock:
            self._store.reset()
            self._jobs.clear()

    def submitted_requests(self, provider: Optional[str] = None) -> list[dict[str, Any]]:
        """Every request line accepted into a created job, in order: ``{"provider":
        "vertex", "batch_id", "custom_id", "request"}`` (custom_id: the ``mmirage_id``
        label, or ``line-<n>`` when there is none). ``provider``: ``vertex`` or None (the
        shared fake's signature)."""
        with self._store.lock:
            return [
                dict(entry)
                for entry in self._store.submitted
                if provider in (None, entry["provider"])
            ]

    def jobs(self) -> list[dict[str, Any]]:
        """Every job as the API shows it now (REST JSON), oldest first."""
        with self._store.lock:
            now = self._store.clock()
            return [self._view(b, now) for b in self._store.batches.values() if not b.deleted]

    # -- WSGI -----------------------------------------------------------------------------
    def _wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        adapter = self._url_map.bind_to_environ(environ)
        try:
            endpoint, args = adapter.match()
            with self._store.lock:
                name = f"vertex_{endpoint}"
                self._store.call_counts[name] = self._store.call_counts.get(name, 0) + 1
            if not request.headers.get("Authorization", "").startswith("Bearer "):
                raise ApiError(
                    401, "UNAUTHENTICATED", "Request is missing required authentication credential."
                )
            leading = self._store.take_leading_error(f"vertex_{endpoint}")
            if leading is not None:
                raise status_error(GEMINI, leading[0], leading[1], endpoint)
            response = getattr(self, f"_{endpoint}")(request, **args)
        except ApiError as err:
            response = error_response(GEMINI, err)
        except HTTPException as exc:
            response = error_response(GEMINI, _error(exc.code or 500, exc.description or ""))
        return response(environ, start_response)

    def _parent(self, project: str, location: str) -> str:
        return f"projects/{project}/locations/{location}"

    def _job(self, job_id: str) -> Batch:
        batch = self._store.batches.get(job_id)
        if batch is None or batch.deleted:
            raise _error(404, f"The BatchPredictionJob does not exist: {job_id}", "NOT_FOUND")
        return batch

    def _create(self, request: Request, version: str, project: str, location: str) -> Response:
        body = json_payload(request)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _error(400, "model: required.")
        if not model.startswith(("publishers/google/models/", "publishers/anthropic/models/")):
            raise _error(
                400, f"model {model!r}: only Gemini and Claude publisher models are emulated."
            )
        embedding_job = fake_embeddings.is_text_embedding(model)
        refusal = fake_embeddings.check_job(body) if embedding_job else None
        if refusal:
            raise _error(400, refusal)
        display = body.get("displayName")
        if not isinstance(display, str) or not display:
            raise _error(400, "displayName: required.")
        source = body.get("inputConfig") or {}
        if source.get("instancesFormat") != "jsonl" or "gcsSource" not in source:
            raise _error(400, "inputConfig: only a jsonl gcsSource is emulated (no BigQuery).")
        uris = (source.get("gcsSource") or {}).get("uris")
        if not isinstance(uris, list) or not uris or not all(_is_gs(u) for u in uris):
            raise _error(400, "inputConfig.gcsSource.uris: a list of gs:// URIs is required.")
        dest = body.get("outputConfig") or {}
        prefix = (dest.get("gcsDestination") or {}).get("outputUriPrefix")
        if dest.get("predictionsFormat") != "jsonl" or not _is_gs(prefix):
            raise _error(400, "outputConfig: a jsonl gcsDestination.outputUriPrefix is required.")
        content, missing = self._read_inputs(uris)
        with self._store.lock:
            lost_answer = self._store.admit_create(GEMINI)
            batch = self._store.new_batch(VERTEX, "", self._store.clock())
            del self._store.batches[batch.id]
            batch.id = str(10**18 + secrets.randbelow(9 * 10**18))
            self._store.batches[batch.id] = batch
            batch.model = model
            batch.metadata = {"displayName": display}
            self._jobs[batch.id] = {
                "name": f"{self._parent(project, location)}/batchPredictionJobs/{batch.id}",
                "model": model,
                "inputConfig": source,
                "outputConfig": dest,
            }
            if embedding_job:  # a text embedding job's settings
                for name in ("modelParameters", "instanceConfig"):
                    if name in body:
                        self._jobs[batch.id][name] = body[name]
            try:
                if missing:
                    batch.errors = [{"code": 5, "message": f"Input file not found: {missing}"}]
                else:
                    batch.items = self._process(batch, content)
            except Exception:  # a bug of the fake: no half-made job is left behind
                del self._store.batches[batch.id]
                del self._jobs[batch.id]
                raise
            if lost_answer is not None:  # created, then the answer is lost
                raise lost_answer
            # the create answers the job as it starts (pending), even with no delay
            return json_response(self._view(batch, batch.created - 1e-6))

    def _read_inputs(self, uris: list[str]) -> tuple[bytes, Optional[str]]:
        from google.api_core.exceptions import NotFound

        chunks = []
        for uri in uris:
            bucket, _, key = uri[len("gs://") :].partition("/")
            blob = self._gcs_client().bucket(bucket).blob(key)
            try:
                chunks.append(blob.download_as_bytes())
            except NotFound:  # the job is created, then fails
                return b"", uri
        return b"\n".join(chunks), None

    def _gcs_client(self) -> Any:
        if self._gcs is None:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            self._gcs = storage.Client(
                project="fake-vertex",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.gcs_endpoint},
            )
        return self._gcs

    def _process(self, batch: Batch, content: bytes) -> list[Item]:
        if fake_embeddings.is_text_embedding(str(batch.model)):

            def fail_job(message: str) -> None:
                batch.errors = [{"code": 3, "message": message}]

            job = self._jobs[batch.id]
            return fake_embeddings.embedding_items(self._store, batch, content, job, fail_job)
        items: list[Item] = []
        for number, line in numbered_json_lines(content):
            if line is NOT_JSON:
                batch.errors = [{"code": 3, "message": f"Line {number} of the input is not JSON."}]
                return []
            body = line.get("request") if isinstance(line, dict) else None
            if not isinstance(body, dict):
                batch.errors = [{"code": 3, "message": f"Line {number} has no request object."}]
                return []
            if _is_claude(str(batch.model)):
                cid = line.get("custom_id")
                if not isinstance(cid, str) or not cid:
                    message = f"Line {number} has no custom_id."
                    batch.errors = [{"code": 3, "message": message}]
                    return []
                self._store.record(batch, cid, body)
                items.append(self._claude_answer(cid, body, str(batch.model)))
                continue
            labels = body.get("labels") if isinstance(body.get("labels"), dict) else {}
            cid = str(labels.get(_ID_LABEL) or f"line-{number}")
            self._store.record(batch, cid, body)
            items.append(self._answer(cid, body, str(batch.model)))
        if not items:
            batch.errors = [{"code": 3, "message": "The input holds no requests."}]
        return items

    def _answer(self, cid: str, body: dict[str, Any], model: str) -> Item:
        try:
            _vertex_request_model().model_validate(body)
        except Exception as exc:  # pydantic.ValidationError: a failed row
            message = "Invalid request: " + " ".join(str(exc).split())
            return Item(cid, _failed_line(body, 400, "INVALID_ARGUMENT", message), False)
        prompt, images = prompt_of(get_field(body, "contents"))
        generation = get_field(body, "generation_config") or {}
        schema = get_field(generation, "response_schema")
        json_mode = get_field(generation, "response_mime_type") == "application/json"
        mode = "json_schema" if json_mode and schema else ("json_object" if json_mode else "text")
        marker = self._store.resolve_transient(error_marker(prompt), cid, prompt)
        if marker in FAILURES:
            code, status, message = FAILURES[marker]
            line: dict[str, Any] | bytes = _failed_line(body, code, status, message)
            if marker == "u2028":
                line = json.dumps(line, ensure_ascii=False).encode("utf-8")
            return Item(cid, line, False)
        try:
            answer = make_answer(prompt, images, mode, json_schema_of(schema), marker)
        except ValueError as exc:
            return Item(
                cid, _failed_line(body, 400, "INVALID_ARGUMENT", f"Invalid schema: {exc}"), False
            )
        model_version = model.rsplit("/", 1)[-1] + "@default"
        response, output_tokens = candidate_response(answer, model_version)
        check_response(response)
        line = {"status": "", "request": body, "response": response}
        if marker in scripting.LINE_MARKERS:
            line = _broken(marker, cid, line, answer.text)
        return Item(cid, line, True, answer.input_tokens, output_tokens)

    def _claude_answer(self, cid: str, body: dict[str, Any], model: str) -> Item:
        """A Claude row (``{"custom_id", "request"}``): the request checked as the shared
        fake checks Anthropic params (with the job's model) plus ``anthropic_version``;
        the answer an Anthropic ``Message`` (checked with the anthropic SDK's type when
        it is installed) in ``response``."""
        from mmirage_beam.providers.anthropic.fake import check_params
        from mmirage_beam.providers.anthropic.fake import prompt_of as claude_prompt

        model_id = model.rsplit("/", 1)[-1]
        version = body.get("anthropic_version")
        problem = None
        if not isinstance(version, str) or not version.startswith("vertex-"):
            problem = "anthropic_version: Field required (e.g. vertex-2023-10-16)"
        problem = problem or check_params({**body, "model": model_id})
        if problem is not None:
            line = _failed_line(body, 400, "INVALID_ARGUMENT", problem, cid)
            return Item(cid, line, False)
        prompt, images, mode, schema = claude_prompt(body)
        marker = self._store.resolve_transient(error_marker(prompt), cid, prompt)
        if marker in FAILURES:
            code, status, message = FAILURES[marker]
            failed: dict[str, Any] | bytes = _failed_line(body, code, status, message, cid)
            if marker == "u2028":
                failed = json.dumps(failed, ensure_ascii=False).encode("utf-8")
            return Item(cid, failed, False)
        try:
            answer = make_answer(prompt, images, mode, schema, marker)
        except ValueError as exc:
            line = _failed_line(body, 400, "INVALID_ARGUMENT", f"Invalid schema: {exc}", cid)
            return Item(cid, line, False)
        if answer.finish == "content_filter":  # Claude has no such finish: it answers
            answer = make_answer(prompt, images, mode, schema)
        stop = {"refusal": "refusal", "length": "max_tokens"}.get(answer.finish, "end_turn")
        text_blocks = [{"type": "text", "text": answer.text}]
        message = {
            "id": f"msg_vrtx_{secrets.token_hex(12)}",
            "type": "message",
            "role": "assistant",
            "model": model_id,
            "content": [] if answer.finish in ("empty", "refusal") else text_blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens},
        }
        _check_message(message)
        line = {"custom_id": cid, "status": "", "request": body, "response": message}
        if marker in scripting.LINE_MARKERS:
            line = scripting.broken_line(
                marker,
                cid,
                line,
                body_key="response",
                answer_text=answer.text,
                wrong_shape={"custom_id": cid, "status": "", "unexpected": True},
            )
        return Item(cid, line, True, answer.input_tokens, answer.output_tokens)

    def _count_tokens(
        self, request: Request, version: str, project: str, location: str, model: str
    ) -> Response:
        """``countTokens`` ``{"contents", "generationConfig"?}``: ``{"totalTokens": N}``,
        N the prompt's words plus 10 per image, as a job's ``promptTokenCount`` says."""
        payload = json_payload(request)
        try:
            tokens = contents_tokens(get_field(payload, "contents"))
        except ValueError as exc:
            raise _error(400, f"Invalid contents: {' '.join(str(exc).split())}") from None
        return json_response({"totalTokens": tokens})

    def _get(
        self, request: Request, version: str, project: str, location: str, job_id: str
    ) -> Response:
        with self._store.lock:
            return json_response(self._view(self._job(job_id), self._store.clock()))

    def _list(self, request: Request, version: str, project: str, location: str) -> Response:
        try:
            size = int(request.args.get("pageSize") or "100")
            start = int(request.args.get("pageToken") or "0")
        except ValueError:
            raise _error(400, "pageSize and pageToken must be integers.") from None
        wanted = None
        text = request.args.get("filter")
        if text:
            match = _FILTER.match(text)
            if match is None:
                raise _error(
                    400, f'filter {text!r}: this fake understands only display_name="...".'
                )
            wanted = match.group(1)
        with self._store.lock:
            now = self._store.clock()
            parent = self._parent(project, location)
            jobs = [
                b
                for b in reversed(self._store.batches.values())
                if not b.deleted
                and self._jobs[b.id]["name"].startswith(parent + "/")
                and (wanted is None or (b.metadata or {}).get("displayName") == wanted)
            ]
            out: dict[str, Any] = {
                "batchPredictionJobs": [self._view(b, now) for b in jobs[start : start + size]]
            }
            if start + size < len(jobs):
                out["nextPageToken"] = str(start + size)
            return json_response(out)

    def _cancel(
        self, request: Request, version: str, project: str, location: str, job_id: str
    ) -> Response:
        refusal = _error(400, f"The job {job_id} has already ended.", "FAILED_PRECONDITION")
        with self._store.lock:
            cancel_google_job(self._job(job_id), self._store.clock(), refusal)
            return json_response({})

    def _delete(
        self, request: Request, version: str, project: str, location: str, job_id: str
    ) -> Response:
        with self._store.lock:
            self._job(job_id).deleted = True
            return json_response(
                {"name": f"{self._jobs[job_id]['name']}/operations/delete", "done": True}
            )

    # -- lifecycle and views --------------------------------------------------------------
    def _state(self, batch: Batch, now: float) -> str:
        return "JOB_STATE_" + google_job_state(batch, now)

    def _write_output(
        self, batch: Batch, done: list[Item], never_run: list[Item], cancelled: bool
    ) -> None:
        job = self._jobs[batch.id]
        prefix = job["outputConfig"]["gcsDestination"]["outputUriPrefix"].rstrip("/")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(batch.created))
        folder = f"{prefix}/prediction-model-{stamp}.{int(batch.created * 1e6) % 10**6:06d}Z"
        processed_at = rfc3339(self._store.clock())
        lines: list[Any] = []
        for it in done:
            line = it.line
            if isinstance(line, dict):
                line = {"status": line["status"], "processed_time": processed_at, **line}
            lines.append(line)
        if batch.unknown_custom_id and _is_claude(str(batch.model)):
            body = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 8}
            body["messages"] = [{"role": "user", "content": "?"}]
            lines.append(self._claude_answer(UNKNOWN_CUSTOM_ID, body, str(batch.model)).line)
        elif batch.unknown_custom_id:
            body = {"contents": [{"role": "user", "parts": [{"text": ""}]}]}
            body["labels"] = {_ID_LABEL: UNKNOWN_CUSTOM_ID}
            lines.append(self._answer(UNKNOWN_CUSTOM_ID, body, str(batch.model)).line)
        bucket, _, key = (folder + "/predictions.jsonl")[len("gs://") :].partition("/")
        data = jsonl(scripting.shuffled(batch.shuffle_seed, lines))
        self._gcs_client().bucket(bucket).blob(key).upload_from_string(data)
        job["gcsOutputDirectory"] = folder
        job["counts"] = (
            sum(1 for it in done if it.ok),
            sum(1 for it in done if not it.ok),
            len(never_run),
        )

    def _view(self, batch: Batch, now: float) -> dict[str, Any]:
        job = self._jobs[batch.id]
        state = self._state(batch, now)
        out: dict[str, Any] = {
            "name": job["name"],
            "displayName": (batch.metadata or {}).get("displayName", ""),
            "model": job["model"],
            "inputConfig": job["inputConfig"],
            "outputConfig": job["outputConfig"],
            "state": state,
            "createTime": rfc3339(batch.created),
            "updateTime": rfc3339(now),
        }
        out.update({k: job[k] for k in ("modelParameters", "instanceConfig") if k in job})
        if state != "JOB_STATE_PENDING":
            out["startTime"] = rfc3339(batch.created + batch.delay_secs / 3)
        if state in _TERMINAL:
            out["endTime"] = rfc3339(now)
        if state == "JOB_STATE_FAILED":
            error = (batch.errors or [{}])[0]
            out["error"] = {"code": error.get("code", 3), "message": error.get("message", "")}
        elif state in _TERMINAL:
            lifecycle.finish_once(batch, self._write_output)
            ok, failed, incomplete = job["counts"]
            out["outputInfo"] = {"gcsOutputDirectory": job["gcsOutputDirectory"]}
            out["completionStats"] = {
                "successfulCount": str(ok),
                "failedCount": str(failed),
                "incompleteCount": str(incomplete),
            }
        else:
            done = lifecycle.processed(batch, now)
            ok = sum(1 for it in batch.items[:done] if it.ok)
            out["completionStats"] = {
                "successfulCount": str(ok),
                "failedCount": str(done - ok),
                "incompleteCount": str(len(batch.items) - done),
            }
        return out


def _is_gs(uri: Any) -> bool:
    return isinstance(uri, str) and uri.startswith("gs://") and len(uri) > len("gs://")


def _failed_line(
    body: Mapping[str, Any], code: int, status: str, message: str, custom_id: Optional[str] = None
) -> dict[str, Any]:
    """A failed row: ``status`` holds the HTTP reason and the JSON error, as the service
    writes a failed request's error text (a Claude row keeps its ``custom_id`` first)."""
    error = json.dumps({"error": {"code": code, "message": message, "status": status}})
    reason = _HTTP_REASON.get(code, "Error")
    line = {"status": f"{reason}: {error}", "request": dict(body)}
    return line if custom_id is None else {"custom_id": custom_id, **line}


def _is_claude(model: str) -> bool:
    return model.startswith("publishers/anthropic/")


def _check_message(message: Mapping[str, Any]) -> None:
    """Raises if ``message`` is not an Anthropic ``Message`` the anthropic SDK reads
    (skipped without the SDK: the fake needs only google-genai)."""
    try:
        from anthropic.types import Message
    except ImportError:  # pragma: no cover - the anthropic SDK is a base dependency
        return
    Message.model_validate(dict(message))


def _broken(marker: str, cid: str, line: Mapping[str, Any], text: str) -> bytes:
    """The bytes of a line one of the line markers breaks (the id still readable as the
    ``mmirage_id`` label in the bytes of ``malformed_line``)."""
    if marker == "malformed_line":
        labels = json.dumps({_ID_LABEL: cid})
        return f'{{"status": "", "request": {{"labels": {labels}}}, "response": <<garbage'.encode()
    return scripting.broken_line(
        marker,
        cid,
        line,
        body_key="response",
        answer_text=text,
        wrong_shape={"status": "", "request": {"labels": {_ID_LABEL: cid}}, "unexpected": True},
    )


#: the offline Application Default Credentials the demo hands Beam's GCS filesystem (an
#: ``authorized_user`` token valid until 2999, never refreshed; an emulator ignores it),
#: so Beam does not spend ~30 s looking for Google's credentials before going anonymous
DEMO_ADC = {
    "type": "authorized_user",
    "client_id": "mmirage-demo-client",
    "client_secret": "mmirage-demo-secret",
    "refresh_token": "mmirage-demo-refresh-token",
    "token": "mmirage-demo-access-token",
    "expiry": "2999-01-01T00:00:00Z",
}


@contextlib.contextmanager
def demo_services(workdir: Path, delay_secs: float) -> Iterator[dict[str, str]]:
    """For ``mmirage demo --provider vertex``: a GCS emulator (``gcp-storage-emulator``,
    in memory, in this process) with one bucket, and a :class:`FakeVertexServer` on it,
    with this process's environment pointing there (``STORAGE_EMULATOR_HOST``,
    ``GOOGLE_APPLICATION_CREDENTIALS`` = :data:`DEMO_ADC` written into ``workdir``,
    ``VERTEX_ACCESS_TOKEN``) until the block ends.

    Yields:
        The config keys of a ``provider: vertex`` processor on them: ``base_url``,
        ``project``, ``location``, ``gcs_staging_uri``.

    Raises:
        mmirage_beam.errors.ConfigError: the emulator is not installed (naming the
            package).
    """
    import os
    import socket

    try:
        from gcp_storage_emulator.server import create_server
    except ImportError:
        from mmirage_beam.errors import ConfigError

        raise ConfigError(
            "provider",
            "the vertex demo needs a GCS emulator: pip install gcp-storage-emulator",
        ) from None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bucket = "mmirage-demo"
    storage = create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    storage.start()
    adc = workdir / "offline_adc.json"
    adc.write_text(json.dumps(DEMO_ADC), encoding="utf-8")
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "STORAGE_EMULATOR_HOST": endpoint,
        "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
        "GOOGLE_CLOUD_PROJECT": "mmirage-demo",
        "VERTEX_ACCESS_TOKEN": "mmirage-demo-token",
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        with FakeVertexServer(endpoint, processing_delay_secs=delay_secs) as fake:
            yield {
                "base_url": fake.base_url,
                "project": "mmirage-demo",
                "location": "us-central1",
                "gcs_staging_uri": f"gs://{bucket}/staging",
            }
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        storage.stop()


class VertexDemo:
    """Vertex AI's entry in the fake registry (:mod:`mmirage_beam.testing.fake_registry`).

    The fake reads and writes its job files in Cloud Storage, so it is a server of its
    own beside a GCS emulator (:class:`FakeVertexServer`, :func:`demo_services`), not a
    handler of the shared port: it claims no request there (``own_server``), and its
    :meth:`demo` starts the emulator and the server for ``mmirage demo --provider vertex``.
    """

    #: served by a server of its own, not on the shared port
    own_server = True

    def __init__(self, store: Store) -> None:
        self.store = store

    def claims(self, request: Request) -> bool:
        """Nothing on the shared port."""
        return False

    def handle(self, request: Request) -> Response:  # pragma: no cover - claims nothing
        """Never called: :meth:`claims` takes nothing."""
        raise AssertionError("the Vertex AI fake serves no request of the shared port")

    @contextlib.contextmanager
    def demo(self, base_url: str, rows: int) -> Iterator[dict[str, Any]]:
        """:func:`demo_services` with the shared fake's processing delay, its offline
        ADC file in a temporary folder; yields the processor keys (``base_url`` is the
        Vertex fake's own; chunks of a quarter of the ``rows``, at least 10)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mmirage-vertex-demo-") as folder:
            with demo_services(Path(folder), self.store.default_delay_secs) as keys:
                yield {**keys, "max_requests_per_chunk": max(10, rows // 4)}
