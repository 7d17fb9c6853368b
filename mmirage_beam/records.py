"""Small immutable records that flow between the pipeline stages.

Every record carries ``source_index``: the 0-based position of its row in the
concatenation of the configured datasets (config order; JSONL counts non-blank lines,
Parquet/Arrow count row positions). Keys and fields are plain ints and strings so Beam's
coders stay deterministic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "SourceRow",
    "RowError",
    "BatchRequest",
    "Chunk",
    "ChunkRef",
]


class SourceRow(NamedTuple):
    """One row read from a dataset.

    Attributes:
        source_index: global 0-based row position (see module docstring).
        dataset_index: position of the dataset in ``loading_params.datasets``.
        row: the decoded row, a plain JSON-compatible ``dict``.
    """

    source_index: int
    dataset_index: int
    row: dict[str, Any]


class RowError(NamedTuple):
    """A row (or file region) that could not be turned into valid requests.

    Attributes:
        source_index: the row's source_index, or ``None`` when the row could not be
            delimited (e.g. a JSONL line that is not JSON still has one; a file that
            cannot be opened does not).
        dataset_path: the dataset's configured ``path``.
        input_name: the ``processing_params`` input or output concerned, if any.
        reason: a human-readable explanation naming what is wrong.
        location: where in the file (e.g. ``"line 17"``), if known.
    """

    source_index: int | None
    dataset_path: str
    input_name: str | None
    reason: str
    location: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class BatchRequest(NamedTuple):
    """One provider-ready request for one (row, output) pair.

    Attributes:
        custom_id: ``<output_name>-<modality>-<source_index>`` (see ``ids.custom_id``).
        source_index: the row the request was built from.
        output_name: the ``processing_params.outputs[*].name``.
        modality: ``"text"`` or ``"multimodal"``.
        line: the request serialised exactly as uploaded: compact UTF-8 JSON plus ``\\n``.
        nbytes: the request's size for chunking, in bytes: the adapter's
            ``estimate_request_bytes``, never less than ``len(line)`` (equal to it for the
            built-in adapters).
    """

    custom_id: str
    source_index: int
    output_name: str
    modality: str
    line: bytes
    nbytes: int


class Chunk(NamedTuple):
    """A byte- and count-bounded group of requests that becomes one provider batch.

    Attributes:
        chunk_id: ``<output_name>-chunk-<NNNNNN>``, unique within a run and modality.
        output_name: the output every request in the chunk belongs to.
        modality: ``"text"`` or ``"multimodal"``; never mixed within a chunk.
        requests: the requests, in arrival order.
        total_bytes: sum of the requests' ``nbytes``, in bytes.
        has_oversized_request: a single request larger than ``max_chunk_bytes``, isolated.
        flush_reason: ``"full_chunk"`` (next request would overflow bytes),
            ``"max_requests"`` (count limit reached), ``"oversized_request"``, or
            ``"end_of_input"``.
    """

    chunk_id: str
    output_name: str
    modality: str
    requests: tuple[BatchRequest, ...]
    total_bytes: int
    has_oversized_request: bool
    flush_reason: str


class ChunkRef(NamedTuple):
    """A chunk whose requests are staged in a file (see :mod:`mmirage_beam.run.staging`):
    what crosses the validation barrier instead of the requests themselves.

    Attributes:
        chunk_id: as :class:`Chunk`.
        output_name: the output every request in the chunk belongs to.
        modality: ``"text"`` or ``"multimodal"``.
        path: the staged file: the request lines exactly as uploaded, in chunk order;
            its metadata (custom_id, source_index, nbytes, line hash per request) is in
            ``staging.meta_path(path)``.
        request_count: the number of requests.
        total_bytes: sum of the requests' ``nbytes``, in bytes.
        request_hash: ``receipts.request_hash`` of the staged lines.
        has_oversized_request: as :class:`Chunk`.
        flush_reason: as :class:`Chunk`.
    """

    chunk_id: str
    output_name: str
    modality: str
    path: str
    request_count: int
    total_bytes: int
    request_hash: str
    has_oversized_request: bool
    flush_reason: str
