"""BuildRequests: from extracted rows to provider-ready requests.

    SourceRow --ExtractInputs--> ExtractedRow --BuildRequests--> BatchRequest (+ RowError)

(ExtractInputs and ExtractedRow live in :mod:`mmirage_beam.transforms.extract`, the
template checks in :mod:`mmirage_beam.transforms.render`; both are re-exported here.)

Provider specifics stay in the adapter (``build_request``); this module renders prompts,
resolves images and builds the provider-neutral payload described in
:class:`mmirage_beam.providers.base.BatchSubmissionAdapter`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import DatasetConfig, OutputConfig
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.costs.tokens import check_sample_fraction, token_counter_for
from mmirage_beam.errors import RequestBuildError
from mmirage_beam.ids import custom_id_maker
from mmirage_beam.io.decode import replace_lone_surrogates
from mmirage_beam.jsonl import json_encoder
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress.counters import add
from mmirage_beam.progress.text import INPUT_TOKENS
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.records import BatchRequest, RowError
from mmirage_beam.request_hashes import str_keys_only
from mmirage_beam.results import EMBEDDING
from mmirage_beam.transforms.extract import (
    ERRORS_TAG,
    ExtractedRow,
    ExtractInputs,
    ExtractInputsResult,
)
from mmirage_beam.transforms.render import (
    NullValueError,
    holds_null,
    misaligned_lists,
    parallel_list_inputs,
    template_variables,
)

__all__ = [
    "ERRORS_TAG",
    "BUILT_ROWS_TAG",
    "TOKENS_TAG",
    "ExtractedRow",
    "ExtractInputs",
    "ExtractInputsResult",
    "build_payload",
    "BuildRequests",
    "BuildRequestsResult",
    "template_variables",
    "parallel_list_inputs",
]


_LOG = logging.getLogger(__name__)
BUILT_ROWS_TAG = "rows"
TOKENS_TAG = "tokens"
_PROGRESS_EVERY = 256  # requests whose tokens are added to the progress report at once


def _clean_text(value: str) -> str:
    """Replace unpaired surrogates (invalid in UTF-8) with U+FFFD so JSON stays valid.
    Only a rendered prompt is cleaned: a row's inputs holding one are invalid rows
    (ExtractInputs), so this changes only a lenient rebuild (merge) of such a row."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return replace_lone_surrogates(value)  # one U+FFFD per surrogate


def build_payload(
    prompt: str,
    images: Sequence[dict[str, Any]],
    output: OutputConfig,
    json_schema: Any = ...,
) -> dict[str, Any]:
    """The provider-neutral payload for one (row, output): see BatchSubmissionAdapter.

    ``json_schema``: the output's :func:`~mmirage_beam.config.schema.json_schema_for`
    when the caller built it once (it is the same for every row); computed otherwise.
    """
    unreadable = [img["source"] for img in images if not img.get("url")]
    if unreadable:
        raise RequestBuildError(f"image {unreadable[0]!r} was not loaded")
    if images:
        content: Any = [{"type": "text", "text": prompt}] + [
            {"type": "image_url", "image_url": {"url": img["url"]}} for img in images
        ]
    else:
        content = prompt
    payload = {
        "messages": [{"role": "user", "content": content}],
        "images": list(images),
        "output_name": output.name,
        "output_type": output.output_type,
        "json_schema": (
            (json_schema_for(output.output_schema) if json_schema is ... else json_schema)
            if output.output_type == "JSON"
            else None
        ),
    }
    if output.output_type == EMBEDDING:  # the text to embed (images: refused at load)
        payload["text"] = prompt
        payload["dimensions"] = output.dimensions
    return payload


@dataclasses.dataclass(frozen=True)
class _BuildSettings:
    """:class:`BuildRequests`'s arguments once checked (their meaning is documented
    there): the requests to build and what of them to count, which
    :class:`_BuildRequestsFn` carries to the workers."""

    outputs: tuple[OutputConfig, ...]
    datasets: tuple[DatasetConfig, ...]
    adapter_cls: type
    provider_config: BatchProviderConfig
    count_tokens: bool
    count_selection: Optional[tuple[frozenset, bool]]
    sample_fraction: Optional[float]
    canonical: bool
    progress: str


