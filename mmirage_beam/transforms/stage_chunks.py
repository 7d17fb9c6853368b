"""Step 1 of :class:`~mmirage_beam.transforms.chunking.ChunkRequests`: each bundle stages
its requests, per ``(output_name, modality[, shard])`` key, into chunk files.

Fused with the stage that builds the requests, :class:`_StageChunksFn` streams every
key's requests into a staged file (:mod:`mmirage_beam.run.staging`), emitting a small
reference (:class:`_Staged`) for every full chunk and, when the bundle ends, for what is
left of each key (a fragment). The chunk rule they and the stateful step share
(:func:`would_overflow`, the flush reasons, the oversized-request policies) is here too.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any, Iterator, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms.window import GlobalWindows

from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.records import BatchRequest, RowError
from mmirage_beam.run.staging import StagedChunkWriter, new_stem

__all__ = [
    "FLUSH_END_OF_INPUT",
    "FLUSH_FULL_CHUNK",
    "FLUSH_MAX_REQUESTS",
    "FLUSH_OVERSIZED_REQUEST",
    "FLUSH_REASONS",
    "OVERSIZED_REQUEST_POLICIES",
    "would_overflow",
]

_LOGGER = logging.getLogger(__name__)

#: Accepted values of ``oversized_request_policy``.
OVERSIZED_REQUEST_POLICIES = ("isolate", "reject")

FLUSH_FULL_CHUNK = "full_chunk"
FLUSH_MAX_REQUESTS = "max_requests"
FLUSH_OVERSIZED_REQUEST = "oversized_request"
FLUSH_END_OF_INPUT = "end_of_input"
#: Every ``Chunk.flush_reason`` this module emits.
FLUSH_REASONS = (FLUSH_FULL_CHUNK, FLUSH_MAX_REQUESTS, FLUSH_OVERSIZED_REQUEST, FLUSH_END_OF_INPUT)

_CHUNKS_TAG = "chunks"
_REJECTED_TAG = "rejected"


def would_overflow(
    current_bytes: int,
    request_nbytes: int,
    max_chunk_bytes: int,
    chunk_overhead_bytes: int = 0,
) -> bool:
    """Whether adding a request to a chunk would make it larger than ``max_chunk_bytes``.

    The single statement of the byte rule, used both for "does the next request still fit
    in the buffer" (``current_bytes`` = bytes already buffered) and for "is this request
    oversized" (``current_bytes=0``).

    Args:
        current_bytes: sum of ``nbytes`` of the requests already in the chunk, in bytes.
        request_nbytes: ``nbytes`` of the candidate request, in bytes.
        max_chunk_bytes: the limit on a chunk's size, in bytes.
        chunk_overhead_bytes: fixed per-chunk bytes counted on top of the requests.

    Returns:
        ``True`` when ``current_bytes + request_nbytes + chunk_overhead_bytes`` exceeds
        ``max_chunk_bytes`` (a chunk of exactly ``max_chunk_bytes`` fits).
    """
    return current_bytes + request_nbytes + chunk_overhead_bytes > max_chunk_bytes


def _shard_of(custom_id: str, shards_per_key: int) -> int:
    """Stable shard of a request (crc32, identical on every worker and every run)."""
    if shards_per_key == 1:
        return 0
    return zlib.crc32(custom_id.encode("utf-8")) % shards_per_key


def _encode_key(output_name: str, modality: str, shard: int) -> str:
    """A plain, unambiguous string key (deterministic coder) for one chunk stream."""
    return json.dumps([output_name, modality, shard], separators=(",", ":"))


def _decode_key(key: str) -> tuple[str, str, int]:
    output_name, modality, shard = json.loads(key)
    return output_name, modality, shard


class _Staged(NamedTuple):
    """A run of staged requests: lines ``start`` to ``end`` of the staged file ``path``.

    From the per-bundle stager, either a complete chunk (``flush_reason`` set, the whole
    file, ``request_hash`` known) or a fragment (``flush_reason`` empty): the requests a
    bundle had left for a key when it finished, merged across bundles by the stateful
    step.
    """

    path: str
    start: int
    end: int
    total_bytes: int
    request_hash: str
    flush_reason: str

    @property
    def request_count(self) -> int:
        return self.end - self.start


class _ChunkingSettings(NamedTuple):
    """How :class:`~mmirage_beam.transforms.chunking.ChunkRequests` chunks, checked
    there (the meaning of each is documented there); the stager
    (:class:`_StageChunksFn`) and the chunker (``_ChunkFn``) apply the same ones."""

    max_chunk_bytes: int
    max_requests_per_chunk: int | None
    oversized_request_policy: str
    chunk_overhead_bytes: int
    shards_per_key: int
    staging_dir: str


class _StageChunksFn(beam.DoFn):
    """``BatchRequest`` -> ``(key, _Staged)`` (main) and ``RowError`` ("rejected").

    Per bundle and key, requests stream straight into an open staged file, greedily in
    arrival order; a full chunk is closed and emitted at once, the remainder of each key
    as a fragment when the bundle finishes. Memory: one line at a time per key.
    """

    def __init__(self, settings: _ChunkingSettings) -> None:
        self._s = settings
        self._oversized_requests = Metrics.counter(METRICS_NAMESPACE, "oversized_requests")
        self._rejected_requests = Metrics.counter(METRICS_NAMESPACE, "rejected_oversized_requests")

    def setup(self) -> None:
        self._keys: dict[tuple[str, str, int], str] = {}

    def start_bundle(self) -> None:
        self._open: dict[str, StagedChunkWriter] = {}

    def _close(self, key: str, reason: str) -> tuple[str, _Staged] | None:
        writer = self._open.pop(key, None)
        if writer is None:
            return None
        digest = writer.close()
        return key, _Staged(
            writer.path, 0, writer.request_count, writer.total_bytes, digest, reason
        )

    def _writer(self, key: str) -> StagedChunkWriter:
        writer = self._open.get(key)
        if writer is None:
            writer = StagedChunkWriter(new_stem(self._s.staging_dir, "staged"))
            self._open[key] = writer
        return writer

    def process(self, request: BatchRequest) -> Iterator[Any]:
        stream = (
            request.output_name,
            request.modality,
            _shard_of(request.custom_id, self._s.shards_per_key),
        )
        key = self._keys.get(stream)
        if key is None:  # encoded once per stream, not per request
            key = self._keys[stream] = _encode_key(*stream)
        if would_overflow(0, request.nbytes, self._s.max_chunk_bytes, self._s.chunk_overhead_bytes):
            self._oversized_requests.inc()
            if self._s.oversized_request_policy == "reject":
                self._rejected_requests.inc()
                _LOGGER.warning(
                    "Rejecting request %s: %d bytes (+%d overhead) > max_chunk_bytes=%d",
                    request.custom_id,
                    request.nbytes,
                    self._s.chunk_overhead_bytes,
                    self._s.max_chunk_bytes,
                )
                yield TaggedOutput(_REJECTED_TAG, _rejection(request, self._s))
                return
            _LOGGER.warning(
                "Isolating request %s in its own chunk: %d bytes (+%d overhead) > "
                "max_chunk_bytes=%d",
                request.custom_id,
                request.nbytes,
                self._s.chunk_overhead_bytes,
                self._s.max_chunk_bytes,
            )
            # alone in a staged file of its own: the requests being gathered stay open,
            # not cut in two chunks around it (issue 38)
            lone = StagedChunkWriter(new_stem(self._s.staging_dir, "staged"))
            lone.write(
                request.custom_id,
                request.source_index,
                request.line,
                request.nbytes,
                request.canonical,
            )
            digest = lone.close()
            yield (
                key,
                _Staged(
                    lone.path,
                    0,
                    lone.request_count,
                    lone.total_bytes,
                    digest,
                    FLUSH_OVERSIZED_REQUEST,
                ),
            )
            return
        writer = self._open.get(key)
        if writer is not None and would_overflow(
            writer.total_bytes,
            request.nbytes,
            self._s.max_chunk_bytes,
            self._s.chunk_overhead_bytes,
        ):
            yield self._close(key, FLUSH_FULL_CHUNK)
        writer = self._writer(key)
        writer.write(
            request.custom_id, request.source_index, request.line, request.nbytes, request.canonical
        )
        if (
            self._s.max_requests_per_chunk is not None
            and writer.request_count >= self._s.max_requests_per_chunk
        ):
            yield self._close(key, FLUSH_MAX_REQUESTS)

    def finish_bundle(self) -> Iterator[Any]:
        for key in sorted(self._open):
            closed = self._close(key, "")
            if closed is not None:
                yield GlobalWindows.windowed_value(closed)


# State and timer specs of _ChunkFn, declared once. They and their DoFn parameters live at
# module level so the parameters can be argument defaults of both process and the timer.
def _rejection(request: BatchRequest, settings: _ChunkingSettings) -> RowError:
    overhead, limit = settings.chunk_overhead_bytes, settings.max_chunk_bytes
    if overhead:
        size = f"{request.nbytes} bytes (plus chunk_overhead_bytes={overhead})"
    else:
        size = f"{request.nbytes} bytes"
    return RowError(
        source_index=request.source_index,
        dataset_path="",
        input_name=request.output_name,
        reason=(
            f"request {request.custom_id} is {size}, larger than "
            f"max_chunk_bytes={limit} (oversized_request_policy: reject)"
        ),
    )
