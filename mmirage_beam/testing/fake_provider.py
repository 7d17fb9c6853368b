"""In-memory fake of the OpenAI Files + Batches API and the Anthropic Message Batches API.

One embedded Werkzeug server on a loopback port serves both providers, so the real,
unmodified ``openai`` and ``anthropic`` SDKs can drive it through ``base_url``::

    with FakeProviderServer() as fake:                      # port 0: a free port
        oa = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url)
        an = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)

State (files, batches, results, recorded requests) lives in memory and is lost on
``stop()``. Only loopback hosts can be bound.

Endpoints
---------
OpenAI (``Authorization: Bearer <any non-empty key>`` required, else 401 with
``{"error": {"message", "type", "param", "code"}}``):

- ``POST /v1/files`` multipart (``file``, ``purpose``): upload; returns a file object.
- ``GET /v1/files?after=&limit=&order=&purpose=``: list files (newest first by default).
- ``GET /v1/files/{file_id}``, ``DELETE /v1/files/{file_id}``: retrieve or delete a file.
- ``GET /v1/files/{file_id}/content``: the raw bytes of an uploaded, output or error file.
- ``POST /v1/batches`` JSON ``{input_file_id, endpoint, completion_window, metadata?}``.
  HTTP 400 when the input file is unknown or not ``purpose=batch``, the endpoint is not
  one of ``/v1/chat/completions``, ``/v1/responses``, ``/v1/embeddings``,
  ``/v1/completions``, ``completion_window != "24h"``, or metadata has more than 16
  pairs, a key over 64 or a value over 512 characters. Problems in the file itself do
  not give an HTTP error: the batch is created and becomes ``failed`` with
  ``errors = {"object": "list", "data": [{code, message, param, line}]}``. Codes:
  ``file_too_large`` (> 200 MiB), ``empty_file``, ``too_many_tasks`` (> 50,000 lines),
  ``invalid_json_line``, ``missing_required_parameter`` (custom_id/method/url/body),
  ``invalid_method``, ``url_mismatch`` (line ``url`` != batch ``endpoint``),
  ``duplicate_custom_id``, ``model_mismatch`` (more than one model in the file), and
  ``token_limit_exceeded`` (scripted, or over ``enqueued_token_limit``).
- ``GET /v1/batches/{batch_id}``, ``POST /v1/batches/{batch_id}/cancel``,
  ``GET /v1/batches?after=&limit=`` (``{object: "list", data, first_id, last_id,
  has_more}``, newest first, limit 1..100, default 20).

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
- ``results_url`` is null until the batch has ended, then an absolute URL on this
  server; the four outcome counts stay 0 until then.

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
``validating`` (OpenAI) or ``in_progress`` (Anthropic). Cancelling a finished batch is
a 400 ``invalid_request_error``. ``request_counts.failed`` (OpenAI) includes expired and
cancelled requests, so ``completed + failed == total`` once the batch is done.

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
- ``leading_errors`` (dict): ``{"status": 429|500|503|529, "count": N,
  "retry_after_ms": 10, "paths": [endpoint names]}``; the first N matching calls (after
  authentication) answer ``status`` with ``retry-after-ms`` and ``retry-after`` headers
  in the provider's error shape. Endpoint names: ``files_create``, ``files_list``,
  ``files_retrieve``, ``files_delete``, ``files_content``, ``batches_create``,
  ``batches_list``, ``batches_retrieve``, ``batches_cancel``,
  ``messages_batches_create``, ``messages_batches_list``, ``messages_batches_retrieve``,
  ``messages_batches_cancel``, ``messages_batches_delete``,
  ``messages_batches_results``. No ``paths``: every API endpoint.
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
- ``FAKE_ERROR:server_error``: OpenAI error line with status 500 (``server_error``);
  Anthropic ``errored`` with ``api_error``.
- ``FAKE_ERROR:invalid_request``: 400 ``invalid_request_error`` (both).
- ``FAKE_ERROR:transient``: like ``server_error`` the first time this server processes a
  request with that custom_id, a normal answer afterwards (a resubmission succeeds).
- ``FAKE_ERROR:rate_limit``: 429 (OpenAI code ``rate_limit_exceeded``; Anthropic
  ``rate_limit_error``).
- ``FAKE_ERROR:timeout``: OpenAI ``response: null, error.code: "request_timeout"``;
  Anthropic ``errored`` with ``timeout_error``.
- ``FAKE_ERROR:not_json``: a JSON-schema request gets plain, non-JSON text instead.
- ``FAKE_FENCE``: the JSON answer is wrapped in a Markdown ```` ```json ```` fence.

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
- Usage: input tokens = words of the prompt + 10 per image; output tokens = words of the
  answer text. OpenAI ``usage.{prompt_tokens, completion_tokens, total_tokens}`` (the
  Responses API ``input_tokens``/``output_tokens``); Anthropic ``usage.{input_tokens,
  output_tokens}``.

Command line::

    python -m mmirage_beam.testing.fake_provider [--host 127.0.0.1] [--port N]
        [--delay SECS] [--script JSON] [--expire-after-requests N] ...
"""

from __future__ import annotations

import argparse
import base64
import binascii
import copy
import hashlib
import ipaddress
import json
import logging
import math
import random
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

__all__ = ["FakeProviderServer", "fake_answer_json", "fake_answer_text", "main"]

_LOG = logging.getLogger(__name__)

OPENAI = "openai"
ANTHROPIC = "anthropic"
_PROVIDERS = (OPENAI, ANTHROPIC)