class _BuildRequestsFn(beam.DoFn):
    def _counted(self, cid: str) -> bool:
        """Whether this run sends ``cid`` (a resume sends only what has no receipt)."""
        if self._s.count_selection is None:
            return True
        ids, keep_listed = self._s.count_selection
        return (cid in ids) == keep_listed

    def __init__(self, settings: _BuildSettings) -> None:
        self._s = settings
        self._requests = Metrics.counter(METRICS_NAMESPACE, "requests")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "request_bytes")

    def setup(self) -> None:
        from mmirage_beam.transforms.render import PromptTemplate, make_environment

        env = make_environment(reject_null=True)
        # plain substitution is filled without Jinja, with Jinja's bytes and errors
        self._templates = [(o, PromptTemplate(o.prompt, env)) for o in self._s.outputs]
        self._used = {o.name: template_variables(o.prompt) for o in self._s.outputs}
        self._parallel = {o.name: parallel_list_inputs(o.prompt) for o in self._s.outputs}
        # Only building and sizing happen here: no credentials, no client.
        self._adapter = self._s.adapter_cls()
        self._hard_limit = type(self._s.provider_config).PROVIDER_MAX_BATCH_BYTES
        self._overhead = self._adapter.chunk_overhead_bytes
        # What is the same for every row is built once: each output's JSON schema; and
        # whether the adapter sizes requests its own way (else nbytes is len(line)).
        self._schemas = {
            o.name: json_schema_for(o.output_schema) if o.output_type == "JSON" else None
            for o in self._s.outputs
        }

        self._own_estimate = self._adapter.estimates_its_own_size
        # The canonical JSON the request hashes cover, encoded from the request dict
        # (no parse of the line), when the line is the base class's encoding of that
        # same dict: an adapter serialising its own way is canonicalised from its line.
        self._encode_canonical = None
        if self._s.canonical and not self._adapter.serializes_its_own_way:
            self._encode_canonical = json_encoder(sort_keys=True, separators=(",", ":"))

        # Each output's text requests spliced from one encoded template, when the
        # adapter's requests are templates (request_template.py); else encoded per row.
        self._request_templates: dict[str, Any] = {}
        if self._encode_canonical is not None and self._adapter.verbatim_prompt:
            from mmirage_beam.transforms.request_template import RequestTemplate

            for o in self._s.outputs:

                def build(cid: str, prompt: str, o: OutputConfig = o) -> dict[str, Any]:
                    payload = build_payload(prompt, (), o, self._schemas[o.name])
                    return self._adapter.build_request(cid, payload, self._s.provider_config)

                self._request_templates[o.name] = RequestTemplate.probe(
                    build, self._adapter.serialize_request, self._encode_canonical
                )

        # per-output token counters; None when not counted (a merge's rebuild)
        self._tokens = (
            token_counter_for(self._s.provider_config, self._s.sample_fraction)
            if self._s.count_tokens
            else None
        )
        # a sampled request stands for 1 / fraction requests in the progress report
        self._progress_scale = 1.0 / self._s.sample_fraction if self._s.sample_fraction else 1.0

    def start_bundle(self) -> None:
        # Counted locally, added to the metrics once per bundle (cheaper per row).
        self._count = self._nbytes = 0
        self._progress_tokens = self._progress_mark = 0

    def _flush_progress(self) -> None:
        """The requests built and input tokens counted since the last call, to the
        progress report."""
        if self._s.progress and self._count > self._progress_mark:
            add(self._s.progress, self._count - self._progress_mark)
        if self._progress_tokens:
            add(INPUT_TOKENS, self._progress_tokens)
        self._progress_tokens, self._progress_mark = 0, self._count

    def finish_bundle(self) -> Iterator[Any]:
        self._flush_progress()
        if self._count:
            self._requests.inc(self._count)
            self._bytes.inc(self._nbytes)
        self._count = self._nbytes = 0
        if self._tokens is None:
            return
        stats = self._tokens.pending_stats()
        self._tokens.flush()
        if stats:  # this bundle's token counts, for the estimate before submitting
            from apache_beam.transforms.window import GlobalWindows

            yield pvalue.TaggedOutput(TOKENS_TAG, GlobalWindows.windowed_value(stats))

    def process(self, element: ExtractedRow) -> Iterator[Any]:
        values, source_index = element.values, element.source_index
        modality = "multimodal" if element.images else "text"
        built: list[BatchRequest] = []
        bodies: list[dict[str, Any]] = []  # the request dicts, counted without a re-parse
        adapter, config = self._adapter, self._s.provider_config
        for output, template in self._templates:
            name = output.name
            parallel = self._parallel[name]
            if parallel:
                misaligned = misaligned_lists(parallel, values)
                if misaligned is not None:
                    names, reason = misaligned
                    yield self._row_error(element, names, f"the prompt of output {name!r} {reason}")
                    return
            try:
                prompt = _clean_text(template.render(values))
                if not prompt or prompt.isspace():  # what `not prompt.strip()` says
                    raise RequestBuildError(
                        f"the prompt of output {name!r} renders to whitespace only"
                    )
                cid = custom_id_maker(name, modality)(source_index)
                payload = build_payload(prompt, element.images, output, self._schemas[name])
                request = adapter.build_request(cid, payload, config)
                spliced = None if element.images else self._request_templates.get(name)
                if spliced is not None:  # the same bytes as encoding the request
                    line, canon = spliced.encode(cid, prompt)
                else:
                    line = adapter.serialize_request(request)
                    canon = None
                    if self._encode_canonical is not None and str_keys_only(request):
                        canon = self._encode_canonical(request).encode("ascii")
                # Never below the real size, so a chunk's upload stays within its cap
                # even for an adapter whose estimate is low.
                nbytes = len(line)
                if self._own_estimate:
                    nbytes = max(adapter.estimate_request_bytes(request), nbytes)
                if self._hard_limit is not None and nbytes + self._overhead > self._hard_limit:
                    raise RequestBuildError(
                        f"the request of output {name!r} is {nbytes} bytes, above the "
                        f"provider's hard limit of {self._hard_limit} bytes per batch; it "
                        "can never be submitted"
                    )
            except Exception as exc:  # noqa: BLE001 - sorted into a RowError, or raised
                yield self._build_error(element, output, exc)
                return
            built.append(BatchRequest(cid, source_index, name, modality, line, nbytes, canon))
            bodies.append(request)
        # A row yields its requests only when every output of it is valid.
        tokens = self._tokens
        for req, body in zip(built, bodies):
            self._count += 1
            self._nbytes += req.nbytes
            if tokens is not None and self._counted(req.custom_id):
                tc = tokens.record(req.output_name, body, req.custom_id)
                if tc is not None:
                    self._progress_tokens += round(tc.input_tokens * self._progress_scale)
            if self._count - self._progress_mark >= _PROGRESS_EVERY:
                self._flush_progress()
            yield req
        yield pvalue.TaggedOutput(BUILT_ROWS_TAG, element)

    def _row_error(self, element: ExtractedRow, name: str, reason: str) -> Any:
        """The RowError of ``element`` on the errors output."""
        ds_path = self._s.datasets[element.dataset_index].path
        return pvalue.TaggedOutput(
            ERRORS_TAG, RowError(element.source_index, ds_path, name, reason)
        )

    def _build_error(self, element: ExtractedRow, output: OutputConfig, exc: Exception) -> Any:
        """The RowError for ``exc``, raised while building ``output``'s request of
        ``element``; an exception that is no fault of the row is raised again."""
        import jinja2

        where = f"output {output.name!r}"
        if isinstance(exc, NullValueError):
            nulls = [
                n
                for n in sorted(self._used[output.name])
                if n in element.values and holds_null(element.values[n])
            ]
            name = ", ".join(nulls) if nulls else output.name
            return self._row_error(
                element,
                name,
                f"the prompt of {where} would render {exc} as the text 'None'"
                + (f" (input {name!r} holds null)" if nulls else "")
                + "; give the input a non-null default, or guard it in the "
                "template ({% if x %}...{% endif %}, {{ x or '' }})",
            )
        if isinstance(exc, jinja2.UndefinedError):
            return self._row_error(
                element,
                output.name,
                f"the prompt of {where} uses an undefined variable: {exc.message}",
            )
        if isinstance(exc, (RequestBuildError, jinja2.TemplateError)):
            # An image limit names the image input (and the output in its message).
            name = getattr(exc, "input_name", None)
            reason = f"{where}: {exc}" if name else str(exc)
            return self._row_error(element, name or output.name, reason)
        raise exc


