"""SubmitChunks: one provider batch per chunk, a durable receipt per accepted batch.

    ChunkRef --SubmitChunks--> receipt dict (see :mod:`mmirage_beam.run.receipts`)
                          \\--> (batch_id, staged path) --WriteExport--> export file
                                (dry run only)

The adapter's client is built in the DoFn's ``setup()`` with credentials read from the
worker's environment; nothing secret is kept on the DoFn, so pickling it is safe.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, NamedTuple, Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.crashpoints import crash_point
from mmirage_beam.errors import RunStopped
from mmirage_beam.io.fs import replace_file, write_durably
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.providers.base import close_adapter, open_adapter
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.records import ChunkRef
from mmirage_beam.run.budget import token_budget_for
from mmirage_beam.run.layout import RunLayout, intent_path, part_path
from mmirage_beam.run.receipts import make_receipt, read_receipt_part, receipt_line, receipt_path
from mmirage_beam.run.staging import receipt_maps
from mmirage_beam.settings import SubmitSettings

__all__ = [
    "EXPORT_TAG",
    "SubmitChunks",
    "SubmitChunksResult",
    "WriteExport",
    "write_export",
]


_LOG = logging.getLogger(__name__)
EXPORT_TAG = "export"


class _SubmitChunkFn(beam.DoFn):
    def __init__(
        self,
        adapter_cls: type,
        provider_config: BatchProviderConfig,
        settings: SubmitSettings,
        receipts_base: str,
        output_types: dict[str, str],
        concurrency: int = 4,
    ) -> None:
        cap = adapter_cls.max_concurrent_submissions
        # A dry run waits on no provider: a chunk's receipt is CPU work the GIL runs one
        # at a time anyway, and one chunk at a time holds one receipt's maps, not four
        # (the 200,000-row dry run's peak RSS: 387 -> 320 MiB).
        self._concurrency = (
            1 if settings.dry_run else max(1, min(concurrency, cap) if cap else concurrency)
        )
        layout = RunLayout(receipts_base, settings.run_id)
        self._stop_marker = None if settings.dry_run else layout.stop_marker
        self._attempt = settings.attempt
        self._parent = settings.parent_run_id
        self._adapter_cls = adapter_cls
        self._config = provider_config
        self._run_id = settings.run_id
        self._base = receipts_base
        self._output_types = dict(output_types)
        self._dry_run = settings.dry_run
        self._skip_invalid = bool(settings.skip_invalid_rows)
        self._submitted = Metrics.counter(METRICS_NAMESPACE, "batches_submitted")
        self._reused = Metrics.counter(METRICS_NAMESPACE, "batches_already_receipted")
        self._blocked = Metrics.counter(METRICS_NAMESPACE, "chunks_not_submitted_invalid_rows")
        self._submitted_requests = Metrics.counter(METRICS_NAMESPACE, "requests_submitted")
        self._submitted_bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_submitted")

    def setup(self) -> None:
        self._budget = None
        if self._dry_run:
            self._adapter = self._adapter_cls()
            return
        self._budget = token_budget_for(self._config, self._base, self._run_id)

        self._adapter = open_adapter(self._adapter_cls, self._config, self._run_id)

    def teardown(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True)
        adapter = getattr(self, "_adapter", None)
        if not self._dry_run:
            close_adapter(adapter)

    def start_bundle(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(
            max_workers=self._concurrency, thread_name_prefix="mmirage-submit"
        )
        self._in_flight: list[Any] = []

    def process(
        self, chunk: ChunkRef, invalid_row_count: int = 0, token_estimate: Any = None
    ) -> Iterator[Any]:
        if invalid_row_count and not self._skip_invalid:
            self._blocked.inc()
            return
        # Up to ``concurrency`` chunks are uploaded and created at once; each writes its
        # own intent and receipt, and outputs are emitted here, on the DoFn's thread
        # (Beam's metrics and outputs are not thread-safe).
        while len(self._in_flight) >= self._concurrency:
            yield from self._collect(wait_for_one=True)
        self._in_flight.append(self._pool.submit(self._submit_one, chunk))
        yield from self._collect(wait_for_one=False)

    def finish_bundle(self) -> Iterator[Any]:
        from apache_beam.transforms.window import GlobalWindows

        try:
            while self._in_flight:
                for out in self._collect(wait_for_one=True):
                    if isinstance(out, pvalue.TaggedOutput):
                        yield pvalue.TaggedOutput(out.tag, GlobalWindows.windowed_value(out.value))
                    else:
                        yield GlobalWindows.windowed_value(out)
        finally:
            self._pool.shutdown(wait=True)

    def _collect(self, wait_for_one: bool) -> Iterator[Any]:
        """Emit the outputs of finished submissions; with ``wait_for_one``, wait for at
        least one. The first failure is raised once every submission in flight ended
        (their receipts are durable), so no accepted batch goes unrecorded."""
        from concurrent.futures import FIRST_COMPLETED, wait

        if not self._in_flight:
            return
        if wait_for_one:
            wait(self._in_flight, return_when=FIRST_COMPLETED)
        done = [f for f in self._in_flight if f.done()]
        failed = [f for f in done if f.exception() is not None]
        if failed:
            wait(self._in_flight)
            done = list(self._in_flight)
        self._in_flight = [f for f in self._in_flight if f not in done]
        for f in done:
            if f.exception() is None:
                yield from self._emit(*f.result())
        if failed:
            raise failed[0].exception()

    def _emit(
        self, receipt: dict[str, Any], export: Optional[tuple[str, str]], reused: bool
    ) -> Any:
        if reused:
            self._reused.inc()
            yield receipt
            return
        if export is not None:
            yield pvalue.TaggedOutput(EXPORT_TAG, export)
        self._submitted.inc()
        self._submitted_requests.inc(receipt["submitted_request_count"])
        self._submitted_bytes.inc(receipt["total_bytes"])
        yield receipt

    def _submit_one(
        self, chunk: ChunkRef
    ) -> tuple[dict[str, Any], Optional[tuple[str, str]], bool]:
        """Submit (or, in a dry run, receipt) one staged chunk: ``(receipt, (batch_id,
        staged path) in a dry run else None, whether the receipt existed already)``. Runs
        on a pool thread."""
        rfile = receipt_path(self._base, chunk.modality, self._run_id, self._dry_run)
        part = part_path(rfile, chunk.chunk_id)
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
            maps=receipt_maps(chunk.path),
        )
        intent = None
        export = None
        if self._dry_run:
            receipt["provider_batch_id"] = f"dry-run-{chunk.modality}-{chunk.chunk_id}"
            receipt["status"] = "dry_run"
            # exported from the staged file itself, by WriteExport (no copy here)
            export = (f"{chunk.modality}-{chunk.chunk_id}", chunk.path)
        else:
            existing = read_receipt_part(part)
            if existing is not None:
                if existing.get("request_hash") != receipt["request_hash"]:
                    raise RuntimeError(
                        f"chunk id {chunk.chunk_id} of run {self._run_id} already has a receipt "
                        "for different requests; refusing to submit"
                    )
                # A retried bundle: this chunk was already accepted; never submit twice.
                return existing, None, True
            self._raise_if_stop_requested(chunk)
            if self._budget is not None:  # max_enqueued_tokens: wait for room (run/budget.py)
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
            batch = self._adapter.submit_staged_chunk(chunk.chunk_id, chunk.path, self._config)
            crash_point("batch_created")
            receipt["provider_batch_id"], receipt["status"] = batch.batch_id, batch.status
            if batch.adoption:
                receipt["adoption"] = dict(batch.adoption)  # matched, not answered
            _LOG.info(
                "submitted %s (%d requests, %d bytes) as %s",
                chunk.chunk_id,
                chunk.request_count,
                chunk.total_bytes,
                batch.batch_id,
            )
        write_durably(part, receipt_line(receipt))  # durable before anything is emitted
        crash_point("receipt_written")
        if intent is not None:
            from apache_beam.io.filesystems import FileSystems

            FileSystems.delete([intent])
        return receipt, export, False

    def _raise_if_stop_requested(self, chunk: ChunkRef) -> None:
        if self._stop_marker is None:
            return
        from apache_beam.io.filesystems import FileSystems

        if FileSystems.exists(self._stop_marker):
            raise RunStopped(
                f"run {self._run_id} was asked to stop; chunk {chunk.chunk_id} was not submitted"
            )


class SubmitChunks(beam.PTransform):
    """PCollection[ChunkRef] -> ``SubmitChunksResult(receipts, export)``.

    Each staged chunk (:mod:`mmirage_beam.run.staging`) becomes one provider batch through
    the adapter (``submit_chunk_file``: the staged file uploaded as it is, so the bytes
    sent are the bytes ``request_hash`` covers), and its receipt dict is written durably to
    ``<receipt file>.parts/<chunk_id>.json`` before it is emitted on ``receipts``. A chunk
    whose receipt part already exists (a retried bundle) is not submitted again.

    In a dry run (``settings.export_prompts`` set) nothing is contacted and no key is
    needed: receipts get ``provider_batch_id = "dry-run-<modality>-<chunk_id>"`` and
    ``status = "dry_run"``, and ``export`` carries, per chunk, ``(batch_id, staged
    path)`` (``batch_id`` is ``<modality>-<chunk_id>``): :class:`WriteExport` writes the
    export file from the staged files themselves.

    Up to ``concurrency`` chunks of a bundle are uploaded and created at the same time
    (the provider's limits on batch creation are far above that: PROVIDERS.md); a dry
    run receipts one chunk at a time (no provider call to overlap, and one receipt's
    memory instead of ``concurrency``).

    Args:
        adapter_cls: the provider's BatchSubmissionAdapter subclass.
        provider_config: the processor's config (``provider``, ``base_url``, ...).
        settings: the run's :class:`~mmirage_beam.settings.SubmitSettings`: ``run_id``
            (part of every receipt file name), ``export_prompts`` (a dry run),
            ``skip_invalid_rows`` (None: False), ``attempt`` and ``parent_run_id``
            (recorded in receipts). Its custom_id sets are not read (nor pickled).
        receipts_base: ``metadata_output_path`` without ``.jsonl``.
        output_types: output name -> ``"plain" | "JSON"`` for the receipts' snapshot.
        invalid_row_count: optional singleton side input (int); when it is > 0 and
            ``skip_invalid_rows`` is false, no chunk is submitted (the validation barrier).
        concurrency: chunks submitted at once per bundle (>= 1; default 4), capped by
            the adapter's ``max_concurrent_submissions`` (Anthropic: 1).
        token_estimate: optional singleton side input (``dict[str, int]``, the run's
            token counters, see :mod:`mmirage_beam.costs.tokens`): no chunk is submitted
            before it is computed, so the step that announces the estimate
            (:func:`mmirage_beam.progress.announce_estimate`) runs first.

    A submission checks the run's stop marker (``<receipts_base>.stop.<run_id>``) before
    each chunk: once it exists (the launcher was asked to stop), no further chunk is
    submitted and the DoFn raises ``RunStopped`` instead.

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
        settings: SubmitSettings,
        receipts_base: str,
        output_types: dict[str, str],
        invalid_row_count: Optional[Any] = None,
        concurrency: int = 4,
        token_estimate: Optional[Any] = None,
    ) -> None:
        super().__init__()
        self._fn = _SubmitChunkFn(
            adapter_cls,
            provider_config,
            settings.for_submit_step(),
            receipts_base,
            output_types,
            concurrency,
        )
        self._invalid = invalid_row_count
        self._token_estimate = token_estimate

    def expand(self, chunks: beam.PCollection) -> SubmitChunksResult:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(chunks)  # every SDK worker imports the package at start-up
        kwargs = {}
        if self._invalid is not None:
            kwargs["invalid_row_count"] = self._invalid
        if self._token_estimate is not None:
            kwargs["token_estimate"] = self._token_estimate
        out = chunks | "Submit" >> beam.ParDo(self._fn, **kwargs).with_outputs(
            EXPORT_TAG, main="receipts"
        )
        return SubmitChunksResult(out.receipts, out[EXPORT_TAG])


