"""In-memory fake of the OpenAI Files + Batches API, the Anthropic Message Batches API and
the Gemini API's batch mode.

One embedded Werkzeug server on a loopback port serves every provider, so the real,
unmodified ``openai``, ``anthropic`` and ``google-genai`` SDKs can drive it through their
base URL (Gemini: ``fake.gemini_base_url``; its endpoints are described in
:mod:`mmirage_beam.providers.gemini.fake`)::

    with FakeProviderServer() as fake:                      # port 0: a free port
        oa = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url)
        an = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)

State (files, batches, results, recorded requests) lives in memory and is lost on
``stop()``. Only loopback hosts can be bound.

Models and parameters are checked as each service checks them (each provider's
``fake_service.py``, or for Mistral ``fake_bodies.py``'s ``refusal``: a typo'd
model, an unknown request key, ``stream`` in a batch line, the reasoning-model and
thinking-budget rules; the tables are the providers' own
``mmirage_beam/providers/<name>/rules.py``, listed with sources in
``docs/fake-provider.md``). ``FakeProviderServer(models=[...])``,
``fake.admit_models(...)`` or ``--models a,b`` serve other names too.

Endpoints
---------
OpenAI (``Authorization: Bearer <any non-empty key>`` required, else 401 with
``{"error": {"message", "type", "param", "code"}}``):

- ``POST /v1/files`` multipart (``file``, ``purpose``): upload; returns a file object.
  400 ``"File is too large."`` for a ``purpose=batch`` upload over 200 MB, 200,000,000
  bytes (the ``max_batch_file_bytes`` constructor argument lowers it) or any upload over
  512 MiB;
  400 ``"Invalid file format for Batch API. Must be .jsonl"`` (``param`` and ``code``
  null, as the real service answers) for a ``purpose=batch`` file of another declared
  format (``notes.txt``, ``input.json``); a name with no extension (the SDK names a
  raw-bytes upload ``upload``) is accepted when the content is JSONL (its first
  non-blank line a JSON object). Batch input files get ``expires_at = created_at + 30
  days``; other uploads ``expires_at: null``. ``tests/spec/README.md`` reviews every
  refusal of the fake against the real services.
- ``GET /v1/files?after=&limit=&order=&purpose=``: list files (newest first by default).
- ``GET /v1/files/{file_id}``, ``DELETE /v1/files/{file_id}``: retrieve or delete a file.
- ``GET /v1/files/{file_id}/content``: the raw bytes of an uploaded, output or error file.
- ``POST /v1/batches`` JSON ``{input_file_id, endpoint, completion_window, metadata?,
  output_expires_after?}``. HTTP 400 when the input file is unknown or not
  ``purpose=batch``, the endpoint is not in the spec's enum (``/v1/responses``,
  ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/completions``, ``/v1/moderations``,
  ``/v1/images/generations``, ``/v1/images/edits``, ``/v1/videos``),
  ``completion_window != "24h"``, metadata has more than 16 pairs, a key over 64 or a
  value over 512 characters, or ``output_expires_after`` is not ``{"anchor":
  "created_at", "seconds": 3600..2592000}``. The output and error files expire
  ``seconds`` after their creation (30 days without it): then they are gone (404 ``No
  such File object``), as the real service deletes them. The fake answers the first four
  endpoints; every line of a moderations, images or videos batch gets a 400
  ``unsupported_endpoint`` result in the error file. Problems in the file itself do
  not give an HTTP error: the batch is created and becomes ``failed`` with
  ``errors = {"object": "list", "data": [{code, message, param, line}]}``. Codes:
  ``empty_file``, ``too_many_tasks`` (> 50,000 lines),
  ``invalid_json_line``, ``missing_required_parameter`` (custom_id/method/url/body),
  ``invalid_method``, ``url_mismatch`` (line ``url`` != batch ``endpoint``),
  ``duplicate_custom_id``, ``model_mismatch`` (more than one model in the file), and
  ``token_limit_exceeded`` (scripted, or over ``enqueued_token_limit``).
- ``GET /v1/batches/{batch_id}``, ``POST /v1/batches/{batch_id}/cancel``,
  ``GET /v1/batches?after=&limit=`` (``{object: "list", data, first_id, last_id,
  has_more}``, newest first, limit 1..100, default 20; ``first_id``/``last_id`` null
  when empty). An empty file list has ``first_id``/``last_id`` ``""`` (the spec's
  ListFilesResponse requires strings).
- Every answer carries an ``x-request-id`` header (Anthropic: ``request-id``).

Anthropic (``x-api-key`` or ``Authorization: Bearer`` required, else 401 with
``{"type": "error", "error": {"type": "authentication_error", "message"}}``):

- ``POST /v1/messages/batches`` ``{requests: [{custom_id, params}]}``: 1..100,000
  requests, else 400; body over 256 MiB: 413 ``request_too_large``; a ``custom_id`` not
  matching ``^[a-zA-Z0-9_-]{1,64}$`` or repeated: 400 ``invalid_request_error``.
  ``params`` are checked asynchronously: bad ones become ``errored`` results.
- ``GET /v1/messages/batches/{id}``, ``POST .../{id}/cancel``, ``DELETE .../{id}`` (only
  once ended, else 400), ``GET .../{id}/results`` (JSONL, one ``\\n`` after each line),
  ``GET /v1/messages/batches?after_id=&before_id=&limit=`` (``{data, has_more,
  first_id, last_id}``, newest first, limit 1..1000, default 20).
- ``POST /v1/messages/count_tokens`` ``{model, messages, system?, tools?}``: ``{"input_tokens":
  N}``, N being the ``usage.input_tokens`` a batch would report for the same params
  (words of the user text + 10 per image); bad params are a 400 ``invalid_request_error``.
- ``results_url`` is null until the batch has ended, then an absolute URL on this
  server; the four outcome counts stay 0 until then.

Anthropic's Files API (beta; ``client.beta.files`` upload, list, retrieve_metadata,
delete, download) on ``/v1/files`` beside OpenAI's, told apart by the
``anthropic-beta: files-api-2025-04-14`` or ``anthropic-version`` header: see
:mod:`mmirage_beam.providers.anthropic.fake_files`.

Mistral (files and batch jobs as the mistralai SDK calls them, under ``/mistral``:
``Mistral(server_url=fake.mistral_base_url)``; inline jobs, chat and FIM completions,
embeddings, moderations, signed URLs and ``agent_id`` jobs): see
:mod:`mmirage_beam.providers.mistral.fake` for its endpoints, lifecycle and markers.

OpenAI-compatible services (the OpenAI Files + Batches endpoints with each service's
rules, under ``/azure/openai/v1``, ``/groq/openai/v1`` and ``/together/v1``:
``openai.OpenAI(base_url=fake.base_url_for("groq"))``): see
:mod:`mmirage_beam.providers.openai.fake_profiles`.

Admin (no auth; for tests and for a fake started from the command line):

- ``POST /_fake/script``: JSON object with the scripting keys below (merged into the
  current script; a ``null`` value restores that key's default); returns the script.
- ``GET /_fake/state``: ``{submitted_requests, create_counts, call_counts, batches,
  script}``.
- ``POST /_fake/reset``: forget every file, batch and record and clear the script.

Lifecycle
---------
Status is computed lazily from the clock on every read; no thread works in the
background. With delay ``D`` (``processing_delay_secs``; 0 by default, so a batch is
finished on the first read after its creation): OpenAI is ``validating`` for ``D/3``,
``in_progress`` until ``2D/3``, ``finalizing`` until ``D``, then ``completed``
(or ``failed`` right after validating, ``expired``/``cancelled`` when scripted).
Anthropic is ``in_progress`` until ``D``, then ``ended``. Requests are processed
evenly over the processing window (OpenAI ``D/3..2D/3``, Anthropic ``0..2D/3``), which
decides how many are done when a batch is cancelled; cancellation takes ``D/3``
(``cancelling``/``canceling``) and leaves partial results: OpenAI ``batch_cancelled``
lines in the error file, Anthropic ``canceled`` results. A create call answers
``validating`` (OpenAI) or ``in_progress`` (Anthropic). Cancelling a finished OpenAI
batch is a 409 ``"Cannot cancel a batch with status 'completed'."`` (Anthropic: 400
``invalid_request_error``). ``request_counts.failed`` (OpenAI) counts failed requests
and, for a cancelled batch, the requests it never ran; an expired batch does not count
the requests it never ran, so ``completed + failed < total`` there.

OpenAI results: successes go to ``output_file_id`` (``null`` when none), failures to
``error_file_id`` (``null`` when none, ``""`` if scripted). HTTP-style failures have
``response = {status_code, request_id, body: {error}}`` and ``error: null``; timeouts,
expiry and cancellation have ``response: null`` and ``error = {code, message}``.

Scripting keys (``fake.script(**keys)`` or ``POST /_fake/script``)
------------------------------------------------------------------
Values are captured by each batch when it is created.

- ``processing_delay_secs`` (float): delay for batches created from now on.
- ``expire_after_requests`` (int N): batches end ``expired`` (Anthropic: ``ended``)
  after N requests; the rest are ``batch_expired`` error lines / ``expired`` results.
- ``cancel_after_requests`` (int N): same, with cancellation (``batch_cancelled`` /
  ``canceled``); OpenAI passes through ``cancelling``, Anthropic through ``canceling``.
- ``token_limit_exceeded`` (bool): OpenAI batches become ``failed`` with
  ``errors.data[0].code == "token_limit_exceeded"`` and no output.
- ``enqueued_token_limit`` (int): the same failure when this batch's prompt tokens plus
  those of unfinished batches of the same model exceed the limit.
- ``leading_errors`` (dict): ``{"status": 429|500|502|503|529|404|..., "count": N,
  "retry_after_ms": 10, "paths": [endpoint names]}``; the first N matching calls (after
  authentication) answer ``status`` with ``retry-after-ms`` and ``retry-after`` headers
  in the provider's error shape. A 404 is the provider's "not found" for the object of
  the URL and carries no retry headers: OpenAI ``{"error": {"message": "No batch found
  with id '<id>'.", "type": "invalid_request_error", "param": null, "code": null}}``,
  Anthropic ``{"type": "error", "error": {"type": "not_found_error", "message"}}`` (so
  ``{"status": 404, "count": 2, "paths": ["batches_retrieve"]}`` is a transient 404 on
  batch lookup). Endpoint names: ``files_create``, ``files_list``,
  ``files_retrieve``, ``files_delete``, ``files_content``, ``batches_create``,
  ``batches_list``, ``batches_retrieve``, ``batches_cancel``,
  ``messages_count_tokens``, ``messages_batches_create``, ``messages_batches_list``,
  ``messages_batches_retrieve``,
  ``messages_batches_cancel``, ``messages_batches_delete``,
  ``messages_batches_results``; Gemini ``gemini_files_upload``, ``gemini_files_get``,
  ``gemini_files_download``, ``gemini_batches_create``, ``gemini_batches_list``,
  ``gemini_batches_get``, ``gemini_batches_cancel``, ``gemini_batches_delete``,
  ``gemini_count_tokens``, ``gemini_files_list``, ``gemini_files_delete``; Anthropic
  files ``anthropic_files_upload``, ``anthropic_files_list``,
  ``anthropic_files_retrieve``, ``anthropic_files_delete``, ``anthropic_files_download``;
  Mistral ``mmirage_beam.providers.mistral.FAKE_ENDPOINT_NAMES``.
  No ``paths``: every API endpoint.
- ``fail_batch_creates`` (dict): ``{"nth": K, "permanent": false, "status": 500,
  "retry_after_ms": 10, "created": false}``; the K-th valid batch create call (both
  providers counted together, from when this key was scripted) fails with ``status``,
  and every later one too if ``permanent``. With ``created`` the batch is really created
  before the error is answered, so the SDK's retry makes a duplicate batch.
- ``empty_error_file_id`` (bool): OpenAI ``error_file_id`` is ``""`` when nothing failed.
- ``shuffle_results`` (bool) and ``shuffle_seed`` (int, default 0): output, error and
  result lines come in a seeded shuffled order (never the submitted order when > 1).
- ``unknown_custom_id`` (bool): one extra result line with custom_id
  ``fake_unknown_custom_id`` that was never submitted.

Markers in the prompt text
--------------------------
A marker is ``FAKE_ERROR:<name>`` (the whole word: ``FAKE_ERROR:empty_body_200`` is not
``empty``); the first known one in the prompt text counts.

Failures:

- ``FAKE_ERROR:server_error``: OpenAI error line with status 500 (``server_error``);
  Anthropic ``errored`` with ``api_error``.
- ``FAKE_ERROR:invalid_request``: 400 ``invalid_request_error`` (both).
- ``FAKE_ERROR:transient``: like ``server_error`` the first time this server processes a
  request with that custom_id, a normal answer afterwards (a resubmission succeeds).
- ``FAKE_ERROR:flaky``: like ``rate_limit`` the first time this server sees that prompt
  text (whatever the custom_id or batch), a normal answer afterwards: the row fails once
  and a retry (``mmirage run --wait --retries N``, ``mmirage resubmit``) ends it clean.
- ``FAKE_ERROR:rate_limit``: 429 (OpenAI code ``rate_limit_exceeded``; Anthropic
  ``rate_limit_error``).
- ``FAKE_ERROR:timeout``: OpenAI ``response: null, error.code: "request_timeout"``;
  Anthropic ``errored`` with ``timeout_error``.
- ``FAKE_ERROR:u2028``: an error whose message holds raw (unescaped) U+2028, U+2029 and
  U+0085: OpenAI error-file line with status 400 ``invalid_request_error``; Anthropic
  ``errored`` ``invalid_request_error``. The line is UTF-8 written with
  ``ensure_ascii=False``.

Answers that are not usable (the request succeeds; usage is counted):

- ``FAKE_ERROR:refusal``: OpenAI chat ``message.content: null``, ``message.refusal:
  "I'm sorry, but I can't help with that."``, ``finish_reason: "stop"``; Responses
  ``output[0].content[0] = {"type": "refusal", "refusal": ...}``; Anthropic
  ``stop_reason: "refusal"`` with ``content: []``.
- ``FAKE_ERROR:length``: the answer is cut to its first half (a JSON answer becomes an
  unterminated JSON text such as ``{"final_answer": 1``): OpenAI chat/completions
  ``finish_reason: "length"``; Responses ``status: "incomplete"``,
  ``incomplete_details: {"reason": "max_output_tokens"}``; Anthropic ``stop_reason:
  "max_tokens"``.
- ``FAKE_ERROR:content_filter``: OpenAI chat ``finish_reason: "content_filter"`` with
  ``content: null`` (completions: the cut text); Responses ``status: "incomplete"``,
  ``incomplete_details: {"reason": "content_filter"}`` with the cut text. Anthropic has
  no such finish: it answers normally.
- ``FAKE_ERROR:empty``: OpenAI chat ``content: ""``; Responses ``output: []``;
  Anthropic ``content: []`` (``stop_reason: "end_turn"``).
- ``FAKE_ERROR:error_body_200`` (OpenAI only; Anthropic answers normally): the output
  line has ``response.status_code: 200`` and ``body: {"error": {"message", "type":
  "server_error", "param", "code"}}``.
- ``FAKE_ERROR:empty_body_200`` (OpenAI only): ``response.status_code: 200``, ``body: {}``.
- ``FAKE_ERROR:not_json``: a JSON-schema request gets plain, non-JSON text instead.
- ``FAKE_FENCE``: the JSON answer is wrapped in a Markdown ```` ```json ```` fence.

Broken result lines (both providers: the OpenAI output file, the Anthropic results
JSONL; each line still ends with one ``\\n``, the other lines are untouched):

- ``FAKE_ERROR:malformed_line``: not JSON: ``{"custom_id": "<id>", "response": <<garbage``
  (Anthropic ``"result": <<garbage``).
- ``FAKE_ERROR:truncated_line``: the first half of the valid line's bytes.
- ``FAKE_ERROR:wrong_shape``: valid JSON of the wrong shape: ``{"custom_id": "<id>",
  "unexpected": true}`` (OpenAI), ``{"custom_id": "<id>", "result": {"type":
  "mystery"}}`` (Anthropic).
- ``FAKE_ERROR:invalid_utf8``: the valid line with the bytes ``ff fe`` (invalid UTF-8)
  in front of the answer text, inside its JSON string.

These lines count as processed successfully in ``request_counts``.

Deterministic answers
---------------------
The prompt text is the text of every user message (OpenAI content string or ``text``
parts; Responses API ``input`` string or ``input_text`` parts; Anthropic content string
or ``text`` blocks) joined by ``"\\n"``; for ``/v1/completions`` and ``/v1/embeddings``
it is the ``prompt``/``input`` (list items joined by ``"\\n"``).

- Plain: :func:`fake_answer_text`, ``"FAKE:" + sha256(prompt)[:12] + " " +`` the first 60
  characters of the prompt with whitespace collapsed (trailing spaces stripped).
- JSON schema (OpenAI ``response_format.json_schema.schema`` or Responses
  ``text.format.schema``; Anthropic ``output_config.format.schema``):
  ``json.dumps(fake_answer_json(prompt, schema))``. ``response_format: json_object``
  gets ``{"answer": fake_answer_text(prompt)}``.
- Embeddings (OpenAI ``/v1/embeddings``, Mistral ``/v1/embeddings`` jobs, Gemini
  ``asyncBatchEmbedContent`` jobs): per input, ``openai_bodies.embedding_vector``:
  ``dimensions`` (OpenAI ``dimensions``, Mistral ``output_dimension``, Gemini
  ``output_dimensionality``; 8 when unset) numbers in [-0.5, 0.5] from the SHA-256 of
  the input's JSON.
- Usage: input tokens = words of the prompt + 10 per image; output tokens = words of the
  answer text. OpenAI ``usage.{prompt_tokens, completion_tokens, total_tokens}`` (the
  Responses API ``input_tokens``/``output_tokens``); Anthropic ``usage.{input_tokens,
  output_tokens}``.

Modules
-------
This package is the core, and names no provider: ``app`` (server, admin endpoints,
dispatch to the registered fakes), ``routing`` (a fake's route table, call count,
authentication, leading errors and error shape: :class:`~.routing.RoutedFake`), ``store``
(files, batches, records), ``lifecycle`` (status from the clock), ``scripting`` (script
keys, markers), ``answers`` (deterministic answers), ``media`` (image bytes), ``wire``
(errors in each provider's registered shape, JSON responses), ``limits`` (the shared
limits), ``serving`` (a WSGI app in a thread), ``command`` (the command line).

Each provider's fake lives in its package, ``mmirage_beam/providers/<name>/``:
``fake.py`` (handlers; ``fake_bodies.py``... beside it) and ``fake_service.py`` (its name,
limits, error shape, lifecycle phases, model and parameter refusals, routes and
credentials, and the class registered with :mod:`mmirage_beam.testing.fake_registry` from
the package's ``__init__``). The server builds every registered fake over one store and
hands each request to the fake that claims it (OpenAI's, the fallback, last).

Command line::

    python -m mmirage_beam.testing.fake_provider [--host 127.0.0.1] [--port N]
        [--delay SECS] [--script JSON] [--expire-after-requests N] ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmirage_beam.testing.fake_provider.answers import fake_answer_json, fake_answer_text
from mmirage_beam.testing.fake_provider.scripting import SCRIPT_KEYS

if TYPE_CHECKING:
    from mmirage_beam.testing.fake_provider.app import FakeProviderServer
    from mmirage_beam.testing.fake_provider.command import main

__all__ = ["SCRIPT_KEYS", "FakeProviderServer", "fake_answer_json", "fake_answer_text", "main"]


def __getattr__(name: str) -> Any:
    # The server and the command line load on first use: the providers' fakes import
    # this package's core modules (store, wire, scripting...), and the server loads them.
    if name == "FakeProviderServer":
        from mmirage_beam.testing.fake_provider.app import FakeProviderServer

        return FakeProviderServer
    if name == "main":
        from mmirage_beam.testing.fake_provider.command import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
