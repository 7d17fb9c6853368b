"""ExtractInputs: a source row's ``processing_params.inputs``, by JMESPath, images read.

    SourceRow --ExtractInputs--> ExtractedRow (+ RowError)

BuildRequests (:mod:`mmirage_beam.transforms.build`) renders the prompts from these rows.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import DatasetConfig, InputConfig
from mmirage_beam.errors import RequestBuildError
from mmirage_beam.images import load_image
from mmirage_beam.jsonl import lone_surrogate_at
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.progress.counters import add
from mmirage_beam.records import RowError, SourceRow

__all__ = ["ERRORS_TAG", "ExtractedRow", "ExtractInputs", "ExtractInputsResult", "compile_key"]

ERRORS_TAG = "errors"
_PROGRESS_EVERY = 256  # rows added to the progress report at once


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


def compile_key(key: str) -> Callable[[Any], Any]:
    """``value -> jmespath.search(key, value)``, the same result, compiled once.

    A key that is a field or a chain of fields (``question``, ``meta.source``,
    ``"a b".c``: most inputs) is looked up with ``dict.get`` as JMESPath's own field
    visitor does (anything without ``.get`` gives None), without building a JMESPath
    interpreter per call; any other expression is JMESPath's ``search``.

    Raises:
        jmespath.exceptions.ParseError: ``key`` is not a JMESPath expression.
    """
    import jmespath

    expr = jmespath.compile(key)
    ast = expr.parsed
    if ast["type"] == "field":
        names = [ast["value"]]
    elif ast["type"] == "subexpression" and all(c["type"] == "field" for c in ast["children"]):
        names = [c["value"] for c in ast["children"]]
    else:
        return expr.search
    if len(names) == 1:
        name = names[0]

        def field(value: Any) -> Any:
            try:
                return value.get(name)
            except AttributeError:
                return None

        return field

    def fields(value: Any) -> Any:
        for name in names:
            try:
                value = value.get(name)
            except AttributeError:
                return None
            if value is None:
                return None
        return value

    return fields


def _input_error(
    element: SourceRow, ds: DatasetConfig, spec: InputConfig, what: str
) -> pvalue.TaggedOutput:
    """The ``errors`` output of a row whose input ``spec`` cannot be used: a
    :class:`RowError` naming the row, the dataset, the input and its key, then ``what``
    is wrong with it."""
    return pvalue.TaggedOutput(
        ERRORS_TAG,
        RowError(
            element.source_index,
            ds.path,
            spec.name,
            f"input {spec.name!r} (key {spec.key!r}) {what}",
        ),
    )


def _missing(row: Any, key: str) -> str:
    """Why a row's input is None: null, or (a plain key ``a`` or ``a.b.c`` whose field
    the row does not have) absent, with the nearest key where the path broke, so a
    typo'd YAML key is told from a bad row."""
    parts = key.split(".")
    if not isinstance(row, Mapping) or not all(_PLAIN_KEY.match(p) for p in parts):
        return "is missing or null"
    obj: Any = row
    for i, part in enumerate(parts):
        if not isinstance(obj, Mapping):
            return "is missing or null"  # a field of a non-object: not a key typo
        if part not in obj:
            names = [str(k) for k in obj]
            prefix = ".".join(parts[:i])
            near = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            if near:
                hint = f"did you mean {'.'.join([*parts[:i], near[0]])!r}?"
            else:
                shown = ", ".join(repr(n) for n in sorted(names)[:8])
                more = ", ..." if len(names) > 8 else ""
                where = f"keys of {prefix!r}" if prefix else "its keys"
                hint = f"{where}: {shown or 'none'}{more}"
            return f"is missing: the row has no key {key!r} ({hint})"
        obj = obj[part]
    return "is missing or null"


