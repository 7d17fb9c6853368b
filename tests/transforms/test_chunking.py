"""Tests for mmirage_beam.transforms.chunking (ChunkRequests and its stateful _ChunkFn).

Streaming tests feed one TestStream sequence (one bundle, one key order) and assert exact
chunks; batch tests (beam.Create, whose order the runner may change) assert invariants
that hold for any arrival order.
"""

from __future__ import annotations

import random
import re
import uuid
import zlib
from collections import Counter, defaultdict

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing import test_pipeline, test_stream
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from mmirage_beam.errors import ConfigError
from mmirage_beam.records import BatchRequest, Chunk, ChunkRef, RowError
from mmirage_beam.transforms.chunking import (
    FLUSH_REASONS,
    ChunkRequests,
    ChunkRequestsResult,
    load_chunk,
    would_overflow,
)


def make_request(
    source_index: int, nbytes: int, output_name: str = "out", modality: str = "text"
) -> BatchRequest:
    """A BatchRequest whose ``line`` is exactly ``nbytes`` bytes: a JSON string (staged
    chunks are hashed as JSON, like every built request), newline-terminated."""
    assert nbytes >= 2
    line = (b'"' + b"x" * (nbytes - 3) + b'"' if nbytes >= 3 else b"0") + b"\n"
    assert len(line) == nbytes
    return BatchRequest(
        custom_id=f"{output_name}-{modality}-{source_index}",
        source_index=source_index,
        output_name=output_name,
        modality=modality,
        line=line,
        nbytes=nbytes,
    )


def summarize(chunk: Chunk) -> tuple:
    """A comparable view of a chunk: id, custom ids in order, bytes, oversized, reason."""
    if isinstance(chunk, ChunkRef):
        chunk = load_chunk(chunk)
    return (
        chunk.chunk_id,
        tuple(r.custom_id for r in chunk.requests),
        chunk.total_bytes,
        chunk.has_oversized_request,
        chunk.flush_reason,
    )


def streaming_pipeline() -> test_pipeline.TestPipeline:
    return test_pipeline.TestPipeline(options=StandardOptions(streaming=True))


def stream_of(requests: list[BatchRequest]) -> test_stream.TestStream:
    """All requests in one TestStream sequence, then the watermark to +inf (final flush)."""
    return test_stream.TestStream().add_elements(list(requests)).advance_watermark_to_infinity()


# The legacy DirectRunner that runs streaming pipelines delivers the outputs of an
# end-of-window timer after assert_that has already fired for the global window, so
# assert_that misses the final "end_of_input" chunks (apache/beam#18987, BEAM-5295). As
# Beam's own userstate tests do, streaming tests record outputs in-process and assert
# after the run. The streaming DirectRunner executes in this process, so this works.
_RECORDED: dict[str, list] = defaultdict(list)


class _Record(beam.DoFn):
    def __init__(self, tag: str) -> None:
        self._tag = tag

    def process(self, element):
        _RECORDED[self._tag].append(element)


def run_stream(requests: list[BatchRequest], **chunk_args) -> tuple[list[Chunk], list[RowError]]:
    """Run ChunkRequests on one TestStream sequence; return (chunks, rejected)."""
    tag = uuid.uuid4().hex
    with streaming_pipeline() as p:
        result = p | stream_of(requests) | ChunkRequests(**chunk_args)
        (
            result.chunks
            | "LoadChunks" >> beam.Map(load_chunk)
            | "RecordChunks" >> beam.ParDo(_Record(f"{tag}/chunks"))
        )
        result.rejected | "RecordRejected" >> beam.ParDo(_Record(f"{tag}/rejected"))
    return _RECORDED.pop(f"{tag}/chunks", []), _RECORDED.pop(f"{tag}/rejected", [])


def check_stream(requests, expected_chunks, expected_rejected=(), **chunk_args):
    """Exact chunks (order of requests inside each chunk included) and rejects."""
    chunks, rejected = run_stream(requests, **chunk_args)
    assert sorted(summarize(c) for c in chunks) == sorted(expected_chunks)
    assert sorted(rejected) == sorted(expected_rejected)


