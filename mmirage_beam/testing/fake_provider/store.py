"""The fake's in-memory state: files, batches and their processed items, the records
tests read back (submitted requests, create and call counts) and the current script.

One :class:`Store` is shared by the providers' fakes; every access holds
``store.lock``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.scripting import (
    LINE_MARKERS,
    SCRIPT_DEFAULTS,
    CreateFailure,
    LeadingErrors,
    broken_line,
)
from mmirage_beam.testing.fake_provider.wire import ApiError, error_shape, new_id, status_error


def rfc3339(ts: float | None) -> str | None:
    """A Unix time as an RFC 3339 UTC string (``...Z``), or ``None``."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def jsonl(lines: Iterable[Mapping[str, Any] | bytes]) -> bytes:
    """JSON Lines with exactly one ``\\n`` after each line and no blank lines.

    A ``bytes`` line (a scripted broken line) is written as it is.
    """
    return b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode("utf-8")) + b"\n"
        for line in lines
    )


def file_object_head(stored: Any) -> dict[str, Any]:
    """The fields an OpenAI-shaped file object starts with (OpenAI's and Mistral's Files
    APIs), in wire order: ``id``, ``object``, ``bytes``, ``created_at``, ``filename``,
    ``purpose``, of ``stored`` (a file record with ``id``, ``content`` bytes,
    ``created_at``, ``filename`` and ``purpose``)."""
    return {
        "id": stored.id,
        "object": "file",
        "bytes": len(stored.content),
        "created_at": stored.created_at,
        "filename": stored.filename,
        "purpose": stored.purpose,
    }