class SubmitChunksResult(NamedTuple):
    receipts: beam.PCollection
    export: beam.PCollection


def _export_prefix(batch_id: str) -> bytes:
    """The bytes before a request in an export line: ``{"batch_id":"<id>","request":``."""
    return b'{"batch_id":"' + batch_id.encode() + b'","request":'


def write_export(
    parts: Iterable[tuple[str, str]], output_path: str, block_bytes: int = 1 << 20
) -> None:
    """Write the dry run's export from staged chunk files, in the order given, atomically.

    Each ``(batch_id, staged path)`` contributes one line per staged request line,
    ``{"batch_id":"<batch_id>","request":<line without "\\n">}`` + ``"\\n"``: the staged
    bytes streamed ``block_bytes`` (1 MiB) at a time, each block's lines wrapped by one
    ``bytes.replace`` (no per-line work), into ``<output_path>.tmp-export``, then renamed
    over ``output_path``. Works on every Beam filesystem.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: a staged file cannot be read or
        the export written.
    """
    from apache_beam.io.filesystems import FileSystems

    from mmirage_beam.run.staging import open_staged

    tmp = f"{output_path}.tmp-export"
    with FileSystems.create(tmp) as out:
        for batch_id, path in parts:
            prefix = _export_prefix(batch_id)
            between = b"}\n" + prefix
            rest = b""
            with open_staged(path) as f:
                while True:
                    block = f.read(block_bytes)
                    if not block:
                        break
                    block = rest + block if rest else block
                    cut = block.rfind(b"\n") + 1
                    rest = block[cut:]
                    if cut:
                        out.write(prefix + block[: cut - 1].replace(b"\n", between) + b"}\n")
            if rest:  # a last line without "\n" (the stager always ends one)
                out.write(prefix + rest + b"}\n")
    replace_file(tmp, output_path)


