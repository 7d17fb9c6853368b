"""Decode dataset rows into plain JSON-compatible dicts.

A JSONL line becomes a JSON object or the reason it cannot be one
(:func:`_decode_jsonl_line`); Parquet and Arrow record batches become rows through
:func:`to_json_value` (binary values always standard base64 strings), refusing a schema
that names a column or struct field twice. :func:`replace_lone_surrogates` makes a value
writable as UTF-8 JSON.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from mmirage_beam.io.splits import _Split

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["to_json_value", "replace_lone_surrogates"]

_ARROW_SLICE_ROWS = 256  # rows turned into Python objects at once (bounds memory)
_ARROW_FILE_MAGIC = b"ARROW1"


def to_json_value(value: Any) -> Any:
    """Turn a value decoded from Arrow / Parquet (or numpy) into plain JSON-compatible data.

    * ``None``, ``bool``, ``int``, ``str`` are kept; finite floats are kept, NaN and
      infinities become ``None``.
    * numpy scalars become Python numbers, numpy arrays and tuples become lists.
    * ``bytes`` always become a standard (RFC 4648, padded) base64 ``str``, even when they
      happen to be valid UTF-8, so binary columns (e.g. HF ``Image`` bytes) stay unambiguous.
    * ``datetime`` / ``date`` / ``time`` become ISO 8601 strings (timezone kept when
      known); ``timedelta`` becomes seconds (``float``); ``Decimal`` becomes ``float``
      (or ``None`` if not finite).
    * dicts (structs, maps) keep their structure; non-string keys become strings.
    * anything else becomes ``str(value)`` (e.g. ``uuid.UUID``).
    """
    t = type(value)
    if value is None or t is str or t is int or t is bool:
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_json_key(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if t.__module__ == "numpy" and hasattr(value, "tolist"):
        return to_json_value(value.tolist())
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    return str(value)


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    plain = to_json_value(key)
    return plain if isinstance(plain, str) else json.dumps(plain)


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _non_finite(_: str) -> None:
    return None


#: ``json.loads(text, parse_float=_finite_float, parse_constant=_non_finite)``'s decoder,
#: made once: ``json.loads`` with any argument builds a ``JSONDecoder`` per call
_ROW_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_non_finite)

_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate in its strings (keys included) replaced
    by U+FFFD, so that it can be written as UTF-8 JSON; other values are returned as is.
    """
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {replace_lone_surrogates(k): replace_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_lone_surrogates(v) for v in value]
    return value


def _decode_jsonl_line(content: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(row, None)`` for a JSON object line, else ``(None, reason)`` (also for a line
    holding an integer longer than Python reads, ``sys.get_int_max_str_digits()``)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (
            f"line is not valid UTF-8: byte 0x{content[exc.start]:02x} at byte offset "
            f"{exc.start} ({exc.reason})"
        )
    try:
        if text.startswith("\ufeff"):  # json.loads' own error for a byte order mark
            value = json.loads(text, parse_float=_finite_float, parse_constant=_non_finite)
        else:
            value = _ROW_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        return None, f"line is not valid JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, "line is not valid JSON: nested too deeply"
    except ValueError as exc:  # an integer longer than sys.get_int_max_str_digits()
        return None, f"line cannot be read as JSON: {exc}"
    if not isinstance(value, dict):
        kind = "null" if value is None else _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        return None, f"line is a JSON {kind}, not a JSON object"
    # An escaped lone surrogate ("\\ud800") is valid JSON but not valid UTF-8: it is
    # kept, so the row is written back as it was (jsonl.json_line); an input holding one
    # is an invalid row (ExtractInputs), never silently sent as U+FFFD.
    return value, None


def _arrow_batches(f: BinaryIO) -> Iterator[pa.RecordBatch]:
    """Record batches of an Arrow IPC stream (HF ``save_to_disk``) or IPC file, one at a time."""
    import pyarrow as pa

    magic = f.read(len(_ARROW_FILE_MAGIC))
    f.seek(0)
    if magic == _ARROW_FILE_MAGIC:
        reader = pa.ipc.open_file(f)
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        with pa.ipc.open_stream(f) as stream:
            yield from stream


class _RowsNotJson(ValueError):
    """The rows of a schema cannot become JSON objects without losing values."""


def _check_unique_names(t: pa.DataType | pa.Schema, where: str = "") -> None:
    """A column (or struct field) name twice would keep only one value per row, silently
    (``to_pylist`` builds a dict): refused, naming it.

    Raises:
        _RowsNotJson: naming the repeated column or field.
    """
    import pyarrow as pa
    import pyarrow.types as pat

    if isinstance(t, pa.Schema):
        fields = list(t)
    elif pat.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
    elif pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _check_unique_names(t.value_type, where)
    elif pat.is_map(t):
        return _check_unique_names(t.item_type, where)
    else:
        return None
    seen: set[str] = set()
    for f in fields:
        name = f"{where}.{f.name}" if where else f.name
        if f.name in seen:
            kind = "field" if where else "column"
            raise _RowsNotJson(
                f"{kind} {name!r} appears more than once in the schema; a row becomes a JSON "
                "object, which holds each name once"
            )
        seen.add(f.name)
        _check_unique_names(f.type, name)
    return None


def _rows_in_range(
    batches: Iterable[pa.RecordBatch], begin: int, stop: int, split: _Split
) -> Iterator[dict[str, Any]]:
    """Plain-JSON rows ``[begin, stop)`` (positions within the split) of ``batches``.

    Raises:
        _RowsNotJson: a column or struct field name appears twice in the schema.
    """
    position = 0
    for batch in batches:
        n = batch.num_rows
        if position + n > begin and position < stop:
            _check_unique_names(batch.schema)
            convert = _needs_conversion(batch.schema)
            for s in range(max(begin - position, 0), min(stop - position, n), _ARROW_SLICE_ROWS):
                part = batch.slice(s, min(_ARROW_SLICE_ROWS, stop - position - s))
                for row in part.to_pylist(maps_as_pydicts="lossy"):
                    yield to_json_value(row) if convert else row
        position += n
        if position >= stop:
            return
    raise RuntimeError(
        f"{split.path} changed while being read: expected at least {stop} rows in split "
        f"{split.split_id}, found {position}"
    )


def _needs_conversion(schema: pa.Schema) -> bool:
    """False when ``to_pylist`` already yields plain JSON for every column."""
    return any(_type_needs_conversion(field.type) for field in schema)


def _type_needs_conversion(t: pa.DataType) -> bool:
    import pyarrow.types as pat

    if pat.is_null(t) or pat.is_boolean(t) or pat.is_integer(t):
        return False
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        return False
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _type_needs_conversion(t.value_type)
    if pat.is_struct(t):
        return any(_type_needs_conversion(t.field(i).type) for i in range(t.num_fields))
    if pat.is_dictionary(t):
        return _type_needs_conversion(t.value_type)
    return True
