"""The collect side: fetch results, verify the source, join by source_index, write in order.

What ``pipeline.MergeRows`` composes (bounded memory, see docs/architecture.md):

    BatchToFetch --FetchResults--> OutputResult (keyed by source_index)   + unknown ids
    ExtractedRow (re-read with the same reader) ---------------------------+
    rebuilt request hashes, receipts' expected entries --------------------+
        each --SpillByRange--> per-range spill files (RangePartitioner)
        --JoinPartitions--> per range: verify, join, render, sort -> parts,
                            concatenated in order -> OUT, OUT.errors.jsonl

Provider specifics stay in the adapters (``retrieve_results``); results arrive here as
the neutral dicts described in :mod:`mmirage_beam.results`.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import OutputConfig
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.jsonl import json_line
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.providers.base import ENDED_STATUSES
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.results import check_answer, is_retryable
from mmirage_beam.reuse import answer_record
from mmirage_beam.run.selection import BatchToFetch  # built by run selection
from mmirage_beam.transforms.render import MISSING, SchemaRenderer
from mmirage_beam.transforms.rows import assemble_output_row

__all__ = [
    "UNKNOWN_TAG",
    "ERRORS_TAG",
    "OutputResult",
    "FetchResults",
    "FetchResultsResult",
    "NEVER_SUBMITTED",
    "never_submitted_result",
    "MergedRow",
    "CACHE_TOKEN_FIELDS",
    "partitions_for",
    "partition_bounds",
    "SPILL_BUFFER_BYTES",
    "ROWS_KIND",
    "RESULTS_KIND",
    "EXPECTED_KIND",
    "REBUILT_KIND",
    "CHANGED_KIND",
    "SKIPPED_KIND",
    "UNKNOWN_KIND",
    "RangePartitioner",
    "SpillFile",
    "read_spilled",
    "SpillByRange",
    "JoinPartitions",
]


_LOG = logging.getLogger(__name__)
UNKNOWN_TAG = "unknown"
ERRORS_TAG = "errors"
ANSWERS_TAG = "answers"


class OutputResult(NamedTuple):
    """The outcome of one request, normalised.

    Attributes:
        source_index: the row it belongs to (from the receipt, never parsed from the id).
        output_name: the output it produces.
        custom_id: the request's custom_id.
        text: the generated text, or None when it failed or is pending.
        error: ``{"type", "message", "status_code", "retryable"}`` or None.
        input_tokens / output_tokens: usage when the provider reported it.
        run_id / run_rank: the run that produced it, and its order among linked runs.
    """

    source_index: int
    output_name: str
    custom_id: str
    text: Optional[str]
    error: Optional[dict]
    input_tokens: Optional[int]
    output_tokens: Optional[int]
    run_id: str = ""
    run_rank: int = 0
    #: Anthropic prompt caching: ``{"cache_read_input_tokens": n,
    #: "cache_creation_input_tokens": n}`` (those reported), or None
    cache_tokens: Optional[dict] = None
    #: where the answer is: the provider and batch it was fetched from
    provider: str = ""
    provider_batch_id: str = ""
    #: a reused answer (:mod:`mmirage_beam.reuse`): the run that paid for it, and the
    #: custom_id it has in that run's batch
    reused_from: Optional[str] = None
    reused_custom_id: Optional[str] = None

    def better_than(self, other: Optional[OutputResult]) -> bool:
        """Success beats failure; among equals, the newer run wins."""
        if other is None:
            return True
        mine, theirs = self.error is None, other.error is None
        if mine != theirs:
            return mine
        return self.run_rank > other.run_rank


def _error(
    kind: str, message: str, status_code: Any = None, raw_text: Optional[str] = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"type": kind, "message": message, "status_code": status_code}
    err["retryable"] = is_retryable(err)
    if raw_text is not None:
        err["raw_text"] = raw_text  # the provider's own text (refusal, cut answer)
    return err


class _FetchResultsFn(beam.DoFn):
    def __init__(self, providers: dict[str, tuple[type, BatchProviderConfig]]) -> None:
        self._providers = dict(providers)
        self._unknown = Metrics.counter(METRICS_NAMESPACE, "unknown_custom_ids")
        self._duplicates = Metrics.counter(METRICS_NAMESPACE, "duplicate_results")
        self._fetched = Metrics.counter(METRICS_NAMESPACE, "batches_fetched")
        self._malformed_unknown = Metrics.counter(METRICS_NAMESPACE, "unreadable_result_lines")

    def setup(self) -> None:
        from mmirage_beam.providers.base import resolve_credentials

        self._adapters = {}
        for name, (cls, config) in self._providers.items():
            adapter = cls(resolve_credentials(cls, name))
            adapter.setup(config)
            self._adapters[name] = (adapter, config)

    def teardown(self) -> None:
        for adapter, _ in getattr(self, "_adapters", {}).values():
            adapter.teardown()

    def process(self, batch: BatchToFetch) -> Iterator[Any]:
        mapping = batch.mapping()
        # A reused receipt: the earlier batch's custom_id -> this run's custom_ids (the
        # same body may be asked by several rows); its other lines are not this run's.
        reused_as: dict[str, list[str]] = {}
        for new_cid, old_cid in batch.reuse_map().items():
            if new_cid in mapping:
                reused_as.setdefault(old_cid, []).append(new_cid)
        results: Iterable[dict[str, Any]] = ()
        if batch.status in ENDED_STATUSES:
            adapter, config = self._adapters[batch.provider]
            results = adapter.retrieve_results(batch.provider_batch_id, config)
            self._fetched.inc()
        seen: set[str] = set()
        for r in results:  # streamed: one result line at a time
            cid = r.get("custom_id")
            if batch.reused_from:
                for new_cid in reused_as.get(cid, ()):
                    if new_cid not in seen:
                        seen.add(new_cid)
                        yield self._result(batch, mapping, new_cid, r, reused_custom_id=cid)
                continue
            if cid not in mapping:
                self._unknown.inc()
                unknown = {
                    "custom_id": cid,
                    "provider_batch_id": batch.provider_batch_id,
                    "run_id": batch.run_id,
                }
                if cid is None:  # a damaged line whose custom_id cannot be recovered
                    self._malformed_unknown.inc()
                    err = r.get("error") or {}
                    unknown["error_type"] = err.get("type") or "malformed_response"
                    unknown["message"] = err.get("message") or ""
                yield pvalue.TaggedOutput(UNKNOWN_TAG, unknown)
                continue
            if cid in seen:
                self._duplicates.inc()
                continue
            seen.add(cid)
            yield self._result(batch, mapping, cid, r)
        if len(seen) == len(mapping):
            return
        if batch.status not in ENDED_STATUSES:
            missing = _error(
                "pending",
                f"batch {batch.provider_batch_id} is still {batch.provider_status}; "
                "merge again when it has ended",
            )
        elif batch.failure:
            missing = _error(
                batch.failure.get("type") or f"batch_{batch.provider_status}",
                f"batch {batch.provider_batch_id} {batch.provider_status}: "
                f"{batch.failure.get('message') or ''}".strip(),
            )
        else:
            missing = _error(
                "missing_result",
                f"batch {batch.provider_batch_id} ended {batch.provider_status} without a "
                "result for this request",
            )
        for cid, idx in mapping.items():
            if cid not in seen:
                yield OutputResult(
                    int(idx),
                    batch.output_name,
                    cid,
                    None,
                    missing,
                    None,
                    None,
                    batch.run_id,
                    batch.run_rank,
                )

    @staticmethod
    def _result(
        batch: BatchToFetch,
        mapping: dict,
        cid: str,
        r: dict[str, Any],
        reused_custom_id: Optional[str] = None,
    ) -> OutputResult:
        """The :class:`OutputResult` of result line ``r`` for this run's ``cid``."""
        error = r.get("error")
        if error is not None:
            detail = {k: error[k] for k in ("code", "param") if error.get(k) is not None}
            error = _error(
                error.get("type") or "unknown_error",
                error.get("message") or "",
                error.get("status_code"),
                error.get("raw_text"),
            )
            error.update(detail)  # the provider's code and param, beside its message
        return OutputResult(
            int(mapping[cid]),
            batch.output_name,
            cid,
            r.get("generated_text") if error is None else None,
            error,
            r.get("input_tokens"),
            r.get("output_tokens"),
            batch.run_id,
            batch.run_rank,
            {k: r[k] for k in CACHE_TOKEN_FIELDS if r.get(k)} or None,
            provider=batch.provider,
            provider_batch_id=batch.provider_batch_id,
            reused_from=batch.reused_from,
            reused_custom_id=reused_custom_id,
        )