def result_line(
    id_prefix: str, custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    """A line of an OpenAI-shaped batch output or error file (OpenAI's and Mistral's
    batch APIs), in wire order: ``id`` (a new id behind ``id_prefix``), ``custom_id``,
    ``response`` (``{status_code, ..., body}`` or None) and ``error`` (``{code,
    message}`` or None)."""
    return {"id": new_id(id_prefix), "custom_id": custom_id, "response": response, "error": error}


@dataclass
class StoredFile:
    """One file: an upload or a batch's output or error file."""

    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int
    expires_at: int | None = None
    owner: str = ""  # the fake (or the compatible profile) whose file it is

    def view(self) -> dict[str, Any]:
        """The OpenAI file object."""
        return {
            **file_object_head(self),
            "status": "processed",
            "status_details": None,
            "expires_at": self.expires_at,
        }


@dataclass
class Item:
    """One processed request: the OpenAI result line or the Anthropic result line
    (``bytes`` when a marker scripts a line that is not plain JSON)."""

    custom_id: str
    line: dict[str, Any] | bytes
    ok: bool
    input_tokens: int = 0
    output_tokens: int = 0


def failed_response_item(
    marker: str, custom_id: str, line: dict[str, Any], input_tokens: int
) -> Item:
    """The failed :class:`Item` of a request a failure marker scripts, in an OpenAI-shaped
    result line (the body under ``response``: OpenAI, Mistral): ``line`` (its error
    line), written with raw non-ASCII characters for ``u2028``
    (:func:`~mmirage_beam.testing.fake_provider.scripting.broken_line`)."""
    out: dict[str, Any] | bytes = line
    if marker == "u2028":
        out = broken_line(
            marker, custom_id, line, body_key="response", answer_text="", wrong_shape={}
        )
    return Item(custom_id, out, ok=False, input_tokens=input_tokens)


def answered_response_item(
    marker: str | None,
    custom_id: str,
    line: dict[str, Any],
    answer: Any,
    *,
    id_key: str = "custom_id",
    body_key: str = "response",
) -> Item:
    """The succeeded :class:`Item` of a request answered with HTTP 200, in a result line
    with its id under ``id_key`` and its body under ``body_key`` (OpenAI, Mistral:
    ``custom_id`` and ``response``; Bedrock: ``recordId`` and ``modelOutput``): ``line``,
    broken as one of :data:`~mmirage_beam.testing.fake_provider.scripting.LINE_MARKERS`
    scripts it, with the token counts of ``answer`` (an :class:`~.answers.Answer`)."""
    out: dict[str, Any] | bytes = line
    if marker in LINE_MARKERS:
        out = broken_line(
            marker,
            custom_id,
            line,
            body_key=body_key,
            answer_text=answer.text,
            wrong_shape={id_key: custom_id, "unexpected": True},
        )
        if id_key != "custom_id":  # broken_line names the id custom_id
            out = out.replace(b'"custom_id"', json.dumps(id_key).encode("utf-8"))
    return Item(custom_id, out, True, answer.input_tokens, answer.output_tokens)


@dataclass
class Batch:
    """One batch of either provider, with its processed items and progress."""

    provider: str
    id: str
    created: float
    delay_secs: float
    items: list[Item]
    stop_after: int | None = None
    stop_kind: str | None = None  # "expired" | "cancelled" | "overrun" (Azure)
    empty_error_file_id: bool = False
    shuffle_seed: int | None = None
    unknown_custom_id: bool = False
    # OpenAI only.
    profile: str | None = None  # an OpenAI-compatible profile's name (azure-openai, ...)
    endpoint: str = ""
    #: the ``endpoint`` as the create gave it (Azure's ``/chat/completions``), if not
    #: ``endpoint`` itself
    endpoint_shown: str | None = None
    input_file_id: str = ""
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None  # {"anchor": "created_at", "seconds"}
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
    #: Anthropic: Unix time after which the results are no longer available (None:
    #: created + 29 days)
    results_expire_at: float | None = None


class Store:
    """Everything the fake holds, guarded by one re-entrant lock.

    Args:
        clock: returns the current Unix time in seconds.
        default_delay_secs: processing delay of batches when none is scripted.
        max_batch_file_bytes: the largest ``purpose=batch`` upload accepted, in bytes.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        default_delay_secs: float,
        max_batch_file_bytes: int = limits.MAX_BATCH_FILE_BYTES,
    ) -> None:
        self.clock = clock
        self.default_delay_secs = default_delay_secs
        self.max_batch_file_bytes = max_batch_file_bytes
        self.lock = threading.RLock()
        self.results_base_url = ""  # base_url of the last start(), kept after stop()
        #: model names admitted beside the rule table's (``--models``); kept by reset()
        self.models: frozenset[str] = frozenset()
        self.reset()

    def reset(self) -> None:
        """Forgets every file, batch, record and counter and clears the script."""
        with self.lock:
            self.files: dict[str, StoredFile] = {}
            self.batches: dict[str, Batch] = {}
            self.submitted: list[dict[str, Any]] = []
            self.create_counts: dict[str, int] = {}
            self.transient_failed: set[str] = set()
            self.call_counts: dict[str, int] = {}
            self.script: dict[str, Any] = dict(SCRIPT_DEFAULTS)
            # provider name -> that provider module's own state (e.g. Mistral's files)
            self.provider_state: dict[str, dict[str, Any]] = {}

    # -- files ----------------------------------------------------------------------------

    def get_file(self, file_id: str) -> StoredFile:
        """The stored file; raises a 404 :class:`ApiError` (OpenAI shape) when unknown."""
        stored = self.files.get(file_id)
        if stored is not None and stored.expires_at is not None:
            if stored.expires_at <= self.clock():  # the real service deletes it
                del self.files[file_id]
                stored = None
        if stored is None:
            raise ApiError(
                404, "invalid_request_error", f"No such File object: {file_id}", param="id"
            )
        return stored

    def store_file(
        self, filename: str, purpose: str, content: bytes, expires_after: int | None = None
    ) -> StoredFile:
        """Stores ``content`` as a new file expiring ``expires_after`` seconds after its
        creation (``None``: never) and returns it."""
        created = int(self.clock())
        expires = None if expires_after is None else created + expires_after
        stored = StoredFile(new_id("file-"), filename, purpose, content, created, expires)
        self.files[stored.id] = stored
        return stored

    # -- batches --------------------------------------------------------------------------

    def get_batch(self, provider: str, batch_id: str) -> Batch:
        """The batch; raises a 404 :class:`ApiError` in ``provider``'s shape when unknown."""
        batch = self.batches.get(batch_id)
        if batch is None or batch.provider != provider or batch.deleted:
            raise error_shape(provider).unknown_batch(batch_id)
        return batch

    def new_batch(self, provider: str, prefix: str, now: float) -> Batch:
        """Registers a new batch that captures the current script's batch-level keys."""
        script = self.script
        delay = script["processing_delay_secs"]
        batch = Batch(
            provider=provider,
            id=new_id(prefix),
            created=now,
            delay_secs=self.default_delay_secs if delay is None else delay,
            items=[],
            empty_error_file_id=script["empty_error_file_id"],
            shuffle_seed=script["shuffle_seed"] if script["shuffle_results"] else None,
            unknown_custom_id=script["unknown_custom_id"],
        )
        if script["expire_after_requests"] is not None:
            batch.stop_after, batch.stop_kind = script["expire_after_requests"], "expired"
        elif script["cancel_after_requests"] is not None:
            batch.stop_after, batch.stop_kind = script["cancel_after_requests"], "cancelled"
        self.batches[batch.id] = batch
        return batch

    def record(self, batch: Batch, custom_id: str, request: Mapping[str, Any]) -> None:
        """Records one request accepted into ``batch`` (see ``submitted_requests``)."""
        self.submitted.append(
            {
                "provider": batch.profile or batch.provider,
                "batch_id": batch.id,
                "custom_id": custom_id,
                "request": copy.deepcopy(dict(request)),
            }
        )
        self.create_counts[custom_id] = self.create_counts.get(custom_id, 0) + 1

    # -- scripting state ------------------------------------------------------------------

    def resolve_transient(self, marker: str | None, custom_id: str, prompt: str = "") -> str | None:
        """``transient`` fails as ``server_error`` once per custom_id, ``flaky`` as
        ``rate_limit`` once per prompt text (whatever its custom_id or batch), then not
        at all; other markers pass through."""
        if marker == "transient":
            key = custom_id
        elif marker == "flaky":
            key = "prompt:" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        else:
            return marker
        if key in self.transient_failed:
            return None
        self.transient_failed.add(key)
        return "server_error" if marker == "transient" else "rate_limit"

    def take_leading_error(self, endpoint: str) -> tuple[int, int] | None:
        """Consumes one scripted ``leading_errors`` answer for ``endpoint`` (a handler
        name; the key's ``paths`` limit which): ``(status, retry_after_ms)``, or None when
        none is left or it does not apply. Takes :attr:`lock` itself."""
        with self.lock:
            leading: LeadingErrors | None = self.script["leading_errors"]
            if leading is None or leading.remaining <= 0:
                return None
            if leading.paths is not None and endpoint not in leading.paths:
                return None
            leading.remaining -= 1
            return leading.status, leading.retry_after_ms

    def admit_create(self, provider: str) -> ApiError | None:
        """Counts a valid create call (:meth:`take_create_failure`); a scripted failure
        is an error in ``provider``'s shape
        (:func:`~mmirage_beam.testing.fake_provider.wire.status_error`), raised here when
        the create fails before creating, else returned for the caller to raise once the
        batch is created (``created: true``: a lost answer). None: no failure. Call it
        holding :attr:`lock`."""
        failure = self.take_create_failure()
        if failure is None:
            return None
        error = status_error(provider, failure.status, failure.retry_after_ms, "create")
        if not failure.created:
            raise error
        return error

    def take_create_failure(self) -> CreateFailure | None:
        """Counts a valid create call; returns the scripted failure if this one fails."""
        failure: CreateFailure | None = self.script["fail_batch_creates"]
        if failure is None:
            return None
        failure.seen += 1
        if failure.seen == failure.nth or (failure.permanent and failure.seen > failure.nth):
            return failure
        return None


class StoreCounts:
    """The counters tests read from a fake server that keeps its state in a
    :class:`Store` (``self._store``): the shared fake's and Vertex AI's."""

    _store: Store

    def create_counts(self) -> dict[str, int]:
        """custom_id -> number of created batches (jobs) that contained it."""
        with self._store.lock:
            return dict(self._store.create_counts)

    def call_counts(self) -> dict[str, int]:
        """Endpoint name (the fake's: ``files_create``, ``vertex_create``...) -> number of
        HTTP calls received (including rejected ones)."""
        with self._store.lock:
            return dict(self._store.call_counts)
