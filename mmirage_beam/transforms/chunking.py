"""Group provider-ready requests into byte- and count-bounded chunks (one provider batch each).

``ChunkRequests`` keys every :class:`~mmirage_beam.records.BatchRequest` by
``(output_name, modality[, shard])`` and fills chunks greedily, in arrival order, until
the next request would not fit, in two steps:

1. fused with the stage that builds the requests, each bundle streams every key's
   requests into a staged file (:mod:`mmirage_beam.run.staging`), emitting a small reference
   for every full chunk and, when the bundle ends, for what is left of each key (a
   fragment);
2. one stateful DoFn per key numbers the chunks and merges the fragments of all bundles
   greedily, request by request (only references and counts live in state; a chunk made
   of several fragments is written once into a new staged file).

No request crosses a stage boundary, so memory stays bounded by one line per key per
bundle plus one chunk's metadata, whatever the dataset's size; the work is linear in the
number of requests. Each bundle may end with one partly filled chunk per key that is
merged with others, so chunk boundaries depend on bundles, never the limits. Step 1 and
the rule it shares with step 2 are in :mod:`mmirage_beam.transforms.stage_chunks`.

The rule (see :func:`would_overflow`): a chunk's size is ``sum(request.nbytes) +
chunk_overhead_bytes`` and never exceeds ``max_chunk_bytes``; its request count never
exceeds ``max_requests_per_chunk``. A single request that cannot fit even alone is either
isolated in a chunk of its own (``has_oversized_request=True``) or rejected as a
:class:`~mmirage_beam.records.RowError`, according to ``oversized_request_policy``.
"""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Any, Iterator, NamedTuple, Tuple

import apache_beam as beam
from apache_beam import coders
from apache_beam.metrics import Metrics
from apache_beam.pvalue import PCollection
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    CombiningValueStateSpec,
    TimerSpec,
    on_timer,
)

from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.records import BatchRequest, Chunk, ChunkRef
from mmirage_beam.run.staging import StagedChunkWriter, iter_lines, iter_meta, new_stem, read_meta
from mmirage_beam.transforms import stage_chunks
from mmirage_beam.transforms.stage_chunks import *  # noqa: F403 (re-exported, see __all__)
from mmirage_beam.transforms.stage_chunks import (
    _CHUNKS_TAG,
    _REJECTED_TAG,
    FLUSH_END_OF_INPUT,
    FLUSH_FULL_CHUNK,
    FLUSH_MAX_REQUESTS,
    FLUSH_OVERSIZED_REQUEST,
    OVERSIZED_REQUEST_POLICIES,
    _ChunkingSettings,
    _decode_key,
    _StageChunksFn,
    _Staged,
    would_overflow,
)

_LOGGER = logging.getLogger(__name__)

# the stager's public names (flush reasons, policies, would_overflow), re-exported
__all__ = [
    *stage_chunks.__all__,
    "ChunkRequests",
    "ChunkRequestsResult",
    "load_chunk",
]


class ChunkRequestsResult(NamedTuple):
    """Outputs of :class:`ChunkRequests`.

    Attributes:
        chunks: ``PCollection[ChunkRef]``, every accepted request in exactly one chunk
            (staged; :func:`load_chunk` reads one back as a :class:`Chunk`).
        rejected: ``PCollection[RowError]``, one per oversized request when
            ``oversized_request_policy`` is ``"reject"`` (empty otherwise).
    """

    chunks: PCollection
    rejected: PCollection


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


_PENDING = BagStateSpec("pending", coders.PickleCoder())
_PENDING_BYTES = CombiningValueStateSpec("pending_bytes", coders.VarIntCoder(), _SumInt())
_PENDING_COUNT = CombiningValueStateSpec("pending_count", coders.VarIntCoder(), _SumInt())
_ARRIVALS = CombiningValueStateSpec("arrivals", coders.VarIntCoder(), _SumInt())
_CHUNK_SEQ = CombiningValueStateSpec("chunk_seq", coders.VarIntCoder(), _SumInt())
_END_OF_INPUT = TimerSpec("end_of_input", TimeDomain.WATERMARK)

_PENDING_PARAM = beam.DoFn.StateParam(_PENDING)
_PENDING_BYTES_PARAM = beam.DoFn.StateParam(_PENDING_BYTES)
_PENDING_COUNT_PARAM = beam.DoFn.StateParam(_PENDING_COUNT)
_ARRIVALS_PARAM = beam.DoFn.StateParam(_ARRIVALS)
_CHUNK_SEQ_PARAM = beam.DoFn.StateParam(_CHUNK_SEQ)
_END_OF_INPUT_PARAM = beam.DoFn.TimerParam(_END_OF_INPUT)