class FetchResults(beam.PTransform):
    """PCollection[BatchToFetch] -> ``FetchResultsResult(results, unknown)``.

    Retrieves each terminal batch's results through its adapter (OpenAI: output and
    error files; Anthropic: ``results()``), maps every result to its source_index with
    the receipt, and gives every request of the receipt an outcome: its result, or an
    error (``pending`` for a batch still running, the batch-level failure, or
    ``missing_result``). Results whose custom_id is not in the receipt go to ``unknown``
    (dicts with ``custom_id``, ``provider_batch_id``, ``run_id``; for a damaged line
    whose custom_id cannot be recovered, ``custom_id`` None plus ``error_type``
    ``malformed_response`` and a ``message`` naming the line), counted, never guessed.

    One DoFn call per batch; the adapter streams the provider's file, so a worker holds
    one result line at a time (plus the receipt's custom_ids), never the whole file.

    Args:
        providers: provider name -> (adapter class, provider config), for every provider
            in the receipts. Keys are read from the workers' environment.
    """

    def __init__(self, providers: dict[str, tuple[type, BatchProviderConfig]]) -> None:
        super().__init__()
        self._fn = _FetchResultsFn(providers)

    def expand(self, batches: beam.PCollection) -> FetchResultsResult:
        out = (
            batches
            | "Spread" >> beam.Reshuffle()
            | "Fetch" >> beam.ParDo(self._fn).with_outputs(UNKNOWN_TAG, main="results")
        )
        return FetchResultsResult(out.results, out[UNKNOWN_TAG])