def ids(*indices: int, output_name: str = "out", modality: str = "text") -> tuple[str, ...]:
    return tuple(f"{output_name}-{modality}-{i}" for i in indices)


# --------------------------------------------------------------------------------------
# would_overflow and argument validation
# --------------------------------------------------------------------------------------


def test_would_overflow_exact_boundary_fits():
    assert not would_overflow(60, 40, max_chunk_bytes=100)
    assert would_overflow(60, 41, max_chunk_bytes=100)
    assert not would_overflow(0, 100, max_chunk_bytes=100)
    assert would_overflow(0, 101, max_chunk_bytes=100)


def test_would_overflow_counts_overhead():
    assert not would_overflow(50, 40, max_chunk_bytes=100, chunk_overhead_bytes=10)
    assert would_overflow(50, 41, max_chunk_bytes=100, chunk_overhead_bytes=10)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"max_chunk_bytes": 0, "max_requests_per_chunk": None}, "max_chunk_bytes"),
        ({"max_chunk_bytes": -5, "max_requests_per_chunk": None}, "max_chunk_bytes"),
        ({"max_chunk_bytes": "100", "max_requests_per_chunk": None}, "max_chunk_bytes"),
        ({"max_chunk_bytes": 1.5, "max_requests_per_chunk": None}, "max_chunk_bytes"),
        ({"max_chunk_bytes": True, "max_requests_per_chunk": None}, "max_chunk_bytes"),
        ({"max_chunk_bytes": 100, "max_requests_per_chunk": 0}, "max_requests_per_chunk"),
        ({"max_chunk_bytes": 100, "max_requests_per_chunk": "10"}, "max_requests_per_chunk"),
        (
            {
                "max_chunk_bytes": 100,
                "max_requests_per_chunk": None,
                "oversized_request_policy": "drop",
            },
            "oversized_request_policy",
        ),
        (
            {"max_chunk_bytes": 100, "max_requests_per_chunk": None, "chunk_overhead_bytes": -1},
            "chunk_overhead_bytes",
        ),
        (
            {"max_chunk_bytes": 100, "max_requests_per_chunk": None, "chunk_overhead_bytes": 100},
            "chunk_overhead_bytes",
        ),
        (
            {"max_chunk_bytes": 100, "max_requests_per_chunk": None, "shards_per_key": 0},
            "shards_per_key",
        ),
    ],
)
def test_invalid_arguments_raise_value_error_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument) as excinfo:
        ChunkRequests(**kwargs)
    assert isinstance(excinfo.value, ConfigError)
    assert excinfo.value.key == argument


def test_valid_arguments_are_accepted():
    ChunkRequests(1, None)
    ChunkRequests(52_428_800, 50_000, "reject", chunk_overhead_bytes=1024, shards_per_key=8)


# --------------------------------------------------------------------------------------
# Exact chunks on a single TestStream sequence (streaming, watermark timer final flush)
# --------------------------------------------------------------------------------------


def test_byte_limit_greedy_fill_in_arrival_order():
    sizes = [40, 40, 30, 60, 50, 50, 10]
    requests = [make_request(i, n) for i, n in enumerate(sizes)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(0, 1), 80, False, "full_chunk"),
            ("out-chunk-000002", ids(2, 3), 90, False, "full_chunk"),
            ("out-chunk-000003", ids(4, 5), 100, False, "full_chunk"),
            ("out-chunk-000004", ids(6), 10, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
    )