class _WriteExportFn(beam.DoFn):
    """Impulse, side input: every ``(batch_id, staged path)`` -> the export file (nothing
    when there is no chunk), chunks in the order of ``<batch_id>.jsonl``."""

    def __init__(self, output_path: str) -> None:
        self._out = output_path

    def process(self, _impulse: bytes, parts: list[tuple[str, str]]) -> Iterator[str]:
        by_id = dict(parts)  # a chunk receipted twice (a retried bundle) is exported once
        if not by_id:
            return
        write_export(sorted(by_id.items(), key=lambda kv: f"{kv[0]}.jsonl"), self._out)
        yield self._out


class WriteExport(beam.PTransform):
    """``PCollection[tuple[str, str]]`` (``SubmitChunksResult.export``: batch_id, staged
    path) -> ``PCollection[str]`` holding ``output_path`` once written.

    One step, once every chunk is receipted (its input is a side input of an Impulse),
    writes the dry run's export with :func:`write_export` straight from the staged chunk
    files, in the order of ``<modality>-<chunk_id>.jsonl``: no export part per chunk and
    no second copy. Writes nothing when there is no chunk.

    Args:
        output_path: the export file (``run/layout.export_file_for``), a Beam path.

    Raises:
        ValueError: ``output_path`` is empty.
    """

    def __init__(self, output_path: str) -> None:
        super().__init__()
        if not output_path:
            raise ValueError("output_path must not be empty")
        self._path = output_path

    def expand(self, exports: beam.PCollection) -> beam.PCollection:
        return (
            exports.pipeline
            | "Once" >> beam.Impulse()
            | "Write" >> beam.ParDo(_WriteExportFn(self._path), beam.pvalue.AsList(exports))
        )
