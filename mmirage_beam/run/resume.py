"""Resuming a run: what was already submitted, and recovery of interrupted submissions.

``mmirage run --run-id ID`` on a run that has receipts submits only the requests whose
custom_id is in none of that run's receipts. Before that, every *intent* left without a
receipt (the run stopped between writing ``<chunk_id>.intent`` and the provider's answer
being receipted) is resolved:

- with an adapter that can find batches (OpenAI: ``find_batch`` lists recent batches and
  matches the ``mmirage_run_id`` / ``mmirage_chunk_id`` metadata), a batch that exists
  is *adopted*: its receipt is written from the intent, so its requests are not sent
  again; when none exists, the intent is dropped and its requests are submitted;
- with an adapter that finds batches by their shape (Anthropic: batches carry no
  metadata; ``find_candidate_batches``), the batches created in the intent's time window
  (``intent_at_utc - ADOPT_SKEW_SECS`` up to the longest a create with its retries can
  take) holding exactly the chunk's request count, and named by no receipt of any run
  of this base, are listed; one is adopted when it is the only candidate of this intent
  and of no other pending intent. When its results already exist the adoption is
  confirmed by custom_ids (a mismatch is reported and the chunk is sent again); else the
  receipt carries ``adoption: {"method", "confirmed": false}`` and the next resume (or
  merge) confirms it. Several candidates, or none: the chunk is sent again (if the
  provider had accepted it, its requests now exist twice; merge keeps, per custom_id,
  the newest successful result). This is the remaining window, in docs/benchmarks.md;
- with an adapter that can do neither, the intent's requests are submitted again with a
  warning naming the chunk.

Receipts adopted earlier and still unconfirmed are checked again on every resume: one
whose batch another receipt also names, or whose results hold other custom_ids, is
marked ``adoption.rejected`` (see :func:`mmirage_beam.run.receipts.adoption_rejected`) and
its requests are sent again.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from mmirage_beam.crashpoints import crash_point
from mmirage_beam.io.fs import list_files, write_durably
from mmirage_beam.providers.base import (
    BatchSubmissionAdapter,
    FoundBatch,
    close_adapter,
    open_adapter,
)
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.run.layout import part_path, parts_dir
from mmirage_beam.run.receipts import (
    MODALITIES,
    adoption_rejected,
    find_receipt_files,
    read_receipts,
    receipt_line,
    receipt_path,
)

_LOG = logging.getLogger(__name__)
# How far before an intent a matching batch may have been created (clock skew), seconds.
_ADOPTION_MARGIN_SECS = 3600.0


@dataclass
class ResumeState:
    """What a resumed run must know before building its pipeline.

    Attributes:
        attempt: this submission attempt (1 for a run with no receipts yet).
        submitted_ids: custom_ids already receipted in the run (never sent again).
        adopted: chunk ids whose interrupted submission was found at the provider.
        resent: chunk ids whose interrupted submission could not be resolved (their
            requests are submitted again).
        dropped: chunk ids whose interrupted submission never reached the provider.
    """

    attempt: int = 1
    submitted_ids: frozenset = frozenset()
    adopted: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _intents(receipt_file: str) -> list[tuple[str, dict[str, Any]]]:
    from mmirage_beam.io.filesystems import FileSystems

    out = []
    for path in list_files(parts_dir(receipt_file), "*.intent"):
        with FileSystems.open(path, compression_type="uncompressed") as f:
            out.append((path, json.loads(f.read().decode("utf-8"))))
    return sorted(out, key=lambda x: x[0])


def prepare_resume(
    base: str,
    run_id: str,
    adapter_cls: type[BatchSubmissionAdapter],
    provider_config: BatchProviderConfig,
) -> ResumeState:
    """Resolve interrupted submissions of ``run_id`` and list what it already submitted.

    Raises:
        mmirage_beam.errors.CredentialsError: an adoption lookup needs the key and it
            is missing.
    """
    from mmirage_beam.io.filesystems import FileSystems

    state = ResumeState()
    attempts = [0]
    files = [receipt_path(base, m, run_id) for m in MODALITIES]
    pending = [(f, path, intent) for f, path, intent in _pending(files)]
    unconfirmed = [(f, r) for f in files for r in read_receipts(f) if _unconfirmed_adoption(r)]
    by_shape = adapter_cls.adopts_by_shape
    adapter = None
    if (pending and (by_shape or adapter_cls.adopts_by_metadata)) or (unconfirmed and by_shape):
        adapter = open_adapter(adapter_cls, provider_config, run_id)
    try:
        if by_shape and adapter is not None:
            claimed = _claim_receipted(base, adapter_cls)
            _recheck_adoptions(adapter, unconfirmed, claimed, run_id)
            pending = _adopt_by_shape(adapter, pending, provider_config, run_id, state)
        for rfile, path, intent in pending:
            chunk_id = intent["chunk_id"]
            attempts.append(int(intent.get("attempt", 1)))
            if FileSystems.exists(part_path(rfile, chunk_id)):
                FileSystems.delete([path])  # receipted after all
                continue
            if adapter is None or not adapter_cls.adopts_by_metadata:
                _LOG.warning(
                    "chunk %s of run %s was being submitted when the run stopped and %s "
                    "cannot tell whether the provider accepted it; its %d requests are "
                    "submitted again (if it had been accepted, they now exist twice)",
                    chunk_id,
                    run_id,
                    provider_config.provider,
                    intent.get("submitted_request_count", 0),
                )
                state.resent.append(chunk_id)
                FileSystems.delete([path])
                continue
            since = _timestamp(intent.get("intent_at_utc")) - _ADOPTION_MARGIN_SECS
            found = adapter.find_batch(run_id, chunk_id, created_after=since)
            if found is None:
                _LOG.info("chunk %s never reached the provider; it is submitted again", chunk_id)
                state.dropped.append(chunk_id)
                FileSystems.delete([path])
                continue
            _adopt(rfile, path, intent, adapter.found_batch(found), run_id, state)
    finally:
        close_adapter(adapter)
    ids: set[str] = set()
    for rfile in files:
        for r in read_receipts(rfile):
            attempts.append(int(r.get("attempt", 1)))
            if adoption_rejected(r):
                continue  # its requests are sent again
            ids.update(r["custom_id_to_source_index"])
    state.submitted_ids = frozenset(ids)
    state.attempt = max(attempts) + 1 if max(attempts) else 1
    return state


def _timestamp(value: Optional[str]) -> float:
    if not value:
        return 0.0
    try:
        return _dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return 0.0


def _pending(files: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(f, path, intent) for f in files for path, intent in _intents(f)]


def _unconfirmed_adoption(receipt: dict[str, Any]) -> bool:
    adoption = receipt.get("adoption") or {}
    return bool(adoption) and not adoption.get("confirmed") and not adoption.get("rejected")


def _adopt(rfile, path, intent, batch: FoundBatch, run_id, state, adoption=None) -> None:  # noqa: ANN001
    from mmirage_beam.io.filesystems import FileSystems

    chunk_id = intent["chunk_id"]
    receipt = dict(intent)
    receipt.pop("intent_at_utc", None)
    receipt["provider_batch_id"] = batch.batch_id
    receipt["status"] = batch.status
    if adoption:
        receipt["adoption"] = adoption
    write_durably(part_path(rfile, chunk_id), receipt_line(receipt))

    crash_point("adopted")
    FileSystems.delete([path])
    _LOG.warning(
        "adopted batch %s for chunk %s of run %s (accepted by the provider before the run stopped)",
        batch.batch_id,
        chunk_id,
        run_id,
    )
    state.adopted.append(chunk_id)


def _claim_receipted(base: str, adapter_cls: type) -> Counter:
    """Batch id -> how many receipts of ``base`` (every run) name it; each is claimed in
    the adapter's module so that no later create adopts it either."""
    claimed: Counter = Counter()
    files, _ = find_receipt_files(base)
    for f in files:
        for r in read_receipts(f.path):
            if r.get("provider_batch_id") and not adoption_rejected(r):
                claimed[r["provider_batch_id"]] += 1
    for batch_id in claimed:
        adapter_cls.claim_batch(batch_id)
    return claimed