class FetchResultsResult(NamedTuple):
    results: beam.PCollection
    unknown: beam.PCollection


# -- source verification -----------------------------------------------------------------


NEVER_SUBMITTED = "never_submitted"


def _expected_entries(receipt: dict[str, Any]) -> Iterator[tuple[str, tuple]]:
    key = f"{receipt['run_id']}/{receipt.get('modality', '')}/{receipt['chunk_id']}"
    hashes = receipt.get("request_hashes") or {}
    for pos, (cid, idx) in enumerate(receipt["custom_id_to_source_index"].items()):
        yield cid, (key, pos, int(idx), receipt["request_hash"], hashes.get(cid))


def _check_chunk(element: tuple[str, Iterable[tuple]]) -> Iterator[tuple[int, str]]:
    from mmirage_beam.run.receipts import request_hash

    key, entries = element
    ordered = sorted(entries, key=lambda e: e[0])
    lines = [e[3] for e in ordered]
    expected = ordered[0][2]
    if any(line is None for line in lines) or request_hash(lines) != expected:
        Metrics.counter(METRICS_NAMESPACE, "chunks_source_changed").inc()
        for _pos, idx, _exp, _line in ordered:
            yield idx, key


def never_submitted_result(
    element: tuple[str, int, str], run_id: str, resume_command: str
) -> OutputResult:
    """An :class:`OutputResult` of type ``never_submitted`` for a rebuilt request no
    receipt holds (the run stopped before submitting it)."""
    cid, idx, output_name = element
    err = _error(
        NEVER_SUBMITTED,
        f"the run stopped before this request was submitted; resume it: {resume_command}",
    )
    return OutputResult(int(idx), output_name, cid, None, err, None, None, run_id, -1)


# -- assembly ----------------------------------------------------------------------------


class MergedRow(NamedTuple):
    source_index: int
    line: bytes


#: the usage fields of cached prompt tokens kept in merged rows and priced (Anthropic)
CACHE_TOKEN_FIELDS = ("cache_read_input_tokens", "cache_creation_input_tokens")


def _count_usage(output_name: str, input_tokens: Any, output_tokens: Any) -> None:
    """Per-output usage counters ``used_input_tokens:<output>`` /
    ``used_output_tokens:<output>``, which ``mmirage merge`` prices
    (:func:`mmirage_beam.costs.report.usage_lines`)."""
    Metrics.counter(METRICS_NAMESPACE, f"used_input_tokens:{output_name}").inc(
        int(input_tokens or 0)
    )
    Metrics.counter(METRICS_NAMESPACE, f"used_output_tokens:{output_name}").inc(
        int(output_tokens or 0)
    )