class _ChunkFn(beam.DoFn):
    """Stateful: ``(key, _Staged)`` -> ``ChunkRef``, numbered per key.

    A complete chunk from the stager is numbered and emitted as it is. Fragments are
    merged greedily, request by request in arrival order, with the same rule as the
    stager (:func:`would_overflow`, ``max_requests_per_chunk``): state holds only
    references to the pending runs of staged lines (never the requests), and their byte
    and request counts. A chunk made of several runs is written once, streamed, into a
    new staged file; a run that is a whole staged file becomes a chunk without a copy.
    """

    def __init__(self, settings: _ChunkingSettings, attempt: int = 1, run_part: str = "") -> None:
        self._s = settings
        self._run_part = run_part
        self._attempt = attempt
        self._chunks = Metrics.counter(METRICS_NAMESPACE, "chunks")
        self._chunk_bytes = Metrics.distribution(METRICS_NAMESPACE, "chunk_bytes")
        self._chunked_requests = Metrics.counter(METRICS_NAMESPACE, "chunked_requests")

    def process(
        self,
        element: tuple[str, _Staged],
        window=beam.DoFn.WindowParam,
        pending=_PENDING_PARAM,
        pending_bytes=_PENDING_BYTES_PARAM,
        pending_count=_PENDING_COUNT_PARAM,
        arrivals=_ARRIVALS_PARAM,
        chunk_seq=_CHUNK_SEQ_PARAM,
        end_of_input=_END_OF_INPUT_PARAM,
    ) -> Iterator[ChunkRef]:
        key, staged = element
        end_of_input.set(window.max_timestamp())
        state = (pending, pending_bytes, pending_count, chunk_seq)
        if staged.flush_reason:  # a complete chunk; an oversized request's alone, while
            # the pending fragments wait for more (issue 38: they were flushed early)
            yield self._emit(key, [staged], staged.flush_reason, chunk_seq)
            return
        metas = read_meta(staged.path, staged.start, staged.end)
        held_bytes, held_count = pending_bytes.read(), pending_count.read()
        seg_start, seg_bytes = 0, 0
        for j, meta in enumerate(metas):
            if (held_count or j > seg_start) and would_overflow(
                held_bytes + seg_bytes,
                meta.nbytes,
                self._s.max_chunk_bytes,
                self._s.chunk_overhead_bytes,
            ):
                run = self._run(staged, seg_start, j, seg_bytes)
                yield from self._flush(key, FLUSH_FULL_CHUNK, *state, extra=run)
                held_bytes, held_count, seg_start, seg_bytes = 0, 0, j, 0
            seg_bytes += meta.nbytes
            if (
                self._s.max_requests_per_chunk is not None
                and held_count + (j + 1 - seg_start) >= self._s.max_requests_per_chunk
            ):
                run = self._run(staged, seg_start, j + 1, seg_bytes)
                yield from self._flush(key, FLUSH_MAX_REQUESTS, *state, extra=run)
                held_bytes, held_count, seg_start, seg_bytes = 0, 0, j + 1, 0
        if seg_start < len(metas):
            run = self._run(staged, seg_start, len(metas), seg_bytes)
            position = arrivals.read()
            arrivals.add(1)
            pending.add((position, run))
            pending_bytes.add(run.total_bytes)
            pending_count.add(run.request_count)

    @staticmethod
    def _run(staged: _Staged, start: int, end: int, total_bytes: int) -> _Staged:
        """Requests ``start``-``end`` (relative to ``staged``) as a run of the same file."""
        whole = start == 0 and end == staged.request_count
        return _Staged(
            staged.path,
            staged.start + start,
            staged.start + end,
            total_bytes,
            staged.request_hash if whole else "",
            "",
        )

    @on_timer(_END_OF_INPUT)
    def on_end_of_input(
        self,
        key=beam.DoFn.KeyParam,
        pending=_PENDING_PARAM,
        pending_bytes=_PENDING_BYTES_PARAM,
        pending_count=_PENDING_COUNT_PARAM,
        chunk_seq=_CHUNK_SEQ_PARAM,
    ) -> Iterator[ChunkRef]:
        yield from self._flush(
            key, FLUSH_END_OF_INPUT, pending, pending_bytes, pending_count, chunk_seq
        )

    def _flush(
        self, key, reason, pending, pending_bytes, pending_count, chunk_seq, extra=None
    ) -> Iterator[ChunkRef]:
        """Emit the pending runs (plus ``extra``) as one chunk, if any; clear the state."""
        entries = sorted(pending.read(), key=itemgetter(0))
        pending.clear()
        pending_bytes.clear()
        pending_count.clear()
        runs = [run for _, run in entries]
        if extra is not None and extra.request_count:
            runs.append(extra)
        if runs:
            yield self._emit(key, runs, reason, chunk_seq)

    def _emit(self, key: str, runs: list[_Staged], reason: str, chunk_seq) -> ChunkRef:
        seq = chunk_seq.read() + 1
        chunk_seq.add(1)
        output_name, modality, shard = _decode_key(key)
        if len(runs) == 1 and runs[0].request_hash:
            path, count = runs[0].path, runs[0].request_count
            total_bytes, digest = runs[0].total_bytes, runs[0].request_hash
        else:
            writer = StagedChunkWriter(new_stem(self._s.staging_dir, "chunk"))
            try:
                for run in runs:
                    metas = iter_meta(run.path, run.start, run.end)
                    for line, meta in zip(iter_lines(run.path, run.start, run.end), metas):
                        writer.write_staged(line, meta)
            except BaseException:
                writer.abort()
                raise
            digest = writer.close()
            path, count, total_bytes = writer.path, writer.request_count, writer.total_bytes
        ref = ChunkRef(
            chunk_id=_chunk_id(
                output_name,
                seq,
                shard if self._s.shards_per_key > 1 else None,
                self._attempt,
                self._run_part,
            ),
            output_name=output_name,
            modality=modality,
            path=path,
            request_count=count,
            total_bytes=total_bytes,
            request_hash=digest,
            has_oversized_request=reason == FLUSH_OVERSIZED_REQUEST,
            flush_reason=reason,
        )
        self._chunks.inc()
        self._chunked_requests.inc(count)
        self._chunk_bytes.update(total_bytes)
        _LOGGER.debug(
            "Flushed chunk %s (%s): %d requests, %d bytes, reason %s",
            ref.chunk_id,
            modality,
            count,
            total_bytes,
            reason,
        )
        return ref


