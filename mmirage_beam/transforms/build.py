"""ExtractInputs and BuildRequests: from source rows to provider-ready requests.

    SourceRow --ExtractInputs--> ExtractedRow --BuildRequests--> BatchRequest (+ RowError)

Provider specifics stay in the adapter (``build_request``); this module renders prompts,
resolves images and builds the provider-neutral payload described in
:class:`mmirage_beam.providers.base.BatchSubmissionAdapter`.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import DatasetConfig, InputConfig, OutputConfig
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.costs.tokens import check_sample_fraction, token_counter_for
from mmirage_beam.errors import RequestBuildError
from mmirage_beam.ids import custom_id
from mmirage_beam.images import load_image
from mmirage_beam.io.decode import replace_lone_surrogates
from mmirage_beam.jsonl import lone_surrogate_at
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress import INPUT_TOKENS, add
from mmirage_beam.providers.base import BatchSubmissionAdapter
from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.records import BatchRequest, RowError, SourceRow

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
ERRORS_TAG = "errors"
BUILT_ROWS_TAG = "rows"
TOKENS_TAG = "tokens"
_PROGRESS_EVERY = 256  # requests whose tokens are added to the progress report at once


class ExtractedRow(NamedTuple):
    """A source row with its inputs extracted.

    Attributes:
        source_index: the row's source_index.
        dataset_index: the row's dataset (config order).
        row: the original row dict.
        values: input name -> extracted value (JSON types; image inputs keep the path/URL).
        images: the row's images in input order, each the payload image dict of
            :func:`mmirage_beam.images.load_image` plus ``"input"``, the name of the
            image input it came from; empty for a text-only row.
    """

    source_index: int
    dataset_index: int
    row: dict[str, Any]
    values: dict[str, Any]
    images: tuple[dict[str, Any], ...]

    @property
    def modality(self) -> str:
        return "multimodal" if self.images else "text"


def _clean_text(value: str) -> str:
    """Replace unpaired surrogates (invalid in UTF-8) with U+FFFD so JSON stays valid.
    Only a rendered prompt is cleaned: a row's inputs holding one are invalid rows
    (ExtractInputs), so this changes only a lenient rebuild (merge) of such a row."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return replace_lone_surrogates(value)  # one U+FFFD per surrogate


class _ExtractInputsFn(beam.DoFn):
    def __init__(
        self,
        inputs: Sequence[InputConfig],
        datasets: Sequence[DatasetConfig],
        load_images: bool = True,
        lenient: bool = False,
        max_image_file_bytes: Optional[int] = None,
        image_file_limit: str = "",
    ) -> None:
        self._inputs = tuple(inputs)
        self._datasets = tuple(datasets)
        self._load_images = load_images
        self._lenient = lenient
        self._max_image_file_bytes = max_image_file_bytes
        self._image_file_limit = image_file_limit
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_extracted")

    def setup(self) -> None:
        import jmespath

        self._compiled = [(i, jmespath.compile(i.key)) for i in self._inputs]

    def start_bundle(self) -> None:
        self._extracted = 0  # added to the metric once per bundle

    def finish_bundle(self) -> None:
        if self._extracted:
            self._rows.inc(self._extracted)
        self._extracted = 0

    def process(self, element: SourceRow) -> Iterator[Any]:
        ds = self._datasets[element.dataset_index]
        values: dict[str, Any] = {}
        images: list[dict[str, Any]] = []
        for spec, expr in self._compiled:
            value = expr.search(element.row)
            if value is None and self._lenient and not spec.has_default:
                values[spec.name] = None
                continue
            if value is None:
                if not spec.has_default:
                    yield pvalue.TaggedOutput(
                        ERRORS_TAG,
                        RowError(
                            element.source_index,
                            ds.path,
                            spec.name,
                            f"input {spec.name!r} (key {spec.key!r}) is missing or null",
                        ),
                    )
                    return
                value = spec.default
            if not self._lenient:
                where = lone_surrogate_at(value)
                if where is not None:
                    yield pvalue.TaggedOutput(
                        ERRORS_TAG,
                        RowError(
                            element.source_index,
                            ds.path,
                            spec.name,
                            f"input {spec.name!r} (key {spec.key!r}) holds a lone UTF-16 "
                            f"surrogate ({where}), a character with no UTF-8 encoding: the "
                            "provider would receive U+FFFD in its place. Fix the source "
                            "row, or skip it with execution_params.skip_invalid_rows",
                        ),
                    )
                    return
            if spec.type == "image" and value is not None:
                refs = value if isinstance(value, list) else [value]
                if not self._load_images:
                    images.extend({"source": v, "input": spec.name} for v in refs)
                    values[spec.name] = value
                    continue
                try:
                    images.extend(
                        {
                            **load_image(
                                v,
                                ds.image_base_path,
                                ds.allow_images_outside_base,
                                self._max_image_file_bytes,
                                self._image_file_limit,
                            ),
                            "input": spec.name,
                        }
                        for v in refs
                    )
                except RequestBuildError as exc:
                    if self._lenient:  # merge re-reads rows: a bad image is no reason to
                        images.extend({"source": v, "input": spec.name} for v in refs)
                        values[spec.name] = value
                        continue
                    yield pvalue.TaggedOutput(
                        ERRORS_TAG, RowError(element.source_index, ds.path, spec.name, str(exc))
                    )
                    return
            values[spec.name] = value
        self._extracted += 1
        yield ExtractedRow(
            element.source_index, element.dataset_index, element.row, values, tuple(images)
        )


