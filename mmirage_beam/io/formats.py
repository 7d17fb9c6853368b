"""The merged file in other formats: Parquet and a Hugging Face ``save_to_disk`` folder.

``mmirage merge --output-format parquet|hf`` first writes the ordered JSONL merge as
usual (to a temporary file beside the output), then :func:`convert_merged_jsonl` streams
it, in batches of ``batch_rows`` rows, into the requested format: memory stays bounded by
one batch, whatever the dataset's size. Two passes over the JSONL: the first derives the
Arrow schema (:func:`derive_schema`), the second writes.

Formats:
  * ``parquet``: one Parquet file (pyarrow's ``ParquetWriter``, one row group per batch).
  * ``hf``: the folder ``datasets.Dataset.save_to_disk`` writes, which
    ``datasets.load_from_disk`` opens: ``data-0000i-of-0000N.arrow`` (Arrow IPC stream
    format, a new shard past ``HF_MAX_SHARD_BYTES``), ``dataset_info.json`` (the
    features) and ``state.json`` (the shard list), as written by datasets 5.2
    (``arrow_dataset.py`` ``save_to_disk``; ``config.MAX_SHARD_SIZE``). The ``datasets``
    package is not needed to write it.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from mmirage_beam.errors import ConfigError
from mmirage_beam.io.fs import delete_files, list_files

if TYPE_CHECKING:  # pyarrow loads only where a Parquet file is written
    import pyarrow as pa

__all__ = [
    "OUTPUT_FORMATS",
    "DEFAULT_BATCH_ROWS",
    "format_for_path",
    "HF_MAX_SHARD_BYTES",
    "declared_types",
    "derive_schema",
    "hf_features",
    "check_hf_folder",
    "convert_merged_jsonl",
]


OUTPUT_FORMATS = ("jsonl", "parquet", "hf")


def format_for_path(path: str) -> str:
    """The merged file's format when none is given: ``parquet`` for a ``.parquet`` path,
    else ``jsonl`` (an ``hf`` folder has no extension to tell it by: ``--output-format
    hf``). A ``.parquet`` path got JSONL bytes before, which pyarrow then refused."""
    return "parquet" if str(path).rstrip("/").lower().endswith(".parquet") else "jsonl"


#: rows per converted batch (about 1.6 KB of JSON per merged row: some 16 MB per batch)
DEFAULT_BATCH_ROWS = 10_000
#: datasets' ``config.MAX_SHARD_SIZE`` ("500MB"): a new .arrow shard past it
HF_MAX_SHARD_BYTES = 500 * 1000 * 1000
_HF_FILES = ("dataset_info.json", "state.json")
_HF_SHARD_RE = re.compile(r"data-\d{5}-of-\d{5}\.arrow$")
_ONE_EXPR_RE = re.compile(r"^\{\{\s*([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?\s*\}\}$")
_INT_FIELDS = ("source_index", "input_tokens", "output_tokens")


def _scalar_type(declared: Any) -> Any:
    """An ``output_schema`` field type (``int``, ``{type: float, ...}``) -> an Arrow type,
    or None where the values decide (lists, objects)."""
    import pyarrow as pa

    name = declared.get("type") if isinstance(declared, dict) else declared
    return {
        "str": pa.string(),
        "string": pa.string(),
        "int": pa.int64(),
        "integer": pa.int64(),
        "float": pa.float64(),
        "number": pa.float64(),
        "bool": pa.bool_(),
        "boolean": pa.bool_(),
    }.get(str(name))


def declared_types(outputs: Sequence[Any], output_schema: Any) -> dict[str, pa.DataType]:
    """Column name -> Arrow type, from the config alone: the tool's own integer fields,
    plain outputs (text), embedding outputs (``list<float32>``, of fixed size
    ``dimensions`` when the config gives it), and each top-level ``output_schema`` entry
    that is exactly one expression naming an output (``{{ answer }}``,
    ``{{ facts.count }}`` with ``count`` declared in that JSON output's
    ``output_schema``) or is longer text (a string).
    Columns not named here (source columns, objects, lists) take the type their values
    have (:func:`derive_schema`)."""
    import pyarrow as pa

    types: dict[str, pa.DataType] = {name: pa.int64() for name in _INT_FIELDS}
    by_name = {o.name: o for o in outputs}

    def of_output(name: str, field: Optional[str]) -> Any:
        output = by_name.get(name)
        if output is None:
            return None  # an input: its values decide
        if output.output_type == "embedding":
            if field is not None:
                return None
            # float32: what the providers' vectors hold; a fixed-size list when the
            # config gives the length (every vector is checked to have it at merge)
            dims = getattr(output, "dimensions", None)
            return pa.list_(pa.float32(), dims) if dims else pa.list_(pa.float32())
        if str(output.output_type).lower() != "json":
            return pa.string() if field is None else None
        schema = output.output_schema
        if field is None or not isinstance(schema, dict):
            return None
        return _scalar_type(schema.get(field))

    if output_schema is None:
        for name in by_name:
            if (t := of_output(name, None)) is not None:
                types[name] = t
    elif isinstance(output_schema, dict):
        for key, template in output_schema.items():
            if not isinstance(template, str):
                continue
            m = _ONE_EXPR_RE.match(template.strip())
            t = of_output(m.group(1), m.group(2)) if m else None
            if m is None and ("{{" in template or "{%" in template):
                t = pa.string()  # a longer template renders as text
            if t is not None and key not in _INT_FIELDS:
                types[str(key)] = t
    return types


def _read_batches(path: str, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    """The JSONL file's rows, ``batch_rows`` at a time (streamed)."""
    batch: list[dict[str, Any]] = []
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for line in f:
            if line.strip():
                batch.append(json.loads(line))
                if len(batch) >= batch_rows:
                    yield batch
                    batch = []
    if batch:
        yield batch


