"""Webhook delivery: the event document, its HMAC-SHA256 signature, POSTs with bounded
retries, and the run's record of what was delivered, so that a restart never sends an
event twice (docs/notifications.md).

Each ``(event, url)`` is delivered at least once: it is sent only if
``<base>.notifications.<run_id>.jsonl`` has no line with its :func:`event_id`; a line is
written (durably, :func:`mmirage_beam.io.fs.write_durably`) right after the receiver
answered 2xx. A crash between the answer and the write sends it again on the next try,
with the same ``event_id`` and the same ``X-Mmirage-Event-Id`` header, for the receiver
to dedupe on. Two processes notifying the same run at the same moment (``check --watch``
and the dashboard) may likewise both send it.

Signature (``secret_env`` set): ``X-Mmirage-Timestamp: <unix seconds>`` and
``X-Mmirage-Signature: sha256=<hex>``, the hex HMAC-SHA256 (RFC 2104, Python ``hmac``)
keyed with the secret's UTF-8 bytes over ``b"<timestamp>." + body`` (the raw body bytes).
A receiver recomputes it, compares with ``hmac.compare_digest`` and refuses old
timestamps (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Sequence, Union
from urllib.parse import urlsplit

from mmirage_beam.io.fs import write_durably
from mmirage_beam.notify.events import Event, event_id, events_for, snapshot_of
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.lookup import BatchStatus
from mmirage_beam.run.store import RunStore

__all__ = [
    "SCHEMA",
    "Delivery",
    "NotifyResult",
    "build_body",
    "deliver",
    "delivered_ids",
    "notifications_path",
    "notify_run",
    "redact_url",
    "sign",
    "slack_text",
]

_LOG = logging.getLogger(__name__)
#: the ``schema`` field of the event document
SCHEMA = "mmirage.notification/1"
#: attempts per (event, url) in one call, and the backoff between them (seconds,
#: doubling, capped)
MAX_ATTEMPTS = 4
RETRY_INITIAL_DELAY_SECS = 1.0
RETRY_MAX_DELAY_SECS = 30.0
REQUEST_TIMEOUT_SECS = 10.0
#: HTTP statuses retried (timeouts, rate limits, server errors); any other non-2xx is
#: final for this call (the event stays undelivered and is tried again next time)
_RETRY_STATUSES = (408, 425, 429)


def notifications_path(base: str, run_id: str) -> str:
    """``<base>.notifications.<run_id>.jsonl`` (:attr:`RunLayout.notifications`): one
    line per delivered (event, url)."""
    return RunLayout(base, run_id).notifications


def redact_url(url: str) -> str:
    """``scheme://host/…``: a webhook URL's path often is its secret (Slack's is), so
    logs and the record keep only the host."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}/…"


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 keyed with ``secret`` (UTF-8) over
    ``timestamp + "." + body`` (``body``: the exact bytes POSTed)."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def build_body(event: Event, url: str, fmt: str = "json") -> bytes:
    """The UTF-8 JSON body POSTed for ``event`` to ``url``.

    ``json``: the event document (docs/notifications.md: ``schema``, ``event``,
    ``event_id``, ``run_id``, ``provider``, ``model``, ``batches``, ``requests``,
    ``tokens``, ``cost_usd``, ``next_command``, ``advice``, ``merged_file``,
    ``created_at``). ``slack``: ``{"text": ...}``, the body of a Slack incoming webhook
    (https://api.slack.com/messaging/webhooks).

    Raises:
        ValueError: an unknown ``fmt``.
    """
    s = event.snapshot
    if fmt == "slack":
        return json.dumps({"text": slack_text(event)}).encode("utf-8")
    if fmt != "json":
        raise ValueError(f"unknown notify format {fmt!r}")
    doc = {
        "schema": SCHEMA,
        "event": event.name,
        "event_id": event_id(s.run_id, event.name, url),
        "run_id": s.run_id,
        "provider": s.provider,
        "model": s.model,
        "batches": {"total": s.batches, "running": s.running},
        "requests": {
            "total": s.requests_total,
            "done": s.requests_done,
            "failed": s.requests_failed,
            "counted_from": s.counted_from,
        },
        "tokens": {"input": s.input_tokens, "output": s.output_tokens, "kind": s.tokens_kind},
        "cost_usd": s.cost_usd,
        "next_command": s.next_command,
        "advice": list(s.advice),
        "merged_file": s.merged_file,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return json.dumps(doc, sort_keys=False).encode("utf-8")


def slack_text(event: Event) -> str:
    """One Slack message: the event, the counts, tokens and cost, the next command."""
    s = event.snapshot
    model = f" {s.model}" if s.model else ""
    lines = [
        f"mmirage run {s.run_id} ({s.provider}{model}): {event.name.replace('_', ' ')}",
        f"requests done {s.requests_done:,} / {s.requests_total:,}, failed {s.requests_failed:,}",
    ]
    if s.input_tokens is not None:
        tokens = f"tokens ({s.tokens_kind}): input {s.input_tokens:,}"
        if s.output_tokens is not None:
            tokens += f", output {s.output_tokens:,}"
        if s.cost_usd is not None:
            tokens += f"; cost ${s.cost_usd:.4f}"
        lines.append(tokens)
    if s.next_command:
        lines.append(f"next: `{s.next_command}`")
    return "\n".join(lines)


@dataclass(frozen=True)
class Delivery:
    """What happened to one ``(event, url)``: ``status`` is ``delivered``,
    ``already_delivered`` (recorded earlier: not sent) or ``failed`` (``error`` says why,
    after ``attempts`` POSTs)."""

    event: str
    event_id: str
    url: str  # redacted (:func:`redact_url`)
    status: str
    attempts: int = 0
    http_status: Optional[int] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class NotifyResult:
    """The deliveries of one :func:`notify_run` call and the warnings to print (one per
    failed delivery; they never change an exit status)."""

    deliveries: tuple[Delivery, ...] = ()

    @property
    def warnings(self) -> list[str]:
        """``notify: <event> of run <id> to <host>: not delivered (...)`` lines."""
        return [
            f"notify: {d.event} to {d.url} not delivered after {d.attempts} attempt(s): "
            f"{d.error}; it is sent again the next time the run is checked "
            "(check --watch, run --wait --run-id)"
            for d in self.deliveries
            if d.status == "failed"
        ]


def deliver(
    url: str,
    body: bytes,
    *,
    event: str,
    eid: str,
    secret: Optional[str] = None,
    max_attempts: int = MAX_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Delivery:
    """POST ``body`` to ``url`` until it answers 2xx, at most ``max_attempts`` times.

    Args:
        url: the webhook.
        body: the exact bytes to POST (:func:`build_body`).
        event: the event name (``X-Mmirage-Event``).
        eid: the event's id (``X-Mmirage-Event-Id``, :func:`event_id`).
        secret: the HMAC key; None: unsigned.
        max_attempts: POSTs at most (>= 1).
        sleep, clock: injectable for tests (seconds).

    Connection errors, timeouts, 408, 425, 429 and 5xx are retried after
    ``RETRY_INITIAL_DELAY_SECS`` doubling up to ``RETRY_MAX_DELAY_SECS`` (seconds; a
    ``Retry-After`` in seconds wins, capped the same); another status ends the attempts
    (a redirect too: it is not followed).
    Each attempt is signed afresh (its own ``X-Mmirage-Timestamp``) when ``secret``.

    Returns:
        a :class:`Delivery` (``delivered`` or ``failed``); never raises for HTTP or
        network errors.
    """
    error, code, attempt = "", None, 0
    for attempt in range(1, max_attempts + 1):
        ts = str(int(clock()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "mmirage-beam-notify/1",
            "X-Mmirage-Event": event,
            "X-Mmirage-Event-Id": eid,
            "X-Mmirage-Timestamp": ts,
        }
        if secret:
            headers["X-Mmirage-Signature"] = sign(secret, ts, body)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        retry_after: Optional[float] = None
        try:
            with _OPENER.open(request, timeout=REQUEST_TIMEOUT_SECS) as response:
                code = response.status
            return Delivery(event, eid, redact_url(url), "delivered", attempt, code)
        except urllib.error.HTTPError as exc:
            code, error = exc.code, f"HTTP {exc.code}"
            retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            if not (code >= 500 or code in _RETRY_STATUSES):
                break
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            code, error = None, f"{type(exc).__name__}: {reason}"
        if attempt < max_attempts:
            delay = RETRY_INITIAL_DELAY_SECS * 2 ** (attempt - 1)
            if retry_after is not None:
                delay = retry_after
            _LOG.info("notify %s to %s: %s, retrying", event, redact_url(url), error)
            sleep(min(delay, RETRY_MAX_DELAY_SECS))
    return Delivery(event, eid, redact_url(url), "failed", attempt, code, error)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the receiver's answer, not a place to go: urllib would turn the POST
    into a GET without the body (301/302/303) and call that a delivery, or send the
    signed event to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def delivered_ids(base: str, run_id: str) -> set[str]:
    """The ``event_id`` of every delivery recorded for ``run_id`` (unreadable lines are
    skipped: they were cut by a crash and their event is sent again)."""
    from mmirage_beam.io.filesystems import FileSystems

    path = notifications_path(base, run_id)
    if not FileSystems.exists(path):
        return set()
    with FileSystems.open(path, compression_type="uncompressed") as f:
        text = f.read().decode("utf-8", errors="replace")
    ids = set()
    for line in text.splitlines():
        try:
            ids.add(json.loads(line)["event_id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def _record(base: str, run_id: str, delivery: Delivery) -> None:
    """Add one line for ``delivery`` to the run's record (the whole file rewritten
    durably: Beam filesystems have no append)."""
    from mmirage_beam.io.filesystems import FileSystems

    path = notifications_path(base, run_id)
    old = b""
    if FileSystems.exists(path):
        with FileSystems.open(path, compression_type="uncompressed") as f:
            old = f.read()
        if old and not old.endswith(b"\n"):
            old += b"\n"
    line = {
        "event_id": delivery.event_id,
        "event": delivery.event,
        "url": delivery.url,
        "attempts": delivery.attempts,
        "http_status": delivery.http_status,
        "delivered_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_durably(path, old + json.dumps(line).encode("utf-8") + b"\n")


def notify_run(
    store_or_base: Union[RunStore, str],
    run_id: Optional[str],
    config: Any,
    *,
    statuses: Optional[Sequence[BatchStatus]] = None,
    config_arg: Optional[str] = None,
    sleep: Callable[[float], None] = time.sleep,
    environ: Optional[dict[str, str]] = None,
) -> NotifyResult:
    """Tell ``config.execution.notify``'s webhooks the events ``run_id`` has reached,
    each (event, url) at most once per record (the call for ``check --watch``,
    ``run --wait`` and the dashboard's poller, which may call it on every poll: a run
    not ended sends nothing, an event already delivered is not sent again).

    Args:
        store_or_base: the run's :class:`RunStore`, or its receipts base
            (``run.layout.receipts_base``).
        run_id: the run (None: ``store_or_base``'s run; required with a base).
        config: the loaded ``PipelineConfig`` (its ``execution.notify`` and processor).
        statuses: the run's batch statuses as just looked up; None: looked up here
            (``BatchStatusChecker``: the provider's API key must be set).
        config_arg: the config path the next command names.
        sleep: between retries (injectable for tests).
        environ: where ``secret_env`` is read (default ``os.environ``).

    Returns:
        the deliveries; failures are in :attr:`NotifyResult.warnings`, never raised.

    Raises:
        ValueError: no ``run_id`` with a base.
        NoReceiptsError, CredentialsError: only when ``statuses`` is None and the run
            has no receipt or the provider's key is missing.
    """
    targets = tuple(getattr(getattr(config, "execution", None), "notify", ()) or ())
    if isinstance(store_or_base, RunStore):
        base, run_id = store_or_base.base, run_id or store_or_base.run_id
    else:
        base = store_or_base
    if not run_id:
        raise ValueError("notify_run needs a run_id with a receipts base")
    if not targets:
        return NotifyResult()
    if statuses is None:
        statuses = _look_up(config, run_id)
    env = os.environ if environ is None else environ
    snapshot = snapshot_of(base, run_id, config, statuses, config_arg)
    events = events_for(snapshot)
    if not events:
        return NotifyResult()
    done = delivered_ids(base, run_id)
    out = []
    for target in targets:
        for event in events:
            if event.name not in target.events:
                continue
            eid = event_id(run_id, event.name, target.url)
            if eid in done:
                out.append(Delivery(event.name, eid, redact_url(target.url), "already_delivered"))
                continue
            body = build_body(event, target.url, target.format)
            secret = env.get(target.secret_env) if target.secret_env else None
            if target.secret_env and not secret:
                out.append(
                    Delivery(
                        event.name,
                        eid,
                        redact_url(target.url),
                        "failed",
                        error=f"environment variable {target.secret_env} is not set",
                    )
                )
                continue
            d = deliver(target.url, body, event=event.name, eid=eid, secret=secret, sleep=sleep)
            if d.status == "delivered":
                try:
                    _record(base, run_id, d)
                except Exception as exc:  # delivered; only the record is lost: at-least-once
                    _LOG.warning("notify: could not record delivery %s: %s", eid, exc)
                done.add(eid)
            out.append(d)
    return NotifyResult(tuple(out))


def _look_up(config: Any, run_id: str) -> list[BatchStatus]:
    from mmirage_beam.run.discovery import collect_receipts
    from mmirage_beam.run.lookup import BatchStatusChecker

    receipts = collect_receipts(config, (), run_id=run_id)
    with BatchStatusChecker(receipts.providers, config) as checker:
        return list(checker.check(receipts.batches))