# Limits of the real services.
_OPENAI_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions")
_OPENAI_MAX_LINES = 50_000
_OPENAI_MAX_FILE_BYTES = 200 * 1024 * 1024  # 200 MiB
_OPENAI_MAX_METADATA_PAIRS = 16
_OPENAI_MAX_METADATA_KEY_CHARS = 64
_OPENAI_MAX_METADATA_VALUE_CHARS = 512
_OPENAI_BATCH_LIST_MAX_LIMIT = 100
_OPENAI_FILE_LIST_MAX_LIMIT = 10_000
_OPENAI_FILE_PURPOSES = frozenset(
    {"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}
)
_ANTHROPIC_MAX_REQUESTS = 100_000
_ANTHROPIC_MAX_BODY_BYTES = 256 * 1024 * 1024  # 256 MiB
_ANTHROPIC_LIST_MAX_LIMIT = 1_000
_ANTHROPIC_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # 5 MiB per image, decoded
_ANTHROPIC_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_DEFAULT_LIST_LIMIT = 20
_BATCH_LIFETIME_SECS = 24 * 60 * 60
_TOKENS_PER_IMAGE = 10
_DEFAULT_RETRY_AFTER_MS = 10

_CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SCHEMA_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_DATA_URL_RE = re.compile(r"^data:([^;,]*)((?:;[^;,]*)*),(.*)$", re.DOTALL)

UNKNOWN_CUSTOM_ID = "fake_unknown_custom_id"
FAKE_ERROR_PREFIX = "FAKE_ERROR:"
FENCE_MARKER = "FAKE_FENCE"
_ERROR_MARKERS = ("server_error", "invalid_request", "rate_limit", "timeout")
_NOT_JSON_MARKER = FAKE_ERROR_PREFIX + "not_json"
_TRANSIENT_MARKER = FAKE_ERROR_PREFIX + "transient"

_OPENAI_ENDPOINT_NAMES = (
    "files_create",
    "files_list",
    "files_retrieve",
    "files_delete",
    "files_content",
    "batches_create",
    "batches_list",
    "batches_retrieve",
    "batches_cancel",
)
_ANTHROPIC_ENDPOINT_NAMES = (
    "messages_batches_create",
    "messages_batches_list",
    "messages_batches_retrieve",
    "messages_batches_cancel",
    "messages_batches_delete",
    "messages_batches_results",
)
_API_ENDPOINT_NAMES = frozenset(_OPENAI_ENDPOINT_NAMES + _ANTHROPIC_ENDPOINT_NAMES)

_JSON_MAX_DEPTH = 12


# ---------------------------------------------------------------------------------------
# Deterministic answers
# ---------------------------------------------------------------------------------------


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fake_answer_text(prompt_text: str) -> str:
    """The fake's plain answer to a prompt.

    Args:
        prompt_text: the prompt text (user message texts joined by ``"\\n"``).

    Returns:
        ``"FAKE:" + sha256(prompt_text)[:12] + " " + collapsed[:60]``, right-stripped,
        where ``collapsed`` is the prompt with runs of whitespace replaced by one space.
    """
    collapsed = " ".join(prompt_text.split())
    return f"FAKE:{_sha256(prompt_text)[:12]} {collapsed[:60]}".rstrip()


def fake_answer_json(prompt_text: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The fake's JSON answer to a prompt that asks for output matching ``schema``.

    Every property of every object is present (required or not). Strings are
    ``"<key>-<8 hex digits of sha256(prompt, path)>"`` (or a date, date-time, time,
    email, uri or uuid for those formats), padded or cut to ``minLength``/``maxLength``;
    integers and numbers lie within ``minimum``/``maximum`` (and the exclusive bounds,
    ``multipleOf``), 0..100 when unbounded; booleans alternate by hash; arrays have
    ``max(minItems, 2)`` items (at most ``maxItems``); ``enum`` and ``const`` are honoured;
    ``anyOf``/``oneOf`` take the first non-null branch; ``allOf`` is merged; local
    ``$ref`` (``#/$defs/...``) is followed.

    Args:
        prompt_text: the prompt text.
        schema: a JSON schema whose root is an object.

    Returns:
        A dict that validates against ``schema``.

    Raises:
        ValueError: if the root is not an object schema or a ``$ref`` cannot be resolved.
    """
    faker = _JsonFaker(prompt_text, schema)
    value = faker.value(schema, "$", 0)
    if not isinstance(value, dict):
        raise ValueError("the root of a structured-output schema must be an object")
    return value


class _JsonFaker:
    """Builds a deterministic instance of a JSON schema from a prompt hash."""

    def __init__(self, prompt_text: str, root: Mapping[str, Any]) -> None:
        self._seed = _sha256(prompt_text)
        self._root = root

    def _hex(self, path: str) -> str:
        return _sha256(f"{self._seed}:{path}")

    def _num(self, path: str) -> int:
        return int(self._hex(path)[:12], 16)

    def resolve(self, schema: Any) -> Any:
        for _ in range(64):
            if not isinstance(schema, Mapping) or "$ref" not in schema:
                return schema
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise ValueError(f"unsupported $ref {ref!r}: only local references")
            target: Any = self._root
            for part in ref[1:].split("/"):
                if not part:
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise ValueError(f"cannot resolve $ref {ref!r}")
                target = target[part]
            schema = target
        raise ValueError("$ref chain too long")

    def value(self, schema: Any, path: str, depth: int) -> Any:
        schema = self.resolve(schema)
        if not isinstance(schema, Mapping) or not schema:
            return self._string({}, path)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return copy.deepcopy(enum[self._num(path) % len(enum)])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self.value(self._pick_branch(options), path, depth + 1)
        if isinstance(schema.get("allOf"), list):
            return self.value(self._merge_all_of(schema), path, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            kind = non_null[0] if non_null else "null"
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                kind = "string"
        if kind == "object":
            return self._object(schema, path, depth)
        if kind == "array":
            return self._array(schema, path, depth)
        if kind == "integer":
            return self._integer(schema, path)
        if kind == "number":
            return self._number(schema, path)
        if kind == "boolean":
            return self._num(path) % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, path)

    def _pick_branch(self, options: list[Any]) -> Any:
        for option in options:
            resolved = self.resolve(option)
            if not (isinstance(resolved, Mapping) and resolved.get("type") == "null"):
                return option
        return options[0]

    def _merge_all_of(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in schema["allOf"]:
            resolved = self.resolve(sub)
            if not isinstance(resolved, Mapping):
                continue
            for key, val in resolved.items():
                if key == "properties" and isinstance(val, Mapping):
                    merged["properties"] = {**merged.get("properties", {}), **val}
                elif key == "required" and isinstance(val, list):
                    merged["required"] = list(merged.get("required", [])) + val
                else:
                    merged.setdefault(key, val)
        return merged

    def _object(self, schema: Mapping[str, Any], path: str, depth: int) -> dict[str, Any]:
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        keys = list(props) if depth <= _JSON_MAX_DEPTH else [k for k in props if k in required]
        keys += [r for r in required if r not in keys]
        return {key: self.value(props.get(key, {}), f"{path}.{key}", depth + 1) for key in keys}

    def _array(self, schema: Mapping[str, Any], path: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, {}
        min_items = int(schema.get("minItems", 0) or 0)
        count = max(min_items, 2 if depth <= _JSON_MAX_DEPTH else 0)
        if isinstance(prefix, list):
            count = max(count, len(prefix))
        max_items = schema.get("maxItems")
        if isinstance(max_items, int):
            count = min(count, max_items)
        out = []
        for i in range(count):
            item_schema = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
            out.append(self.value(item_schema, f"{path}[{i}]", depth + 1))
        return out

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        digest = self._hex(path)
        n = int(digest[:12], 16)
        fmt = schema.get("format")
        if fmt == "date-time":
            text = f"2024-01-{1 + n % 28:02d}T12:{n % 60:02d}:00Z"
        elif fmt == "date":
            text = f"2024-01-{1 + n % 28:02d}"
        elif fmt == "time":
            text = f"12:{n % 60:02d}:00"
        elif fmt == "email":
            text = f"user{digest[:6]}@example.com"
        elif fmt in ("uri", "url"):
            text = f"https://example.com/{digest[:8]}"
        elif fmt == "uuid":
            text = str(uuid.UUID(digest[:32]))
        else:
            label = re.split(r"[.\[]", path)[-1].rstrip("]")
            if label in ("$", "") or label.isdigit():
                label = "item" if label.isdigit() else "value"
            text = f"{label}-{digest[:8]}"
        min_len = schema.get("minLength")
        if isinstance(min_len, int) and len(text) < min_len:
            text += "x" * (min_len - len(text))
        max_len = schema.get("maxLength")
        if isinstance(max_len, int):
            text = text[:max_len]
        return text

    @staticmethod
    def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        lo_excl = hi_excl = False
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if ex_lo is True:  # draft-4 boolean form
            lo_excl = lo is not None
        elif isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool):
            if lo is None or ex_lo >= lo:
                lo, lo_excl = ex_lo, True
        if ex_hi is True:
            hi_excl = hi is not None
        elif isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool):
            if hi is None or ex_hi <= hi:
                hi, hi_excl = ex_hi, True
        return lo, lo_excl, hi, hi_excl

    def _integer(self, schema: Mapping[str, Any], path: str) -> int:
        lo, lo_excl, hi, hi_excl = self._bounds(schema)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
        if ilo is None and ihi is None:
            ilo, ihi = 0, 100
        elif ilo is None:
            ilo = ihi - 100
        elif ihi is None:
            ihi = ilo + 100
        step = schema.get("multipleOf")
        step = (
            int(step) if isinstance(step, (int, float)) and step >= 1 and step == int(step) else 1
        )
        first = math.ceil(ilo / step) * step
        count = (ihi - first) // step + 1
        if count <= 0:
            return ilo
        return first + (self._num(path) % count) * step

    def _number(self, schema: Mapping[str, Any], path: str) -> float | int:
        if isinstance(schema.get("multipleOf"), (int, float)):
            step = schema["multipleOf"]
            if step > 0 and step == int(step):
                return self._integer(schema, path)
        lo, lo_excl, hi, hi_excl = self._bounds(schema)
        if lo is None and hi is None:
            lo, hi = 0.0, 100.0
        elif lo is None:
            lo = hi - 100.0
        elif hi is None:
            hi = lo + 100.0
        if hi <= lo:
            return lo
        frac = (self._num(path) % 9999 + 1) / 10000  # strictly inside (0, 1)
        value = lo + frac * (hi - lo)
        rounded = round(value, 4)
        if lo < rounded < hi or (
            (rounded == lo and not lo_excl) or (rounded == hi and not hi_excl)
        ):
            return rounded
        return value


def _schema_root_is_object(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    try:
        resolved = _JsonFaker("", schema).resolve(schema)
    except ValueError:
        return False
    if not isinstance(resolved, Mapping):
        return False
    kind = resolved.get("type")
    return kind == "object" or (kind is None and "properties" in resolved)


# ---------------------------------------------------------------------------------------
# Prompt analysis shared by both providers
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    text: str
    input_tokens: int
    output_tokens: int


def _words(text: str) -> int:
    return len(text.split())


def _error_marker(prompt_text: str) -> str | None:
    for name in _ERROR_MARKERS:
        if FAKE_ERROR_PREFIX + name in prompt_text:
            return name
    if _TRANSIENT_MARKER in prompt_text:
        return "transient"
    return None


def _answer(prompt_text: str, images: int, mode: str, schema: Any) -> _Answer:
    """Answer text and usage; ``mode`` is ``"text"``, ``"json_object"`` or ``"json_schema"``."""
    if mode == "json_schema" and _NOT_JSON_MARKER not in prompt_text:
        text = json.dumps(fake_answer_json(prompt_text, schema))
    elif mode == "json_object" and _NOT_JSON_MARKER not in prompt_text:
        text = json.dumps({"answer": fake_answer_text(prompt_text)})
    else:
        text = fake_answer_text(prompt_text)
    if mode != "text" and FENCE_MARKER in prompt_text and _NOT_JSON_MARKER not in prompt_text:
        text = f"```json\n{text}\n```"
    return _Answer(
        text=text,
        input_tokens=_words(prompt_text) + _TOKENS_PER_IMAGE * images,
        output_tokens=_words(text),
    )


def _sniff_image(data: bytes) -> str | None:
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _b64decode(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def _jsonl(lines: Iterable[Mapping[str, Any]]) -> bytes:
    """JSON Lines with exactly one ``\\n`` after each line and no blank lines."""
    return b"".join(json.dumps(line).encode("utf-8") + b"\n" for line in lines)


class _ApiError(Exception):
    """An HTTP error answered in the calling provider's error shape."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


# ---------------------------------------------------------------------------------------
# OpenAI request bodies
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HttpFailure:
    status: int
    error: dict[str, Any]  # {message, type, param, code}


def _oa_error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> _HttpFailure:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _HttpFailure(status, {"message": message, "type": kind, "param": param, "code": code})


def _openai_check_image_url(url: Any, param: str) -> _HttpFailure | None:
    if not isinstance(url, str) or not url:
        return _oa_error(400, f"Missing required parameter: '{param}'.", param=param)
    if not url.startswith("data:"):
        return None
    match = _DATA_URL_RE.match(url)
    decoded = None
    if match and ";base64" in match.group(2):
        decoded = _b64decode(match.group(3))
    if decoded is None or _sniff_image(decoded) is None:
        return _oa_error(
            400,
            "You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: ['png', 'jpeg', 'gif', 'webp'].",
            param=param,
            code="invalid_image_format",
        )
    return None


def _openai_check_schema(fmt: Any, param: str, *, nested: bool) -> _HttpFailure | None:
    """Checks a json_schema response format (chat: nested under ``json_schema``)."""
    spec = fmt.get("json_schema") if nested else fmt
    if not isinstance(spec, Mapping):
        return _oa_error(400, f"Missing required parameter: '{param}'.", param=param)
    name = spec.get("name")
    if not isinstance(name, str) or not _SCHEMA_NAME_RE.match(name):
        return _oa_error(
            400,
            f"Invalid '{param}.name': must match ^[a-zA-Z0-9_-]{{1,64}}$.",
            param=f"{param}.name",
            code="invalid_value",
        )
    if not _schema_root_is_object(spec.get("schema")):
        return _oa_error(
            400,
            f"Invalid schema for response_format '{name}': schema must be a JSON Schema of "
            "'type: \"object\"'.",
            param=param,
            code="invalid_json_schema",
        )
    return None


def _openai_check_body(endpoint: str, body: Any) -> _HttpFailure | None:
    """Request-level validation: a failure becomes a 400 line in the error file."""
    if not isinstance(body, Mapping):
        return _oa_error(400, "The request body must be a JSON object.", param="body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _oa_error(400, "you must provide a model parameter", param="model")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not 0 <= temperature <= 2
    ):
        return _oa_error(
            400,
            "Invalid 'temperature': must be a number between 0 and 2.",
            param="temperature",
            code="invalid_value",
        )
    if endpoint == "/v1/chat/completions":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _oa_error(
                400,
                "Missing required parameter: 'messages'.",
                param="messages",
                code="missing_required_parameter",
            )
        for i, msg in enumerate(messages):
            if not isinstance(msg, Mapping) or msg.get("role") not in (
                "system",
                "developer",
                "user",
                "assistant",
                "tool",
                "function",
            ):
                return _oa_error(
                    400, f"Invalid value for 'messages[{i}].role'.", param=f"messages[{i}].role"
                )
            content = msg.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    if isinstance(part, Mapping) and part.get("type") == "image_url":
                        image = part.get("image_url")
                        url = image.get("url") if isinstance(image, Mapping) else None
                        failure = _openai_check_image_url(
                            url, f"messages[{i}].content[{j}].image_url.url"
                        )
                        if failure:
                            return failure
        fmt = body.get("response_format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return _openai_check_schema(fmt, "response_format", nested=True)
    elif endpoint == "/v1/responses":
        if not isinstance(body.get("input"), (str, list)):
            return _oa_error(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        text_cfg = body.get("text")
        fmt = text_cfg.get("format") if isinstance(text_cfg, Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            return _openai_check_schema(fmt, "text.format", nested=False)
    elif endpoint == "/v1/completions":
        if not isinstance(body.get("prompt"), (str, list)):
            return _oa_error(
                400,
                "Missing required parameter: 'prompt'.",
                param="prompt",
                code="missing_required_parameter",
            )
    elif endpoint == "/v1/embeddings":
        if not isinstance(body.get("input"), (str, list)):
            return _oa_error(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
    return None


def _text_parts(content: Any, text_types: tuple[str, ...]) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in text_types:
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
    return out


def _count_parts(content: Any, image_types: tuple[str, ...]) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, Mapping) and p.get("type") in image_types)


def _openai_prompt(endpoint: str, body: Mapping[str, Any]) -> tuple[str, int, str, Any]:
    """(prompt text, image count, answer mode, schema) of a validated request body."""
    texts: list[str] = []
    images = 0
    mode, schema = "text", None
    if endpoint == "/v1/chat/completions":
        for msg in body.get("messages") or []:
            if msg.get("role") == "user":
                texts += _text_parts(msg.get("content"), ("text",))
            images += _count_parts(msg.get("content"), ("image_url",))
        fmt = body.get("response_format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            mode, schema = "json_schema", fmt["json_schema"]["schema"]
        elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
            mode = "json_object"
    elif endpoint == "/v1/responses":
        items = body.get("input")
        if isinstance(items, str):
            texts.append(items)
        else:
            for item in items:
                if isinstance(item, Mapping) and item.get("role", "user") == "user":
                    texts += _text_parts(item.get("content"), ("input_text", "text"))
                if isinstance(item, Mapping):
                    images += _count_parts(item.get("content"), ("input_image",))
        text_cfg = body.get("text")
        fmt = text_cfg.get("format") if isinstance(text_cfg, Mapping) else None
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            mode, schema = "json_schema", fmt["schema"]
        elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
            mode = "json_object"
    else:
        value = body.get("prompt" if endpoint == "/v1/completions" else "input")
        if isinstance(value, str):
            texts.append(value)
        else:
            texts += [str(v) for v in value]
    return "\n".join(texts), images, mode, schema


def _openai_success_body(
    endpoint: str, body: Mapping[str, Any], answer: _Answer, now: float
) -> dict[str, Any]:
    model = body["model"]
    created = int(now)
    usage = {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }
    if endpoint == "/v1/chat/completions":
        return {
            "id": _new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }
    if endpoint == "/v1/responses":
        return {
            "id": _new_id("resp_"),
            "object": "response",
            "created_at": created,
            "status": "completed",
            "model": model,
            "output": [
                {
                    "type": "message",
                    "id": _new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": answer.input_tokens,
                "output_tokens": answer.output_tokens,
                "total_tokens": answer.input_tokens + answer.output_tokens,
            },
        }
    if endpoint == "/v1/completions":
        return {
            "id": _new_id("cmpl-"),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [
                {"text": answer.text, "index": 0, "logprobs": None, "finish_reason": "stop"}
            ],
            "usage": usage,
        }
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = []
    for index, item in enumerate(inputs):
        digest = _sha256(json.dumps(item))
        vector = [round(int(digest[i : i + 4], 16) / 65535 - 0.5, 6) for i in range(0, 32, 4)]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": answer.input_tokens, "total_tokens": answer.input_tokens},
    }


# ---------------------------------------------------------------------------------------
# Anthropic request params
# ---------------------------------------------------------------------------------------


def _anthropic_check_block(block: Any, where: str) -> str | None:
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
    if media_type not in _ANTHROPIC_MEDIA_TYPES:
        return (
            f"{where}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'"
        )
    data = source.get("data")
    decoded = _b64decode(data) if isinstance(data, str) else None
    if decoded is None:
        return f"{where}.source.base64.data: The image data is not valid base64."
    if len(decoded) > _ANTHROPIC_MAX_IMAGE_BYTES:
        return (
            f"{where}.source.base64: image exceeds 5 MB maximum: {len(decoded)} bytes > "
            f"{_ANTHROPIC_MAX_IMAGE_BYTES} bytes"
        )
    actual = _sniff_image(decoded)
    if actual != media_type:
        return (
            f"{where}.source.base64.data: Image does not match the provided media type {media_type}"
        )
    return None


def _anthropic_check_params(params: Any) -> str | None:
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
            problem = _anthropic_check_block(block, f"messages.{i}.content.{j}")
            if problem:
                return problem
    temperature = params.get("temperature")
    if temperature is not None:
        if "top_p" in params and params["top_p"] is not None:
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
            if not _schema_root_is_object(fmt.get("schema")):
                return "output_config.format.schema: the schema root must be an object"
    return None


def _anthropic_prompt(params: Mapping[str, Any]) -> tuple[str, int, str, Any]:
    texts: list[str] = []
    images = 0
    for msg in params["messages"]:
        if msg["role"] == "user":
            texts += _text_parts(msg.get("content"), ("text",))
        images += _count_parts(msg.get("content"), ("image",))
    output_config = params.get("output_config")
    fmt = output_config.get("format") if isinstance(output_config, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        return "\n".join(texts), images, "json_schema", fmt["schema"]
    return "\n".join(texts), images, "text", None


# ---------------------------------------------------------------------------------------
# Server state
# ---------------------------------------------------------------------------------------


@dataclass
class _StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


@dataclass
class _Item:
    """One processed request: the OpenAI result line or the Anthropic result line."""

    custom_id: str
    line: dict[str, Any]
    ok: bool
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class _Batch:
    provider: str
    id: str
    created: float
    delay_secs: float
    items: list[_Item]
    stop_after: int | None = None
    stop_kind: str | None = None  # "expired" | "cancelled"
    empty_error_file_id: bool = False
    shuffle_seed: int | None = None
    unknown_custom_id: bool = False
    # OpenAI only.
    endpoint: str = ""
    input_file_id: str = ""
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    model: str | None = None
    errors: list[dict[str, Any]] | None = None  # set: the batch fails after validating
    prompt_tokens: int = 0
    # Progress.
    cancel_requested_at: float | None = None
    finished: bool = False
    output_file_id: str | None = None
    error_file_id: str | None = None
    results_jsonl: bytes = b""
    final_counts: dict[str, int] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    deleted: bool = False


@dataclass
class _LeadingErrors:
    status: int
    remaining: int
    retry_after_ms: int
    paths: frozenset[str] | None

    def view(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "count": self.remaining,
            "retry_after_ms": self.retry_after_ms,
            "paths": sorted(self.paths) if self.paths is not None else None,
        }


@dataclass
class _CreateFailure:
    nth: int
    permanent: bool
    status: int
    created: bool
    retry_after_ms: int
    seen: int = 0

    def view(self) -> dict[str, Any]:
        return {
            "nth": self.nth,
            "permanent": self.permanent,
            "status": self.status,
            "created": self.created,
            "retry_after_ms": self.retry_after_ms,
            "seen": self.seen,
        }


def _check_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"script key {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"script key {key!r} must be true or false, got {value!r}")
    return value


def _check_status(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
        raise ValueError(f"script key {key!r}: status must be an HTTP error code, got {value!r}")
    return value


def _parse_leading_errors(value: Any) -> _LeadingErrors:
    if not isinstance(value, Mapping):
        raise ValueError("script key 'leading_errors' must be an object")
    unknown = set(value) - {"status", "count", "retry_after_ms", "paths"}
    if unknown:
        raise ValueError(f"script key 'leading_errors' has unknown fields {sorted(unknown)}")
    paths = value.get("paths")
    if paths is not None:
        if isinstance(paths, str) or not isinstance(paths, Sequence):
            raise ValueError("leading_errors.paths must be a list of endpoint names")
        bad = [p for p in paths if p not in _API_ENDPOINT_NAMES]
        if bad:
            raise ValueError(
                f"leading_errors.paths has unknown endpoint names {bad}; "
                f"known: {sorted(_API_ENDPOINT_NAMES)}"
            )
        paths = frozenset(paths)
    return _LeadingErrors(
        status=_check_status("leading_errors.status", value.get("status", 429)),
        remaining=_check_int("leading_errors.count", value.get("count", 1), 0),
        retry_after_ms=_check_int(
            "leading_errors.retry_after_ms",
            value.get("retry_after_ms", _DEFAULT_RETRY_AFTER_MS),
            0,
        ),
        paths=paths,
    )


def _parse_create_failure(value: Any) -> _CreateFailure:
    if not isinstance(value, Mapping):
        raise ValueError("script key 'fail_batch_creates' must be an object")
    unknown = set(value) - {"nth", "permanent", "status", "created", "retry_after_ms"}
    if unknown:
        raise ValueError(f"script key 'fail_batch_creates' has unknown fields {sorted(unknown)}")
    return _CreateFailure(
        nth=_check_int("fail_batch_creates.nth", value.get("nth", 1), 1),
        permanent=_check_bool("fail_batch_creates.permanent", value.get("permanent", False)),
        status=_check_status("fail_batch_creates.status", value.get("status", 500)),
        created=_check_bool("fail_batch_creates.created", value.get("created", False)),
        retry_after_ms=_check_int(
            "fail_batch_creates.retry_after_ms",
            value.get("retry_after_ms", _DEFAULT_RETRY_AFTER_MS),
            0,
        ),
    )


def _parse_delay(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"script key {key!r} must be a number >= 0, got {value!r}")
    return float(value)


_SCRIPT_PARSERS: dict[str, Callable[[Any], Any]] = {
    "processing_delay_secs": lambda v: _parse_delay("processing_delay_secs", v),
    "expire_after_requests": lambda v: _check_int("expire_after_requests", v, 0),
    "cancel_after_requests": lambda v: _check_int("cancel_after_requests", v, 0),
    "token_limit_exceeded": lambda v: _check_bool("token_limit_exceeded", v),
    "enqueued_token_limit": lambda v: _check_int("enqueued_token_limit", v, 0),
    "leading_errors": _parse_leading_errors,
    "fail_batch_creates": _parse_create_failure,
    "empty_error_file_id": lambda v: _check_bool("empty_error_file_id", v),
    "shuffle_results": lambda v: _check_bool("shuffle_results", v),
    "shuffle_seed": lambda v: _check_int("shuffle_seed", v, 0),
    "unknown_custom_id": lambda v: _check_bool("unknown_custom_id", v),
}
_SCRIPT_DEFAULTS: dict[str, Any] = {
    "processing_delay_secs": None,
    "expire_after_requests": None,
    "cancel_after_requests": None,
    "token_limit_exceeded": False,
    "enqueued_token_limit": None,
    "leading_errors": None,
    "fail_batch_creates": None,
    "empty_error_file_id": False,
    "shuffle_results": False,
    "shuffle_seed": 0,
    "unknown_custom_id": False,
}
SCRIPT_KEYS = tuple(_SCRIPT_DEFAULTS)


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"the fake provider binds loopback addresses only, not {host!r}")


class _QuietRequestHandler(WSGIRequestHandler):
    """Sends Werkzeug's per-request lines to this module's logger at DEBUG."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        _LOG.debug("%s %r %s %s", self.address_string(), self.requestline, code, size)

    def log(self, type: str, message: str, *args: Any) -> None:
        level = logging.DEBUG if type == "info" else logging.WARNING
        _LOG.log(level, "%s - " + message.rstrip(), self.address_string(), *args)


def _json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        json.dumps(body), status=status, headers=dict(headers or {}), mimetype="application/json"
    )


def _error_response(provider: str, err: _ApiError) -> Response:
    if provider == ANTHROPIC:
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": err.error_type, "message": err.message},
            "request_id": _new_id("req_"),
        }
    else:
        body = {
            "error": {
                "message": err.message,
                "type": err.error_type,
                "param": err.param,
                "code": err.code,
            }
        }
    return _json_response(body, err.status, err.headers)


def _status_error(provider: str, status: int, retry_after_ms: int, what: str) -> _ApiError:
    """A scripted transient error in the provider's shape, with retry-after headers."""
    if provider == ANTHROPIC:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 504: "timeout_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        code = None
    else:
        kind = {429: "requests"}.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        code = {429: "rate_limit_exceeded", 503: "service_unavailable"}.get(status)
    headers = {
        "retry-after-ms": str(retry_after_ms),
        "retry-after": str(math.ceil(retry_after_ms / 1000)),
    }
    return _ApiError(
        status,
        kind,
        f"Scripted {status} from the fake provider ({what}).",
        code=code,
        headers=headers,
    )


def _query_limit(request: Request, default: int, maximum: int) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        limit = -1
    if not 1 <= limit <= maximum:
        raise _ApiError(
            400,
            "invalid_request_error",
            f"limit: Input should be between 1 and {maximum}, got {raw!r}",
            param="limit",
        )
    return limit


def _json_payload(request: Request) -> dict[str, Any]:
    try:
        payload = json.loads(request.get_data(cache=False) or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _ApiError(400, "invalid_request_error", f"Invalid JSON body: {exc}") from None
    if not isinstance(payload, dict):
        raise _ApiError(400, "invalid_request_error", "The request body must be a JSON object.")
    return payload


# ---------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------


class FakeProviderServer:
    """Embedded OpenAI + Anthropic batch API fake on one loopback port.

    Use as a context manager (``with FakeProviderServer() as fake:``) or call
    :meth:`start` and :meth:`stop`. All state is in memory. See the module docstring for
    the endpoints, scripting keys, prompt markers and answer rules.

    Args:
        host: loopback address to bind (``127.0.0.1``, ``::1`` or ``localhost``).
        port: TCP port; 0 picks a free one (read it back from :attr:`port`).
        processing_delay_secs: seconds from creation until a batch has finished; 0
            means finished on the first read after creation.
        clock: returns the current Unix time in seconds; injectable for tests.

    Raises:
        ValueError: for a non-loopback host or a negative delay.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        processing_delay_secs: float = 0.0,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_loopback(host)
        self._host = host
        self._requested_port = port
        self._default_delay_secs = _parse_delay("processing_delay_secs", processing_delay_secs)
        self._clock = clock
        self._lock = threading.RLock()
        self._server: BaseWSGIServer | None = None
        self._results_base_url = ""  # base_url of the last start(), kept after stop()
        self._thread: threading.Thread | None = None
        self._url_map = Map(
            [
                Rule("/v1/files", methods=["POST"], endpoint="files_create"),
                Rule("/v1/files", methods=["GET"], endpoint="files_list"),
                Rule("/v1/files/<file_id>", methods=["GET"], endpoint="files_retrieve"),
                Rule("/v1/files/<file_id>", methods=["DELETE"], endpoint="files_delete"),
                Rule("/v1/files/<file_id>/content", methods=["GET"], endpoint="files_content"),
                Rule("/v1/batches", methods=["POST"], endpoint="batches_create"),
                Rule("/v1/batches", methods=["GET"], endpoint="batches_list"),
                Rule("/v1/batches/<batch_id>", methods=["GET"], endpoint="batches_retrieve"),
                Rule("/v1/batches/<batch_id>/cancel", methods=["POST"], endpoint="batches_cancel"),
                Rule("/v1/messages/batches", methods=["POST"], endpoint="messages_batches_create"),
                Rule("/v1/messages/batches", methods=["GET"], endpoint="messages_batches_list"),
                Rule(
                    "/v1/messages/batches/<batch_id>",
                    methods=["GET"],
                    endpoint="messages_batches_retrieve",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>",
                    methods=["DELETE"],
                    endpoint="messages_batches_delete",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>/cancel",
                    methods=["POST"],
                    endpoint="messages_batches_cancel",
                ),
                Rule(
                    "/v1/messages/batches/<batch_id>/results",
                    methods=["GET"],
                    endpoint="messages_batches_results",
                ),
                Rule("/_fake/script", methods=["GET", "POST"], endpoint="admin_script"),
                Rule("/_fake/state", methods=["GET"], endpoint="admin_state"),
                Rule("/_fake/reset", methods=["POST"], endpoint="admin_reset"),
            ],
            strict_slashes=False,
        )
        self._reset_state()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeProviderServer:
        """Binds the port and serves in a daemon thread; returns ``self``."""
        with self._lock:
            if self._server is not None:
                return self
            server = make_server(
                self._host,
                self._requested_port,
                self._wsgi_app,
                threaded=True,
                request_handler=_QuietRequestHandler,
            )
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"fake-provider-{server.server_port}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
            self._results_base_url = self.base_url
        _LOG.info("fake provider listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stops serving and closes the port (idempotent)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound TCP port. Raises RuntimeError before :meth:`start`."""
        server = self._server
        if server is None:
            raise RuntimeError("FakeProviderServer is not started")
        return int(server.server_port)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (no trailing slash)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``, for ``openai.OpenAI(base_url=...)``."""
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url``, for ``anthropic.Anthropic(base_url=...)``."""
        return self.base_url

    # -- in-process helpers ---------------------------------------------------------------

    def submitted_requests(self, provider: str | None = None) -> list[dict[str, Any]]:
        """Every request line accepted into a created batch, in order of receipt.

        Each entry is ``{"provider", "batch_id", "custom_id", "request"}`` where
        ``request`` is the OpenAI input line or the Anthropic ``{custom_id, params}``.
        Lines of OpenAI batches that later fail validation are included when they parsed
        as an object with a ``custom_id``.
        """
        _check_provider(provider)
        with self._lock:
            return [
                copy.deepcopy(entry)
                for entry in self._submitted
                if provider is None or entry["provider"] == provider
            ]

    def create_counts(self) -> dict[str, int]:
        """custom_id -> number of created batches (either provider) that contained it."""
        with self._lock:
            return dict(self._create_counts)

    def call_counts(self) -> dict[str, int]:
        """Endpoint name -> number of HTTP calls received (including rejected ones)."""
        with self._lock:
            return dict(self._call_counts)

    def batches(self, provider: str | None = None) -> list[dict[str, Any]]:
        """The current batch objects (as the API shows them now), oldest first."""
        _check_provider(provider)
        with self._lock:
            now = self._clock()
            return [
                self._view(batch, now)
                for batch in self._batches.values()
                if not batch.deleted and (provider is None or batch.provider == provider)
            ]

    def script(self, **behaviour: Any) -> None:
        """Merges scripting keys into the current script (``None`` restores a default).

        Raises:
            ValueError: for an unknown key or a bad value (nothing is changed then).
        """
        unknown = set(behaviour) - set(_SCRIPT_DEFAULTS)
        if unknown:
            raise ValueError(
                f"unknown script keys {sorted(unknown)}; known: {sorted(_SCRIPT_DEFAULTS)}"
            )
        parsed = {
            key: _SCRIPT_DEFAULTS[key] if value is None else _SCRIPT_PARSERS[key](value)
            for key, value in behaviour.items()
        }
        with self._lock:
            merged = {**self._script, **parsed}
            if (
                merged["expire_after_requests"] is not None
                and merged["cancel_after_requests"] is not None
            ):
                raise ValueError(
                    "script at most one of 'expire_after_requests' and 'cancel_after_requests'"
                )
            self._script = merged
        if parsed:
            _LOG.info("fake provider scripted: %s", sorted(parsed))

    def script_view(self) -> dict[str, Any]:
        """The current script as JSON-friendly values (counters show what is left)."""
        with self._lock:
            out = {}
            for key, value in self._script.items():
                out[key] = value.view() if hasattr(value, "view") else value
            return out

    def reset(self) -> None:
        """Clears the script and forgets every file, batch, record and counter."""
        with self._lock:
            self._reset_state()

    def _reset_state(self) -> None:
        with self._lock:
            self._files: dict[str, _StoredFile] = {}
            self._batches: dict[str, _Batch] = {}
            self._submitted: list[dict[str, Any]] = []
            self._create_counts: dict[str, int] = {}
            self._transient_failed: set[str] = set()
            self._call_counts: dict[str, int] = {}
            self._script: dict[str, Any] = dict(_SCRIPT_DEFAULTS)

    # -- HTTP plumbing --------------------------------------------------------------------

    def _wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        try:
            response = self._dispatch(request)
        finally:
            request.close()  # closes spooled upload files
        return response(environ, start_response)

    def _dispatch(self, request: Request) -> Response:
        provider = ANTHROPIC if request.path.startswith("/v1/messages") else OPENAI
        adapter = self._url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
        except HTTPException as exc:
            status = exc.code or 404
            kind = "not_found_error" if provider == ANTHROPIC else "invalid_request_error"
            return _error_response(
                provider,
                _ApiError(status, kind, f"{request.method} {request.path}: {exc.name}"),
            )
        handler = getattr(self, f"_h_{endpoint}")
        if endpoint.startswith("admin_"):
            try:
                return handler(request, **args)
            except ValueError as exc:
                return _json_response({"error": str(exc)}, 400)
        with self._lock:
            self._call_counts[endpoint] = self._call_counts.get(endpoint, 0) + 1
        try:
            self._check_auth(provider, request)
            self._take_leading_error(provider, endpoint)
            return handler(request, **args)
        except _ApiError as err:
            return _error_response(provider, err)
        except Exception:  # a bug in the fake: answer 500 rather than drop the connection
            _LOG.exception("fake provider failed on %s %s", request.method, request.path)
            kind = "api_error" if provider == ANTHROPIC else "server_error"
            return _error_response(provider, _ApiError(500, kind, "Internal error in the fake."))

    @staticmethod
    def _check_auth(provider: str, request: Request) -> None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return
        if provider == ANTHROPIC:
            if request.headers.get("x-api-key", "").strip():
                return
            raise _ApiError(401, "authentication_error", "x-api-key header is required")
        raise _ApiError(
            401,
            "invalid_request_error",
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        )

    def _take_leading_error(self, provider: str, endpoint: str) -> None:
        with self._lock:
            leading: _LeadingErrors | None = self._script["leading_errors"]
            if leading is None or leading.remaining <= 0:
                return
            if leading.paths is not None and endpoint not in leading.paths:
                return
            leading.remaining -= 1
            status, retry_ms = leading.status, leading.retry_after_ms
        raise _status_error(provider, status, retry_ms, f"leading error on {endpoint}")

    def _take_create_failure(self) -> _CreateFailure | None:
        """Counts a valid create call; returns the scripted failure if this one fails."""
        failure: _CreateFailure | None = self._script["fail_batch_creates"]
        if failure is None:
            return None
        failure.seen += 1
        if failure.seen == failure.nth or (failure.permanent and failure.seen > failure.nth):
            return failure
        return None

    # -- admin endpoints ------------------------------------------------------------------

    def _h_admin_script(self, request: Request) -> Response:
        if request.method == "POST":
            payload = json.loads(request.get_data() or b"{}")
            if not isinstance(payload, dict):
                raise ValueError("the script must be a JSON object")
            self.script(**payload)
        return _json_response(self.script_view())

    def _h_admin_state(self, request: Request) -> Response:
        return _json_response(
            {
                "submitted_requests": self.submitted_requests(),
                "create_counts": self.create_counts(),
                "call_counts": self.call_counts(),
                "batches": self.batches(),
                "script": self.script_view(),
            }
        )

    def _h_admin_reset(self, request: Request) -> Response:
        self.reset()
        return _json_response({"ok": True})

    # -- OpenAI files ---------------------------------------------------------------------

    def _get_file(self, file_id: str) -> _StoredFile:
        stored = self._files.get(file_id)
        if stored is None:
            raise _ApiError(
                404, "invalid_request_error", f"No such File object: {file_id}", param="id"
            )
        return stored

    def _store_file(self, filename: str, purpose: str, content: bytes) -> _StoredFile:
        stored = _StoredFile(_new_id("file-"), filename, purpose, content, int(self._clock()))
        self._files[stored.id] = stored
        return stored

    def _h_files_create(self, request: Request) -> Response:
        upload = request.files.get("file")
        purpose = request.form.get("purpose")
        if upload is None:
            raise _ApiError(
                400, "invalid_request_error", "Missing required parameter: 'file'.", param="file"
            )
        if purpose not in _OPENAI_FILE_PURPOSES:
            raise _ApiError(
                400,
                "invalid_request_error",
                f"Invalid value for 'purpose': {purpose!r}.",
                param="purpose",
            )
        content = upload.read()
        with self._lock:
            stored = self._store_file(upload.filename or "upload.jsonl", purpose, content)
            return _json_response(stored.view())

    def _h_files_list(self, request: Request) -> Response:
        limit = _query_limit(request, _OPENAI_FILE_LIST_MAX_LIMIT, _OPENAI_FILE_LIST_MAX_LIMIT)
        purpose = request.args.get("purpose")
        with self._lock:
            files = [f for f in self._files.values() if purpose in (None, f.purpose)]
            if request.args.get("order", "desc") == "desc":
                files.reverse()
            return _json_response(_openai_page([f.view() for f in files], request, limit))

    def _h_files_retrieve(self, request: Request, file_id: str) -> Response:
        with self._lock:
            return _json_response(self._get_file(file_id).view())

    def _h_files_delete(self, request: Request, file_id: str) -> Response:
        with self._lock:
            self._get_file(file_id)
            del self._files[file_id]
            return _json_response({"id": file_id, "object": "file", "deleted": True})

    def _h_files_content(self, request: Request, file_id: str) -> Response:
        with self._lock:
            content = self._get_file(file_id).content
        return Response(content, mimetype="application/octet-stream")

    # -- OpenAI batches -------------------------------------------------------------------

    def _get_batch(self, provider: str, batch_id: str) -> _Batch:
        batch = self._batches.get(batch_id)
        if batch is None or batch.provider != provider or batch.deleted:
            if provider == ANTHROPIC:
                raise _ApiError(404, "not_found_error", f"Message batch {batch_id} not found.")
            raise _ApiError(
                404, "invalid_request_error", f"No batch found with id '{batch_id}'.", param="id"
            )
        return batch

    def _h_batches_create(self, request: Request) -> Response:
        payload = _json_payload(request)
        input_file_id = payload.get("input_file_id")
        endpoint = payload.get("endpoint")
        window = payload.get("completion_window")
        metadata = payload.get("metadata")
        if endpoint not in _OPENAI_ENDPOINTS:
            raise _ApiError(
                400,
                "invalid_request_error",
                f"Invalid value: {endpoint!r}. Supported values are: "
                + ", ".join(repr(e) for e in _OPENAI_ENDPOINTS)
                + ".",
                param="endpoint",
                code="invalid_value",
            )
        if window != "24h":
            raise _ApiError(
                400,
                "invalid_request_error",
                f"Invalid value: {window!r}. Supported values are: '24h'.",
                param="completion_window",
                code="invalid_value",
            )
        _check_metadata(metadata)
        with self._lock:
            if not isinstance(input_file_id, str) or input_file_id not in self._files:
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"Invalid 'input_file_id': {input_file_id!r}. File not found.",
                    param="input_file_id",
                )
            stored = self._files[input_file_id]
            if stored.purpose != "batch":
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"File {input_file_id} has purpose {stored.purpose!r}; batches need "
                    "purpose 'batch'.",
                    param="input_file_id",
                )
            failure = self._take_create_failure()
            if failure is not None and not failure.created:
                raise _status_error(OPENAI, failure.status, failure.retry_after_ms, "create")
            batch = self._create_openai_batch(stored, endpoint, metadata)
            if failure is not None:
                raise _status_error(OPENAI, failure.status, failure.retry_after_ms, "create")
            return _json_response(self._view(batch, batch.created - 1e-6))

    def _create_openai_batch(
        self, stored: _StoredFile, endpoint: str, metadata: dict[str, str] | None
    ) -> _Batch:
        now = self._clock()
        batch = self._new_batch(OPENAI, "batch_", now)
        batch.endpoint, batch.input_file_id, batch.metadata = endpoint, stored.id, metadata
        lines, errors, model = _parse_openai_file(stored.content, endpoint)
        for line in lines:
            self._record(batch, line["custom_id"], line)
        if errors:
            batch.errors = errors
            return batch
        batch.model = model
        batch.items = [self._process_openai_line(endpoint, line, now) for line in lines]
        batch.prompt_tokens = sum(item.input_tokens for item in batch.items)
        limit = self._script["enqueued_token_limit"]
        enqueued = batch.prompt_tokens
        if limit is not None:
            enqueued += sum(
                other.prompt_tokens
                for other in self._batches.values()
                if other.provider == OPENAI
                and other is not batch
                and other.model == model
                and not self._is_terminal(other, now)
            )
        if self._script["token_limit_exceeded"] or (limit is not None and enqueued > limit):
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

    def _new_batch(self, provider: str, prefix: str, now: float) -> _Batch:
        script = self._script
        delay = script["processing_delay_secs"]
        batch = _Batch(
            provider=provider,
            id=_new_id(prefix),
            created=now,
            delay_secs=self._default_delay_secs if delay is None else delay,
            items=[],
            empty_error_file_id=script["empty_error_file_id"],
            shuffle_seed=script["shuffle_seed"] if script["shuffle_results"] else None,
            unknown_custom_id=script["unknown_custom_id"],
        )
        if script["expire_after_requests"] is not None:
            batch.stop_after, batch.stop_kind = script["expire_after_requests"], "expired"
        elif script["cancel_after_requests"] is not None:
            batch.stop_after, batch.stop_kind = script["cancel_after_requests"], "cancelled"
        self._batches[batch.id] = batch
        return batch

    def _record(self, batch: _Batch, custom_id: str, request: Mapping[str, Any]) -> None:
        self._submitted.append(
            {
                "provider": batch.provider,
                "batch_id": batch.id,
                "custom_id": custom_id,
                "request": copy.deepcopy(dict(request)),
            }
        )
        self._create_counts[custom_id] = self._create_counts.get(custom_id, 0) + 1

    def _resolve_transient(self, marker: str | None, custom_id: str) -> str | None:
        """``transient`` fails as ``server_error`` once per custom_id, then not at all."""
        if marker != "transient":
            return marker
        if custom_id in self._transient_failed:
            return None
        self._transient_failed.add(custom_id)
        return "server_error"

    def _process_openai_line(self, endpoint: str, line: Mapping[str, Any], now: float) -> _Item:
        custom_id, body = line["custom_id"], line["body"]
        failure = _openai_check_body(endpoint, body)
        if failure is not None:
            return _Item(custom_id, _openai_http_line(custom_id, failure), ok=False)
        prompt, images, mode, schema = _openai_prompt(endpoint, body)
        input_tokens = _words(prompt) + _TOKENS_PER_IMAGE * images
        marker = self._resolve_transient(_error_marker(prompt), custom_id)
        if marker == "timeout":
            result = _openai_error_line(custom_id, "request_timeout", "The request timed out.")
            return _Item(custom_id, result, ok=False, input_tokens=input_tokens)
        if marker is not None:
            status, failure = {
                "server_error": (
                    500,
                    _oa_error(
                        500,
                        "The server had an error while processing your request. Sorry about "
                        "that! (FAKE_ERROR:server_error)",
                    ),
                ),
                "invalid_request": (
                    400,
                    _oa_error(400, "Scripted invalid request (FAKE_ERROR:invalid_request)."),
                ),
                "rate_limit": (
                    429,
                    _HttpFailure(
                        429,
                        {
                            "message": "Rate limit reached (FAKE_ERROR:rate_limit).",
                            "type": "requests",
                            "param": None,
                            "code": "rate_limit_exceeded",
                        },
                    ),
                ),
            }[marker]
            result = _openai_http_line(custom_id, failure)
            return _Item(custom_id, result, ok=False, input_tokens=input_tokens)
        try:
            answer = _answer(prompt, images, mode, schema)
        except ValueError as exc:  # e.g. an unresolvable $ref deep in the schema
            failure = _oa_error(400, f"Invalid schema: {exc}", code="invalid_json_schema")
            return _Item(custom_id, _openai_http_line(custom_id, failure), ok=False)
        result = {
            "id": _new_id("batch_req_"),
            "custom_id": custom_id,
            "response": {
                "status_code": 200,
                "request_id": _new_id("req_"),
                "body": _openai_success_body(endpoint, body, answer, now),
            },
            "error": None,
        }
        return _Item(custom_id, result, True, answer.input_tokens, answer.output_tokens)

    def _h_batches_retrieve(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            return _json_response(self._view(self._get_batch(OPENAI, batch_id), self._clock()))

    def _h_batches_list(self, request: Request) -> Response:
        limit = _query_limit(request, _DEFAULT_LIST_LIMIT, _OPENAI_BATCH_LIST_MAX_LIMIT)
        with self._lock:
            now = self._clock()
            views = [
                self._view(b, now) for b in reversed(self._batches.values()) if b.provider == OPENAI
            ]
            return _json_response(_openai_page(views, request, limit))

    def _h_batches_cancel(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            batch = self._get_batch(OPENAI, batch_id)
            now = self._clock()
            view = self._view(batch, now)
            if view["status"] in ("completed", "failed", "expired", "cancelled"):
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"Cannot cancel a batch with status '{view['status']}'.",
                )
            if batch.cancel_requested_at is None:
                batch.cancel_requested_at = now
            return _json_response(self._view(batch, now))

    # -- Anthropic message batches ----------------------------------------------------------

    def _h_messages_batches_create(self, request: Request) -> Response:
        size = request.content_length
        if size is not None and size > _ANTHROPIC_MAX_BODY_BYTES:
            raise _ApiError(
                413,
                "request_too_large",
                f"Request exceeds the maximum allowed number of bytes "
                f"({_ANTHROPIC_MAX_BODY_BYTES}).",
            )
        payload = _json_payload(request)
        requests = payload.get("requests")
        if not isinstance(requests, list):
            raise _ApiError(400, "invalid_request_error", "requests: Field required")
        if not 1 <= len(requests) <= _ANTHROPIC_MAX_REQUESTS:
            raise _ApiError(
                400,
                "invalid_request_error",
                f"requests: List should have at least 1 item and at most "
                f"{_ANTHROPIC_MAX_REQUESTS:,} items, not {len(requests)}",
            )
        seen: set[str] = set()
        for i, entry in enumerate(requests):
            if not isinstance(entry, Mapping):
                raise _ApiError(
                    400, "invalid_request_error", f"requests.{i}: Input should be an object"
                )
            custom_id = entry.get("custom_id")
            if not isinstance(custom_id, str) or not _CUSTOM_ID_RE.match(custom_id):
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: String should match pattern "
                    f"'^[a-zA-Z0-9_-]{{1,64}}$' (got {custom_id!r})",
                )
            if custom_id in seen:
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_id "
                    "must be unique within a batch.",
                )
            seen.add(custom_id)
            if "params" not in entry:
                raise _ApiError(
                    400, "invalid_request_error", f"requests.{i}.params: Field required"
                )
        with self._lock:
            failure = self._take_create_failure()
            if failure is not None and not failure.created:
                raise _status_error(ANTHROPIC, failure.status, failure.retry_after_ms, "create")
            now = self._clock()
            batch = self._new_batch(ANTHROPIC, "msgbatch_", now)
            for entry in requests:
                self._record(batch, entry["custom_id"], entry)
            batch.items = [
                self._process_anthropic_request(e["custom_id"], e["params"]) for e in requests
            ]
            if failure is not None:
                raise _status_error(ANTHROPIC, failure.status, failure.retry_after_ms, "create")
            return _json_response(self._view(batch, batch.created - 1e-6))

    def _process_anthropic_request(self, custom_id: str, params: Any) -> _Item:
        problem = _anthropic_check_params(params)
        if problem is not None:
            return _Item(
                custom_id, _anthropic_errored(custom_id, "invalid_request_error", problem), False
            )
        prompt, images, mode, schema = _anthropic_prompt(params)
        marker = self._resolve_transient(_error_marker(prompt), custom_id)
        if marker is not None:
            kind, message = {
                "server_error": ("api_error", "Internal server error (FAKE_ERROR:server_error)"),
                "invalid_request": (
                    "invalid_request_error",
                    "Scripted invalid request (FAKE_ERROR:invalid_request)",
                ),
                "rate_limit": ("rate_limit_error", "Rate limited (FAKE_ERROR:rate_limit)"),
                "timeout": ("timeout_error", "Request timed out (FAKE_ERROR:timeout)"),
            }[marker]
            return _Item(custom_id, _anthropic_errored(custom_id, kind, message), False)
        try:
            answer = _answer(prompt, images, mode, schema)
        except ValueError as exc:  # e.g. an unresolvable $ref deep in the schema
            line = _anthropic_errored(custom_id, "invalid_request_error", f"Invalid schema: {exc}")
            return _Item(custom_id, line, False)
        message_obj = {
            "id": _new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": [{"type": "text", "text": answer.text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": answer.input_tokens,
                "output_tokens": answer.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "service_tier": "batch",
            },
        }
        line = {"custom_id": custom_id, "result": {"type": "succeeded", "message": message_obj}}
        return _Item(custom_id, line, True, answer.input_tokens, answer.output_tokens)

    def _h_messages_batches_retrieve(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            batch = self._get_batch(ANTHROPIC, batch_id)
            return _json_response(self._view(batch, self._clock()))

    def _h_messages_batches_list(self, request: Request) -> Response:
        limit = _query_limit(request, _DEFAULT_LIST_LIMIT, _ANTHROPIC_LIST_MAX_LIMIT)
        after_id, before_id = request.args.get("after_id"), request.args.get("before_id")
        if after_id and before_id:
            raise _ApiError(
                400, "invalid_request_error", "Only one of after_id and before_id may be given."
            )
        with self._lock:
            now = self._clock()
            batches = [
                b
                for b in reversed(self._batches.values())
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
            return _json_response(
                {
                    "data": [self._view(b, now) for b in window],
                    "has_more": has_more,
                    "first_id": window[0].id if window else None,
                    "last_id": window[-1].id if window else None,
                }
            )

    def _h_messages_batches_cancel(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            batch = self._get_batch(ANTHROPIC, batch_id)
            now = self._clock()
            if self._view(batch, now)["processing_status"] == "ended":
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"Message batch {batch_id} has already ended and cannot be canceled.",
                )
            if batch.cancel_requested_at is None:
                batch.cancel_requested_at = now
            return _json_response(self._view(batch, now))

    def _h_messages_batches_delete(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            batch = self._get_batch(ANTHROPIC, batch_id)
            if self._view(batch, self._clock())["processing_status"] != "ended":
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"Message batch {batch_id} cannot be deleted while it is still processing; "
                    "cancel it and wait until it has ended.",
                )
            batch.deleted = True
            return _json_response({"id": batch_id, "type": "message_batch_deleted"})

    def _h_messages_batches_results(self, request: Request, batch_id: str) -> Response:
        with self._lock:
            batch = self._get_batch(ANTHROPIC, batch_id)
            if self._view(batch, self._clock())["processing_status"] != "ended":
                raise _ApiError(
                    400,
                    "invalid_request_error",
                    f"Results for message batch {batch_id} are not available until it has ended.",
                )
            content = batch.results_jsonl
        return Response(content, mimetype="application/binary")

    # -- lifecycle computation --------------------------------------------------------------

    def _processing_window(self, batch: _Batch) -> tuple[float, float]:
        d = batch.delay_secs
        if batch.provider == OPENAI:
            return batch.created + d / 3, batch.created + 2 * d / 3
        return batch.created, batch.created + 2 * d / 3

    def _processed(self, batch: _Batch, at: float) -> int:
        """How many requests are done at time ``at`` (capped by a scripted stop)."""
        total = len(batch.items)
        start, end = self._processing_window(batch)
        if at >= end:
            done = total
        elif at <= start:
            done = 0
        else:
            done = int(total * (at - start) / (end - start))
        if batch.stop_after is not None:
            done = min(done, batch.stop_after)
        return done

    def _final_processed(self, batch: _Batch) -> int:
        if batch.cancel_requested_at is not None:
            return self._processed(batch, batch.cancel_requested_at)
        return self._processed(batch, math.inf)

    def _is_terminal(self, batch: _Batch, now: float) -> bool:
        if batch.provider == OPENAI:
            return self._openai_phase(batch, now)["status"] in (
                "completed",
                "failed",
                "expired",
                "cancelled",
            )
        return self._anthropic_phase(batch, now)["processing_status"] == "ended"

    def _openai_phase(self, batch: _Batch, now: float) -> dict[str, Any]:
        d, t0 = batch.delay_secs, batch.created
        v_end, ip_end, end = t0 + d / 3, t0 + 2 * d / 3, t0 + d
        out: dict[str, Any] = dict.fromkeys(
            (
                "in_progress_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            )
        )
        tc = batch.cancel_requested_at
        if tc is not None:
            out["in_progress_at"] = v_end if tc >= v_end and batch.errors is None else None
            out["finalizing_at"] = ip_end if tc >= ip_end and batch.errors is None else None
            out["cancelling_at"] = tc
            if now < tc + d / 3:
                out["status"] = "cancelling"
            else:
                out["status"] = "cancelled"
                out["cancelled_at"] = tc + d / 3
        elif now < v_end:
            out["status"] = "validating"
        elif batch.errors is not None:
            out["status"], out["failed_at"] = "failed", v_end
        else:
            out["in_progress_at"] = v_end
            if now < ip_end:
                out["status"] = "in_progress"
            elif batch.stop_kind == "cancelled":
                out["cancelling_at"] = ip_end
                if now < end:
                    out["status"] = "cancelling"
                else:
                    out["status"], out["cancelled_at"] = "cancelled", end
            elif batch.stop_kind == "expired":
                if now < end:
                    out["status"] = "in_progress"
                else:
                    out["status"], out["expired_at"] = "expired", end
            else:
                out["finalizing_at"] = ip_end
                if now < end:
                    out["status"] = "finalizing"
                else:
                    out["status"], out["completed_at"] = "completed", end
        return out

    def _anthropic_phase(self, batch: _Batch, now: float) -> dict[str, Any]:
        d, t0 = batch.delay_secs, batch.created
        end = t0 + d
        out: dict[str, Any] = {"cancel_initiated_at": None, "ended_at": None}
        tc = batch.cancel_requested_at
        if tc is not None:
            out["cancel_initiated_at"] = tc
            end = tc + d / 3
            status = "canceling"
        elif batch.stop_kind == "cancelled":
            initiated = t0 + 2 * d / 3
            out["cancel_initiated_at"] = initiated if now >= initiated else None
            status = "canceling" if now >= initiated else "in_progress"
        else:
            status = "in_progress"
        if now >= end:
            status, out["ended_at"] = "ended", end
        out["processing_status"] = status
        return out

    def _finish(self, batch: _Batch) -> None:
        """Materialises results once a batch has reached its terminal state."""
        if batch.finished:
            return
        batch.finished = True
        done = self._final_processed(batch)
        cancelled = batch.cancel_requested_at is not None or batch.stop_kind == "cancelled"
        processed, rest = batch.items[:done], batch.items[done:]
        if batch.provider == OPENAI:
            self._finish_openai(batch, processed, rest, cancelled)
        else:
            self._finish_anthropic(batch, processed, rest, cancelled)

    def _shuffled(self, batch: _Batch, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if batch.shuffle_seed is None or len(lines) < 2:
            return lines
        order = list(range(len(lines)))
        random.Random(batch.shuffle_seed).shuffle(order)
        if order == sorted(order):
            order = order[1:] + order[:1]
        return [lines[i] for i in order]

    def _finish_openai(
        self, batch: _Batch, processed: list[_Item], rest: list[_Item], cancelled: bool
    ) -> None:
        ok_lines = [it.line for it in processed if it.ok]
        err_lines = [it.line for it in processed if not it.ok]
        if cancelled:
            code, message = "batch_cancelled", "This request was cancelled with its batch."
        else:
            code = "batch_expired"
            message = "This request could not be executed before the completion window expired."
        err_lines += [_openai_error_line(it.custom_id, code, message) for it in rest]
        if batch.unknown_custom_id:
            if ok_lines:
                answer = _answer("", 0, "text", None)
                body = _openai_success_body(
                    batch.endpoint,
                    {"model": batch.model or "fake-model", "input": ""},
                    answer,
                    self._clock(),
                )
                ok_lines.append(
                    {
                        "id": _new_id("batch_req_"),
                        "custom_id": UNKNOWN_CUSTOM_ID,
                        "response": {
                            "status_code": 200,
                            "request_id": _new_id("req_"),
                            "body": body,
                        },
                        "error": None,
                    }
                )
            else:
                err_lines.append(
                    _openai_http_line(UNKNOWN_CUSTOM_ID, _oa_error(500, "Unknown request (fake)."))
                )
        prefix = batch.id
        if ok_lines:
            stored = self._store_file(
                f"{prefix}_output.jsonl", "batch_output", _jsonl(self._shuffled(batch, ok_lines))
            )
            batch.output_file_id = stored.id
        if err_lines:
            stored = self._store_file(
                f"{prefix}_error.jsonl", "batch_output", _jsonl(self._shuffled(batch, err_lines))
            )
            batch.error_file_id = stored.id
        elif batch.empty_error_file_id:
            batch.error_file_id = ""
        succeeded = sum(1 for it in processed if it.ok)
        total = len(batch.items)
        batch.final_counts = {"total": total, "completed": succeeded, "failed": total - succeeded}
        input_tokens = sum(it.input_tokens for it in processed if it.ok)
        output_tokens = sum(it.output_tokens for it in processed if it.ok)
        batch.usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }

    def _finish_anthropic(
        self, batch: _Batch, processed: list[_Item], rest: list[_Item], cancelled: bool
    ) -> None:
        kind = "canceled" if cancelled else "expired"
        lines = [it.line for it in processed]
        lines += [{"custom_id": it.custom_id, "result": {"type": kind}} for it in rest]
        if batch.unknown_custom_id:
            unknown = self._process_anthropic_request(
                UNKNOWN_CUSTOM_ID,
                {
                    "model": "fake-model",
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": ""}],
                },
            )
            lines.append(unknown.line)
        batch.results_jsonl = _jsonl(self._shuffled(batch, lines))
        succeeded = sum(1 for it in processed if it.ok)
        batch.final_counts = {
            "processing": 0,
            "succeeded": succeeded,
            "errored": len(processed) - succeeded,
            "canceled": len(rest) if cancelled else 0,
            "expired": 0 if cancelled else len(rest),
        }

    def _view(self, batch: _Batch, now: float) -> dict[str, Any]:
        """The batch object at time ``now`` (materialising results once it is done)."""
        if batch.provider == OPENAI:
            return self._openai_view(batch, now)
        return self._anthropic_view(batch, now)

    def _openai_view(self, batch: _Batch, now: float) -> dict[str, Any]:
        phase = self._openai_phase(batch, now)
        status = phase.pop("status")
        terminal = status in ("completed", "failed", "expired", "cancelled")
        if terminal and status != "failed":
            self._finish(batch)
        if status in ("validating", "failed") or (status == "cancelling" and not batch.items):
            counts = {"total": 0, "completed": 0, "failed": 0}
        elif terminal:
            counts = dict(batch.final_counts)
        else:
            done = self._processed(batch, now)
            if batch.cancel_requested_at is not None:
                done = min(done, self._processed(batch, batch.cancel_requested_at))
            succeeded = sum(1 for it in batch.items[:done] if it.ok)
            counts = {"total": len(batch.items), "completed": succeeded, "failed": done - succeeded}
        view: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
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
            "expires_at": int(batch.created + _BATCH_LIFETIME_SECS),
        }
        for key, value in phase.items():
            view[key] = None if value is None else int(value)
        view["request_counts"] = counts
        view["metadata"] = copy.deepcopy(batch.metadata)
        view["usage"] = copy.deepcopy(batch.usage) if terminal else None
        return view

    def _anthropic_view(self, batch: _Batch, now: float) -> dict[str, Any]:
        phase = self._anthropic_phase(batch, now)
        ended = phase["processing_status"] == "ended"
        if ended:
            self._finish(batch)
            counts = dict(batch.final_counts)
        else:
            counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
            counts["processing"] = len(batch.items)
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": phase["processing_status"],
            "request_counts": counts,
            "ended_at": _rfc3339(phase["ended_at"]),
            "created_at": _rfc3339(batch.created),
            "expires_at": _rfc3339(batch.created + _BATCH_LIFETIME_SECS),
            "archived_at": None,
            "cancel_initiated_at": _rfc3339(phase["cancel_initiated_at"]),
            "results_url": (
                f"{self._results_base_url}/v1/messages/batches/{batch.id}/results"
                if ended
                else None
            ),
        }


# ---------------------------------------------------------------------------------------
# OpenAI helpers used by the server
# ---------------------------------------------------------------------------------------


def _check_provider(provider: str | None) -> None:
    if provider is not None and provider not in _PROVIDERS:
        raise ValueError(f"provider must be one of {_PROVIDERS} or None, got {provider!r}")


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise _ApiError(
            400, "invalid_request_error", "Invalid type for 'metadata'.", param="metadata"
        )
    if len(metadata) > _OPENAI_MAX_METADATA_PAIRS:
        raise _ApiError(
            400,
            "invalid_request_error",
            f"Invalid 'metadata': too many properties. Expected an object with at most "
            f"{_OPENAI_MAX_METADATA_PAIRS} properties, but got {len(metadata)} instead.",
            param="metadata",
            code="object_above_max_properties",
        )
    for key, value in metadata.items():
        if len(key) > _OPENAI_MAX_METADATA_KEY_CHARS:
            raise _ApiError(
                400,
                "invalid_request_error",
                f"Invalid 'metadata': key {key[:20]!r}... is longer than "
                f"{_OPENAI_MAX_METADATA_KEY_CHARS} characters.",
                param="metadata",
                code="string_above_max_length",
            )
        if not isinstance(value, str) or len(value) > _OPENAI_MAX_METADATA_VALUE_CHARS:
            raise _ApiError(
                400,
                "invalid_request_error",
                f"Invalid 'metadata[{key}]': expected a string of at most "
                f"{_OPENAI_MAX_METADATA_VALUE_CHARS} characters.",
                param=f"metadata.{key}",
                code="string_above_max_length",
            )


def _openai_page(items: list[dict[str, Any]], request: Request, limit: int) -> dict[str, Any]:
    after = request.args.get("after")
    start = 0
    if after:
        ids = [item["id"] for item in items]
        start = ids.index(after) + 1 if after in ids else len(items)
    page = items[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }


def _line_error(code: str, message: str, line: int | None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def _parse_openai_file(
    content: bytes, endpoint: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(parsed lines with a custom_id, line-level validation errors, the file's model)."""
    if len(content) > _OPENAI_MAX_FILE_BYTES:
        message = (
            f"The input file is {len(content):,} bytes; the maximum is "
            f"{_OPENAI_MAX_FILE_BYTES:,} bytes (200 MB)."
        )
        return [], [_line_error("file_too_large", message, None)], None
    numbered = [(n, raw) for n, raw in enumerate(content.split(b"\n"), start=1) if raw.strip()]
    if not numbered:
        return [], [_line_error("empty_file", "The input file is empty.", None)], None
    if len(numbered) > _OPENAI_MAX_LINES:
        message = (
            f"The input file contains {len(numbered):,} requests; the maximum is "
            f"{_OPENAI_MAX_LINES:,}."
        )
        return [], [_line_error("too_many_tasks", message, None)], None
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None
    for number, raw in numbered:
        try:
            line = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            line = None
        if not isinstance(line, dict):
            errors.append(
                _line_error(
                    "invalid_json_line", "This line is not parseable as valid JSON.", number
                )
            )
            continue
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            errors.append(
                _line_error(
                    "missing_required_parameter",
                    "Missing required parameter: 'custom_id'.",
                    number,
                    "custom_id",
                )
            )
            continue
        lines.append(line)
        for key in ("method", "url", "body"):
            if key not in line:
                errors.append(
                    _line_error(
                        "missing_required_parameter",
                        f"Missing required parameter: '{key}'.",
                        number,
                        key,
                    )
                )
        if "method" in line and line["method"] != "POST":
            errors.append(
                _line_error(
                    "invalid_method", "The only supported method is 'POST'.", number, "method"
                )
            )
        if "url" in line and line["url"] != endpoint:
            errors.append(
                _line_error(
                    "url_mismatch",
                    f"The URL provided for this request does not match the batch endpoint "
                    f"{endpoint}.",
                    number,
                    "url",
                )
            )
        if custom_id in seen:
            errors.append(
                _line_error(
                    "duplicate_custom_id",
                    f"The custom_id {custom_id!r} is duplicated; each custom_id must be "
                    "unique within the batch.",
                    number,
                    "custom_id",
                )
            )
        seen.add(custom_id)
        body = line.get("body")
        line_model = body.get("model") if isinstance(body, Mapping) else None
        if isinstance(line_model, str) and line_model:
            if model is None:
                model = line_model
            elif line_model != model:
                errors.append(
                    _line_error(
                        "model_mismatch",
                        f"The model {line_model!r} differs from the file's model {model!r}; "
                        "a batch file must use a single model.",
                        number,
                        "body.model",
                    )
                )
    return lines, errors, model


def _openai_http_line(custom_id: str, failure: _HttpFailure) -> dict[str, Any]:
    return {
        "id": _new_id("batch_req_"),
        "custom_id": custom_id,
        "response": {
            "status_code": failure.status,
            "request_id": _new_id("req_"),
            "body": {"error": dict(failure.error)},
        },
        "error": None,
    }


def _openai_error_line(custom_id: str, code: str, message: str) -> dict[str, Any]:
    return {
        "id": _new_id("batch_req_"),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def _anthropic_errored(custom_id: str, kind: str, message: str) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "result": {
            "type": "errored",
            "error": {"type": "error", "error": {"type": kind, "message": message}},
        },
    }


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmirage fake-provider",
        description="Serve a fake OpenAI (Files + Batches) and Anthropic (Message Batches) "
        "API on one loopback port, in memory. Point the SDKs or a config's base_url at it: "
        "OpenAI http://HOST:PORT/v1, Anthropic http://HOST:PORT. Any non-empty key is "
        "accepted. Script failures at start with the flags below, or later with "
        "POST /_fake/script (same keys as --script); GET /_fake/state shows what it holds.",
        epilog="Markers in a prompt script single requests: FAKE_ERROR:server_error, "
        "FAKE_ERROR:invalid_request, FAKE_ERROR:rate_limit, FAKE_ERROR:timeout, "
        "FAKE_ERROR:transient (fails once), FAKE_ERROR:not_json, FAKE_FENCE.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: a free port)")
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds each batch takes to complete"
    )
    parser.add_argument(
        "--script",
        default=None,
        help="JSON object of scripting keys, e.g. '{\"shuffle_results\": true}'",
    )
    parser.add_argument(
        "--expire-after-requests",
        type=int,
        default=None,
        metavar="N",
        help="batches expire after N requests (partial results)",
    )
    parser.add_argument(
        "--cancel-after-requests",
        type=int,
        default=None,
        metavar="N",
        help="batches are cancelled after N requests (partial results)",
    )
    parser.add_argument(
        "--token-limit-exceeded",
        action="store_true",
        help="OpenAI batches fail validation with token_limit_exceeded",
    )
    parser.add_argument(
        "--empty-error-file-id",
        action="store_true",
        help='OpenAI error_file_id is "" when nothing failed',
    )
    parser.add_argument(
        "--shuffle-results", action="store_true", help="results in a shuffled order"
    )
    parser.add_argument(
        "--unknown-custom-id",
        action="store_true",
        help="add a result whose custom_id was never submitted",
    )
    parser.add_argument(
        "--leading-errors",
        default=None,
        metavar="JSON",
        help='first calls fail, e.g. \'{"status": 429, "count": 3, "retry_after_ms": 10}\'',
    )
    parser.add_argument(
        "--fail-batch-creates",
        default=None,
        metavar="JSON",
        help='fail batch creations, e.g. \'{"nth": 2, "permanent": true}\'',
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log every request (DEBUG) to stderr"
    )
    return parser


def _script_from_args(args: argparse.Namespace) -> dict[str, Any]:
    script: dict[str, Any] = {}
    if args.script:
        loaded = json.loads(args.script)
        if not isinstance(loaded, dict):
            raise ValueError("--script must be a JSON object")
        script.update(loaded)
    for key in ("expire_after_requests", "cancel_after_requests"):
        if getattr(args, key) is not None:
            script[key] = getattr(args, key)
    for key in ("token_limit_exceeded", "empty_error_file_id", "shuffle_results"):
        if getattr(args, key):
            script[key] = True
    if args.unknown_custom_id:
        script["unknown_custom_id"] = True
    if args.leading_errors:
        script["leading_errors"] = json.loads(args.leading_errors)
    if args.fail_batch_creates:
        script["fail_batch_creates"] = json.loads(args.fail_batch_creates)
    return script


def main(argv: list[str] | None = None) -> int:
    """Runs the fake until Ctrl-C or SIGTERM; returns the process exit code.

    Prints one banner line ``fake provider listening on http://HOST:PORT (OpenAI:
    http://HOST:PORT/v1, Anthropic: http://HOST:PORT)`` once the port is bound.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        fake = FakeProviderServer(host=args.host, port=args.port, processing_delay_secs=args.delay)
        fake.script(**_script_from_args(args))
    except ValueError as exc:  # includes json.JSONDecodeError
        parser.error(str(exc))
    stop = threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # Handle both explicitly: a shell starts background jobs with SIGINT ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    fake.start()
    try:
        print(
            f"fake provider listening on {fake.base_url} "
            f"(OpenAI: {fake.openai_base_url}, Anthropic: {fake.anthropic_base_url})",
            flush=True,
        )
        while not stop.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