def load_chunk(ref: ChunkRef) -> Chunk:
    """The staged chunk ``ref`` read back as a :class:`Chunk` (its requests in memory:
    for tests and small chunks)."""
    metas = read_meta(ref.path)
    requests = tuple(
        BatchRequest(m.custom_id, m.source_index, ref.output_name, ref.modality, line, m.nbytes)
        for line, m in zip(iter_lines(ref.path), metas)
    )
    return Chunk(
        ref.chunk_id,
        ref.output_name,
        ref.modality,
        requests,
        ref.total_bytes,
        ref.has_oversized_request,
        ref.flush_reason,
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
    policy ``"isolate"``, emitted alone (the requests gathered so far go on filling theirs) with
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
        staging_dir: where the staged chunk files go (any Beam filesystem path every
            worker can reach; ``mmirage run`` uses ``<base>.staged.<run_id>``). Default:
            a new local temp folder, for runners whose workers share this machine.

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
        staging_dir: str | None = None,
    ) -> None:
        super().__init__(label)
        if staging_dir is None:
            import tempfile

            staging_dir = tempfile.mkdtemp(prefix="mmirage-staged-")
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
        self._settings = _ChunkingSettings(
            max_chunk_bytes,
            max_requests_per_chunk,
            oversized_request_policy,
            chunk_overhead_bytes,
            shards_per_key,
            staging_dir,
        )

    def expand(self, requests: PCollection) -> ChunkRequestsResult:
        """``PCollection[BatchRequest]`` -> ``ChunkRequestsResult(chunks, rejected)``."""
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(requests)  # every SDK worker imports the package at start-up
        if not requests.windowing.is_default():
            # Already in the global window with the default trigger (a batch read), the
            # re-windowing changes nothing and costs a step per request (about 6% of a
            # dry run on the DirectRunner).
            requests = requests | "RewindowIntoGlobal" >> beam.WindowInto(
                beam_window.GlobalWindows()
            )
        staged = requests | "StageChunks" >> beam.ParDo(
            _StageChunksFn(self._settings)
        ).with_outputs(_REJECTED_TAG, main=_CHUNKS_TAG)
        chunks = (
            staged[_CHUNKS_TAG]
            # A fusion break before the stateful step (only chunk references cross it):
            # Beam's FnApiRunner (DirectRunner, multi_processing, the Python job service)
            # would fuse the step into the stage that reads, renders and stages, and runs
            # a stage holding a stateful step on one worker, whatever the worker count.
            | "SpreadRefs" >> beam.Reshuffle()
            # A str key: the stateful step's key coder is deterministic.
            | "TypedKeys" >> beam.Map(lambda kv: kv).with_output_types(Tuple[str, Any])
            | "ChunkPerKey" >> beam.ParDo(_ChunkFn(self._settings, self._attempt, self._run_part))
        )
        return ChunkRequestsResult(chunks=chunks, rejected=staged[_REJECTED_TAG])