class ExtractInputs(beam.PTransform):
    """PCollection[SourceRow] -> ``ExtractInputsResult(rows, errors)``.

    ``rows`` is PCollection[ExtractedRow]: every ``processing_params.inputs`` JMESPath
    (compiled once per worker) applied to the row; image inputs resolved against the
    dataset's ``image_base_path`` and read (http(s) URLs are kept as URLs). ``errors`` is
    PCollection[RowError]: a missing or null input without ``default``, an input holding
    a lone UTF-16 surrogate (JSON ``"\\ud800"``: no UTF-8 encoding, a provider would get
    U+FFFD), or an image that
    may not or cannot be read (an absolute path, a path out of ``image_base_path``
    through ``..`` or a symlink, unless the dataset's ``allow_images_outside_base``; a
    URL of another scheme; a file over ``max_image_file_bytes``, refused before it is
    read; an unreadable or unrecognisable file), naming the input, the path and the
    source_index (:func:`mmirage_beam.images.load_image`).

    With ``load_images=False`` image files are not read: each image is ``{"source": value}``
    (enough for the modality and for rendering, as merge needs). With ``lenient=True`` a
    missing or null input is ``None`` and a lone surrogate is kept, instead of an error
    (merge re-reads rows that were skipped as invalid at submission, to write them marked,
    as the source held them).

    ``max_image_file_bytes`` (bytes) and ``image_file_limit`` (its wording in messages):
    the provider's per-image limit (``BatchSubmissionAdapter.max_image_file_bytes`` and
    ``image_file_limit``); None: :data:`mmirage_beam.images.DEFAULT_MAX_IMAGE_FILE_BYTES`.
    """

    def __init__(
        self,
        inputs: Sequence[InputConfig],
        datasets: Sequence[DatasetConfig],
        load_images: bool = True,
        lenient: bool = False,
        max_image_file_bytes: Optional[int] = None,
        image_file_limit: str = "",
    ) -> None:
        super().__init__()
        if not inputs:
            raise ValueError("inputs must not be empty")
        if max_image_file_bytes is not None and max_image_file_bytes < 1:
            raise ValueError("max_image_file_bytes must be at least 1")
        self._inputs = tuple(inputs)
        self._datasets = tuple(datasets)
        self._load_images = load_images
        self._lenient = lenient
        self._max_image_file_bytes = max_image_file_bytes
        self._image_file_limit = image_file_limit

    def expand(self, rows: beam.PCollection) -> ExtractInputsResult:
        out = rows | "Extract" >> beam.ParDo(
            _ExtractInputsFn(
                self._inputs,
                self._datasets,
                self._load_images,
                self._lenient,
                self._max_image_file_bytes,
                self._image_file_limit,
            )
        ).with_outputs(ERRORS_TAG, main="rows")
        return ExtractInputsResult(out.rows, out[ERRORS_TAG])