class _AssembleFn(beam.DoFn):
    def __init__(self, outputs: Sequence[OutputConfig], schema: Any, remove_columns: bool):
        self._outputs = tuple(outputs)
        self._schema = schema
        self._remove = remove_columns
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_written")
        self._ok = Metrics.counter(METRICS_NAMESPACE, "outputs_succeeded")
        self._failed_rows = Metrics.counter(METRICS_NAMESPACE, "rows_with_failures")
        self._missing_rows = Metrics.counter(METRICS_NAMESPACE, "missing_source_rows")
        self._changed_rows = Metrics.counter(METRICS_NAMESPACE, "source_changed_rows")
        self._in = Metrics.counter(METRICS_NAMESPACE, "input_tokens")
        self._out = Metrics.counter(METRICS_NAMESPACE, "output_tokens")

    def setup(self) -> None:
        self._renderer = SchemaRenderer(self._schema) if self._schema is not None else None
        self._json_schemas = {
            o.name: json_schema_for(o.output_schema)
            for o in self._outputs
            if o.output_type == "JSON"
        }

    def _failed(self, kind: str) -> None:
        Metrics.counter(METRICS_NAMESPACE, f"failed_{kind}").inc()

    def process(self, element: tuple[int, dict[str, list]]) -> Iterator[Any]:
        source_index, grouped = element
        results: list[OutputResult] = list(grouped["results"])
        if grouped.get("skipped"):  # skipped at submission: never submitted on purpose
            results = [r for r in results if (r.error or {}).get("type") != NEVER_SUBMITTED]
        if results:
            yield from self._assemble(source_index, results, grouped)
        elif grouped.get("skipped"):
            yield from self._skipped(source_index, grouped)
        # else: a row this merge submitted nothing for

    def _null_shape(self, values: dict[str, Any], source_index: int) -> dict[str, Any]:
        """A row that cannot be rendered: the configured ``output_schema``'s keys (else
        the outputs) with null values, and ``source_index``."""
        if isinstance(self._schema, dict):
            out: dict[str, Any] = {str(k): None for k in self._schema}
        else:
            out = {name: None for name in values}
        out["source_index"] = source_index
        return out

    def _skipped(self, source_index: int, grouped: dict[str, list]) -> Iterator[Any]:
        """A row left out at submission (--skip-invalid-rows): written, marked, no outputs.

        A row that could not even be read (e.g. a line that is not JSON) is written with
        its ``source_index``, null outputs and the reason.
        """
        values = {o.name: MISSING for o in self._outputs}
        out = None
        if grouped["rows"]:
            extracted = grouped["rows"][0]
            try:
                out = assemble_output_row(
                    extracted.row,
                    extracted.values,
                    values,
                    self._renderer,
                    self._remove,
                    source_index,
                )
            except Exception:  # rendered from null inputs; the raw columns are enough
                out = None
        if out is None:
            out = {o.name: None for o in self._outputs}
            out["source_index"] = source_index
        out["mmirage_skipped"] = grouped["skipped"][0]
        Metrics.counter(METRICS_NAMESPACE, "rows_skipped_invalid").inc()
        self._rows.inc()
        yield MergedRow(source_index, json_line(out, default=_json_default))

    def _assemble(
        self, source_index: int, results: list[OutputResult], grouped: dict[str, list]
    ) -> Iterator[Any]:
        tokens_in = tokens_out = 0
        cached: dict[str, int] = {}
        reported = False
        rows = grouped["rows"]
        changed = grouped["changed"]
        # Per output, across linked runs: the newest success, else the newest failure.
        by_output: dict[str, OutputResult] = {}
        for r in results:
            if r.better_than(by_output.get(r.output_name)):
                by_output[r.output_name] = r
            if r.reused_from:  # paid by the earlier run: counted apart, not billed again
                for name, n in (("input", r.input_tokens), ("output", r.output_tokens)):
                    Metrics.counter(METRICS_NAMESPACE, f"reused_{name}_tokens:{r.output_name}").inc(
                        int(n or 0)
                    )
                continue
            if r.input_tokens is not None:  # every attempt's usage was billed
                reported = True
                tokens_in += int(r.input_tokens or 0)
                tokens_out += int(r.output_tokens or 0)
                _count_usage(r.output_name, r.input_tokens, r.output_tokens)  # costs/report.py
            for key, n in (r.cache_tokens or {}).items():
                cached[key] = cached.get(key, 0) + int(n)
                Metrics.counter(METRICS_NAMESPACE, f"used_{key}:{r.output_name}").inc(int(n))
        values: dict[str, Any] = {}
        errors: dict[str, dict[str, Any]] = {}
        for output in self._outputs:
            r = by_output.get(output.name)
            if r is None:
                continue
            if not rows or changed:
                kind = "source_changed" if changed else "missing_source_row"
                why = (
                    f"the source row no longer matches what was submitted (chunk "
                    f"{changed[0]}); the answer is not joined. Re-send it built from the "
                    "current row: mmirage resubmit --config C --from OUT.errors.jsonl"
                    if changed
                    else "the source dataset has no row with this source_index any more"
                )
                errors[output.name] = _error(kind, why)
                errors[output.name]["retryable"] = bool(changed)  # a resubmission fixes it
                values[output.name] = MISSING
            elif r.error is not None:
                errors[output.name] = r.error
                values[output.name] = MISSING
            else:
                value, err = check_answer(
                    output.output_type, r.text, self._json_schemas.get(output.name)
                )
                if err is None:
                    values[output.name] = value
                    self._ok.inc()
                else:
                    # The row is marked and keeps the raw text; templates see a missing
                    # value, so "{{ answer.field }}" renders null instead of failing.
                    values[output.name] = MISSING
                    errors[output.name] = err
        if not rows:
            self._missing_rows.inc()
        if changed:
            self._changed_rows.inc()
        out = None
        if rows:  # a changed row too: its fields from the row, its answers null
            extracted = rows[0]
            try:
                out = assemble_output_row(
                    extracted.row,
                    extracted.values,
                    values,
                    self._renderer,
                    self._remove,
                    source_index,
                )
            except Exception as exc:  # a template the values do not fit: mark, never crash
                Metrics.counter(METRICS_NAMESPACE, "render_failures").inc()
                errors["output_schema"] = {
                    "type": "render_failed",
                    "message": f"output_schema could not be rendered: {exc}",
                    "status_code": None,
                    "retryable": False,
                }
        if out is None:
            out = self._null_shape(values, source_index)
        if reported:
            out["input_tokens"] = tokens_in
            out["output_tokens"] = tokens_out
            self._in.inc(tokens_in)
            self._out.inc(tokens_out)
            out.update(cached)  # cache_read_input_tokens / cache_creation_input_tokens
        reused = {
            name: r.reused_from for name, r in by_output.items() if r.reused_from and name in values
        }
        if reused:
            out["mmirage_reused_from"] = reused  # beside mmirage_errors: per output
            Metrics.counter(METRICS_NAMESPACE, "outputs_reused").inc(len(reused))
        keys = grouped.get("keys") or {}
        for name, r in by_output.items():  # answers a later run may reuse
            key = keys.get(r.custom_id)
            if key and name in values and name not in errors and values[name] is not MISSING:
                yield pvalue.TaggedOutput(
                    ANSWERS_TAG,
                    answer_record(
                        key,
                        r.provider,
                        r.provider_batch_id,
                        r.reused_custom_id or r.custom_id,
                        r.reused_from or r.run_id,
                    ),
                )
        if errors:
            out["mmirage_errors"] = errors
            self._failed_rows.inc()
            for name, err in errors.items():
                self._failed(err["type"])
                cid = by_output[name].custom_id if name in by_output else None
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    {
                        "custom_id": cid,
                        "run_id": by_output[name].run_id if name in by_output else None,
                        "source_index": source_index,
                        "output_name": name,
                        "error_type": err["type"],
                        "message": err.get("message", ""),
                        "status_code": err.get("status_code"),
                        "retryable": bool(err.get("retryable")),
                        # the provider's code and param, when it gave them
                        **{k: err[k] for k in ("code", "param") if err.get(k) is not None},
                    },
                )
        self._rows.inc()
        yield MergedRow(source_index, json_line(out, default=_json_default))