#: a JMESPath key that names one top-level field (no dots, brackets or functions).
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclasses.dataclass(frozen=True)
class _ExtractSettings:
    """:class:`ExtractInputs`'s arguments once checked (their meaning is documented
    there): the inputs to extract from each row and how, which :class:`_ExtractInputsFn`
    carries to the workers."""

    inputs: tuple[InputConfig, ...]
    datasets: tuple[DatasetConfig, ...]
    load_images: bool
    lenient: bool
    max_image_file_bytes: Optional[int]
    image_file_limit: str
    progress: str


class _ExtractInputsFn(beam.DoFn):
    def __init__(self, settings: _ExtractSettings) -> None:
        self._s = settings
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_extracted")

    def setup(self) -> None:
        self._compiled = [(i, compile_key(i.key)) for i in self._s.inputs]

    def start_bundle(self) -> None:
        self._extracted = 0  # added to the metric once per bundle
        self._seen = 0  # rows seen, added to the progress report every _PROGRESS_EVERY

    def finish_bundle(self) -> None:
        if self._extracted:
            self._rows.inc(self._extracted)
        self._extracted = 0
        if self._s.progress and self._seen:
            add(self._s.progress, self._seen)
        self._seen = 0

    def process(self, element: SourceRow) -> Iterator[Any]:
        if self._s.progress:
            self._seen += 1
            if self._seen >= _PROGRESS_EVERY:
                add(self._s.progress, self._seen)
                self._seen = 0
        ds = self._s.datasets[element.dataset_index]
        values: dict[str, Any] = {}
        images: list[dict[str, Any]] = []
        for spec, lookup in self._compiled:
            value = lookup(element.row)
            if value is None and self._s.lenient and not spec.has_default:
                values[spec.name] = None
                continue
            if value is None:
                if not spec.has_default:
                    yield _input_error(element, ds, spec, _missing(element.row, spec.key))
                    return
                value = spec.default
            if not self._s.lenient:
                where = lone_surrogate_at(value)
                if where is not None:
                    yield _input_error(
                        element,
                        ds,
                        spec,
                        f"holds a lone UTF-16 surrogate ({where}), a character with no UTF-8 "
                        "encoding: the provider would receive U+FFFD in its place. Fix the "
                        "source row, or skip it with execution_params.skip_invalid_rows",
                    )
                    return
            if spec.type == "image" and value is not None:
                refs = value if isinstance(value, list) else [value]
                if not self._s.load_images:
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
                                self._s.max_image_file_bytes,
                                self._s.image_file_limit,
                            ),
                            "input": spec.name,
                        }
                        for v in refs
                    )
                except RequestBuildError as exc:
                    if self._s.lenient:  # merge re-reads rows: a bad image is no reason to
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

    ``progress``: a progress-report name (:mod:`mmirage_beam.progress`) that counts every
    row this step sees, valid or not (``mmirage run``'s "rows read", counted here rather
    than by a step of its own); empty: not counted.
    """

    def __init__(
        self,
        inputs: Sequence[InputConfig],
        datasets: Sequence[DatasetConfig],
        load_images: bool = True,
        lenient: bool = False,
        max_image_file_bytes: Optional[int] = None,
        image_file_limit: str = "",
        progress: str = "",
    ) -> None:
        super().__init__()
        if not inputs:
            raise ValueError("inputs must not be empty")
        if max_image_file_bytes is not None and max_image_file_bytes < 1:
            raise ValueError("max_image_file_bytes must be at least 1")
        self._fn = _ExtractInputsFn(
            _ExtractSettings(
                tuple(inputs),
                tuple(datasets),
                load_images,
                lenient,
                max_image_file_bytes,
                image_file_limit,
                progress,
            )
        )

    def expand(self, rows: beam.PCollection) -> ExtractInputsResult:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(rows)  # every SDK worker imports the package at start-up
        out = rows | "Extract" >> beam.ParDo(self._fn).with_outputs(ERRORS_TAG, main="rows")
        return ExtractInputsResult(out.rows, out[ERRORS_TAG])


class ExtractInputsResult(NamedTuple):
    rows: beam.PCollection
    errors: beam.PCollection
