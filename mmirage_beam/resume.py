"""Resuming a run: what was already submitted, and recovery of interrupted submissions.

``mmirage run --run-id ID`` on a run that has receipts submits only the requests whose
custom_id is in none of that run's receipts. Before that, every *intent* left without a
receipt (the run stopped between writing ``<chunk_id>.intent`` and the provider's answer
being receipted) is resolved:

- with an adapter that can find batches (OpenAI: ``find_batch`` lists recent batches and
  matches the ``mmirage_run_id`` / ``mmirage_chunk_id`` metadata), a batch that exists
  is *adopted*: its receipt is written from the intent, so its requests are not sent
  again; when none exists, the intent is dropped and its requests are submitted;
- with an adapter that cannot (Anthropic: batches carry no metadata), the intent's
  requests are submitted again and a warning names the chunk: if the provider had
  accepted that batch, its requests now exist twice (merge keeps, per custom_id, the
  newest successful result). This is the remaining window, documented in the README.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

from mmirage_beam.config.batch_provider import BatchProviderConfig
from mmirage_beam.providers.base import BatchSubmissionAdapter, resolve_credentials
from mmirage_beam.receipts import (
    MODALITIES,
    part_path,
    parts_dir,
    read_receipts,
    receipt_line,
    receipt_path,
    write_durably,
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


def _can_find_batches(adapter_cls: type[BatchSubmissionAdapter]) -> bool:
    find = getattr(adapter_cls, "find_batch", None)
    base = getattr(BatchSubmissionAdapter, "find_batch", None)
    return find is not None and find is not base


def _intents(receipt_file: str) -> list[tuple[str, dict[str, Any]]]:
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.io.fs import list_files

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
    from apache_beam.io.filesystems import FileSystems

    state = ResumeState()
    attempts = [0]
    files = [receipt_path(base, m, run_id) for m in MODALITIES]
    pending = [(f, path, intent) for f in files for path, intent in _intents(f)]
    adapter = None
    if pending and _can_find_batches(adapter_cls):
        adapter = adapter_cls(resolve_credentials(adapter_cls, provider_config.provider))
        adapter.run_id = run_id
        adapter.setup(provider_config)
    try:
        for rfile, path, intent in pending:
            chunk_id = intent["chunk_id"]
            attempts.append(int(intent.get("attempt", 1)))
            if FileSystems.exists(part_path(rfile, chunk_id)):
                FileSystems.delete([path])  # receipted after all
                continue
            if adapter is None:
                _LOG.warning(
                    "chunk %s of run %s was being submitted when the run stopped and %s "
                    "batches cannot be looked up; its %d requests are submitted again (if "
                    "the provider had accepted it, they now exist twice)",
                    chunk_id,
                    run_id,
                    provider_config.provider,
                    intent.get("submitted_request_count", 0),
                )
                state.resent.append(chunk_id)
                FileSystems.delete([path])
                continue
            since = _timestamp(intent.get("intent_at_utc")) - _ADOPTION_MARGIN_SECS
            raw = adapter.find_batch(run_id, chunk_id, created_after=since)
            if raw is None:
                _LOG.info("chunk %s never reached the provider; it is submitted again", chunk_id)
                state.dropped.append(chunk_id)
                FileSystems.delete([path])
                continue
            result = adapter.parse_submission_result(raw)
            receipt = dict(intent)
            receipt.pop("intent_at_utc", None)
            receipt["provider_batch_id"] = result.provider_batch_id
            receipt["status"] = result.status
            write_durably(part_path(rfile, chunk_id), receipt_line(receipt))
            FileSystems.delete([path])
            _LOG.warning(
                "adopted batch %s for chunk %s of run %s (accepted by the provider before "
                "the run stopped)",
                result.provider_batch_id,
                chunk_id,
                run_id,
            )
            state.adopted.append(chunk_id)
    finally:
        if adapter is not None:
            adapter.teardown()
    ids: set[str] = set()
    for rfile in files:
        for r in read_receipts(rfile):
            ids.update(r["custom_id_to_source_index"])
            attempts.append(int(r.get("attempt", 1)))
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