def _json_default(value: Any) -> Any:
    if value is MISSING:
        return None
    return str(value)


def partitions_for(lo: int, hi: int, rows_per_partition: int) -> int:
    """How many range partitions over ``[lo, hi]`` (inclusive) hold at most
    ``rows_per_partition`` indices each: the ceiling of the span over the width, so the
    partition a worker joins stays the same size however large the dataset (at least 1)."""
    span = max(1, hi - lo + 1)
    return max(1, -(-span // max(1, rows_per_partition)))


def partition_bounds(lo: int, hi: int, num_partitions: int) -> list[int]:
    """Start indices of ``num_partitions`` equal ranges over ``[lo, hi]`` (inclusive)."""
    span = max(1, hi - lo + 1)
    n = max(1, min(num_partitions, span))
    return [lo + (span * i) // n for i in range(n)]


SPILL_BUFFER_BYTES = 16 << 20

ROWS_KIND = "rows"
RESULTS_KIND = "results"
EXPECTED_KIND = "expected"
REBUILT_KIND = "rebuilt"
CHANGED_KIND = "changed"
SKIPPED_KIND = "skipped"
UNKNOWN_KIND = "unknown"
#: (custom_id, source_index, answer key) of every rebuilt request (mmirage_beam.reuse)
ANSWER_KEYS_KIND = "answerkeys"


class RangePartitioner:
    """source_index -> partition id, monotone: a lower id holds only lower indices.

    Inside ``[lo, hi]`` the ``bounds`` of :func:`partition_bounds`; below and above it
    (rows without a receipt: skipped or never submitted ones, rows of other runs),
    further ranges of the same width numbered on (negative ids below ``lo``), so no
    partition holds more than about ``width`` indices.
    """

    def __init__(self, lo: int, hi: int, bounds: Sequence[int]) -> None:
        self.lo, self.hi, self.bounds = lo, hi, list(bounds)
        self.width = max(1, -(-(hi - lo + 1) // max(1, len(self.bounds))))

    def __call__(self, source_index: int) -> int:
        import bisect

        if source_index < self.lo:
            return -1 - (self.lo - 1 - source_index) // self.width
        if source_index > self.hi:
            return len(self.bounds) + (source_index - self.hi - 1) // self.width
        return bisect.bisect_right(self.bounds, source_index) - 1


class SpillFile(NamedTuple):
    """One temporary file of one kind of record for one partition."""

    partition: int
    kind: str
    path: str


def _write_records(path: str, records: list[bytes]) -> None:
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.create(path) as f:
        f.write(b"".join(records))


def read_spilled(path: str) -> Iterator[Any]:
    """The records of one spill file, in the order written (one file is at most about
    :data:`SPILL_BUFFER_BYTES`, read whole)."""
    import io
    import pickle

    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read()
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        # A new unpickler per record: each record is its own pickle, whose memo indices
        # start at 0 (one unpickler's memo would carry over and shift them).
        yield pickle.load(stream)


class _SpillFn(beam.DoFn):
    """Records -> per-partition temporary files; emits a :class:`SpillFile` per file.

    Buffers at most :data:`SPILL_BUFFER_BYTES` (pickled) per DoFn instance: past it, the
    biggest partition's buffer is written out; the rest at the end of each bundle.
    """

    def __init__(
        self, kind: str, temp_dir: str, partitioner: RangePartitioner, key: Any = None
    ) -> None:
        self._kind = kind
        self._dir = temp_dir
        self._part = partitioner
        self._key = key

    def start_bundle(self) -> None:
        self._buffers: dict[int, list[bytes]] = {}
        self._sizes: dict[int, int] = {}
        self._total = 0

    def _flush(self, part: int) -> SpillFile:
        import uuid

        from mmirage_beam.memory import release_free_memory

        path = f"{self._dir}/{self._kind}-p{part}-{uuid.uuid4().hex}.pkl"
        _write_records(path, self._buffers.pop(part))
        self._total -= self._sizes.pop(part)
        release_free_memory()  # the buffer's records, scattered between live rows
        return SpillFile(part, self._kind, path)

    def process(self, element: Any) -> Iterator[SpillFile]:
        import pickle

        index, record = self._key(element) if self._key else (element[0], element)
        part = self._part(int(index))
        data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        self._buffers.setdefault(part, []).append(data)
        self._sizes[part] = self._sizes.get(part, 0) + len(data)
        self._total += len(data)
        if self._total > SPILL_BUFFER_BYTES:
            yield self._flush(max(self._sizes, key=self._sizes.__getitem__))

    def finish_bundle(self) -> Iterator[Any]:
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue

        for part in sorted(self._buffers):
            yield WindowedValue(self._flush(part), 0, [GlobalWindow()])


class SpillByRange(beam.PTransform):
    """PCollection[T] -> PCollection[:class:`SpillFile`]: each element pickled into the
    temporary file of its source_index's range, fused with the stage producing it.

    Args:
        kind: the kind of record (part of the file names, read back by kind).
        temp_dir: the merge's temporary folder (absolute path or URI).
        partitioner: the ranges.
        key: element -> ``(source_index, record to store)``; default ``(element[0],
            element)``.
    """

    def __init__(
        self, kind: str, temp_dir: str, partitioner: RangePartitioner, key: Any = None
    ) -> None:
        super().__init__()
        self._fn = _SpillFn(kind, temp_dir, partitioner, key)

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "Spill" >> beam.ParDo(self._fn)


def _results_record(r: OutputResult) -> tuple[int, OutputResult]:
    return r.source_index, r


def _rows_record(r: Any) -> tuple[int, Any]:
    return r.source_index, r._replace(images=())


class _RebuiltHashFn(beam.DoFn):
    """Rebuilt request -> ``(custom_id, source_index, output_name, request_line_hash)``;
    a request of a chunk whose receipt has no ``request_hashes`` also goes, with its
    line, to ``by_chunk`` for the chunk-level check."""

    def __init__(self, old_entries: dict[str, list[tuple]]) -> None:
        self._old = old_entries

    def process(self, r: Any) -> Iterator[Any]:
        from mmirage_beam.run.receipts import request_line_hash

        yield (r.custom_id, r.source_index, r.output_name, request_line_hash(r.line))
        for key, pos, idx, chunk_hash, _own in self._old.get(r.custom_id, ()):
            yield pvalue.TaggedOutput("by_chunk", (key, (pos, idx, chunk_hash, r.line)))


def _old_chunk_entries(receipt: dict[str, Any]) -> Iterator[tuple[str, tuple]]:
    """A receipt without per-request hashes -> ``(chunk key, (pos, source_index, chunk
    hash, None))`` per request: the chunk's expected requests, rebuilt or not."""
    for _cid, (key, pos, idx, chunk_hash, own) in _expected_entries(receipt):
        if own is None:
            yield key, (pos, idx, chunk_hash, None)


def _check_old_chunk(element: tuple[str, Iterable[tuple]]) -> Iterator[tuple[int, str]]:
    """A chunk of a receipt without per-request hashes: its receipt's entries (line None)
    and its rebuilt requests (with their line) -> every row, when the chunk changed."""
    key, entries = element
    by_pos: dict[int, tuple] = {}
    for e in entries:
        if e[0] not in by_pos or e[3] is not None:
            by_pos[e[0]] = e
    yield from _check_chunk((key, list(by_pos.values())))


class _CollectPartitionsFn(beam.DoFn):
    def process(self, files: list[SpillFile]) -> Iterator[tuple[int, dict[str, list[str]]]]:
        by_part: dict[int, dict[str, list[str]]] = {}
        for f in files:
            by_part.setdefault(f.partition, {}).setdefault(f.kind, []).append(f.path)
        for part in sorted(by_part):
            yield part, {k: sorted(v) for k, v in by_part[part].items()}


class _JoinPartitionFn(beam.DoFn):
    """One partition: read its files, verify, join, render, write its ordered parts.

    Memory: the partition's rows, results and lines, never more.
    """

    def __init__(
        self,
        temp_dir: str,
        outputs: Sequence[OutputConfig],
        schema: Any,
        remove_columns: bool,
        unsubmitted_run: Optional[tuple[str, str]],
    ) -> None:
        self._dir = temp_dir
        self._assemble = _AssembleFn(outputs, schema, remove_columns)
        self._unsubmitted_run = unsubmitted_run

    def setup(self) -> None:
        self._assemble.setup()

    def _verify(self, files: dict[str, list[str]]) -> Iterator[Any]:
        """Per-request check: (source_index, key) changed, and never-submitted results."""
        from mmirage_beam.progress import add

        expected: dict[str, list[tuple]] = {}
        for path in files.get(EXPECTED_KIND, ()):
            for cid, entry in read_spilled(path):
                expected.setdefault(cid, []).append(entry)
        for path in files.get(REBUILT_KIND, ()):
            for cid, idx, output_name, now in read_spilled(path):
                entries = expected.pop(cid, None)
                if entries is None:
                    if self._unsubmitted_run is not None:
                        run, command = self._unsubmitted_run
                        Metrics.counter(METRICS_NAMESPACE, "requests_never_submitted").inc()
                        add("results fetched")
                        yield (
                            RESULTS_KIND,
                            never_submitted_result((cid, idx, output_name), run, command),
                        )
                    continue
                yield from self._compare(entries, now)
        for entries in expected.values():  # a receipted request the source no longer builds
            yield from self._compare(entries, None)

    def _compare(self, entries: list[tuple], now: Optional[str]) -> Iterator[Any]:
        hashed = [e for e in entries if e[4] is not None]
        if hashed and not any(e[4] == now for e in hashed):
            Metrics.counter(METRICS_NAMESPACE, "requests_source_changed").inc()
            key, _pos, idx, _chunk_hash, _own = hashed[-1]
            yield CHANGED_KIND, (idx, key)

    def process(self, element: tuple[int, dict[str, list[str]]]) -> Iterator[tuple]:
        from apache_beam.io.filesystems import FileSystems

        from mmirage_beam.memory import release_free_memory
        from mmirage_beam.progress import add

        part, files = element
        grouped: dict[int, dict[str, list]] = {}

        def slot(idx: int) -> dict[str, list]:
            g = grouped.get(idx)
            if g is None:
                g = grouped[idx] = {"results": [], "rows": [], "changed": [], "skipped": []}
            return g

        for kind, record in self._verify(files):
            if kind == RESULTS_KIND:
                slot(record.source_index)["results"].append(record)
            else:
                slot(record[0])["changed"].append(record[1])
        for path in files.get(RESULTS_KIND, ()):
            for r in read_spilled(path):
                slot(r.source_index)["results"].append(r)
        for path in files.get(CHANGED_KIND, ()):
            for idx, key in read_spilled(path):
                slot(idx)["changed"].append(key)
        for path in files.get(SKIPPED_KIND, ()):
            for idx, reason in read_spilled(path):
                slot(idx)["skipped"].append(reason)
        for path in files.get(ROWS_KIND, ()):
            for row in read_spilled(path):
                g = grouped.get(row.source_index)
                if g is not None:  # rows without any result are not written
                    g["rows"].append(row)
        for path in files.get(ANSWER_KEYS_KIND, ()):
            for cid, idx, key in read_spilled(path):
                g = grouped.get(idx)
                if g is not None:
                    g.setdefault("keys", {})[cid] = key
        lines: list[tuple[int, bytes]] = []
        errors: list[tuple[int, bytes]] = []
        answers: list[bytes] = []
        for path in files.get(UNKNOWN_KIND, ()):
            errors.extend(read_spilled(path))
        for idx in sorted(grouped):
            g = grouped.pop(idx)
            g["changed"].sort()
            for out in self._assemble.process((idx, g)):
                if isinstance(out, pvalue.TaggedOutput) and out.tag == ANSWERS_TAG:
                    answers.append(json_line(out.value))
                elif isinstance(out, pvalue.TaggedOutput):
                    errors.append((out.value["source_index"], json_line(out.value)))
                else:
                    lines.append((out.source_index, out.line))
                    add("rows merged")
        lines.sort()
        errors.sort()
        written = []
        for what, entries in (
            ("merged", lines),
            ("errors", errors),
            ("answers", [(0, a) for a in answers]),
        ):
            path = f"{self._dir}/{what}-{part:+012d}.jsonl"
            with FileSystems.create(path) as f:
                for _idx, line in entries:
                    f.write(line)
            written.append(path)
        del lines, errors, answers  # (grouped is empty: each row popped as it was joined)
        release_free_memory()  # the partition's rows, results and lines
        from mmirage_beam.crashpoints import crash_point

        crash_point("merge_joined")
        yield part, written[0], written[1], written[2]


class _ConcatenatePartsFn(beam.DoFn):
    def __init__(
        self,
        output_path: str,
        errors_path: str,
        temp_dir: str,
        answers_path: Optional[str] = None,
    ) -> None:
        self._out, self._errors, self._dir = output_path, errors_path, temp_dir
        self._answers = answers_path

    def process(self, parts: list[tuple[int, str, str, str]]) -> Iterator[str]:
        from mmirage_beam.io.fs import delete_folder
        from mmirage_beam.io.writers import concatenate_files

        ordered = sorted(parts)
        # Streamed, then renamed over the output: a reader never sees half a file.
        concatenate_files([p[1] for p in ordered], self._out)
        concatenate_files([p[2] for p in ordered], self._errors)
        if self._answers:  # last: only a merge that wrote both files records answers
            concatenate_files([p[3] for p in ordered], self._answers)
        delete_folder(self._dir)
        yield self._out


class JoinPartitions(beam.PTransform):
    """PCollection[:class:`SpillFile`] (every file of every kind) -> the output file and
    its errors file, each in source_index order (lines of one source_index by their
    bytes), written whole; PCollection[str] of the output path.

    Waits for every spill file (a global list of their names: one small element per
    file), then joins each partition in its own DoFn call and concatenates the parts in
    partition order; the temporary folder is removed once both files are written.
    """

    def __init__(
        self,
        temp_dir: str,
        output_path: str,
        errors_path: str,
        outputs: Sequence[OutputConfig],
        output_schema: Any,
        remove_columns: bool,
        unsubmitted_run: Optional[tuple[str, str]] = None,
        answers_path: Optional[str] = None,
    ) -> None:
        super().__init__()
        self._dir, self._out, self._errors = temp_dir, output_path, errors_path
        self._answers = answers_path
        self._join = _JoinPartitionFn(
            temp_dir, outputs, output_schema, remove_columns, unsubmitted_run
        )

    def expand(self, files: beam.PCollection) -> beam.PCollection:
        return (
            files
            | "AllSpillFiles" >> beam.combiners.ToList()
            | "Partitions" >> beam.ParDo(_CollectPartitionsFn())
            | "SpreadPartitions" >> beam.Reshuffle()
            | "JoinPartition" >> beam.ParDo(self._join)
            | "AllParts" >> beam.combiners.ToList()
            | "Concatenate"
            >> beam.ParDo(_ConcatenatePartsFn(self._out, self._errors, self._dir, self._answers))
        )