def _create_window_secs(adapter, provider_config: BatchProviderConfig) -> float:  # noqa: ANN001
    """The longest a create with all its retries can take after its intent, seconds."""
    policy = adapter.retry_policy()
    timeout = float(getattr(provider_config, "timeout_seconds", None) or 600.0)
    return policy.max_attempts * (timeout + policy.max_delay_secs) + 60.0


def _adopt_by_shape(adapter, pending, provider_config, run_id, state):  # noqa: ANN001, ANN202
    """Resolve the intents that one unclaimed batch of their request count matches;
    returns the intents left (sent again by the caller)."""
    import time

    from mmirage_beam.io.filesystems import FileSystems

    window = _create_window_secs(adapter, provider_config)
    now = time.time()
    candidates: dict[str, list[FoundBatch]] = {}
    left = []
    for rfile, path, intent in pending:
        if FileSystems.exists(part_path(rfile, intent["chunk_id"])):
            left.append((rfile, path, intent))  # receipted after all: the caller cleans up
            continue
        start = _timestamp(intent.get("intent_at_utc"))
        candidates[path] = [
            adapter.found_batch(b)
            for b in adapter.find_candidate_batches(
                int(intent.get("submitted_request_count") or 0),
                created_after=start - adapter.ADOPT_SKEW_SECS,
                created_before=min(now, start + window),
            )
        ]
    for rfile, path, intent in pending:
        if path not in candidates:
            continue
        mine = candidates[path]
        others = {b.batch_id for p, bs in candidates.items() if p != path for b in bs}
        chunk_id = intent["chunk_id"]
        if len(mine) != 1 or mine[0].batch_id in others:
            if mine:
                _LOG.warning(
                    "chunk %s of run %s: %d unclaimed batches of %d requests were created "
                    "while it was being submitted; cannot tell which (if any) is its own, so "
                    "it is sent again (its requests may now exist twice)",
                    chunk_id,
                    run_id,
                    len(mine),
                    intent.get("submitted_request_count", 0),
                )
            left.append((rfile, path, intent))
            continue
        batch = mine[0]
        adoption: dict[str, Any] = {"method": "created_at+request_count", "confirmed": False}
        ids = adapter.result_custom_ids(batch.batch_id)
        if ids is not None:
            if ids != set(intent["custom_id_to_source_index"]):
                _LOG.warning(
                    "chunk %s of run %s: batch %s matched by time and request count holds "
                    "other custom_ids (confirmation failed); the chunk is sent again",
                    chunk_id,
                    run_id,
                    batch.batch_id,
                )
                left.append((rfile, path, intent))
                continue
            adoption["confirmed"] = True
        adapter.claim_batch(batch.batch_id)
        _adopt(rfile, path, intent, batch, run_id, state, adoption)
    return left


def _recheck_adoptions(adapter, unconfirmed, claimed: Counter, run_id: str) -> None:  # noqa: ANN001
    """Confirm (by custom_ids) or reject receipts adopted earlier without confirmation."""
    for rfile, r in unconfirmed:
        batch_id = r["provider_batch_id"]
        reason = None
        if claimed[batch_id] > 1:
            reason = f"batch {batch_id} is also named by another receipt"
        else:
            ids = adapter.result_custom_ids(batch_id)
            if ids is None:
                continue  # still processing: confirmed later
            if ids != set(r["custom_id_to_source_index"]):
                reason = f"batch {batch_id} holds other custom_ids"
        updated = dict(r)
        adoption = dict(r.get("adoption") or {})
        if reason is None:
            adoption["confirmed"] = True
        else:
            adoption["rejected"] = reason
            _LOG.warning(
                "run %s: the adoption of %s for chunk %s is withdrawn (%s); its requests are "
                "sent again",
                run_id,
                batch_id,
                r["chunk_id"],
                reason,
            )
        updated["adoption"] = adoption
        write_durably(part_path(rfile, r["chunk_id"]), receipt_line(updated))
