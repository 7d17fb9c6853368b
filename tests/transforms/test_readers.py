"""Tests for mmirage_beam.io.readers.ReadDatasets on the real DirectRunner."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from mmirage_beam.config.loader import DatasetConfig
from mmirage_beam.errors import ConfigError
from mmirage_beam.io import DEFAULT_DESIRED_SPLIT_BYTES, ReadDatasets, to_json_value
from mmirage_beam.records import SourceRow

REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "mmirage_beam" / "examples" / "data" / "gsm8k"
JSONL_PATH = str(GSM8K / "test.jsonl")
PARQUET_PATH = str(GSM8K / "test_conversations.parquet")
LOADABLE_PATH = str(GSM8K / "hf_saved_conversations_300")
DATA = REPO / "tests" / "data" / "readers"
MESSY_PATH = str(DATA / "messy.jsonl")
PARTS_DIR = str(DATA / "parts")


def _jsonl_rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _parquet_rows(path: str) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _arrow_stream_rows(path: str) -> list[dict]:
    with pa.memory_map(path) as source:
        return pa.ipc.open_stream(source).read_all().to_pylist()


GSM8K_JSONL = _jsonl_rows(JSONL_PATH)
GSM8K_PARQUET = _parquet_rows(PARQUET_PATH)
GSM8K_LOADABLE = _arrow_stream_rows(str(Path(LOADABLE_PATH) / "data-00000-of-00001.arrow"))


def _source_rows(rows: list[dict], dataset_index: int = 0, first: int = 0) -> list[SourceRow]:
    return [SourceRow(first + i, dataset_index, row) for i, row in enumerate(rows)]


def _is_plain_json(value) -> bool:
    if value is None or type(value) in (str, int, bool):
        return True
    if type(value) is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if type(value) is list:
        return all(_is_plain_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _is_plain_json(v) for k, v in value.items())
    return False


def _all_plain_json(actual):
    for element in actual:
        json.dumps(element.row, allow_nan=False)
        if not _is_plain_json(element.row):
            raise BeamAssertException(f"not plain JSON: {element.row!r}")


def _errors_like(expected):
    """Matcher: errors equal ``(source_index, dataset_path, location, reason substring)``."""

    def check(actual):
        got = sorted(
            (e.source_index, e.dataset_path, e.location, e.reason, e.input_name) for e in actual
        )
        want = sorted(expected)
        ok = len(got) == len(want) and all(
            g[:3] == w[:3] and w[3] in g[3] and g[4] is None for g, w in zip(got, want)
        )
        if not ok:
            raise BeamAssertException(f"errors {got!r} do not match {want!r}")

    return check


# --------------------------------------------------------------------------------------
# JSONL


@pytest.mark.parametrize("desired_split_bytes", [DEFAULT_DESIRED_SPLIT_BYTES, 4096])
def test_jsonl_gsm8k_rows_in_line_order(desired_split_bytes):
    read = ReadDatasets(
        [DatasetConfig(JSONL_PATH, "JSONL")], desired_split_bytes=desired_split_bytes
    )
    if desired_split_bytes == 4096:
        assert read.num_splits > 150  # 749,738 bytes in 4 KiB ranges: offsets really add up
    else:
        assert read.num_splits == 1
    assert len(GSM8K_JSONL) == 1319
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(_source_rows(GSM8K_JSONL)), label="Rows")
        assert_that(result.errors, equal_to([]), label="NoErrors")


def test_jsonl_compressed_file_is_one_split():
    path = str(DATA / "small.jsonl.gz")
    read = ReadDatasets([DatasetConfig(path, "JSONL")], desired_split_bytes=8)
    assert read.num_splits == 1
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(_source_rows([{"g": i} for i in range(5)])))


MESSY_ROWS = [
    SourceRow(0, 0, {"id": 0, "text": "first"}),
    SourceRow(1, 0, {"id": 1, "text": "café ’"}),
    SourceRow(5, 0, {"id": 3, "x": None, "y": 1.5}),
    SourceRow(7, 0, {"id": 4, "nested": {"a": [1, {"b": None}]}}),
]
MESSY_ERRORS = [
    (2, MESSY_PATH, "line 5", "not valid JSON"),
    (3, MESSY_PATH, "line 6", "JSON array, not a JSON object"),
    (4, MESSY_PATH, "line 8", "not valid UTF-8: byte 0xff"),
    (6, MESSY_PATH, "line 10", "JSON string, not a JSON object"),
]


@pytest.mark.parametrize("desired_split_bytes", [DEFAULT_DESIRED_SPLIT_BYTES, 1, 7, 40])
def test_jsonl_bad_input_becomes_errors(desired_split_bytes):
    # BOM, CRLF and blank lines are tolerated (blank lines are not counted); bad lines
    # keep their source_index and report their physical line number, whatever the splits.
    read = ReadDatasets(
        [DatasetConfig(MESSY_PATH, "JSONL")], desired_split_bytes=desired_split_bytes
    )
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(MESSY_ROWS), label="Rows")
        assert_that(result.errors, _errors_like(MESSY_ERRORS), label="Errors")


def test_jsonl_errors_follow_earlier_datasets_and_shards():
    # messy.jsonl after the 1,319 GSM8K rows: its indices start at 1319; with 2 shards of
    # 1,327 rows, shard 1 ([663, 1327)) still sees every messy row and error.
    datasets = [DatasetConfig(JSONL_PATH, "JSONL"), DatasetConfig(MESSY_PATH, "JSONL")]
    read = ReadDatasets(datasets, num_shards=2, shard_id=1, desired_split_bytes=4096)
    expected_rows = _source_rows(GSM8K_JSONL)[663:] + [
        SourceRow(r.source_index + 1319, 1, r.row) for r in MESSY_ROWS
    ]
    expected_errors = [(i + 1319, *rest) for i, *rest in MESSY_ERRORS]
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(expected_rows), label="Rows")
        assert_that(result.errors, _errors_like(expected_errors), label="Errors")


@pytest.mark.parametrize("path", [PARTS_DIR, PARTS_DIR + "/*.jsonl"])
@pytest.mark.parametrize("desired_split_bytes", [DEFAULT_DESIRED_SPLIT_BYTES, 5])
def test_jsonl_directory_and_glob_in_sorted_order(path, desired_split_bytes):
    # _SUCCESS and notes.txt are ignored; line numbers restart in every file.
    read = ReadDatasets([DatasetConfig(path, "JSONL")], desired_split_bytes=desired_split_bytes)
    rows = [
        SourceRow(0, 0, {"part": 0, "i": 0}),
        SourceRow(1, 0, {"part": 0, "i": 1}),
        SourceRow(2, 0, {"part": 1, "i": 0}),
        SourceRow(4, 0, {"part": 1, "i": 2}),
    ]
    part1 = os.path.join(PARTS_DIR, "part-00001.jsonl")
    errors = [(3, path, f"line 2 of {part1}", "not valid JSON")]
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(rows), label="Rows")
        assert_that(result.errors, _errors_like(errors), label="Errors")


def test_counters_count_rows_and_errors():
    p = BeamTestPipeline()
    result = p | ReadDatasets([DatasetConfig(MESSY_PATH, "JSONL")], desired_split_bytes=16)
    assert_that(result.rows, equal_to(MESSY_ROWS))
    run = p.run()
    run.wait_until_finish()
    counters = run.metrics().query(MetricsFilter().with_namespace("mmirage"))["counters"]
    totals = {c.key.metric.name: c.committed for c in counters}
    assert totals == {"rows_read": 4, "row_errors": 4}


# --------------------------------------------------------------------------------------
# Parquet and HF save_to_disk (Arrow)


def test_parquet_gsm8k_one_split_per_row_group():
    read = ReadDatasets([DatasetConfig(PARQUET_PATH, "parquet")])
    assert read.num_splits == 7
    assert len(GSM8K_PARQUET) == 1319
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(_source_rows(GSM8K_PARQUET)), label="Rows")
        assert_that(result.rows, _all_plain_json, label="PlainJson")
        assert_that(result.errors, equal_to([]), label="NoErrors")


def test_loadable_gsm8k_300_rows():
    read = ReadDatasets([DatasetConfig(LOADABLE_PATH, "loadable")])
    assert read.num_splits == 1
    assert len(GSM8K_LOADABLE) == 300
    assert GSM8K_LOADABLE[0]["id"] == "gsm8k-test-0"
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(_source_rows(GSM8K_LOADABLE)), label="Rows")
        assert_that(result.rows, _all_plain_json, label="PlainJson")


def test_loadable_arrow_ipc_file_format():
    read = ReadDatasets([DatasetConfig(str(DATA / "hf_ipc_file_format"), "loadable")])
    rows = [{"n": 0, "f": 0.5, "b": "YWI="}, {"n": 1, "f": None, "b": None}]
    rows.append({"n": 2, "f": None, "b": "/w=="})
    with BeamTestPipeline() as p:
        assert_that((p | read).rows, equal_to(_source_rows(rows)))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


TYPED_ROWS = [
    {
        "i64": 1, "i8": -1, "f64": 1.5, "f32": 0.5, "flag": True, "s": "a",
        "ints": [1, 2], "floats": [1.0, None], "st": {"a": 1, "b": [0.5, None], "c": "x"},
        "blob": _b64(b"\x00\x01\xff"), "ts": "2024-01-02T03:04:05.123456+00:00",
        "day": "2024-02-29", "m": {"k": 1}, "dec": 1.25, "cat": "u",
    },
    {
        "i64": 2, "i8": 0, "f64": None, "f32": 1.0, "flag": False, "s": "",
        "ints": [], "floats": [None], "st": {"a": None, "b": [], "c": None},
        "blob": _b64(b"hello"), "ts": None, "day": None, "m": {}, "dec": None, "cat": "v",
    },
    {
        "i64": 3, "i8": 1, "f64": None, "f32": None, "flag": None, "s": None,
        "ints": None, "floats": [], "st": None, "blob": None,
        "ts": "1999-12-31T23:59:59+00:00", "day": "2000-01-01", "m": None, "dec": -3.5,
        "cat": "u",
    },
    {
        "i64": None, "i8": 2, "f64": None, "f32": 2.0, "flag": True, "s": "é’",
        "ints": [3], "floats": [2.5], "st": {"a": 4, "b": None, "c": "w"}, "blob": "",
        "ts": "2024-01-02T00:00:00+00:00", "day": "2024-01-01", "m": {"x": 2, "y": 3},
        "dec": 0.0, "cat": None,
    },
    {
        "i64": 5, "i8": 127, "f64": -0.25, "f32": None, "flag": False, "s": "e",
        "ints": [4, 5, 6], "floats": None, "st": {"a": 5, "b": [1.0], "c": "v"},
        "blob": _b64(b"\x89PNG"), "ts": "2024-01-02T00:00:00+00:00", "day": "2024-01-02",
        "m": {"z": None}, "dec": 10.01, "cat": "v",
    },
]  # fmt: skip


@pytest.mark.parametrize(
    ("num_shards", "shard_id", "first", "end"),
    [(1, 0, 0, 5), (3, 0, 0, 1), (3, 1, 1, 3), (3, 2, 3, 5)],
)
def test_parquet_typed_values_become_plain_json(num_shards, shard_id, first, end):
    # 5 rows in row groups of 2: shard slices start and end inside row groups.
    read = ReadDatasets(
        [DatasetConfig(str(DATA / "typed.parquet"), "parquet")],
        num_shards=num_shards,
        shard_id=shard_id,
    )
    assert read.num_splits == 3
    expected = _source_rows(TYPED_ROWS)[first:end]
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(expected), label="Rows")
        assert_that(result.rows, _all_plain_json, label="PlainJson")


def test_parquet_written_from_numpy_pandas():
    read = ReadDatasets([DatasetConfig(str(DATA / "numpy_pandas.parquet"), "parquet")])
    rows = [
        {"n32": 1, "u8": 0, "x": 1.5, "vec": [1.0, None], "ok": True},
        {"n32": 2, "u8": 128, "x": None, "vec": [], "ok": False},
        {"n32": 3, "u8": 255, "x": None, "vec": [2.0], "ok": True},
    ]
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(_source_rows(rows)), label="Rows")
        assert_that(result.rows, _all_plain_json, label="PlainJson")


def test_to_json_value_numpy_and_python_types():
    value = {
        "i": np.int64(3),
        "f": np.float32(0.5),
        "nan": np.float64("nan"),
        "inf": float("inf"),
        "b": np.bool_(True),
        "arr": np.array([[1, 2], [3, 4]], dtype=np.int16),
        "farr": np.array([1.0, np.nan]),
        "s": np.str_("x"),
        "dt64": np.datetime64("2024-01-02T03:04:05"),
        "bytes": b"\x00\xff",
        "utf8_bytes": b"hello",
        "tuple": (1, 2.5),
        "td": datetime.timedelta(minutes=1, milliseconds=500),
        "dec": decimal.Decimal("NaN"),
        "naive": datetime.datetime(2024, 5, 6, 7, 8, 9),
        7: "int key",
    }
    plain = to_json_value(value)
    assert plain == {
        "i": 3,
        "f": 0.5,
        "nan": None,
        "inf": None,
        "b": True,
        "arr": [[1, 2], [3, 4]],
        "farr": [1.0, None],
        "s": "x",
        "dt64": "2024-01-02T03:04:05",
        "bytes": "AP8=",
        "utf8_bytes": "aGVsbG8=",
        "tuple": [1, 2.5],
        "td": 60.5,
        "dec": None,
        "naive": "2024-05-06T07:08:09",
        "7": "int key",
    }
    assert _is_plain_json(plain)


# --------------------------------------------------------------------------------------
# Several datasets, shards, workers in separate processes


CONCAT = [
    DatasetConfig(JSONL_PATH, "JSONL"),
    DatasetConfig(PARQUET_PATH, "parquet"),
    DatasetConfig(LOADABLE_PATH, "loadable"),
]
CONCAT_ROWS = (
    _source_rows(GSM8K_JSONL, 0, 0)
    + _source_rows(GSM8K_PARQUET, 1, 1319)
    + _source_rows(GSM8K_LOADABLE, 2, 2638)
)


def test_several_datasets_concatenate_in_config_order():
    read = ReadDatasets(CONCAT, desired_split_bytes=64 * 1024)
    assert len(CONCAT_ROWS) == 2938
    with BeamTestPipeline() as p:
        result = p | read
        assert_that(result.rows, equal_to(CONCAT_ROWS), label="Rows")
        assert_that(result.errors, equal_to([]), label="NoErrors")


def test_three_shards_partition_the_rows_exactly():
    n, num_shards = 1319, 3
    slices = [(k * n // num_shards, (k + 1) * n // num_shards) for k in range(num_shards)]
    assert slices == [(0, 439), (439, 879), (879, 1319)]  # contiguous, disjoint, complete
    expected = _source_rows(GSM8K_JSONL)
    for shard_id, (start, end) in enumerate(slices):
        read = ReadDatasets(
            [DatasetConfig(JSONL_PATH, "JSONL")],
            num_shards=num_shards,
            shard_id=shard_id,
            desired_split_bytes=4096,
        )
        with BeamTestPipeline() as p:
            assert_that((p | read).rows, equal_to(expected[start:end]))


@pytest.mark.parametrize("shard_id", range(4))
def test_shards_across_dataset_boundaries(shard_id):
    # 2,938 rows in 4 shards: slices cross the JSONL/parquet and parquet/loadable borders.
    read = ReadDatasets(CONCAT, num_shards=4, shard_id=shard_id, desired_split_bytes=8192)
    start, end = shard_id * 2938 // 4, (shard_id + 1) * 2938 // 4
    with BeamTestPipeline() as p:
        assert_that((p | read).rows, equal_to(CONCAT_ROWS[start:end]))


def test_multi_processing_workers(monkeypatch):
    # Workers are separate Python processes: they must import mmirage_beam themselves.
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), pythonpath])))
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    read = ReadDatasets(CONCAT + [DatasetConfig(MESSY_PATH, "JSONL")], desired_split_bytes=32768)
    messy_rows = [SourceRow(r.source_index + 2938, 3, r.row) for r in MESSY_ROWS]
    messy_errors = [(i + 2938, *rest) for i, *rest in MESSY_ERRORS]
    with BeamTestPipeline(options=options) as p:
        result = p | read
        assert_that(result.rows, equal_to(CONCAT_ROWS + messy_rows), label="Rows")
        assert_that(result.errors, _errors_like(messy_errors), label="Errors")


# --------------------------------------------------------------------------------------
# Errors raised at construction


def test_missing_file_names_dataset_index_and_path():
    missing = str(DATA / "does_not_exist.jsonl")
    datasets = [DatasetConfig(JSONL_PATH, "JSONL"), DatasetConfig(missing, "JSONL")]
    with pytest.raises(ConfigError) as info:
        ReadDatasets(datasets)
    assert info.value.key == "loading_params.datasets[1].path"
    assert missing in str(info.value)


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        (DatasetConfig(str(DATA / "nope_dir"), "loadable"), "dataset directory not found"),
        (DatasetConfig(str(DATA / "hf_dataset_dict"), "loadable"), "is a DatasetDict"),
        (DatasetConfig(str(DATA / "parts"), "loadable"), "no state.json"),
        (DatasetConfig(str(DATA / "nope_*.jsonl"), "JSONL"), "no file matches"),
        (DatasetConfig(str(DATA / "hf_dataset_dict"), "JSONL"), "holds no file ending in"),
        (DatasetConfig(str(DATA / "missing.parquet"), "parquet"), "file not found"),
        (DatasetConfig(MESSY_PATH, "parquet"), "cannot read the Parquet footer"),
    ],
)
def test_bad_dataset_paths_raise_config_error(dataset, message):
    with pytest.raises(ConfigError, match=message) as info:
        ReadDatasets([DatasetConfig(JSONL_PATH, "JSONL"), dataset])
    assert info.value.key == "loading_params.datasets[1].path"
    assert dataset.path in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_shards": 0}, ConfigError, "num_shards"),
        ({"num_shards": 2, "shard_id": 2}, ConfigError, "shard_id"),
        ({"shard_id": -1}, ConfigError, "shard_id"),
        ({"desired_split_bytes": 0}, ValueError, "desired_split_bytes"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        ReadDatasets([DatasetConfig(JSONL_PATH, "JSONL")], **kwargs)


def test_empty_dataset_list_is_refused():
    with pytest.raises(ConfigError, match="non-empty"):
        ReadDatasets([])


def test_result_is_a_named_tuple_and_labels_are_unique():
    with BeamTestPipeline() as p:
        first = p | "ReadA" >> ReadDatasets([DatasetConfig(MESSY_PATH, "JSONL")])
        second = p | "ReadB" >> ReadDatasets([DatasetConfig(MESSY_PATH, "JSONL")])
        rows, errors = first
        assert rows is first.rows and errors is first.errors
        merged = (rows, second.rows) | beam.Flatten()
        assert_that(
            merged | beam.Map(lambda r: r.source_index),
            equal_to([0, 1, 5, 7] * 2),
        )
