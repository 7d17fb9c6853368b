"""Group provider-ready requests into byte- and count-bounded chunks (one provider batch each).

``ChunkRequests`` keys every :class:`~mmirage_beam.records.BatchRequest` by
``(output_name, modality[, shard])`` and runs one stateful DoFn per key that buffers
requests greedily, in arrival order, until the next one would not fit. Memory is bounded by
one chunk per key and the work is linear in the number of requests: the running byte and
request counts live in state, the buffer is read once, when it is flushed.

The rule (see :func:`would_overflow`): a chunk's size is ``sum(request.nbytes) +
chunk_overhead_bytes`` and never exceeds ``max_chunk_bytes``; its request count never
exceeds ``max_requests_per_chunk``. A single request that cannot fit even alone is either
isolated in a chunk of its own (``has_oversized_request=True``) or rejected as a
:class:`~mmirage_beam.records.RowError`, according to ``oversized_request_policy``.
"""

from __future__ import annotations

import json
import logging
import zlib
from operator import itemgetter
from typing import Iterator, NamedTuple, Tuple

import apache_beam as beam
from apache_beam import coders
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection, TaggedOutput
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    TimerSpec,
    on_timer,
)

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.records import BatchRequest, Chunk, RowError

__all__ = [
    "FLUSH_END_OF_INPUT",
    "FLUSH_FULL_CHUNK",
    "FLUSH_MAX_REQUESTS",
    "FLUSH_OVERSIZED_REQUEST",
    "FLUSH_REASONS",
    "OVERSIZED_REQUEST_POLICIES",
    "ChunkRequests",
    "ChunkRequestsResult",
    "would_overflow",
]

_LOGGER = logging.getLogger(__name__)
_METRICS_NAMESPACE = "mmirage"

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


class ChunkRequestsResult(NamedTuple):
    """Outputs of :class:`ChunkRequests`.

    Attributes:
        chunks: ``PCollection[Chunk]``, every accepted request in exactly one chunk.
        rejected: ``PCollection[RowError]``, one per oversized request when
            ``oversized_request_policy`` is ``"reject"`` (empty otherwise).
    """

    chunks: PCollection
    rejected: PCollection


class _BatchRequestCoder(coders.Coder):
    """Deterministic coder for :class:`BatchRequest`, field by field (used for the buffer)."""

    def __init__(self) -> None:
        self._fields = coders.TupleCoder(
            [
                coders.StrUtf8Coder(),  # custom_id
                coders.VarIntCoder(),  # source_index
                coders.StrUtf8Coder(),  # output_name
                coders.StrUtf8Coder(),  # modality
                coders.BytesCoder(),  # line
                coders.VarIntCoder(),  # nbytes
            ]
        )

    def encode(self, value: BatchRequest) -> bytes:
        return self._fields.encode(tuple(value))

    def decode(self, encoded: bytes) -> BatchRequest:
        return BatchRequest(*self._fields.decode(encoded))

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self):
        return BatchRequest


def _shard_of(custom_id: str, shards_per_key: int) -> int:
    """Stable shard of a request (crc32, identical on every worker and every run)."""
    if shards_per_key == 1:
        return 0
    return zlib.crc32(custom_id.encode("utf-8")) % shards_per_key


def _encode_key(output_name: str, modality: str, shard: int) -> str:
    """A plain, unambiguous string key (deterministic coder) for one chunk stream."""
    return json.dumps([output_name, modality, shard], separators=(",", ":"))


def _keyed(request: BatchRequest, shards_per_key: int) -> tuple[str, BatchRequest]:
    shard = _shard_of(request.custom_id, shards_per_key)
    return _encode_key(request.output_name, request.modality, shard), request


def _decode_key(key: str) -> tuple[str, str, int]:
    output_name, modality, shard = json.loads(key)
    return output_name, modality, shard


def _chunk_id(
    output_name: str, seq: int, shard: int | None, attempt: int = 1, run_part: str = ""
) -> str:
    # "." cannot occur in an output name, so a later attempt or another data shard never
    # collides with another output's chunk ids.
    stem = output_name + run_part + ("" if attempt == 1 else f".a{attempt}")
    if shard is None:
        return f"{stem}-chunk-{seq:06d}"
    return f"{stem}-s{shard:03d}-chunk-{seq:06d}"


class _SumInt(beam.CombineFn):
    """Integer sum whose accumulator is an int, so state can use ``VarIntCoder``."""

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, accumulator: int, value: int) -> int:
        return accumulator + value

    def merge_accumulators(self, accumulators) -> int:
        return sum(accumulators)

    def extract_output(self, accumulator: int) -> int:
        return accumulator


