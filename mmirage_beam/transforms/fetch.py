"""Fetch every receipted batch's results: one outcome per receipted request.

``FetchResults`` turns each :class:`~mmirage_beam.run.selection.BatchToFetch` into an
:class:`OutputResult` per request of its receipt: the provider's answer, or an error
(the batch still running, its batch-level failure, a missing result); results whose
custom_id the receipt does not hold go to ``unknown``. :func:`never_submitted_result` is
the outcome of a request the run stopped before submitting. Every outcome's error is
built by :func:`error_record`.

Provider specifics stay in the adapters (``retrieve_results``); results arrive here as
:class:`~mmirage_beam.records.ProviderResult` records (a plugin's neutral dicts are
converted here, the one boundary, with ``ProviderResult.from_json``).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple, Optional

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.providers.base import ENDED_STATUSES, OpenedAdapters
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.records import (
    ErrorJson,
    ProviderResult,
    ResultError,
    provider_result,
    register_coders,
)
from mmirage_beam.results import is_retryable
from mmirage_beam.run.selection import BatchToFetch  # built by run selection

register_coders()  # the records these PCollections carry: RowCoder, not pickle

__all__ = [
    "UNKNOWN_TAG",
    "OutputResult",
    "error_record",
    "outcome_error",
    "FetchResults",
    "FetchResultsResult",
    "NEVER_SUBMITTED",
    "never_submitted_result",
    "CACHE_TOKEN_FIELDS",
]


UNKNOWN_TAG = "unknown"
NEVER_SUBMITTED = "never_submitted"

#: the usage fields of cached prompt tokens kept in merged rows and priced (Anthropic)
CACHE_TOKEN_FIELDS = (
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cached_input_tokens",  # OpenAI: of input_tokens, at the cached-input price
    "reasoning_tokens",  # OpenAI: of output_tokens
)


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


def error_record(
    kind: str, message: str, status_code: Optional[int] = None, raw_text: Optional[str] = None
) -> ErrorJson:
    """The error of one outcome: ``{"type", "message", "status_code", "retryable"}``
    (retryability from :func:`mmirage_beam.results.is_retryable`), plus ``raw_text``
    (the provider's own text: a refusal, a cut answer) when given."""
    return outcome_error(ResultError(kind, message, status_code, raw_text))


def outcome_error(error: ResultError) -> ErrorJson:
    """``error`` as the error of one outcome (merged rows' ``mmirage_errors``):
    :meth:`ResultError.to_json <mmirage_beam.records.ResultError.to_json>` with
    ``retryable`` (:func:`mmirage_beam.results.is_retryable`); the provider's ``code``
    and ``param``, when set, stay beside its message."""
    return error.to_json(retryable=is_retryable(error))


class _FetchResultsFn(beam.DoFn):
    def __init__(self, providers: dict[str, tuple[type, BatchProviderConfig]]) -> None:
        self._providers = dict(providers)
        self._adapters = OpenedAdapters()
        self._unknown = Metrics.counter(METRICS_NAMESPACE, "unknown_custom_ids")
        self._duplicates = Metrics.counter(METRICS_NAMESPACE, "duplicate_results")
        self._fetched = Metrics.counter(METRICS_NAMESPACE, "batches_fetched")
        self._malformed_unknown = Metrics.counter(METRICS_NAMESPACE, "unreadable_result_lines")

    def setup(self) -> None:
        for name, (cls, config) in self._providers.items():
            self._adapters.open(name, cls, config)

    def teardown(self) -> None:
        self._adapters.close()

    def process(self, batch: BatchToFetch) -> Iterator[Any]:
        mapping = batch.mapping()
        # A reused receipt: the earlier batch's custom_id -> this run's custom_ids (the
        # same body may be asked by several rows); its other lines are not this run's.
        reused_as: dict[str, list[str]] = {}
        for new_cid, old_cid in batch.reuse_map().items():
            if new_cid in mapping:
                reused_as.setdefault(old_cid, []).append(new_cid)
        results: Iterable[Any] = ()
        if batch.status in ENDED_STATUSES:
            adapter, config = self._adapters[batch.provider], self._providers[batch.provider][1]
            results = adapter.retrieve_results(batch.provider_batch_id, config)
            self._fetched.inc()
        seen: set[str] = set()
        for item in results:  # streamed: one result line at a time
            r = provider_result(item)  # a plugin's adapter may yield neutral dicts
            cid = r.custom_id
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
                    err = r.error or ResultError("", "")
                    unknown["error_type"] = err.type or "malformed_response"
                    unknown["message"] = err.message or ""
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
            missing = error_record(
                "pending",
                f"batch {batch.provider_batch_id} is still {batch.provider_status}; "
                "merge again when it has ended",
            )
        elif batch.failure:
            missing = error_record(
                batch.failure.get("type") or f"batch_{batch.provider_status}",
                f"batch {batch.provider_batch_id} {batch.provider_status}: "
                f"{batch.failure.get('message') or ''}".strip(),
            )
        else:
            missing = error_record(
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
        r: ProviderResult,
        reused_custom_id: Optional[str] = None,
    ) -> OutputResult:
        """The :class:`OutputResult` of result line ``r`` for this run's ``cid``."""
        error = None
        if r.error is not None:
            # the provider's code and param (when given) stay beside its message
            error = outcome_error(
                r.error._replace(
                    type=r.error.type or "unknown_error", message=r.error.message or ""
                )
            )
        return OutputResult(
            int(mapping[cid]),
            batch.output_name,
            cid,
            r.generated_text if error is None else None,
            error,
            r.input_tokens,
            r.output_tokens,
            batch.run_id,
            batch.run_rank,
            {k: getattr(r, k) for k in CACHE_TOKEN_FIELDS if getattr(r, k)} or None,
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
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(batches)  # every SDK worker imports the package at start-up
        out = (
            batches
            | "Spread" >> beam.Reshuffle()
            | "Fetch" >> beam.ParDo(self._fn).with_outputs(UNKNOWN_TAG, main="results")
        )
        return FetchResultsResult(out.results, out[UNKNOWN_TAG])


class FetchResultsResult(NamedTuple):
    results: beam.PCollection
    unknown: beam.PCollection


def never_submitted_result(
    element: tuple[str, int, str], run_id: str, resume_command: str
) -> OutputResult:
    """An :class:`OutputResult` of type ``never_submitted`` for a rebuilt request no
    receipt holds (the run stopped before submitting it)."""
    cid, idx, output_name = element
    err = error_record(
        NEVER_SUBMITTED,
        f"the run stopped before this request was submitted; resume it: {resume_command}",
    )
    return OutputResult(int(idx), output_name, cid, None, err, None, None, run_id, -1)
