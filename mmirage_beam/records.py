"""Small immutable records that flow between the pipeline stages.

Every row record carries ``source_index``: the 0-based position of its row in the
concatenation of the configured datasets (config order; JSONL counts non-blank lines,
Parquet/Arrow count row positions). Keys and fields are plain ints and strings so Beam's
coders stay deterministic.

:class:`ProviderResult` and :class:`ResultError` are one provider result line after the
adapter's normaliser (``normalise_result_line`` / ``normalise_result``), following
Beam's ``PredictionResult``: NamedTuples with ``to_json`` / ``from_json`` for the neutral
dict shape plugins may still return. Both are registered with Beam's ``RowCoder``, so a
PCollection typed with them is encoded field by field, deterministically.
"""

# No ``from __future__ import annotations``: Beam reads the field types of the NamedTuples
# (RowCoder schemas), which must be real types, not strings.
import sys
from typing import Any, Mapping, NamedTuple, Optional, TypedDict, Union

__all__ = [
    "register_coders",
    "ErrorJson",
    "ResultJson",
    "RowErrorJson",
    "ResultError",
    "ProviderResult",
    "provider_result",
    "ExpectedRequest",
    "RebuiltRequest",
    "ChunkRequestLine",
    "ChangedRow",
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


class RowErrorJson(TypedDict):
    """A :class:`RowError` as the invalid-rows file holds it (:meth:`RowError.to_json`)."""

    source_index: Optional[int]
    dataset_path: str
    input_name: Optional[str]
    reason: str
    location: Optional[str]


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

    def to_json(self) -> RowErrorJson:
        return RowErrorJson(**self._asdict())


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
        canonical: the request's canonical JSON (sorted keys, compact, ASCII escapes),
            the bytes ``request_hash`` and ``request_hashes`` cover, when BuildRequests
            encoded it from the request dict; None: derived from ``line`` when needed
            (``run/staging.canonical``).
    """

    custom_id: str
    source_index: int
    output_name: str
    modality: str
    line: bytes
    nbytes: int
    canonical: Optional[bytes] = None


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


class ErrorJson(TypedDict, total=False):
    """The neutral dict of a :class:`ResultError` (:meth:`ResultError.to_json`):
    ``type``, ``message`` and ``status_code`` always; ``retryable`` in the error of one
    merge outcome (merged rows' ``mmirage_errors``, ``OUT.errors.jsonl``); ``raw_text``,
    ``code`` and ``param`` only when set."""

    type: str
    message: str
    status_code: Optional[int]
    retryable: bool
    raw_text: str
    code: str
    param: str


class ResultError(NamedTuple):
    """Why one provider result is not a usable answer: the one error record every
    adapter and the shared result rules build.

    Attributes:
        type: the outcome type: the provider's error type or code (``rate_limit_exceeded``,
            ``invalid_request_error``, ...) or one of :mod:`mmirage_beam.results`'
            (``malformed_response``, ``refusal``, ``truncated``, ``content_filter``,
            ``empty``).
        message: a human-readable explanation (``""`` when the provider gave none).
        status_code: the HTTP status of the provider's answer (an int; 200 for an answer
            that is not usable), or None when the line carries none.
        raw_text: the provider's own text (a refusal, a cut answer), or None.
        code: the provider's error ``code`` beside its type (OpenAI), or None.
        param: the request parameter the provider's error names (OpenAI), or None.
    """

    type: str
    message: str
    status_code: Optional[int] = None
    raw_text: Optional[str] = None
    code: Optional[str] = None
    param: Optional[str] = None

    def to_json(self, retryable: Optional[bool] = None) -> ErrorJson:
        """``{"type", "message", "status_code", "raw_text"?, "code"?, "param"?}``: the
        optional keys only when set.

        Args:
            retryable: when given, a ``"retryable"`` key after ``status_code``: the error
                of one merge outcome, as merged rows' ``mmirage_errors`` and
                ``OUT.errors.jsonl`` hold it (``transforms/fetch.error_record``).
        """
        out = ErrorJson(type=self.type, message=self.message, status_code=self.status_code)
        if retryable is not None:
            out["retryable"] = retryable
        for key in ("raw_text", "code", "param"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "ResultError":
        """The record of a neutral error dict (:meth:`to_json`'s shape; a missing
        ``type`` or ``message`` is None, left for the reader's default)."""
        return cls(
            value.get("type"),
            value.get("message"),
            value.get("status_code"),
            value.get("raw_text"),
            value.get("code"),
            value.get("param"),
        )


#: the optional fields of :class:`ProviderResult`, in :meth:`ProviderResult.to_json` order
_RESULT_FIELDS = (
    "generated_text",
    "error",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "line",
    "offset",
    "cached_input_tokens",
    "reasoning_tokens",
)


class ResultJson(TypedDict, total=False):
    """The neutral dict of a :class:`ProviderResult` (:meth:`ProviderResult.to_json`):
    ``custom_id`` always, the other keys only when set."""

    custom_id: Optional[str]
    generated_text: str
    error: ErrorJson
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    line: int
    offset: int
    cached_input_tokens: int
    reasoning_tokens: int


class ProviderResult(NamedTuple):
    """One line of a provider's result file, normalised by its adapter.

    Attributes:
        custom_id: the request's custom_id, or None only for a line so damaged that it
            cannot be recovered (then ``line`` / ``offset`` say where it is).
        generated_text: the answer's text, when the request succeeded.
        error: why there is no usable answer, else None.
        input_tokens / output_tokens: usage in tokens, when the provider reported it.
        cache_read_input_tokens / cache_creation_input_tokens: Anthropic prompt caching,
            tokens read from / written to the cache (not in ``input_tokens``), when
            reported and non-zero.
        line: the 1-based line number in the provider's file, for an unreadable line.
        offset: the line's byte offset in the provider's file, for an unreadable line.
        cached_input_tokens / reasoning_tokens: OpenAI's ``cached_tokens`` (of the
            input, included in ``input_tokens``, billed at the cached-input price) and
            ``reasoning_tokens`` (included in ``output_tokens``), when reported and
            non-zero (chat ``usage.prompt_tokens_details`` /
            ``completion_tokens_details``; Responses ``usage.input_tokens_details`` /
            ``output_tokens_details``; openai-python ``CompletionUsage`` and
            ``ResponseUsage``).
    """

    custom_id: Optional[str]
    generated_text: Optional[str] = None
    error: Optional[ResultError] = None
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    cache_read_input_tokens: Optional[int] = None
    cache_creation_input_tokens: Optional[int] = None
    line: Optional[int] = None
    offset: Optional[int] = None
    cached_input_tokens: Optional[int] = None
    reasoning_tokens: Optional[int] = None

    def to_json(self) -> ResultJson:
        """The neutral dict: ``{"custom_id", "generated_text"?, "error"?: {...},
        "input_tokens"?, "output_tokens"?, "cache_read_input_tokens"?,
        "cache_creation_input_tokens"?, "line"?, "offset"?, "cached_input_tokens"?,
        "reasoning_tokens"?}``, the optional keys only
        when set."""
        out = ResultJson(custom_id=self.custom_id)
        for key in _RESULT_FIELDS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value.to_json() if key == "error" else value
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "ProviderResult":
        """The record of a neutral result dict (:meth:`to_json`'s shape, as plugins'
        normalisers and ``retrieve_results`` may return); other keys are ignored."""
        error = value.get("error")
        return cls(
            value.get("custom_id"),
            value.get("generated_text"),
            ResultError.from_json(error) if isinstance(error, Mapping) else None,
            *(value.get(key) for key in _RESULT_FIELDS[2:]),
        )


def provider_result(value: Union[ProviderResult, Mapping[str, Any]]) -> ProviderResult:
    """An adapter's result as a :class:`ProviderResult`: a record as it is, a neutral
    dict (a plugin's) through :meth:`ProviderResult.from_json`.

    Raises:
        TypeError: ``value`` is neither.
    """
    if isinstance(value, ProviderResult):
        return value
    if isinstance(value, Mapping):
        return ProviderResult.from_json(value)
    raise TypeError(f"a provider result is a ProviderResult or a dict, not {type(value).__name__}")


# -- merge's source verification (mmirage_beam/transforms/merge.py) ---------------------
# Spilled (pickled) into the range files, or (chunk lines) grouped by chunk key. Their
# fields are plain str / int / bytes / None, so Beam's coders (the registered RowCoder
# when a PCollection is typed with them, else its tuple encoding) are deterministic.


class ExpectedRequest(NamedTuple):
    """One request a receipt says was submitted (spilled as ``expected``).

    Attributes:
        chunk_key: ``<run_id>/<modality>/<chunk_id>`` of its receipt.
        position: its 0-based position in the chunk's ``custom_id_to_source_index``.
        source_index: the row it was built from.
        chunk_hash: the receipt's ``request_hash`` (of the chunk's lines).
        request_hash: the receipt's ``request_hashes[custom_id]``, None for a receipt
            written before per-request hashes.
    """

    chunk_key: str
    position: int
    source_index: int
    chunk_hash: str
    request_hash: Optional[str]


class RebuiltRequest(NamedTuple):
    """A request rebuilt from the current source (spilled as ``rebuilt``).

    Attributes:
        custom_id: the request's custom_id.
        source_index: the row it was built from.
        output_name: the output it belongs to.
        request_hash: ``run/receipts.request_line_hash`` of its line.
    """

    custom_id: str
    source_index: int
    output_name: str
    request_hash: str


class ChunkRequestLine(NamedTuple):
    """One request of a chunk whose receipt has no per-request hashes: a GroupByKey
    value keyed by the chunk key, from the receipt (``line`` None) or rebuilt.

    Attributes:
        position: as :class:`ExpectedRequest`.
        source_index: the row.
        chunk_hash: the receipt's ``request_hash``.
        line: the rebuilt request line (bytes, as uploaded), None for a receipt entry.
    """

    position: int
    source_index: int
    chunk_hash: str
    line: Optional[bytes]


class ChangedRow(NamedTuple):
    """A row whose source no longer builds what was submitted (spilled as ``changed``).

    Attributes:
        source_index: the row.
        chunk_key: the chunk of the submitted request (as :class:`ExpectedRequest`).
    """

    source_index: int
    chunk_key: str


def register_coders() -> None:
    """Register Beam's ``RowCoder`` for the records PCollections are typed with, so they
    are encoded field by field (deterministic, so they can be keys) instead of pickled.
    Idempotent. Done at import when Beam is loaded already, else by the transforms that
    type PCollections with them (``transforms/fetch.py``, ``transforms/merge.py``), so a
    command that builds no pipeline does not load Beam for these records."""
    import apache_beam as beam

    for record in (
        ResultError,
        ProviderResult,
        ExpectedRequest,
        RebuiltRequest,
        ChunkRequestLine,
        ChangedRow,
    ):
        beam.coders.registry.register_coder(record, beam.coders.RowCoder)


if "apache_beam" in sys.modules:
    register_coders()