# State and timer specs of _ChunkFn, declared once. They and their DoFn parameters live at
# module level so the parameters can be argument defaults of both process and the timer.
_BUFFER = BagStateSpec("buffer", coders.TupleCoder([coders.VarIntCoder(), _BatchRequestCoder()]))
_BUFFERED_BYTES = CombiningValueStateSpec("buffered_bytes", coders.VarIntCoder(), _SumInt())
_BUFFERED_COUNT = CombiningValueStateSpec("buffered_count", coders.VarIntCoder(), _SumInt())
_CHUNK_SEQ = CombiningValueStateSpec("chunk_seq", coders.VarIntCoder(), _SumInt())
_END_OF_INPUT = TimerSpec("end_of_input", TimeDomain.WATERMARK)

_BUFFER_PARAM = beam.DoFn.StateParam(_BUFFER)
_BUFFERED_BYTES_PARAM = beam.DoFn.StateParam(_BUFFERED_BYTES)
_BUFFERED_COUNT_PARAM = beam.DoFn.StateParam(_BUFFERED_COUNT)
_CHUNK_SEQ_PARAM = beam.DoFn.StateParam(_CHUNK_SEQ)
_END_OF_INPUT_PARAM = beam.DoFn.TimerParam(_END_OF_INPUT)


class _ChunkFn(beam.DoFn):
    """Stateful: ``(key, BatchRequest)`` -> ``Chunk`` (main) and ``RowError`` ("rejected").

    Per key, the buffer holds at most one chunk's worth of requests (tagged with their
    arrival position so the chunk keeps arrival order whatever order the bag returns). Every
    flush, from ``process`` or from the end-of-input timer, goes through :meth:`_flush`.
    """

    def __init__(
        self,
        max_chunk_bytes: int,
        max_requests_per_chunk: int | None,
        oversized_request_policy: str,
        chunk_overhead_bytes: int,
        shards_per_key: int,
        attempt: int = 1,
        run_part: str = "",
    ) -> None:
        self._run_part = run_part
        self._max_chunk_bytes = max_chunk_bytes
        self._max_requests_per_chunk = max_requests_per_chunk
        self._oversized_request_policy = oversized_request_policy
        self._chunk_overhead_bytes = chunk_overhead_bytes
        self._shards_per_key = shards_per_key
        self._attempt = attempt
        self._chunks = Metrics.counter(_METRICS_NAMESPACE, "chunks")
        self._chunk_bytes = Metrics.distribution(_METRICS_NAMESPACE, "chunk_bytes")
        self._chunked_requests = Metrics.counter(_METRICS_NAMESPACE, "chunked_requests")
        self._oversized_requests = Metrics.counter(_METRICS_NAMESPACE, "oversized_requests")
        self._rejected_requests = Metrics.counter(_METRICS_NAMESPACE, "rejected_oversized_requests")

    def process(
        self,
        element: tuple[str, BatchRequest],
        window=beam.DoFn.WindowParam,
        buffer=_BUFFER_PARAM,
        buffered_bytes=_BUFFERED_BYTES_PARAM,
        buffered_count=_BUFFERED_COUNT_PARAM,
        chunk_seq=_CHUNK_SEQ_PARAM,
        end_of_input=_END_OF_INPUT_PARAM,
    ) -> Iterator[Chunk | TaggedOutput]:
        key, request = element
        end_of_input.set(window.max_timestamp())
        buffer_state = (buffer, buffered_bytes, buffered_count)
        state = (*buffer_state, chunk_seq)

        if would_overflow(0, request.nbytes, self._max_chunk_bytes, self._chunk_overhead_bytes):
            self._oversized_requests.inc()
            if self._oversized_request_policy == "reject":
                self._rejected_requests.inc()
                _LOGGER.warning(
                    "Rejecting request %s: %d bytes (+%d overhead) > max_chunk_bytes=%d",
                    request.custom_id,
                    request.nbytes,
                    self._chunk_overhead_bytes,
                    self._max_chunk_bytes,
                )
                yield TaggedOutput(_REJECTED_TAG, self._rejection(request))
                return
            _LOGGER.warning(
                "Isolating request %s in its own chunk: %d bytes (+%d overhead) > "
                "max_chunk_bytes=%d",
                request.custom_id,
                request.nbytes,
                self._chunk_overhead_bytes,
                self._max_chunk_bytes,
            )
            yield from self._flush(key, FLUSH_FULL_CHUNK, *state)
            self._buffer_request(request, 0, *buffer_state)
            yield from self._flush(key, FLUSH_OVERSIZED_REQUEST, *state)
            return

        count = buffered_count.read()
        if count and would_overflow(
            buffered_bytes.read(),
            request.nbytes,
            self._max_chunk_bytes,
            self._chunk_overhead_bytes,
        ):
            yield from self._flush(key, FLUSH_FULL_CHUNK, *state)
            count = 0
        self._buffer_request(request, count, *buffer_state)
        count += 1
        if self._max_requests_per_chunk is not None and count >= self._max_requests_per_chunk:
            yield from self._flush(key, FLUSH_MAX_REQUESTS, *state)

    @on_timer(_END_OF_INPUT)
    def on_end_of_input(
        self,
        key=beam.DoFn.KeyParam,
        buffer=_BUFFER_PARAM,
        buffered_bytes=_BUFFERED_BYTES_PARAM,
        buffered_count=_BUFFERED_COUNT_PARAM,
        chunk_seq=_CHUNK_SEQ_PARAM,
    ) -> Iterator[Chunk]:
        yield from self._flush(
            key, FLUSH_END_OF_INPUT, buffer, buffered_bytes, buffered_count, chunk_seq
        )

    @staticmethod
    def _buffer_request(request, position, buffer, buffered_bytes, buffered_count):
        buffer.add((position, request))
        buffered_bytes.add(request.nbytes)
        buffered_count.add(1)

    def _flush(
        self, key, reason, buffer, buffered_bytes, buffered_count, chunk_seq
    ) -> Iterator[Chunk]:
        """Emit the buffered requests as one chunk (if any) and clear all buffer state."""
        entries = list(buffer.read())
        buffer.clear()
        buffered_bytes.clear()
        buffered_count.clear()
        if not entries:
            return
        entries.sort(key=itemgetter(0))
        requests = tuple(request for _, request in entries)
        seq = chunk_seq.read() + 1
        chunk_seq.add(1)

        output_name, modality, shard = _decode_key(key)
        total_bytes = sum(request.nbytes for request in requests)
        chunk = Chunk(
            chunk_id=_chunk_id(
                output_name,
                seq,
                shard if self._shards_per_key > 1 else None,
                self._attempt,
                self._run_part,
            ),
            output_name=output_name,
            modality=modality,
            requests=requests,
            total_bytes=total_bytes,
            has_oversized_request=reason == FLUSH_OVERSIZED_REQUEST,
            flush_reason=reason,
        )
        self._chunks.inc()
        self._chunked_requests.inc(len(requests))
        self._chunk_bytes.update(total_bytes)
        _LOGGER.debug(
            "Flushed chunk %s (%s): %d requests, %d bytes, reason %s",
            chunk.chunk_id,
            modality,
            len(requests),
            total_bytes,
            reason,
        )
        yield chunk

    def _rejection(self, request: BatchRequest) -> RowError:
        if self._chunk_overhead_bytes:
            size = (
                f"{request.nbytes} bytes (plus chunk_overhead_bytes={self._chunk_overhead_bytes})"
            )
        else:
            size = f"{request.nbytes} bytes"
        return RowError(
            source_index=request.source_index,
            dataset_path="",
            input_name=request.output_name,
            reason=(
                f"request {request.custom_id} is {size}, larger than "
                f"max_chunk_bytes={self._max_chunk_bytes} (oversized_request_policy: reject)"
            ),
        )