class BuildRequests(beam.PTransform):
    """PCollection[ExtractedRow] -> ``BuildRequestsResult(requests, errors, rows)``.

    For every row and every output: render the Jinja2 prompt (StrictUndefined), build
    the neutral payload (text part first, then one part per image for a multimodal row),
    let the adapter turn it into the provider's request, and serialise it
    (:class:`~mmirage_beam.records.BatchRequest`, ``nbytes`` in bytes). A row whose
    outputs cannot all be built yields no request and one RowError naming the output,
    the reason and the source_index (undefined variable, a ``{{ expr }}`` that is null,
    parallel lists of different lengths (:func:`parallel_list_inputs`), whitespace-only
    prompt, an image the provider refuses or a request over one of its per-request
    limits (naming the image input), a request above the provider's hard per-batch byte
    limit).
    ``rows`` is PCollection[ExtractedRow]: the rows whose every request was built (the
    ones placeholder rows may be written for).

    Args:
        outputs: the ``processing_params.outputs``.
        datasets: the configured datasets (for error messages).
        adapter_cls: the provider's BatchSubmissionAdapter subclass (pickled with the DoFn).
        provider_config: the processor's BatchProviderConfig.
        count_tokens: count each request's input tokens (the ``tokens`` output and the
            ``mmirage`` token counters). Off for a merge's rebuild of the requests,
            which needs only their bytes: no tokenizer is loaded (about 125 MB per
            worker for ``o200k_base``) and, with ``exact_tokens``, no provider is called.
        count_selection: ``(custom_ids, keep_listed)``: count the tokens of only the
            requests the run sends (those in ``custom_ids`` when ``keep_listed``, else
            those not in it), so a resume's or a resubmission's estimate covers what it
            sends, not the requests already sent. None: every request.
        sample_fraction: ``--estimate sample``: count the tokens of only this share of
            the requests, chosen by custom_id
            (:func:`mmirage_beam.costs.tokens.in_sample`), for an extrapolated estimate.
            None: count every request (exact).
        canonical: also encode each request's canonical JSON from its dict
            (``BatchRequest.canonical``, the bytes its hashes cover), so staging hashes
            it without parsing the line. Off where nothing stages the requests, or where
            they are shuffled (the extra bytes would cross the shuffle).
        progress: a progress-report name (:mod:`mmirage_beam.progress`) counting the
            requests built (``mmirage run``'s "requests built"); empty: not counted.

    Raises:
        ValueError: ``outputs`` is empty.
        mmirage_beam.errors.ConfigError: ``sample_fraction`` is not in (0, 1].
    """

    def __init__(
        self,
        outputs: Sequence[OutputConfig],
        datasets: Sequence[DatasetConfig],
        adapter_cls: type,
        provider_config: BatchProviderConfig,
        count_tokens: bool = True,
        count_selection: Optional[tuple[frozenset, bool]] = None,
        sample_fraction: Optional[float] = None,
        canonical: bool = True,
        progress: str = "",
    ) -> None:
        super().__init__()
        if not outputs:
            raise ValueError("outputs must not be empty")
        if sample_fraction is not None:
            sample_fraction = check_sample_fraction(sample_fraction, "sample_fraction")
        self._fn = _BuildRequestsFn(
            _BuildSettings(
                tuple(outputs),
                tuple(datasets),
                adapter_cls,
                provider_config,
                count_tokens,
                count_selection,
                sample_fraction,
                canonical,
                progress,
            )
        )

    def expand(self, rows: beam.PCollection) -> BuildRequestsResult:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(rows)  # every SDK worker imports the package at start-up
        out = rows | "Build" >> beam.ParDo(self._fn).with_outputs(
            ERRORS_TAG, BUILT_ROWS_TAG, TOKENS_TAG, main="requests"
        )
        return BuildRequestsResult(
            out.requests, out[ERRORS_TAG], out[BUILT_ROWS_TAG], out[TOKENS_TAG]
        )


class BuildRequestsResult(NamedTuple):
    requests: beam.PCollection
    errors: beam.PCollection
    rows: beam.PCollection
    #: ``PCollection[dict[str, int]]``: token counts per bundle, keyed like the Beam
    #: counters of :mod:`mmirage_beam.costs.tokens` (``"input_tokens:<output>"``...).
    tokens: Any = None