def _unify(a: Any, b: Any) -> Any:
    """The type both ``a`` and ``b`` fit in (null -> anything, int -> float, struct
    fields merged), or None when there is none."""
    import pyarrow as pa

    if a == b:
        return a
    try:
        merged = pa.unify_schemas(
            [pa.schema([pa.field("x", a)]), pa.schema([pa.field("x", b)])],
            promote_options="permissive",
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return merged.field("x").type


def derive_schema(
    path: str, declared: dict[str, Any], batch_rows: int = DEFAULT_BATCH_ROWS
) -> tuple[Any, frozenset[str]]:
    """The Arrow schema of the merged JSONL file at ``path`` (one streamed pass).

    Columns keep the order in which they first appear. A column of ``declared`` has that
    type; any other takes the type of its values, unified over every batch (a column
    null in some rows and an int in others is an int column; ints and floats are
    floats; objects are structs with every key seen). A column whose values have no
    common type (a source column holding numbers in some rows and text in others) is
    written as JSON text, and named in the returned set.

    Returns:
        ``(pyarrow.Schema, names of the columns written as JSON text)``.
    """
    import pyarrow as pa

    types: dict[str, Any] = {}
    as_json: set[str] = set()
    for rows in _read_batches(path, batch_rows):
        names: dict[str, None] = {}
        for row in rows:
            names.update(dict.fromkeys(row))
        for name in names:
            if name in as_json:
                continue
            try:
                t = pa.array([row.get(name) for row in rows]).type
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                as_json.add(name)
                types[name] = pa.string()
                continue
            if name not in types:
                types[name] = t
                continue
            merged = _unify(types[name], t)
            if merged is None:
                as_json.add(name)
                merged = pa.string()
            types[name] = merged
    for name, t in declared.items():
        if name in types and name not in as_json:
            types[name] = t
    return pa.schema([pa.field(n, t) for n, t in types.items()]), frozenset(as_json)


def _table(rows: list[dict[str, Any]], schema: Any, as_json: frozenset[str]) -> Any:
    import pyarrow as pa

    if as_json:
        rows = [
            {
                k: (json.dumps(v, ensure_ascii=False) if k in as_json and v is not None else v)
                for k, v in row.items()
            }
            for row in rows
        ]
    return pa.Table.from_pylist(rows, schema=schema)


def hf_features(schema: Any) -> Optional[dict[str, Any]]:
    """``dataset_info.json``'s ``features`` for an Arrow schema, in a JSON form datasets
    3.x to 5.x read alike (``{"dtype": "int64", "_type": "Value"}``, ``{"feature": ...,
    "_type": "Sequence"}``, ``[struct]`` for a list of structs, a dict per struct); None
    where a type has no such form (datasets then derives the features from the Arrow
    schema itself)."""
    import pyarrow as pa

    names = {
        pa.float64(): "float64",
        pa.float32(): "float32",
        pa.string(): "string",
        pa.large_string(): "large_string",
        pa.bool_(): "bool",
        pa.null(): "null",
    }

    def feature(t: Any) -> Any:
        if pa.types.is_struct(t):
            return {t.field(i).name: feature(t.field(i).type) for i in range(t.num_fields)}
        if pa.types.is_fixed_size_list(t):  # datasets' Sequence(feature, length=n)
            return {"feature": feature(t.value_type), "length": t.list_size, "_type": "Sequence"}
        if pa.types.is_large_list(t):
            return {"feature": feature(t.value_type), "_type": "LargeList"}
        if pa.types.is_list(t):
            # A list of structs is a JSON list, any other list a Sequence: the two forms
            # datasets 3.x (curator pins datasets<4) and 4.x/5.x both read as a list
            # (datasets 3 reads a Sequence of a dict as a dict of lists, hence the split).
            inner = feature(t.value_type)
            if pa.types.is_struct(t.value_type):
                return [inner]
            return {"feature": inner, "_type": "Sequence"}
        if pa.types.is_integer(t):
            return {"dtype": str(t), "_type": "Value"}
        if t in names:
            return {"dtype": names[t], "_type": "Value"}
        raise TypeError(t)

    try:
        return {f.name: feature(f.type) for f in schema}
    except TypeError:
        return None


def check_hf_folder(folder: str) -> None:
    """Refuse an ``--output-format hf`` folder that holds anything but a previous
    save_to_disk folder's files (which the merge replaces).

    Raises:
        ConfigError: on ``--output-path``, naming the first foreign file.
    """
    for path in list_files(folder, "**"):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name not in _HF_FILES and not _HF_SHARD_RE.search(name):
            raise ConfigError(
                "--output-path",
                f"{folder} holds {path}, which is not part of a saved dataset; the hf "
                "format writes a folder: give a new or an earlier merge's folder",
            )


def convert_merged_jsonl(
    jsonl_path: str,
    output_path: str,
    output_format: str,
    outputs: Sequence[Any],
    output_schema: Any,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> tuple[int, frozenset[str]]:
    """Write the merged JSONL file at ``jsonl_path`` as ``output_format`` at
    ``output_path`` (a file for parquet, a folder for hf), rows in the file's order
    (source order), ``batch_rows`` rows in memory at a time. Written under a temporary
    name and renamed once complete, so an interrupted conversion leaves no partial
    output under the final name.

    Args:
        outputs, output_schema: the config's outputs and top-level ``output_schema``
            (:func:`declared_types`).

    Returns:
        ``(rows written, columns written as JSON text)``.

    Raises:
        ValueError: an unknown ``output_format``.
    """
    if output_format not in ("parquet", "hf"):
        raise ValueError(f"output_format must be parquet or hf, got {output_format!r}")
    schema, as_json = derive_schema(jsonl_path, declared_types(outputs, output_schema), batch_rows)
    if output_format == "parquet":
        schema = _parquet_readable(jsonl_path, schema, batch_rows)
        return _write_parquet(jsonl_path, output_path, schema, as_json, batch_rows), as_json
    return _write_hf(jsonl_path, output_path, schema, as_json, batch_rows), as_json


def _parquet_readable(path: str, schema: Any, batch_rows: int) -> Any:
    """``schema`` with each fixed-size list column that holds a null (a failed row's
    vector) made a variable-length list of the same values: pyarrow up to 25 writes
    such a column to Parquet but cannot read it back ("Expected all lists to be of
    size=N but index i had size=0", https://github.com/apache/arrow/issues/35692, fixed
    by https://github.com/apache/arrow/pull/50271). A column with every vector keeps its
    fixed size. One more streamed pass, only when there is such a column."""
    import pyarrow as pa

    fixed = {f.name for f in schema if pa.types.is_fixed_size_list(f.type)}
    if not fixed:
        return schema
    nulls: set[str] = set()
    for rows in _read_batches(path, batch_rows):
        nulls.update(n for n in fixed - nulls if any(row.get(n) is None for row in rows))
        if nulls == fixed:
            break
    return pa.schema(
        [pa.field(f.name, pa.list_(f.type.value_type)) if f.name in nulls else f for f in schema]
    )


def _create(path: str) -> Any:
    return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _write_parquet(
    src: str, out: str, schema: Any, as_json: frozenset[str], batch_rows: int
) -> int:
    import pyarrow.parquet as pq

    tmp = f"{out}.tmp-{uuid.uuid4().hex[:12]}"
    rows = 0
    try:
        with _create(tmp) as sink:
            with pq.ParquetWriter(sink, schema) as writer:
                for batch in _read_batches(src, batch_rows):
                    writer.write_table(_table(batch, schema, as_json))
                    rows += len(batch)
        if FileSystems.exists(out):
            FileSystems.delete([out])
        FileSystems.rename([tmp], [out])
    finally:
        if FileSystems.exists(tmp):
            FileSystems.delete([tmp])
    return rows


def _write_hf(src: str, folder: str, schema: Any, as_json: frozenset[str], batch_rows: int) -> int:
    import pyarrow as pa

    features = hf_features(schema)
    if features is not None:  # as datasets writes it: read back as the same features
        meta = {"huggingface": json.dumps({"info": {"features": features}})}
        schema = schema.with_metadata(meta)
    tag = uuid.uuid4().hex[:12]
    shards: list[str] = []
    rows = 0
    try:
        sink = writer = None
        shard_bytes = 0
        for batch in _read_batches(src, batch_rows):
            table = _table(batch, schema, as_json)
            if writer is None or shard_bytes >= HF_MAX_SHARD_BYTES:
                if writer is not None:
                    writer.close()
                    sink.close()
                shards.append(FileSystems.join(folder, f"tmp-{tag}-{len(shards):05d}.arrow"))
                sink = _create(shards[-1])
                writer = pa.ipc.new_stream(sink, schema)
                shard_bytes = 0
            writer.write_table(table)
            shard_bytes += table.nbytes
            rows += len(batch)
        if writer is None:  # no rows: one empty shard, as save_to_disk writes
            shards.append(FileSystems.join(folder, f"tmp-{tag}-00000.arrow"))
            sink = _create(shards[-1])
            writer = pa.ipc.new_stream(sink, schema)
        writer.close()
        sink.close()
        # an earlier merge's files (check_hf_folder allowed only those) make way
        delete_files([p for p in list_files(folder, "**") if f"tmp-{tag}-" not in p])
        names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
        FileSystems.rename(shards, [FileSystems.join(folder, n) for n in names])
        shards = []
        info = {
            "citation": "",
            "description": "",
            "features": features,
            "homepage": "",
            "license": "",
        }
        state = {
            "_data_files": [{"filename": n} for n in names],
            "_fingerprint": uuid.uuid4().hex[:16],  # datasets' own is random too
            "_format_columns": None,
            "_format_kwargs": {},
            "_format_type": None,
            "_output_all_columns": False,
            "_split": None,
        }
        for name, obj in (("dataset_info.json", info), ("state.json", state)):  # state last
            with _create(FileSystems.join(folder, name)) as f:
                f.write(json.dumps(obj, indent=2).encode("utf-8"))
    finally:
        delete_files(shards)
    return rows