class ChunkRequests(beam.PTransform):
    """Group requests into byte- and count-bounded chunks, one per provider batch.

    Input: ``PCollection[BatchRequest]`` (any windowing; it is re-windowed into the global
    window so chunk ids are unique for the whole run). Output: :class:`ChunkRequestsResult`
    with ``chunks`` (``PCollection[Chunk]``) and ``rejected`` (``PCollection[RowError]``).

    Requests are grouped per ``(output_name, modality)``, so text and multimodal requests,
    and requests of different outputs, never share a chunk. Within a key, chunks are filled
    greedily in arrival order: a chunk is flushed with reason ``"full_chunk"`` when the next
    request would push ``sum(nbytes) + chunk_overhead_bytes`` past ``max_chunk_bytes``, with
    ``"max_requests"`` as soon as it holds ``max_requests_per_chunk`` requests, and with
    ``"end_of_input"`` for the remainder. No chunk is empty. ``Chunk.total_bytes`` is the
    sum of the requests' ``nbytes`` (the overhead is not included).

    A request whose ``nbytes + chunk_overhead_bytes`` exceeds ``max_chunk_bytes`` is, with
    policy ``"isolate"``, emitted alone (after flushing the current buffer) with
    ``has_oversized_request=True`` and reason ``"oversized_request"``; with ``"reject"`` it
    becomes a ``RowError`` on ``rejected`` and is in no chunk.

    Chunk ids are ``<output_name>-chunk-<NNNNNN>`` counted from 1 per key, or
    ``<output_name>-s<SSS>-chunk-<NNNNNN>`` when ``shards_per_key > 1``: unique per
    ``(output_name, modality)`` within the run. A resumed run's later attempts insert
    ``.a<attempt>`` after the output name, so no chunk id of a run is ever reused.

    Args:
        max_chunk_bytes: limit on a chunk's size, in bytes (> ``chunk_overhead_bytes``).
        max_requests_per_chunk: limit on a chunk's request count, or ``None`` for no limit.
        oversized_request_policy: ``"isolate"`` or ``"reject"``.
        chunk_overhead_bytes: fixed bytes per chunk counted against ``max_chunk_bytes``.
        shards_per_key: split each ``(output_name, modality)`` into this many independent
            chunk streams (by a stable hash of ``custom_id``) for parallelism; 1 keeps the
            greedy fill optimal.
        attempt: the run's submission attempt (1 for a fresh run, +1 per resume).
        run_part: inserted after the output name in chunk ids, e.g. ``".shard2of3"`` for
            one of ``num_shards`` data shards, so shards never share a chunk id.

    Raises:
        ConfigError: (a ``ValueError``) naming the offending argument when it has the wrong
            type or is out of range.
    """

    def __init__(
        self,
        max_chunk_bytes: int,
        max_requests_per_chunk: int | None,
        oversized_request_policy: str = "isolate",
        chunk_overhead_bytes: int = 0,
        shards_per_key: int = 1,
        label: str | None = None,
        attempt: int = 1,
        run_part: str = "",
    ) -> None:
        super().__init__(label)
        require_int("attempt", attempt, 1)
        self._attempt = attempt
        self._run_part = run_part
        require_int("max_chunk_bytes", max_chunk_bytes, 1)
        if max_requests_per_chunk is not None:
            require_int("max_requests_per_chunk", max_requests_per_chunk, 1)
        if oversized_request_policy not in OVERSIZED_REQUEST_POLICIES:
            raise ConfigError(
                "oversized_request_policy",
                f"must be one of {', '.join(OVERSIZED_REQUEST_POLICIES)}, "
                f"got {oversized_request_policy!r}",
            )
        require_int("chunk_overhead_bytes", chunk_overhead_bytes, 0)
        if chunk_overhead_bytes >= max_chunk_bytes:
            raise ConfigError(
                "chunk_overhead_bytes",
                f"must be smaller than max_chunk_bytes={max_chunk_bytes}, "
                f"got {chunk_overhead_bytes}",
            )
        require_int("shards_per_key", shards_per_key, 1)
        self._max_chunk_bytes = max_chunk_bytes
        self._max_requests_per_chunk = max_requests_per_chunk
        self._oversized_request_policy = oversized_request_policy
        self._chunk_overhead_bytes = chunk_overhead_bytes
        self._shards_per_key = shards_per_key

    def expand(self, requests: PCollection) -> ChunkRequestsResult:
        """``PCollection[BatchRequest]`` -> ``ChunkRequestsResult(chunks, rejected)``."""
        shards_per_key = self._shards_per_key
        outputs = (
            requests
            | "RewindowIntoGlobal" >> beam.WindowInto(beam_window.GlobalWindows())
            | "KeyByOutputAndModality"
            >> beam.Map(_keyed, shards_per_key).with_output_types(Tuple[str, BatchRequest])
            | "ChunkPerKey"
            >> beam.ParDo(
                _ChunkFn(
                    self._max_chunk_bytes,
                    self._max_requests_per_chunk,
                    self._oversized_request_policy,
                    self._chunk_overhead_bytes,
                    shards_per_key,
                    self._attempt,
                    self._run_part,
                )
            ).with_outputs(_REJECTED_TAG, main=_CHUNKS_TAG)
        )
        return ChunkRequestsResult(chunks=outputs[_CHUNKS_TAG], rejected=outputs[_REJECTED_TAG])
