"""Output rows: the top-level ``output_schema`` rendered for each source row.

At submission the batch outputs are not known yet, so each is the placeholder
``__BATCH_SUBMITTED__:<custom_id>``; ``merge`` renders the same schema with the real
values.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import apache_beam as beam

from mmirage_beam.config.loader import OutputConfig
from mmirage_beam.ids import custom_id_maker
from mmirage_beam.jsonl import json_line
from mmirage_beam.transforms.render import SchemaRenderer

__all__ = [
    "PLACEHOLDER_PREFIX",
    "Placeholder",
    "placeholder",
    "assemble_output_row",
    "RenderPlaceholderRows",
]


PLACEHOLDER_PREFIX = "__BATCH_SUBMITTED__:"


class Placeholder(str):
    """``__BATCH_SUBMITTED__:<custom_id>``; any attribute or item of it is itself, so a
    schema template such as ``{{ answer.question }}`` renders the placeholder before the
    JSON answer exists."""

    def __getattr__(self, name: str) -> Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key: object) -> Placeholder:  # type: ignore[override]
        return self


def placeholder(cid: str) -> Placeholder:
    """``__BATCH_SUBMITTED__:<custom_id>``."""
    return Placeholder(PLACEHOLDER_PREFIX + cid)


def assemble_output_row(
    row: dict[str, Any],
    values: dict[str, Any],
    outputs: dict[str, Any],
    renderer: Optional[SchemaRenderer],
    remove_columns: bool,
    source_index: int,
) -> dict[str, Any]:
    """One output row.

    The schema is rendered with the row's inputs and outputs (outputs win); with no
    schema, the row is the inputs and outputs themselves. Unless ``remove_columns``, the
    original columns come first and rendered keys override them; with no schema, only
    the outputs do: an input is a template variable, so its value (a ``default``
    standing in for a null) never replaces the source column of the same name, which
    comes out as it went in, as in MMIRAGE, whose inputs live in the templates'
    variable environment and whose rows keep their columns (issue 38). ``source_index``
    is always set.

    Raises:
        jinja2.UndefinedError: a schema template uses an unknown variable.
    """
    variables = dict(values)
    variables.update(outputs)
    if renderer is not None:
        rendered = renderer.render(variables)
    elif remove_columns:
        rendered = variables
    else:  # the row's own columns stay as they went in; new input names and outputs added
        rendered = {k: v for k, v in values.items() if k not in row}
        rendered.update(outputs)
    if not isinstance(rendered, dict):
        rendered = {"output": rendered}
    out: dict[str, Any] = {} if remove_columns else dict(row)
    out.update(rendered)
    out["source_index"] = source_index
    return out


class _PlaceholderRowFn(beam.DoFn):
    """``ExtractedRow`` -> ``(dataset_index, bytes)``: one line per element, or with
    ``block_bytes`` a dataset's lines of the bundle joined, in arrival order, into
    elements of about ``block_bytes`` (the rest when the bundle ends: the rows are in the
    global window). No parameter beyond the element, so Beam calls it without filling
    arguments per element."""

    def __init__(
        self,
        outputs: Sequence[OutputConfig],
        schema: Any,
        remove_columns: bool,
        block_bytes: int = 0,
    ) -> None:
        self._names = [o.name for o in outputs]
        self._schema = schema
        self._remove = remove_columns
        self._block_bytes = block_bytes

    def setup(self) -> None:
        self._renderer = SchemaRenderer(self._schema) if self._schema is not None else None

    def start_bundle(self) -> None:
        self._blocks: dict[int, list[bytes]] = {}
        self._block_sizes: dict[int, int] = {}

    def _line(self, element: Any) -> bytes:
        modality, index = element.modality, element.source_index
        outputs = {n: placeholder(custom_id_maker(n, modality)(index)) for n in self._names}
        row = assemble_output_row(
            element.row,
            element.values,
            outputs,
            self._renderer,
            self._remove,
            element.source_index,
        )
        # a lone surrogate of a source column written back as the source held it
        return json_line(row, default=str)

    def process(self, element: Any) -> Iterator[Any]:
        line = self._line(element)
        if not self._block_bytes:
            yield element.dataset_index, line
            return
        dataset = element.dataset_index
        block = self._blocks.setdefault(dataset, [])
        block.append(line)
        size = self._block_sizes.get(dataset, 0) + len(line)
        if size >= self._block_bytes:
            yield dataset, b"".join(block)
            block.clear()
            size = 0
        self._block_sizes[dataset] = size

    def finish_bundle(self) -> Iterator[Any]:
        from apache_beam.transforms.window import GlobalWindows

        for dataset in sorted(self._blocks):
            if self._blocks[dataset]:
                yield GlobalWindows.windowed_value((dataset, b"".join(self._blocks[dataset])))
        self._blocks, self._block_sizes = {}, {}


class _GatedPlaceholderRowFn(_PlaceholderRowFn):
    """:class:`_PlaceholderRowFn` behind the invalid-row count (a side input)."""

    def process(self, element: Any, invalid_row_count: int) -> Iterator[Any]:
        # When the run is refused (invalid rows), no placeholder may point nowhere.
        if not invalid_row_count:
            yield from super().process(element)


class RenderPlaceholderRows(beam.PTransform):
    """PCollection[ExtractedRow] -> PCollection[(dataset_index, bytes)]: one JSONL line
    per element, or with ``block_bytes`` several.

    Args:
        outputs: the batch outputs (each becomes a placeholder value).
        output_schema: the top-level ``output_schema`` (None: inputs and outputs).
        remove_columns: drop the source columns.
        invalid_row_count: optional singleton side input; rows are written only when 0.
        block_bytes: 0: one line per element. Else a bundle's lines of each dataset are
            joined, in arrival order, into elements of about this many bytes (the last
            one when the bundle ends), so the steps writing them handle a few elements
            instead of one per row; for rows in the global window (every reader's).

    Raises:
        ValueError: ``block_bytes`` is negative.
    """

    def __init__(
        self,
        outputs: Sequence[OutputConfig],
        output_schema: Any,
        remove_columns: bool,
        invalid_row_count: Optional[Any] = None,
        block_bytes: int = 0,
    ) -> None:
        super().__init__()
        if block_bytes < 0:
            raise ValueError(f"block_bytes must be at least 0, got {block_bytes}")
        gated = _PlaceholderRowFn if invalid_row_count is None else _GatedPlaceholderRowFn
        self._fn = gated(outputs, output_schema, remove_columns, block_bytes)
        self._invalid = invalid_row_count

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        from mmirage_beam.worker_imports import import_on_workers

        import_on_workers(rows)  # every SDK worker imports the package at start-up
        kwargs = {} if self._invalid is None else {"invalid_row_count": self._invalid}
        return rows | "Render" >> beam.ParDo(self._fn, **kwargs)