class ExtractInputsResult(NamedTuple):
    rows: beam.PCollection
    errors: beam.PCollection


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
    return {
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


class _BuildRequestsFn(beam.DoFn):
    def _counted(self, cid: str) -> bool:
        """Whether this run sends ``cid`` (a resume sends only what has no receipt)."""
        if self._count_selection is None:
            return True
        ids, keep_listed = self._count_selection
        return (cid in ids) == keep_listed

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
    ) -> None:
        self._outputs = tuple(outputs)
        self._canonical = canonical
        self._sample_fraction = sample_fraction
        self._datasets = tuple(datasets)
        self._count_tokens = count_tokens
        self._count_selection = count_selection
        self._adapter_cls = adapter_cls
        self._config = provider_config
        self._requests = Metrics.counter(METRICS_NAMESPACE, "requests")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "request_bytes")

    def setup(self) -> None:
        from mmirage_beam.transforms.render import PromptTemplate, make_environment

        env = make_environment(reject_null=True)
        # plain substitution is filled without Jinja, with Jinja's bytes and errors
        self._templates = [(o, PromptTemplate(o.prompt, env)) for o in self._outputs]
        self._used = {o.name: template_variables(o.prompt) for o in self._outputs}
        self._parallel = {o.name: parallel_list_inputs(o.prompt) for o in self._outputs}
        # Only building and sizing happen here: no credentials, no client.
        self._adapter = self._adapter_cls()
        self._hard_limit = type(self._config).PROVIDER_MAX_BATCH_BYTES
        self._overhead = self._adapter.chunk_overhead_bytes
        # What is the same for every row is built once: each output's JSON schema; and
        # whether the adapter sizes requests its own way (else nbytes is len(line)).
        self._schemas = {
            o.name: json_schema_for(o.output_schema) if o.output_type == "JSON" else None
            for o in self._outputs
        }

        self._own_estimate = (
            type(self._adapter).estimate_request_bytes
            is not BatchSubmissionAdapter.estimate_request_bytes
        )
        # The canonical JSON the request hashes cover, encoded from the request dict
        # (no parse of the line), when the line is the base class's encoding of that
        # same dict: an adapter serialising its own way is canonicalised from its line.
        self._encode_canonical = None
        if (
            self._canonical
            and type(self._adapter).serialize_request is BatchSubmissionAdapter.serialize_request
        ):
            self._encode_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

        # per-output token counters; None when not counted (a merge's rebuild)
        self._tokens = (
            token_counter_for(self._config, self._sample_fraction) if self._count_tokens else None
        )
        # a sampled request stands for 1 / fraction requests in the progress report
        self._progress_scale = 1.0 / self._sample_fraction if self._sample_fraction else 1.0

    def start_bundle(self) -> None:
        # Counted locally, added to the metrics once per bundle (cheaper per row).
        self._count = self._nbytes = 0
        self._progress_tokens = self._progress_mark = 0

    def _flush_progress(self) -> None:
        """The input tokens counted since the last call, to the progress report."""
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
        import jinja2

        from mmirage_beam.transforms.render import NullValueError, holds_null

        ds_path = self._datasets[element.dataset_index].path
        built: list[BatchRequest] = []
        bodies: list[dict[str, Any]] = []  # the request dicts, counted without a re-parse
        for output, template in self._templates:
            where = f"output {output.name!r}"
            misaligned = _misaligned_lists(self._parallel[output.name], element.values)
            if misaligned is not None:
                names, reason = misaligned
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    RowError(
                        element.source_index, ds_path, names, f"the prompt of {where} {reason}"
                    ),
                )
                return
            try:
                prompt = _clean_text(template.render(element.values))
                if not prompt.strip():
                    raise RequestBuildError(f"the prompt of {where} renders to whitespace only")
                cid = custom_id(output.name, element.modality, element.source_index)
                payload = build_payload(prompt, element.images, output, self._schemas[output.name])
                request = self._adapter.build_request(cid, payload, self._config)
                line = self._adapter.serialize_request(request)
                canon = None
                if self._encode_canonical is not None and _str_keys_only(request):
                    canon = self._encode_canonical(request).encode("ascii")
                # Never below the real size, so a chunk's upload stays within its cap
                # even for an adapter whose estimate is low.
                nbytes = len(line)
                if self._own_estimate:
                    nbytes = max(self._adapter.estimate_request_bytes(request), nbytes)
                if self._hard_limit is not None and nbytes + self._overhead > self._hard_limit:
                    raise RequestBuildError(
                        f"the request of {where} is {nbytes} bytes, above the provider's "
                        f"hard limit of {self._hard_limit} bytes per batch; it can never be "
                        "submitted"
                    )
            except NullValueError as exc:
                nulls = [
                    n
                    for n in sorted(self._used[output.name])
                    if n in element.values and holds_null(element.values[n])
                ]
                name = ", ".join(nulls) if nulls else output.name
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    RowError(
                        element.source_index,
                        ds_path,
                        name,
                        f"the prompt of {where} would render {exc} as the text 'None'"
                        + (f" (input {name!r} holds null)" if nulls else "")
                        + "; give the input a non-null default, or guard it in the "
                        "template ({% if x %}...{% endif %}, {{ x or '' }})",
                    ),
                )
                return
            except jinja2.UndefinedError as exc:
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    RowError(
                        element.source_index,
                        ds_path,
                        output.name,
                        f"the prompt of {where} uses an undefined variable: {exc.message}",
                    ),
                )
                return
            except (RequestBuildError, jinja2.TemplateError) as exc:
                # An image limit names the image input (and the output in its message).
                name = getattr(exc, "input_name", None)
                reason = f"{where}: {exc}" if name else str(exc)
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    RowError(element.source_index, ds_path, name or output.name, reason),
                )
                return
            built.append(
                BatchRequest(
                    cid, element.source_index, output.name, element.modality, line, nbytes, canon
                )
            )
            bodies.append(request)
        # A row yields its requests only when every output of it is valid.
        for req, body in zip(built, bodies):
            self._count += 1
            self._nbytes += req.nbytes
            if self._tokens is not None and self._counted(req.custom_id):
                tc = self._tokens.record(req.output_name, body, req.custom_id)
                if tc is not None:
                    self._progress_tokens += round(tc.input_tokens * self._progress_scale)
                if self._count - self._progress_mark >= _PROGRESS_EVERY:
                    self._flush_progress()
            yield req
        yield pvalue.TaggedOutput(BUILT_ROWS_TAG, element)


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
    ) -> None:
        super().__init__()
        if not outputs:
            raise ValueError("outputs must not be empty")
        if sample_fraction is not None:
            sample_fraction = check_sample_fraction(sample_fraction, "sample_fraction")
        self._fn = _BuildRequestsFn(
            outputs,
            datasets,
            adapter_cls,
            provider_config,
            count_tokens,
            count_selection,
            sample_fraction,
            canonical,
        )

    def expand(self, rows: beam.PCollection) -> BuildRequestsResult:
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


