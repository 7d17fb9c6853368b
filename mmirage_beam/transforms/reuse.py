"""The submit graph's reuse step: requests already answered by an earlier run are not sent.

    BatchRequest --AnswerKeys--> (answer key, request) --+
    earlier answers files --ReadAnswers--> (key, answer) -+--CoGroupByKey--> split
        split.send:   requests nobody answered (or whose answer is stale) -> ChunkRequests
        split.reused: ((output, modality, run, batch), entry) --GroupByKey-->
                      one reused receipt per earlier batch and output (WriteReusedReceipts)

Memory stays flat in the data: the join is keyed (each key holds the requests with that
body, usually one, and its earlier answers); a reused receipt holds at most the requests
of one earlier batch, as a receipt of that batch did. See :mod:`mmirage_beam.reuse`.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.costs.tokens import TokenCounter, token_counter_for
from mmirage_beam.io.fs import write_durably
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.reuse import (
    REUSED_PREFIX,
    REUSED_REQUESTS,
    STALE_REQUESTS,
    answer_key,
    key_settings,
)
from mmirage_beam.run.layout import part_path
from mmirage_beam.run.receipts import (
    receipt_line,
    receipt_path,
    request_line_hash,
    reused_receipt,
)

REUSED_TAG = "reused"
TOKENS_TAG = "tokens"


class _ReusedTokenCounter(TokenCounter):
    """Counts reused requests under ``reused_<metric>:<output>`` (the savings)."""

    def _inc(self, name: str, output_name: str, value: int) -> None:
        super()._inc(REUSED_PREFIX + name, output_name, value)


class _AnswerKeyFn(beam.DoFn):
    def __init__(self, adapter_cls: type, provider_config: Any) -> None:
        self._cls = adapter_cls
        self._config = provider_config

    def setup(self) -> None:
        self._adapter = self._cls()
        self._settings = key_settings(self._config)

    def process(self, r: Any) -> Iterator[tuple[str, Any]]:
        yield answer_key(self._adapter, r.line, self._settings), r


def _earlier_answer(line: str, provider: str, stale: frozenset) -> Iterator[tuple[str, tuple]]:
    """An answers-file line -> ``(key, (stale, run_id, provider_batch_id, custom_id))``
    (another provider's answers never match: its name is in the key)."""
    try:
        a = json.loads(line)
    except ValueError:
        return
    if not isinstance(a, dict) or a.get("provider") != provider or not a.get("answer_key"):
        return
    batch = str(a.get("provider_batch_id"))
    yield (
        str(a["answer_key"]),
        (batch in stale, str(a.get("run_id")), batch, str(a.get("custom_id"))),
    )


class ReusedEntry(NamedTuple):
    """One reused request: this run's custom_id and source_index, the earlier batch's
    custom_id that holds the answer, the request line's hash and size in bytes."""

    custom_id: str
    source_index: int
    earlier_custom_id: str
    line_hash: str
    nbytes: int


class _SplitFn(beam.DoFn):
    def __init__(
        self, provider_config: Any, count_tokens: bool, sample_fraction: Optional[float] = None
    ) -> None:
        self._config = provider_config
        self._count_tokens = count_tokens
        self._sample_fraction = sample_fraction
        self._reused = Metrics.counter(METRICS_NAMESPACE, REUSED_REQUESTS)
        self._stale = Metrics.counter(METRICS_NAMESPACE, STALE_REQUESTS)

    def setup(self) -> None:
        self._tokens: Optional[TokenCounter] = None
        if self._count_tokens:
            base = token_counter_for(self._config)
            self._tokens = _ReusedTokenCounter(
                base.provider,
                base.model,
                exact_tokens=base.exact_tokens,
                base_url=base.base_url,
                provider_config=self._config,
                sample_fraction=self._sample_fraction,
            )

    def process(self, element: tuple[str, dict[str, list]]) -> Iterator[Any]:
        _key, grouped = element
        new = list(grouped["new"])
        if not new:
            return
        old = list(grouped["old"])
        usable = sorted(a for a in old if not a[0])
        if not usable:
            if old:  # answered before, but its results expired: sent again
                self._stale.inc(len(new))
            yield from new
            return
        _stale, run_id, batch, earlier_cid = usable[0]
        for r in new:
            self._reused.inc()
            if self._tokens is not None:
                self._tokens.record(r.output_name, r.line, r.custom_id)
            yield pvalue.TaggedOutput(
                REUSED_TAG,
                (
                    (r.output_name, r.modality, run_id, batch),
                    ReusedEntry(
                        r.custom_id,
                        r.source_index,
                        earlier_cid,
                        request_line_hash(r.line),
                        r.nbytes,
                    ),
                ),
            )

    def finish_bundle(self) -> Iterator[Any]:
        if self._tokens is None:
            return
        stats = self._tokens.pending_stats()
        self._tokens.flush()
        if stats:  # the reused requests' counts, taken off the estimate before submitting
            from apache_beam.transforms.window import GlobalWindows

            yield pvalue.TaggedOutput(TOKENS_TAG, GlobalWindows.windowed_value(stats))


class ReuseAnswers(beam.PTransform):
    """``PCollection[BatchRequest]`` -> :class:`ReuseResult` ``(send, reused)``.

    Args:
        answer_files: the earlier runs' answers files
            (:func:`mmirage_beam.reuse.earlier_answer_files`).
        adapter_cls: the provider's adapter class (its ``request_without_id``).
        provider_config: the processor's config.
        stale_batches: earlier provider_batch_ids whose results expired: their answers
            are not reused (the requests are sent, counted in ``requests_reuse_stale``).
        count_tokens: count the reused requests' tokens under ``reused_<metric>:<output>``
            (the savings line).
        sample_fraction: ``--estimate sample``: the share of requests counted (the same
            requests as BuildRequests' sample), None: every request.
    """

    def __init__(
        self,
        answer_files: Sequence[str],
        adapter_cls: type,
        provider_config: Any,
        stale_batches: frozenset = frozenset(),
        count_tokens: bool = True,
        sample_fraction: Optional[float] = None,
    ) -> None:
        super().__init__()
        self._sample_fraction = sample_fraction
        self._files = list(answer_files)
        self._cls = adapter_cls
        self._config = provider_config
        self._stale = frozenset(stale_batches)
        self._count_tokens = count_tokens

    def expand(self, requests: beam.PCollection) -> ReuseResult:
        p = requests.pipeline
        keyed = requests | "AnswerKeys" >> beam.ParDo(_AnswerKeyFn(self._cls, self._config))
        earlier = (
            p
            | "AnswerFiles" >> beam.Create(self._files)
            | "ReadAnswers" >> beam.io.ReadAllFromText()
            | "EarlierAnswers" >> beam.FlatMap(_earlier_answer, self._config.provider, self._stale)
        )
        split = (
            {"new": keyed, "old": earlier}
            | "JoinAnswers" >> beam.CoGroupByKey()
            | "SplitReused"
            >> beam.ParDo(
                _SplitFn(self._config, self._count_tokens, self._sample_fraction)
            ).with_outputs(REUSED_TAG, TOKENS_TAG, main="send")
        )
        return ReuseResult(split.send, split[REUSED_TAG], split[TOKENS_TAG])


class ReuseResult(NamedTuple):
    #: ``PCollection[BatchRequest]``: the requests to chunk and send
    send: beam.PCollection
    #: ``PCollection[((output, modality, run_id, provider_batch_id), ReusedEntry)]``
    reused: beam.PCollection
    #: ``PCollection[dict[str, int]]``: per bundle, the reused requests' token counts
    #: (``reused_<metric>:<output>``)
    tokens: Any = None


class _ReusedReceiptsSettings(NamedTuple):
    """What :class:`WriteReusedReceipts` was given (documented there), which
    :class:`_WriteReusedFn` carries to the workers."""

    provider: str
    run_id: str
    base: str
    attempt: int
    output_types: dict[str, str]
    model: Optional[str]
    dry_run: bool


class _WriteReusedFn(beam.DoFn):
    def __init__(self, settings: _ReusedReceiptsSettings) -> None:
        self._s = settings

    def process(
        self, element: tuple[tuple, Any], invalid_row_count: int = 0
    ) -> Iterator[dict[str, Any]]:
        if invalid_row_count:  # the run is refused: nothing is receipted
            return
        (output_name, modality, run, batch), entries = element
        receipt = reused_receipt(
            provider=self._s.provider,
            run_id=self._s.run_id,
            attempt=self._s.attempt,
            output_name=output_name,
            output_type=self._s.output_types.get(output_name, ""),
            modality=modality,
            model=self._s.model,
            reused_from=run,
            provider_batch_id=batch,
            entries=(tuple(e) for e in entries),
        )
        if not self._s.dry_run:
            rfile = receipt_path(self._s.base, modality, self._s.run_id)
            write_durably(part_path(rfile, receipt["chunk_id"]), receipt_line(receipt))
        Metrics.counter(METRICS_NAMESPACE, "reused_receipts").inc()
        yield {"chunk_id": receipt["chunk_id"], "requests": receipt["submitted_request_count"]}


class WriteReusedReceipts(beam.PTransform):
    """:attr:`ReuseResult.reused` -> ``PCollection[dict]`` (one small summary per reused
    receipt written as a receipt part of the run, ``<receipt file>.parts/<chunk_id>.json``;
    a dry run writes none). Behind the validation barrier: with invalid rows (and no
    ``skip_invalid_rows``) nothing is written.

    Args:
        gate: the invalid-row count singleton side input, or None (skip_invalid_rows).
    """

    def __init__(
        self,
        provider: str,
        run_id: str,
        base: str,
        attempt: int,
        output_types: dict[str, str],
        model: Optional[str],
        dry_run: bool,
        gate: Any = None,
    ) -> None:
        super().__init__()
        self._fn = _WriteReusedFn(
            _ReusedReceiptsSettings(
                provider, run_id, base, attempt, dict(output_types), model, dry_run
            )
        )
        self._gate = gate

    def expand(self, reused: beam.PCollection) -> beam.PCollection:
        grouped = reused | "ByEarlierBatch" >> beam.GroupByKey()
        if self._gate is None:
            return grouped | "WriteReused" >> beam.ParDo(self._fn)
        return grouped | "WriteReused" >> beam.ParDo(self._fn, self._gate)
