"""SubmitChunks: one provider batch per chunk, a durable receipt per accepted batch.

    Chunk --SubmitChunks--> receipt dict (see :mod:`mmirage_beam.receipts`)
                       \\--> export lines (dry run only)

The adapter's client is built in the DoFn's ``setup()`` with credentials read from the
worker's environment; nothing secret is kept on the DoFn, so pickling it is safe.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, NamedTuple, Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.batch_provider import BatchProviderConfig
from mmirage_beam.crashpoints import crash_point
from mmirage_beam.receipts import (
    intent_path,
    make_receipt,
    part_path,
    read_receipt_part,
    receipt_line,
    receipt_path,
    write_durably,
)
from mmirage_beam.records import Chunk

_LOG = logging.getLogger(__name__)
_NS = "mmirage"
EXPORT_TAG = "export"


class _SubmitChunkFn(beam.DoFn):
    def __init__(
        self,
        adapter_cls: type,
        provider_config: BatchProviderConfig,
        run_id: str,
        receipts_base: str,
        output_types: dict[str, str],
        dry_run: bool,
        skip_invalid_rows: bool,
        attempt: int = 1,
        parent_run_id: Optional[str] = None,
        stop_marker: Optional[str] = None,
    ) -> None:
        self._stop_marker = stop_marker
        self._attempt = attempt
        self._parent = parent_run_id
        self._adapter_cls = adapter_cls
        self._config = provider_config
        self._run_id = run_id
        self._base = receipts_base
        self._output_types = dict(output_types)
        self._dry_run = dry_run
        self._skip_invalid = skip_invalid_rows
        self._submitted = Metrics.counter(_NS, "batches_submitted")
        self._reused = Metrics.counter(_NS, "batches_already_receipted")
        self._blocked = Metrics.counter(_NS, "chunks_not_submitted_invalid_rows")
        self._submitted_requests = Metrics.counter(_NS, "requests_submitted")
        self._submitted_bytes = Metrics.counter(_NS, "bytes_submitted")

    def setup(self) -> None:
        from mmirage_beam.costs.budget import token_budget_for

        self._budget = None
        if self._dry_run:
            self._adapter = self._adapter_cls()
            return
        self._budget = token_budget_for(self._config, self._base, self._run_id)
        from mmirage_beam.providers.base import resolve_credentials

        creds = resolve_credentials(self._adapter_cls, self._config.provider)
        self._adapter = self._adapter_cls(creds)
        self._adapter.run_id = self._run_id
        self._adapter.setup(self._config)

    def teardown(self) -> None:
        adapter = getattr(self, "_adapter", None)
        if adapter is not None and not self._dry_run:
            adapter.teardown()

    def process(self, chunk: Chunk, invalid_row_count: int = 0) -> Iterator[Any]:
        if invalid_row_count and not self._skip_invalid:
            self._blocked.inc()
            return
        rfile = receipt_path(self._base, chunk.modality, self._run_id, self._dry_run)
        part = part_path(rfile, chunk.chunk_id)
        lines = [r.line for r in chunk.requests]
        receipt = make_receipt(
            provider=self._config.provider,
            chunk=chunk,
            provider_batch_id="",
            status="submitting",
            run_id=self._run_id,
            output_type=self._output_types.get(chunk.output_name, "plain"),
            model=getattr(self._config, "model", None),
            attempt=self._attempt,
            parent_run_id=self._parent,
        )
        intent = None
        if self._dry_run:
            receipt["provider_batch_id"] = f"dry-run-{chunk.modality}-{chunk.chunk_id}"
            receipt["status"] = "dry_run"
            prefix = b'{"batch_id":"' + f"{chunk.modality}-{chunk.chunk_id}".encode() + b'"'
            yield pvalue.TaggedOutput(
                EXPORT_TAG,
                b"".join(prefix + b',"request":' + ln.rstrip(b"\n") + b"}\n" for ln in lines),
            )
        else:
            existing = read_receipt_part(part)
            if existing is not None:
                if existing.get("request_hash") != receipt["request_hash"]:
                    raise RuntimeError(
                        f"chunk id {chunk.chunk_id} of run {self._run_id} already has a receipt "
                        "for different requests; refusing to submit"
                    )
                # A retried bundle: this chunk was already accepted; never submit twice.
                self._reused.inc()
                yield existing
                return
            self._raise_if_stop_requested(chunk)
            if self._budget is not None:  # max_enqueued_tokens: wait for room (costs/budget.py)
                receipt["input_tokens_estimate"] = self._budget.wait_for_token_budget(
                    chunk, self._adapter, lambda: self._raise_if_stop_requested(chunk)
                )
            # The intent is durable before the provider is called: if the run dies between
            # the provider accepting the batch and the receipt below, a resume finds it.
            intent = intent_path(rfile, chunk.chunk_id)
            receipt["intent_at_utc"] = receipt["submitted_at_utc"]
            write_durably(intent, receipt_line(receipt))
            del receipt["intent_at_utc"]
            crash_point("intent_written")
            raw = self._adapter.submit_chunk_lines(chunk.chunk_id, lines, self._config)
            crash_point("batch_created")
            result = self._adapter.parse_submission_result(raw)
            receipt["provider_batch_id"], receipt["status"] = (
                result.provider_batch_id,
                result.status,
            )
            if isinstance(raw, dict) and raw.get("mmirage_adoption"):
                receipt["adoption"] = raw["mmirage_adoption"]  # matched, not answered
            _LOG.info(
                "submitted %s (%d requests, %d bytes) as %s",
                chunk.chunk_id,
                len(lines),
                chunk.total_bytes,
                result.provider_batch_id,
            )
        write_durably(part, receipt_line(receipt))  # durable before anything is emitted
        crash_point("receipt_written")
        if intent is not None:
            from apache_beam.io.filesystems import FileSystems

            FileSystems.delete([intent])
        self._submitted.inc()
        self._submitted_requests.inc(len(lines))
        self._submitted_bytes.inc(chunk.total_bytes)
        yield receipt

    def _raise_if_stop_requested(self, chunk: Chunk) -> None:
        if self._stop_marker is None:
            return
        from apache_beam.io.filesystems import FileSystems

        from mmirage_beam.errors import RunStopped

        if FileSystems.exists(self._stop_marker):
            raise RunStopped(
                f"run {self._run_id} was asked to stop; chunk {chunk.chunk_id} was not submitted"
            )


class SubmitChunks(beam.PTransform):
    """PCollection[Chunk] -> ``SubmitChunksResult(receipts, export)``.

    Each chunk becomes one provider batch through the adapter (``submit_chunk_lines``:
    the exact serialised request bytes), and its receipt dict is written durably to
    ``<receipt file>.parts/<chunk_id>.json`` before it is emitted on ``receipts``. A chunk
    whose receipt part already exists (a retried bundle) is not submitted again.

    With ``dry_run=True`` nothing is contacted and no key is needed: receipts get
    ``provider_batch_id = "dry-run-<modality>-<chunk_id>"`` and ``status = "dry_run"``, and
    ``export`` carries, per chunk, the ``{"batch_id", "request"}`` JSONL bytes.

    Args:
        adapter_cls: the provider's BatchSubmissionAdapter subclass.
        provider_config: the processor's config (``provider``, ``base_url``, ...).
        run_id: the run's id, part of every receipt file name.
        receipts_base: ``metadata_output_path`` without ``.jsonl``.
        output_types: output name -> ``"plain" | "JSON"`` for the receipts' snapshot.
        invalid_row_count: optional singleton side input (int); when it is > 0 and
            ``skip_invalid_rows`` is false, no chunk is submitted (the validation barrier).
        attempt: the run's submission attempt (recorded in receipts).
        parent_run_id: for a resubmission, the run whose failures it re-sends.
        stop_marker: a path; once it exists (the launcher was asked to stop), no further
            chunk is submitted and the DoFn raises ``RunStopped`` instead.

    Just before a chunk goes to the provider, ``<receipt file>.parts/<chunk_id>.intent``
    is written; it is replaced by the receipt once the provider accepted the batch.

    Raises (on the worker):
        mmirage_beam.errors.CredentialsError: the key is missing on the worker.
        The SDK's API errors once its own retries are exhausted.
    """

    def __init__(
        self,
        adapter_cls: type,
        provider_config: BatchProviderConfig,
        run_id: str,
        receipts_base: str,
        output_types: dict[str, str],
        dry_run: bool = False,
        invalid_row_count: Optional[Any] = None,
        skip_invalid_rows: bool = False,
        attempt: int = 1,
        parent_run_id: Optional[str] = None,
        stop_marker: Optional[str] = None,
    ) -> None:
        super().__init__()
        self._fn = _SubmitChunkFn(
            adapter_cls,
            provider_config,
            run_id,
            receipts_base,
            output_types,
            dry_run,
            skip_invalid_rows,
            attempt,
            parent_run_id,
            stop_marker,
        )
        self._invalid = invalid_row_count

    def expand(self, chunks: beam.PCollection) -> SubmitChunksResult:
        kwargs = {}
        if self._invalid is not None:
            kwargs["invalid_row_count"] = self._invalid
        out = chunks | "Submit" >> beam.ParDo(self._fn, **kwargs).with_outputs(
            EXPORT_TAG, main="receipts"
        )
        return SubmitChunksResult(out.receipts, out[EXPORT_TAG])


class SubmitChunksResult(NamedTuple):
    receipts: beam.PCollection
    export: beam.PCollection
