"""The boundary of the Beam YAML transforms: ``beam.Row`` -> :class:`SourceRow`.

A Beam YAML source's rows become plain JSON-compatible dicts (:func:`row_to_dict`) and
get their ``source_index`` (what merge joins on) from :class:`AssignSourceIndex`: the
``index_field`` column, or the row's rank in the content order of all rows. Used by
:class:`mmirage_beam.beam_yaml.transforms.SubmitBatches` and ``MergeBatches``.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import json
from typing import Any, Iterable, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from mmirage_beam.errors import ConfigError
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.records import RowError, SourceRow

__all__ = ["YAML_ROWS_LABEL", "plain_value", "row_to_dict", "AssignSourceIndex"]

#: buckets of the content-ordered index: rows are grouped by the first 4 hex digits of
#: their content hash, so no worker holds more than about 1/65,536 of the rows.
_INDEX_BUCKETS_HEX = 4
#: ``dataset_path`` of row errors and the dataset label of rows read by Beam YAML.
YAML_ROWS_LABEL = "<rows of the Beam YAML pipeline>"


def plain_value(value: Any) -> Any:
    """A Beam YAML field value as a plain JSON-compatible value.

    ``beam.Row`` and schema NamedTuples become dicts, sequences lists, numpy scalars
    Python numbers, dates and datetimes ISO 8601 strings, ``Decimal`` a float; ``bytes``
    and everything else is kept.
    """
    if hasattr(value, "_asdict"):
        return {k: plain_value(v) for k, v in value._asdict().items()}
    if hasattr(value, "as_dict") and callable(value.as_dict):  # beam.Row
        return {k: plain_value(v) for k, v in value.as_dict().items()}
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    if isinstance(value, (str, bytes, bool, int, float)) or value is None:
        return value
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy array
        return value.tolist()
    return value


def row_to_dict(row: Any) -> dict[str, Any]:
    """One Beam YAML element (``beam.Row``, a schema NamedTuple or a dict) as a dict.

    Raises:
        TypeError: the element is not a row (e.g. a bare string).
    """
    out = plain_value(row)
    if not isinstance(out, dict):
        raise TypeError(f"expected a schema'd row (beam.Row), got {type(row).__name__}")
    return out


def _canonical(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)


def _content_key(row: dict[str, Any]) -> tuple[str, str]:
    text = _canonical(row)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), text


class _IndexFromFieldFn(beam.DoFn):
    def __init__(self, index_field: str) -> None:
        self._field = index_field
        self._bad = Metrics.counter(METRICS_NAMESPACE, "row_errors")

    def process(self, element: Any) -> Iterable[Any]:
        row = row_to_dict(element)
        value = row.get(self._field)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # pandas reads an int column with gaps as floats
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self._bad.inc()
            yield beam.pvalue.TaggedOutput(
                "errors",
                RowError(
                    None,
                    YAML_ROWS_LABEL,
                    None,
                    f"index_field {self._field!r} must hold a non-negative integer, got "
                    f"{value!r}" + ("" if self._field in row else " (no such column)"),
                    f"{self._field}={value!r}",
                ),
            )
            return
        yield (value, row)


def _unique_index(kv: tuple[int, Iterable[dict[str, Any]]], index_field: str) -> Iterable[Any]:
    index, rows = kv
    rows = list(rows)
    if len(rows) == 1:
        yield SourceRow(index, 0, rows[0])
        return
    Metrics.counter(METRICS_NAMESPACE, "row_errors").inc(len(rows))
    for _ in rows:
        yield beam.pvalue.TaggedOutput(
            "errors",
            RowError(
                index,
                YAML_ROWS_LABEL,
                None,
                f"index_field {index_field!r} value {index} is shared by {len(rows)} rows; "
                "it must be unique (it is the source_index merge joins on)",
                f"{index_field}={index}",
            ),
        )


def _bucket_offsets(counts: list[tuple[str, int]]) -> dict[str, int]:
    offsets, total = {}, 0
    for bucket, n in sorted(counts):
        offsets[bucket] = total
        total += n
    return offsets


def _rank_bucket(kv: tuple[str, Iterable[Any]], offsets: dict[str, int]) -> Iterable[SourceRow]:
    bucket, keyed = kv
    for i, (_key, row) in enumerate(sorted(keyed, key=lambda e: e[0])):
        yield SourceRow(offsets[bucket] + i, 0, row)


class AssignSourceIndex(beam.PTransform):
    """``PCollection[beam.Row]`` -> ``{"rows": PCollection[SourceRow], "errors":
    PCollection[RowError]}``: every Beam YAML row as a plain dict with its
    ``source_index`` (``dataset_index`` 0).

    * ``index_field`` given: the source_index is that column's value, which must be a
      non-negative integer (an integral float is accepted) unique over the rows; a row
      without one, and every row sharing a value, is a row error (so nothing is
      submitted unless ``skip_invalid_rows``). Give the 0-based line or row position of
      the file to make ``mmirage merge --config`` (which counts positions) join these
      runs too.
    * no ``index_field``: the source_index is the row's rank when all rows are sorted by
      (SHA-256 of their canonical JSON, that JSON). Beam readers give no order, so this
      is the only index the same rows always get, on every runner and read. Its
      consequences: merged files are in that order, not the file's; adding, removing or
      editing one row shifts the index of others, which merge's source verification
      then reports as ``source_changed`` (never a wrong join); identical rows are
      interchangeable; ``mmirage merge --config`` cannot be used (use
      :class:`MergeBatches`).

    Computed in buckets of the hash (counts per bucket as a side input), so no worker
    sorts more than its bucket.
    """

    def __init__(self, index_field: Optional[str] = None) -> None:
        super().__init__()
        if index_field is not None and (not isinstance(index_field, str) or not index_field):
            raise ConfigError("index_field", "must be the name of a column")
        self.index_field = index_field

    def expand(self, pcoll: beam.PCollection) -> dict[str, beam.PCollection]:
        if self.index_field is not None:
            keyed = pcoll | "IndexFromField" >> beam.ParDo(
                _IndexFromFieldFn(self.index_field)
            ).with_outputs("errors", main="keyed")
            unique = (
                keyed.keyed
                | "GroupByIndex" >> beam.GroupByKey()
                | "UniqueIndex"
                >> beam.FlatMap(_unique_index, self.index_field).with_outputs("errors", main="rows")
            )
            errors = (keyed.errors, unique.errors) | "IndexErrors" >> beam.Flatten()
            return {"rows": unique.rows, "errors": errors}
        digits = _INDEX_BUCKETS_HEX
        keyed = (
            pcoll
            | "ToDicts" >> beam.Map(row_to_dict).with_output_types(Any)
            | "ContentKey" >> beam.Map(lambda r: (_content_key(r), r))
            | "ByBucket" >> beam.Map(lambda kr: (kr[0][0][:digits], kr))
        )
        counts = (
            keyed | "Buckets" >> beam.Keys() | "CountPerBucket" >> beam.combiners.Count.PerElement()
        )
        # Once, over every bucket's count (a side input: no global combine's GroupByKey).
        offsets = beam.pvalue.AsSingleton(
            pcoll.pipeline
            | "OffsetsOnce" >> beam.Impulse()
            | "Offsets"
            >> beam.Map(
                lambda _impulse, counts: _bucket_offsets(counts), beam.pvalue.AsList(counts)
            )
        )
        ranked = (
            keyed
            | "GroupByBucket" >> beam.GroupByKey()
            # "errors" is never emitted here: an empty PCollection without a Create.
            | "RankInBucket"
            >> beam.FlatMap(_rank_bucket, offsets).with_outputs("errors", main="rows")
        )
        return {"rows": ranked.rows, "errors": ranked.errors}