def test_exact_boundary_fits_and_one_more_byte_starts_a_new_chunk():
    fits = [make_request(0, 50, "fits"), make_request(1, 50, "fits")]
    spills = [make_request(0, 50, "spills"), make_request(1, 51, "spills")]
    check_stream(
        fits + spills,
        [
            ("fits-chunk-000001", ids(0, 1, output_name="fits"), 100, False, "end_of_input"),
            ("spills-chunk-000001", ids(0, output_name="spills"), 50, False, "full_chunk"),
            ("spills-chunk-000002", ids(1, output_name="spills"), 51, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
    )


def test_chunk_overhead_bytes_are_counted_against_the_limit():
    # 45 + 45 + 10 overhead == 100 fits; 45 + 46 + 10 does not; 91 + 10 is oversized.
    requests = [
        make_request(0, 45, "a"),
        make_request(1, 45, "a"),
        make_request(0, 45, "b"),
        make_request(1, 46, "b"),
        make_request(0, 90, "c"),
        make_request(1, 91, "c"),
    ]
    check_stream(
        requests,
        [
            ("a-chunk-000001", ids(0, 1, output_name="a"), 90, False, "end_of_input"),
            ("b-chunk-000001", ids(0, output_name="b"), 45, False, "full_chunk"),
            ("b-chunk-000002", ids(1, output_name="b"), 46, False, "end_of_input"),
            ("c-chunk-000001", ids(1, output_name="c"), 91, True, "oversized_request"),
            ("c-chunk-000002", ids(0, output_name="c"), 90, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
        chunk_overhead_bytes=10,
    )


def test_count_limit_flushes_with_max_requests():
    requests = [make_request(i, 10) for i in range(7)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(0, 1, 2), 30, False, "max_requests"),
            ("out-chunk-000002", ids(3, 4, 5), 30, False, "max_requests"),
            ("out-chunk-000003", ids(6), 10, False, "end_of_input"),
        ],
        max_chunk_bytes=1000,
        max_requests_per_chunk=3,
    )


def test_count_and_byte_limits_together_and_no_empty_final_chunk():
    # 30+30+30 -> max_requests; 50+50 -> +10 overflows bytes; 10+10+10 -> max_requests; nothing
    # is left at end of input, so no end_of_input chunk is emitted.
    sizes = [30, 30, 30, 50, 50, 10, 10, 10]
    requests = [make_request(i, n) for i, n in enumerate(sizes)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(0, 1, 2), 90, False, "max_requests"),
            ("out-chunk-000002", ids(3, 4), 100, False, "full_chunk"),
            ("out-chunk-000003", ids(5, 6, 7), 30, False, "max_requests"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=3,
    )


def test_isolate_oversized_request_in_the_middle_of_a_stream():
    """The oversized request is alone; the others fill chunks as if it were not there."""
    sizes = [30, 30, 500, 30, 30]
    requests = [make_request(i, n) for i, n in enumerate(sizes)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(2), 500, True, "oversized_request"),
            ("out-chunk-000002", ids(0, 1, 3), 90, False, "full_chunk"),
            ("out-chunk-000003", ids(4), 30, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
        oversized_request_policy="isolate",
    )


def test_isolating_a_request_does_not_split_the_others():
    """Issue 38: the rows before an oversized one were closed into a chunk of their own
    (3 chunks here); they share one with the rows after it (2 chunks)."""
    sizes = [30, 500, 30, 30]
    requests = [make_request(i, n) for i, n in enumerate(sizes)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(1), 500, True, "oversized_request"),
            ("out-chunk-000002", ids(0, 2, 3), 90, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
    )


def test_isolate_with_empty_buffer_emits_no_empty_chunk():
    requests = [make_request(0, 500), make_request(1, 501), make_request(2, 20)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(0), 500, True, "oversized_request"),
            ("out-chunk-000002", ids(1), 501, True, "oversized_request"),
            ("out-chunk-000003", ids(2), 20, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
    )


def test_reject_oversized_request_goes_to_rejected_and_in_no_chunk():
    sizes = [30, 30, 500, 30, 30]
    requests = [make_request(i, n) for i, n in enumerate(sizes)]
    check_stream(
        requests,
        [
            ("out-chunk-000001", ids(0, 1, 3), 90, False, "full_chunk"),
            ("out-chunk-000002", ids(4), 30, False, "end_of_input"),
        ],
        expected_rejected=[
            RowError(
                source_index=2,
                dataset_path="",
                input_name="out",
                reason=(
                    "request out-text-2 is 500 bytes, larger than max_chunk_bytes=100 "
                    "(oversized_request_policy: reject)"
                ),
            )
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
        oversized_request_policy="reject",
    )


def test_reject_message_mentions_overhead_when_it_makes_the_request_oversized():
    requests = [make_request(0, 95)]
    check_stream(
        requests,
        [],
        expected_rejected=[
            RowError(
                source_index=0,
                dataset_path="",
                input_name="out",
                reason=(
                    "request out-text-0 is 95 bytes (plus chunk_overhead_bytes=10), larger "
                    "than max_chunk_bytes=100 (oversized_request_policy: reject)"
                ),
            )
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
        oversized_request_policy="reject",
        chunk_overhead_bytes=10,
    )


def test_text_and_multimodal_of_the_same_output_never_share_a_chunk():
    requests = []
    for i in range(6):
        requests.append(make_request(i, 10, "caption", "text"))
        requests.append(make_request(i, 10, "caption", "multimodal"))
    text = dict(output_name="caption", modality="text")
    multi = dict(output_name="caption", modality="multimodal")
    expected = [
        ("caption-chunk-000001", ids(0, 1, 2, 3, **text), 40, False, "max_requests"),
        ("caption-chunk-000002", ids(4, 5, **text), 20, False, "end_of_input"),
        ("caption-chunk-000001", ids(0, 1, 2, 3, **multi), 40, False, "max_requests"),
        ("caption-chunk-000002", ids(4, 5, **multi), 20, False, "end_of_input"),
    ]
    chunks, rejected = run_stream(requests, max_chunk_bytes=1000, max_requests_per_chunk=4)
    assert sorted((c.modality, summarize(c)) for c in chunks) == sorted(
        [("text", e) for e in expected[:2]] + [("multimodal", e) for e in expected[2:]]
    )
    assert all({r.modality for r in c.requests} == {c.modality} for c in chunks)
    assert rejected == []


def test_two_outputs_are_chunked_separately():
    requests = []
    for i in range(5):
        requests.append(make_request(i, 40, "question", "text"))
        requests.append(make_request(i, 40, "answer", "text"))
    q = dict(output_name="question")
    a = dict(output_name="answer")
    check_stream(
        requests,
        [
            ("question-chunk-000001", ids(0, 1, **q), 80, False, "full_chunk"),
            ("question-chunk-000002", ids(2, 3, **q), 80, False, "full_chunk"),
            ("question-chunk-000003", ids(4, **q), 40, False, "end_of_input"),
            ("answer-chunk-000001", ids(0, 1, **a), 80, False, "full_chunk"),
            ("answer-chunk-000002", ids(2, 3, **a), 80, False, "full_chunk"),
            ("answer-chunk-000003", ids(4, **a), 40, False, "end_of_input"),
        ],
        max_chunk_bytes=100,
        max_requests_per_chunk=None,
    )


def test_result_is_a_named_tuple_of_pcollections_batch():
    with test_pipeline.TestPipeline() as p:
        result = p | beam.Create([make_request(0, 10)]) | ChunkRequests(100, None)
        assert isinstance(result, ChunkRequestsResult)
        assert isinstance(result.chunks, beam.pvalue.PCollection)
        assert isinstance(result.rejected, beam.pvalue.PCollection)
        chunks, rejected = result
        assert_that(
            chunks | beam.Map(summarize),
            equal_to([("out-chunk-000001", ids(0), 10, False, "end_of_input")]),
            label="CheckChunks",
        )
        assert_that(rejected, equal_to([]), label="CheckNoRejects")


def test_equal_sized_requests_batch_exact_chunks():
    """Equal sizes make the chunking independent of the (runner-chosen) arrival order."""
    requests = [make_request(i, 30) for i in range(10)]
    requests += [make_request(i, 30, "other", "multimodal") for i in range(4)]
    requests += [make_request(99, 150)]  # oversized, rejected
    with test_pipeline.TestPipeline() as p:
        result = (
            p | beam.Create(requests) | ChunkRequests(100, None, oversized_request_policy="reject")
        )
        assert_that(
            result.chunks
            | "LoadChunks" >> beam.Map(load_chunk)
            | "Shape"
            >> beam.Map(
                lambda c: (c.chunk_id, c.modality, len(c.requests), c.total_bytes, c.flush_reason)
            ),
            equal_to(
                [
                    ("out-chunk-000001", "text", 3, 90, "full_chunk"),
                    ("out-chunk-000002", "text", 3, 90, "full_chunk"),
                    ("out-chunk-000003", "text", 3, 90, "full_chunk"),
                    ("out-chunk-000004", "text", 1, 30, "end_of_input"),
                    ("other-chunk-000001", "multimodal", 3, 90, "full_chunk"),
                    ("other-chunk-000002", "multimodal", 1, 30, "end_of_input"),
                ]
            ),
            label="CheckChunkShapes",
        )
        assert_that(
            result.chunks
            | "LoadMembers" >> beam.Map(load_chunk)
            | "Members" >> beam.FlatMap(lambda c: [r.custom_id for r in c.requests]),
            equal_to([r.custom_id for r in requests[:-1]]),
            label="CheckEveryRequestOnce",
        )
        assert_that(
            result.rejected | "RejectedIds" >> beam.Map(lambda e: (e.source_index, e.input_name)),
            equal_to([(99, "out")]),
            label="CheckRejected",
        )


# --------------------------------------------------------------------------------------
# Invariants over thousands of requests (batch pipeline; arrival order is the runner's)
# --------------------------------------------------------------------------------------

_CHUNK_ID = re.compile(r"^(?P<output>.+?)(?:-s(?P<shard>\d{3}))?-chunk-(?P<seq>\d{6})$")


def check_chunk_invariants(
    requests: list[BatchRequest],
    *,
    max_chunk_bytes: int,
    max_requests_per_chunk: int | None,
    oversized_request_policy: str = "isolate",
    chunk_overhead_bytes: int = 0,
    shards_per_key: int = 1,
):
    """A matcher for ``assert_that`` over ``(chunks, rejected_custom_ids)`` as one list."""

    def is_oversized(r: BatchRequest) -> bool:
        return r.nbytes + chunk_overhead_bytes > max_chunk_bytes

    def check(actual):
        chunks = [c for kind, c in actual if kind == "chunk"]
        rejected = [e for kind, e in actual if kind == "rejected"]
        failures = []

        # No loss, no duplication.
        expected_ids = Counter(r.custom_id for r in requests)
        seen = Counter(r.custom_id for c in chunks for r in c.requests)
        rejected_ids = Counter(e.reason.split()[1] for e in rejected)
        if seen + rejected_ids != expected_ids:
            failures.append("requests lost or duplicated")
        if any(n > 1 for n in (seen + rejected_ids).values()):
            failures.append("a request appears twice")
        if oversized_request_policy == "reject":
            want = Counter(r.custom_id for r in requests if is_oversized(r))
            if rejected_ids != want:
                failures.append("rejected != oversized requests")
        elif rejected:
            failures.append("isolate policy rejected something")

        # Per chunk.
        by_key = defaultdict(list)
        for c in chunks:
            m = _CHUNK_ID.match(c.chunk_id)
            if not m or m["output"] != c.output_name:
                failures.append(f"bad chunk id {c.chunk_id}")
                continue
            shard = m["shard"]
            if (shard is None) != (shards_per_key == 1):
                failures.append(f"shard part wrong in {c.chunk_id}")
            by_key[(c.output_name, c.modality, shard)].append((int(m["seq"]), c))
            if not c.requests:
                failures.append(f"empty chunk {c.chunk_id}")
            if c.flush_reason not in FLUSH_REASONS:
                failures.append(f"unknown reason {c.flush_reason}")
            if c.total_bytes != sum(r.nbytes for r in c.requests):
                failures.append(f"total_bytes wrong in {c.chunk_id}")
            if any((r.output_name, r.modality) != (c.output_name, c.modality) for r in c.requests):
                failures.append(f"mixed output/modality in {c.chunk_id}")
            if shard is not None and any(
                zlib.crc32(r.custom_id.encode()) % shards_per_key != int(shard) for r in c.requests
            ):
                failures.append(f"request in the wrong shard in {c.chunk_id}")
            if max_requests_per_chunk is not None and len(c.requests) > max_requests_per_chunk:
                failures.append(f"too many requests in {c.chunk_id}")
            if c.has_oversized_request:
                if (
                    c.flush_reason != "oversized_request"
                    or len(c.requests) != 1
                    or not is_oversized(c.requests[0])
                ):
                    failures.append(f"bad oversized chunk {c.chunk_id}")
            else:
                if c.flush_reason == "oversized_request":
                    failures.append(f"oversized reason without flag in {c.chunk_id}")
                if c.total_bytes + chunk_overhead_bytes > max_chunk_bytes:
                    failures.append(f"{c.chunk_id} exceeds max_chunk_bytes")
            if c.flush_reason == "max_requests" and len(c.requests) != max_requests_per_chunk:
                failures.append(f"max_requests flush below the limit in {c.chunk_id}")

        # Per key: ids unique, sequential from 1; end_of_input only last; greedy fill.
        for key, numbered in by_key.items():
            numbered.sort(key=lambda t: t[0])
            if [seq for seq, _ in numbered] != list(range(1, len(numbered) + 1)):
                failures.append(f"chunk sequence of {key} is not 1..n")
            for position, (_, c) in enumerate(numbered):
                last = position == len(numbered) - 1
                if c.flush_reason == "end_of_input" and not last:
                    failures.append(f"end_of_input before the end in {c.chunk_id}")
                if c.flush_reason == "full_chunk":
                    if last:
                        failures.append(f"full_chunk is the last chunk of {key}")
                        continue
                    nxt = numbered[position + 1][1].requests[0]
                    # The next chunk starts with the request that did not fit.
                    if not would_overflow_ref(c.total_bytes, nxt.nbytes):
                        failures.append(f"{c.chunk_id} flushed although the next request fit")

        if failures:
            raise BeamAssertException("; ".join(sorted(set(failures))[:20]))

    def would_overflow_ref(current, nbytes):
        return current + nbytes + chunk_overhead_bytes > max_chunk_bytes

    return check


def random_requests(count: int, seed: int, oversized_every: int = 0) -> list[BatchRequest]:
    rng = random.Random(seed)
    outputs = ["rewrite", "caption", "q"]
    modalities = ["text", "multimodal"]
    requests = []
    for i in range(count):
        nbytes = rng.randint(2, 900)  # the smallest JSON line: "0\n"
        if oversized_every and i % oversized_every == oversized_every // 2:
            nbytes = rng.randint(5001, 20000)
        requests.append(make_request(i, nbytes, rng.choice(outputs), rng.choice(modalities)))
    return requests


def tag_outputs(result: ChunkRequestsResult):
    return (
        result.chunks
        | "LoadTagged" >> beam.Map(load_chunk)
        | "TagChunks" >> beam.Map(lambda c: ("chunk", c)),
        result.rejected | "TagRejected" >> beam.Map(lambda e: ("rejected", e)),
    ) | "Together" >> beam.Flatten()


def run_batch_invariants(requests, **chunk_args):
    with test_pipeline.TestPipeline() as p:
        result = p | beam.Create(requests) | ChunkRequests(**chunk_args)
        assert_that(
            tag_outputs(result), check_chunk_invariants(requests, **chunk_args), label="Invariants"
        )


@pytest.mark.parametrize(
    "chunk_args",
    [
        dict(max_chunk_bytes=5000, max_requests_per_chunk=None),
        dict(max_chunk_bytes=5000, max_requests_per_chunk=7),
        dict(max_chunk_bytes=5000, max_requests_per_chunk=50, chunk_overhead_bytes=300),
        dict(max_chunk_bytes=5000, max_requests_per_chunk=None, oversized_request_policy="reject"),
        dict(max_chunk_bytes=5000, max_requests_per_chunk=20, shards_per_key=4),
        dict(
            max_chunk_bytes=5000,
            max_requests_per_chunk=None,
            oversized_request_policy="reject",
            shards_per_key=3,
            chunk_overhead_bytes=100,
        ),
    ],
    ids=["bytes", "bytes+count", "overhead", "reject", "shards", "shards+reject+overhead"],
)
def test_thousands_of_requests_batch_invariants(chunk_args):
    run_batch_invariants(random_requests(3000, seed=7, oversized_every=97), **chunk_args)


@pytest.mark.parametrize("policy", ["isolate", "reject"])
def test_thousands_of_requests_streaming_invariants(policy):
    requests = random_requests(2000, seed=11, oversized_every=101)
    chunk_args = dict(
        max_chunk_bytes=5000, max_requests_per_chunk=25, oversized_request_policy=policy
    )
    chunks, rejected = run_stream(requests, **chunk_args)
    check = check_chunk_invariants(requests, **chunk_args)
    check([("chunk", c) for c in chunks] + [("rejected", e) for e in rejected])


def test_streaming_greedy_fill_matches_a_sequential_reference():
    """One TestStream sequence: chunks equal a plain-Python greedy pass, per key."""
    requests = random_requests(1500, seed=5, oversized_every=53)
    max_chunk_bytes, max_requests, overhead = 4000, 9, 64
    expected = []
    buffers: dict[tuple[str, str], list[BatchRequest]] = defaultdict(list)
    seqs: Counter = Counter()

    def flush(key, reason, reqs=None):
        if reqs is not None or buffers[key]:
            seqs[key] += 1
            reqs = tuple(buffers.pop(key)) if reqs is None else reqs
            total = sum(r.nbytes for r in reqs)
            chunk_id = f"{key[0]}-chunk-{seqs[key]:06d}"
            expected.append(
                (
                    chunk_id,
                    tuple(r.custom_id for r in reqs),
                    total,
                    reason == "oversized_request",
                    reason,
                )
            )

    for r in requests:
        key = (r.output_name, r.modality)
        if r.nbytes + overhead > max_chunk_bytes:  # alone; the buffer goes on filling
            flush(key, "oversized_request", (r,))
            continue
        if (
            buffers[key]
            and sum(x.nbytes for x in buffers[key]) + r.nbytes + overhead > max_chunk_bytes
        ):
            flush(key, "full_chunk")
        buffers[key].append(r)
        if len(buffers[key]) == max_requests:
            flush(key, "max_requests")
    for key in list(buffers):
        flush(key, "end_of_input")

    check_stream(
        requests,
        expected,
        max_chunk_bytes=max_chunk_bytes,
        max_requests_per_chunk=max_requests,
        chunk_overhead_bytes=overhead,
    )


def test_shards_per_key_ids_and_membership():
    requests = [make_request(i, 10) for i in range(40)]
    by_shard = defaultdict(list)
    for r in requests:
        by_shard[zlib.crc32(r.custom_id.encode()) % 3].append(r.custom_id)
    assert len(by_shard) == 3
    expected = sorted(
        (f"out-s{shard:03d}-chunk-000001", tuple(cids)) for shard, cids in by_shard.items()
    )
    chunks, _ = run_stream(
        requests, max_chunk_bytes=10_000, max_requests_per_chunk=None, shards_per_key=3
    )
    assert sorted((c.chunk_id, tuple(r.custom_id for r in c.requests)) for c in chunks) == expected


def test_metrics_are_reported():
    requests = [make_request(i, 40) for i in range(5)] + [make_request(5, 500)]
    pipeline = test_pipeline.TestPipeline()
    result = pipeline | beam.Create(requests) | ChunkRequests(100, None)
    assert_that(result.chunks | beam.Map(lambda c: c.request_count), equal_to([2, 2, 1, 1]))
    run = pipeline.run()
    run.wait_until_finish()
    counters = {
        m.key.metric.name: m.committed
        for m in run.metrics().query(MetricsFilter().with_namespace("mmirage"))["counters"]
    }
    assert counters["chunks"] == 4
    assert counters["chunked_requests"] == 6
    assert counters["oversized_requests"] == 1
    distributions = run.metrics().query(MetricsFilter().with_name("chunk_bytes"))["distributions"]
    assert distributions and distributions[0].committed.sum == 700
    assert distributions[0].committed.count == 4