_JSON_SCALARS = frozenset((str, int, float, bool, type(None)))


def _str_keys_only(value: Any) -> bool:
    """Whether ``value`` is plain JSON (dicts, lists, str, int, float, bool, None, no
    subclasses) whose every dict key is a ``str``.

    Only then is the dict's sorted encoding the line's canonical form: a line's keys are
    strings once parsed back, sorted as strings, while ``{10: x, 9: y}`` sorts as ints;
    anything else (a tuple, a subclass) is canonicalised from the line instead."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (
                type(item) not in _JSON_SCALARS and not _str_keys_only(item)
            ):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _JSON_SCALARS and not _str_keys_only(item):
                return False
        return True
    return kind in _JSON_SCALARS


def template_variables(source: str) -> frozenset[str]:
    """The top-level variables a Jinja2 template reads (e.g. ``{"question"}``)."""
    import jinja2
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(jinja2.Environment().parse(source)))


def parallel_list_inputs(source: str) -> tuple[frozenset[str], ...]:
    """Groups of variables a template walks in step, as parallel lists.

    A group is every variable that one ``{% for %}`` loop iterates over or indexes with
    the loop's position: ``{% for q in questions %}{{ answers[loop.index0] }}`` gives
    ``{questions, answers}``; ``{% for i in range(n) %}{{ a[i] }} {{ b[i] }}`` gives
    ``{a, b}``. Only groups of two or more are returned. A row whose lists of one group
    have different lengths is invalid (a JMESPath projection such as ``items[*].x``
    drops nulls, so the lists no longer line up).
    """
    import jinja2
    from jinja2 import nodes

    def is_position(node: Any, counters: set[str]) -> bool:
        for n in [node, *node.find_all((nodes.Name, nodes.Getattr))]:
            if isinstance(n, nodes.Name) and n.name in counters:
                return True
            if (
                isinstance(n, nodes.Getattr)
                and isinstance(n.node, nodes.Name)
                and n.node.name == "loop"
                and n.attr in ("index0", "index", "revindex0", "revindex")
            ):
                return True
        return False

    groups: list[frozenset[str]] = []
    for loop in jinja2.Environment().parse(source).find_all(nodes.For):
        group: set[str] = set()
        counters: set[str] = set()
        it = loop.iter
        while isinstance(it, nodes.Filter) and it.node is not None:
            it = it.node
        if isinstance(it, nodes.Name):
            group.add(it.name)
        elif (
            isinstance(it, nodes.Call)
            and isinstance(it.node, nodes.Name)
            and it.node.name == "range"
            and isinstance(loop.target, nodes.Name)
        ):
            counters.add(loop.target.name)
        for body_node in loop.body:
            for item in [body_node, *body_node.find_all(nodes.Getitem)]:
                if (
                    isinstance(item, nodes.Getitem)
                    and isinstance(item.node, nodes.Name)
                    and is_position(item.arg, counters)
                ):
                    group.add(item.node.name)
        if len(group) >= 2:
            groups.append(frozenset(group))
    return tuple(groups)


def _misaligned_lists(
    groups: Sequence[frozenset[str]], values: dict[str, Any]
) -> Optional[tuple[str, str]]:
    """``(input names, reason)`` for the first group of :func:`parallel_list_inputs`
    whose list values differ in length, else None."""
    for group in groups:
        lists = {n: values[n] for n in sorted(group) if isinstance(values.get(n), list)}
        if len({len(v) for v in lists.values()}) > 1:
            sizes = ", ".join(f"{n!r} has {len(v)}" for n, v in lists.items())
            return (
                ", ".join(lists),
                f"walks inputs {', '.join(map(repr, lists))} in step as parallel lists, but "
                f"they have different lengths ({sizes} items); a JMESPath projection like "
                "items[*].field drops nulls: use map(&field, items) to keep them "
                "(see docs/config.md, 'Parallel lists')",
            )
    return None
